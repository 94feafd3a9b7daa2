"""Where CelebA comes from: the official tree or a Parquet mirror, each behind one image-source interface.

An :class:`ImageSource` yields ``(image_id, bytes or file path)`` for requested ids; :func:`open_celeba_source` returns
the annotations and the image source of a builder config's source.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Protocol

import datasets
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .attributes import (
    CELEBA_ATTRIBUTES,
    CONCEPT_ATTRIBUTES,
    HUB_SPLIT_PARTITIONS,
    ID_COLUMNS,
    PARTITION_COLUMNS,
    ROW_INDEX_IDS,
    CelebAAnnotations,
    _partitions_for,
    normalize_image_id,
    read_official_annotations,
    read_partition_file,
)
from .config import CelebAConceptsConfig


class ImageSource(Protocol):
    """Reads the images of a CelebA copy: ``read(ids)`` yields ``(image_id, bytes or file path)`` in order."""

    def read(self, image_ids: Sequence[str]) -> Iterator[tuple[str, bytes | str]]: ...


class FileImages:
    """Images of the official tree, read as files from ``img_align_celeba/``."""

    def __init__(self, directory: Path):
        self.directory = directory

    def read(self, image_ids: Sequence[str]) -> Iterator[tuple[str, str]]:
        for image_id in image_ids:
            yield image_id, str(self.directory / image_id)



# --- Parquet / Hub mirrors -------------------------------------------------------------------------------------


def _decode_attribute_columns(table: pa.Table, names: Sequence[str]) -> np.ndarray:
    """(N, A) bool from bool, -1/1 or 0/1 columns; the integer encoding is detected over all columns together."""
    columns = []
    for name in names:
        column = table.column(name)
        if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
            text = np.asarray(pc.utf8_lower(pc.utf8_trim_whitespace(column)).to_pylist(), dtype=object)
            lookup = {"true": 1, "false": 0, "1": 1, "0": 0, "-1": -1}
            unknown = sorted({str(v) for v in text if v not in lookup})
            if unknown:
                raise ValueError(f"attribute column {name!r} has values {unknown[:3]} (expected bool, -1/1 or 0/1)")
            columns.append(np.asarray([lookup[v] for v in text], dtype=np.int8))
        elif pa.types.is_boolean(column.type) or pa.types.is_integer(column.type):
            if column.null_count:
                raise ValueError(f"attribute column {name!r} has {column.null_count} missing values")
            columns.append(column.to_numpy().astype(np.int8))
        else:
            raise ValueError(f"attribute column {name!r} has type {column.type} (expected bool or integer)")
    values = np.stack(columns, axis=1) if columns else np.zeros((table.num_rows, 0), dtype=np.int8)
    present = set(np.unique(values).tolist())
    if present <= {-1, 1}:
        return values == 1
    if present <= {0, 1}:
        return values == 1
    raise ValueError(f"attribute columns mix encodings or hold values other than bool, -1/1, 0/1: {sorted(present)}")


def _image_ids_of(table: pa.Table, split: str, id_column: str | None) -> list[str]:
    if id_column == ROW_INDEX_IDS:
        return [f"{split}/{row}" for row in range(table.num_rows)]
    candidates = [id_column] if id_column else [c for c in ID_COLUMNS if c in table.column_names]
    for column in candidates:
        if column not in table.column_names:
            raise ValueError(f"id_column {column!r} not found; columns: {table.column_names}")
        return [normalize_image_id(v) for v in table.column(column).to_pylist()]
    image = table.column("image") if "image" in table.column_names else None
    if image is not None and pa.types.is_struct(image.type) and image.type.get_field_index("path") >= 0:
        paths = pc.struct_field(image, "path").to_pylist()
        if all(paths):
            return [normalize_image_id(p) for p in paths]
    raise ValueError(
        f"cannot find CelebA image ids in split {split!r}: no column among {ID_COLUMNS} and the image column stores "
        f"no file names (columns: {table.column_names}); pass id_column=..., or id_column={ROW_INDEX_IDS!r} to use "
        "row positions (splits are then reproducible only on this exact mirror)"
    )


class ParquetImages:
    """Row lookup of images in a ``DatasetDict`` loaded from Parquet (images read undecoded, batch by batch)."""

    def __init__(self, splits: datasets.DatasetDict, rows: dict[str, tuple[str, int]]):
        self.splits = {
            name: ds.select_columns(["image"]).cast_column("image", datasets.Image(decode=False))
            for name, ds in splits.items()
            if "image" in ds.column_names
        }
        self.rows = rows
        self.missing = [name for name in splits if name not in self.splits]

    def read(self, image_ids: Sequence[str]) -> Iterator[tuple[str, bytes | str]]:
        if self.missing:
            raise ValueError(f"the Parquet splits {self.missing} have no 'image' column to build images from")
        for start in range(0, len(image_ids), 256):
            batch = image_ids[start : start + 256]
            by_split: dict[str, list[int]] = {}
            for image_id in batch:
                split, row = self.rows[image_id]
                by_split.setdefault(split, []).append(row)
            fetched: dict[tuple[str, int], Any] = {}
            for split, rows in by_split.items():
                for row, value in zip(rows, self.splits[split][rows]["image"], strict=True):
                    fetched[split, row] = value
            for image_id in batch:
                value = fetched[self.rows[image_id]]
                data = value.get("bytes") if value else None
                yield image_id, data if data is not None else (value or {}).get("path") or ""


def read_parquet_annotations(
    parquet: str | Sequence[str],
    config_name: str | None = None,
    id_column: str | None = None,
    partition_file: str | os.PathLike | None = None,
) -> tuple[CelebAAnnotations, ParquetImages]:
    """Annotations and an image reader for a Parquet CelebA: a local file/dir/list of files or a Hub dataset id.

    The official partition comes from a partition column, else from ``partition_file``
    (``list_eval_partition.txt``), else from the split names (train / valid|validation / test).
    """
    splits = _load_parquet(parquet, config_name)
    ids: list[str] = []
    partitions: list[np.ndarray] = []
    attributes: list[np.ndarray] = []
    rows: dict[str, tuple[str, int]] = {}
    official = read_partition_file(partition_file) if partition_file is not None else None
    names: tuple[str, ...] | None = None
    for split, ds in splits.items():
        table = _flatten_attribute_struct(ds.data.table)
        split_names = tuple(n for n in CELEBA_ATTRIBUTES if n in table.column_names)
        missing = [n for n in CONCEPT_ATTRIBUTES if n not in split_names]
        if missing:
            raise ValueError(f"Parquet split {split!r} lacks the attribute columns {missing}; has {ds.column_names}")
        if names is not None and split_names != names:
            raise ValueError(f"Parquet splits disagree on their attribute columns ({names} vs {split_names})")
        names = split_names
        split_ids = _image_ids_of(table, split, id_column)
        partition_column = next((c for c in PARTITION_COLUMNS if c in table.column_names), None)
        if official is not None:
            split_partitions = _partitions_for(split_ids, official, str(partition_file))
        elif partition_column is not None:
            split_partitions = np.asarray(table.column(partition_column).to_numpy(), dtype=np.int8)
        elif split in HUB_SPLIT_PARTITIONS and len(splits) > 1:
            split_partitions = np.full(len(split_ids), HUB_SPLIT_PARTITIONS[split], dtype=np.int8)
        else:
            raise ValueError(
                f"cannot tell the official partition of Parquet split {split!r} (splits: {list(splits)}): give a "
                f"column among {PARTITION_COLUMNS}, partition_file='list_eval_partition.txt', or a mirror with "
                "train / valid / test splits"
            )
        if not set(np.unique(split_partitions).tolist()) <= {0, 1, 2}:
            raise ValueError(f"Parquet split {split!r} has partition values other than 0, 1, 2")
        for row, image_id in enumerate(split_ids):
            if image_id in rows:
                raise ValueError(f"image id {image_id!r} appears twice in the Parquet dataset")
            rows[image_id] = (split, row)
        ids.extend(split_ids)
        partitions.append(split_partitions)
        attributes.append(_decode_attribute_columns(table, split_names))
    if not ids or names is None:
        raise ValueError(f"the Parquet dataset {parquet!r} has no rows")
    annotations = CelebAAnnotations(ids, np.concatenate(partitions), np.concatenate(attributes), names)
    return annotations, ParquetImages(splits, rows)


def _flatten_attribute_struct(table: pa.Table) -> pa.Table:
    """Lift the fields of a struct column ``attributes`` (some mirrors nest the 40 attributes) to columns."""
    if "attributes" not in table.column_names or not pa.types.is_struct(table.schema.field("attributes").type):
        return table
    column = table.column("attributes")
    table = table.drop_columns(["attributes"])
    for field in column.type:
        table = table.append_column(field.name, pc.struct_field(column, field.name))
    return table


def _load_parquet(parquet: str | Sequence[str], config_name: str | None) -> datasets.DatasetDict:
    files = [parquet] if isinstance(parquet, str | os.PathLike) else list(parquet)
    local = [Path(f) for f in files]
    if all(p.is_file() for p in local):
        loaded = datasets.load_dataset("parquet", data_files=[str(p) for p in local])
    elif len(local) == 1 and local[0].is_dir():
        loaded = datasets.load_dataset(str(local[0]), config_name)
    elif len(files) == 1 and not local[0].exists() and str(files[0]).count("/") == 1:
        loaded = datasets.load_dataset(str(files[0]), config_name)  # a Hub dataset id
    else:
        missing = [str(p) for p in local if not p.exists()]
        raise FileNotFoundError(f"CelebA Parquet source not found: {missing or files}")
    if not isinstance(loaded, datasets.DatasetDict):
        loaded = datasets.DatasetDict({"train": loaded})
    return loaded



def open_celeba_source(config: CelebAConceptsConfig) -> tuple[CelebAAnnotations, ImageSource]:
    """Annotations and an image reader (``read(ids)`` yielding ``(id, bytes or path)``) for a config's source."""
    if (config.data_dir is None) == (config.parquet is None):
        raise ValueError("give exactly one CelebA source: data_dir (official tree) or parquet (file, dir or Hub id)")
    if config.parquet is not None:
        return read_parquet_annotations(config.parquet, config.parquet_config, config.id_column, config.partition_file)
    annotations = read_official_annotations(config.data_dir)
    images_dir = Path(config.data_dir) / "img_align_celeba"
    if not images_dir.is_dir():
        raise FileNotFoundError(f"CelebA image directory not found: {images_dir}")
    return annotations, FileImages(images_dir)


