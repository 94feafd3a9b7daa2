"""CelebA concept-graph splits (Okawa et al. 2023 section 4.2, Farid et al. 2025): a ``datasets`` builder.

Three binary concepts, tuple order (gender, smile, hair):

* gender: 0 female, 1 male (attribute ``Male``)
* smile: 0 smiling, 1 not smiling (attribute ``Smiling``)
* hair: 0 black, 1 blond (attributes ``Black_Hair`` / ``Blond_Hair``; images with both or neither are excluded)

Sources: the official download (``img_align_celeba/``, ``list_attr_celeba.txt``, ``list_eval_partition.txt``,
given as ``data_dir``) or a Parquet dataset with the 40 attributes as columns (``parquet``: a local file,
directory or Hub dataset id; bool, -1/1 or 0/1 values are detected).

Splits and the official partition (0 train, 1 val, 2 test) that feeds each:

* ``train``: training classes only, partition 0, at most ``max_train_per_class`` images per class.
* ``probe_train``: every class, partition 0, at most ``max_probe_train_per_class`` per class (attribute probes may
  see every composition; the generator may not).
* ``probe_val``: every class, partition 1, at most ``max_probe_val_per_class`` per class.
* ``test``: every class, partition 2, at most ``max_test_per_class`` per class (real references for evaluation).

Selection under a cap is deterministic: candidates are sorted by image id and drawn with a generator seeded by
(seed, split, class), so two copies of CelebA with the same ids give the same splits.
"""

from __future__ import annotations

import dataclasses
import io
import logging
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import datasets
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from PIL import Image, UnidentifiedImageError

from ..concepts import ConceptGraph, ConceptLike, ConceptSpace, ConceptVariable

logger = logging.getLogger(__name__)

CELEBA_ATTRIBUTES: tuple[str, ...] = (
    "5_o_Clock_Shadow", "Arched_Eyebrows", "Attractive", "Bags_Under_Eyes", "Bald", "Bangs", "Big_Lips",
    "Big_Nose", "Black_Hair", "Blond_Hair", "Blurry", "Brown_Hair", "Bushy_Eyebrows", "Chubby", "Double_Chin",
    "Eyeglasses", "Goatee", "Gray_Hair", "Heavy_Makeup", "High_Cheekbones", "Male", "Mouth_Slightly_Open",
    "Mustache", "Narrow_Eyes", "No_Beard", "Oval_Face", "Pale_Skin", "Pointy_Nose", "Receding_Hairline",
    "Rosy_Cheeks", "Sideburns", "Smiling", "Straight_Hair", "Wavy_Hair", "Wearing_Earrings", "Wearing_Hat",
    "Wearing_Lipstick", "Wearing_Necklace", "Wearing_Necktie", "Young",
)  # fmt: skip
"""The 40 attribute names of ``list_attr_celeba.txt``, in file order."""

CONCEPT_ATTRIBUTES: tuple[str, ...] = ("Male", "Smiling", "Black_Hair", "Blond_Hair")
"""The attributes the three concepts are read from."""

DEFAULT_TRAINING_CLASSES: tuple[str, ...] = ("000", "001", "010", "100")
"""Paper B's CelebA split: 011, 101, 110 are level 1 and 111 (male, not smiling, blond) is level 2."""

PARTITION_NAMES: dict[int, str] = {0: "train", 1: "val", 2: "test"}
SPLIT_PARTITIONS: dict[str, int] = {"train": 0, "probe_train": 0, "probe_val": 1, "test": 2}
"""Which official partition feeds which builder split."""

SPLITS: tuple[str, ...] = ("train", "test", "probe_train", "probe_val")

# Split names of Hub mirrors -> official partition (flwrlabs/celeba uses train/valid/test).
HUB_SPLIT_PARTITIONS: dict[str, int] = {
    "train": 0, "training": 0, "valid": 1, "validation": 1, "val": 1, "dev": 1, "test": 2, "testing": 2,
}  # fmt: skip
ID_COLUMNS: tuple[str, ...] = ("image_id", "file_name", "filename", "image_name", "img_id", "image_path", "path")
"""Columns searched for the image id, in order. ``celeb_id`` (flwrlabs/celeba) is the *identity*, never an image id."""
PARTITION_COLUMNS: tuple[str, ...] = ("partition", "eval_partition", "split_partition")
ROW_INDEX_IDS = "__row_index__"
"""``id_column`` value for mirrors without image ids: ids become ``"<split>/<row>"`` (not portable across copies)."""

BAD_IMAGE_ACTIONS = ("raise", "skip")


def celeba_space() -> ConceptSpace:
    """The CelebA concept space: (gender, smile, hair), each binary."""
    return ConceptSpace(
        (
            ConceptVariable("gender", ("female", "male")),
            ConceptVariable("smile", ("smiling", "not_smiling")),
            ConceptVariable("hair", ("black", "blond")),
        )
    )


def celeba_graph(training_classes: Sequence[ConceptLike] = DEFAULT_TRAINING_CLASSES) -> ConceptGraph:
    """The CelebA concept graph (a 3-cube) with the given training classes."""
    return ConceptGraph(celeba_space(), training_classes)


# --- annotations -----------------------------------------------------------------------------------------------


@dataclass
class CelebAAnnotations:
    """Attributes and official partitions of a CelebA copy, one row per image."""

    image_ids: list[str]
    partitions: np.ndarray  # (N,) int8 in {0, 1, 2}
    attributes: np.ndarray  # (N, A) bool
    attribute_names: tuple[str, ...]

    def attribute(self, name: str) -> np.ndarray:
        if name not in self.attribute_names:
            raise ValueError(f"CelebA attribute {name!r} is missing; available: {self.attribute_names}")
        return self.attributes[:, self.attribute_names.index(name)]


@dataclass
class ConceptTable:
    """Concept tuples of the images kept after excluding ambiguous hair, sorted by image id."""

    image_ids: list[str]
    partitions: np.ndarray  # (N,) int8
    concepts: np.ndarray  # (N, 3) int64, order (gender, smile, hair)
    num_excluded_both_hair: int
    num_excluded_neither_hair: int


def concept_table(annotations: CelebAAnnotations) -> ConceptTable:
    """Map attributes to (gender, smile, hair); drop images with both or neither of black and blond hair."""
    male = annotations.attribute("Male")
    smiling = annotations.attribute("Smiling")
    black = annotations.attribute("Black_Hair")
    blond = annotations.attribute("Blond_Hair")
    both = black & blond
    neither = ~black & ~blond
    keep = ~(both | neither)
    concepts = np.stack([male, ~smiling, blond], axis=1).astype(np.int64)[keep]
    ids = [image_id for image_id, k in zip(annotations.image_ids, keep, strict=True) if k]
    order = np.argsort(np.asarray(ids, dtype=object), kind="stable") if ids else np.zeros(0, dtype=np.int64)
    logger.info(
        "CelebA concepts: kept %d images; excluded %d with both Black_Hair and Blond_Hair and %d with neither",
        len(ids), int(both.sum()), int(neither.sum()),
    )  # fmt: skip
    return ConceptTable(
        image_ids=[ids[i] for i in order],
        partitions=annotations.partitions[keep][order],
        concepts=concepts[order],
        num_excluded_both_hair=int(both.sum()),
        num_excluded_neither_hair=int(neither.sum()),
    )


def normalize_image_id(value: Any) -> str:
    """Official file name of an image id: ``1``, ``"1"``, ``"000001"``, ``"x/000001.jpg"`` -> ``"000001.jpg"``."""
    if isinstance(value, bool) or value is None:
        raise ValueError(f"invalid CelebA image id {value!r}")
    if isinstance(value, int | np.integer):
        return f"{int(value):06d}.jpg"
    name = os.path.basename(str(value).strip().replace("\\", "/"))
    if not name:
        raise ValueError(f"invalid CelebA image id {value!r}")
    if name.isdigit():
        return f"{int(name):06d}.jpg"
    return name


def _require_file(path: Path, what: str) -> Path:
    if not path.is_file():
        raise FileNotFoundError(f"CelebA {what} not found: {path}")
    return path


def read_attribute_table(path: str | os.PathLike) -> tuple[list[str], tuple[str, ...], np.ndarray]:
    """Parse ``list_attr_celeba.txt``: a count line, the attribute names, then ``<file> <-1/1 values>`` rows.

    Returns (image ids, attribute names, bool array of shape (N, A)). Raises ``ValueError`` naming the line on a
    missing header, a wrong column count, a value other than -1/1 or a row count that disagrees with the header.
    """
    path = _require_file(Path(path), "attribute table")
    with open(path, encoding="utf-8") as f:
        lines = [line for line in f.read().splitlines() if line.strip()]
    if len(lines) < 2 or not lines[0].strip().isdigit():
        raise ValueError(
            f"{path}: malformed attribute table: the first line must be the image count and the second the "
            f"attribute names, got {lines[:1]!r}"
        )
    expected = int(lines[0])
    names = tuple(lines[1].split())
    if not names or any(n.lstrip("-").isdigit() for n in names):
        raise ValueError(f"{path}: malformed attribute table: line 2 must hold the attribute names, got {lines[1]!r}")
    missing = [n for n in CONCEPT_ATTRIBUTES if n not in names]
    if missing:
        raise ValueError(f"{path}: attribute table lacks the attributes {missing} needed for the concepts")
    ids: list[str] = []
    values = np.empty((len(lines) - 2, len(names)), dtype=np.int8)
    for row, line in enumerate(lines[2:]):
        fields = line.split()
        if len(fields) != len(names) + 1:
            raise ValueError(
                f"{path}, line {row + 3}: expected an image name and {len(names)} values, got {len(fields)} fields"
            )
        try:
            row_values = [int(v) for v in fields[1:]]
        except ValueError:
            row_values = []
        if len(row_values) != len(names) or any(v not in (-1, 1) for v in row_values):
            bad = next(v for v in fields[1:] if v not in ("-1", "1"))
            raise ValueError(f"{path}, line {row + 3}: attribute values must be -1 or 1, got {bad!r}")
        ids.append(fields[0])
        values[row] = row_values
    if len(ids) != expected:
        raise ValueError(f"{path}: the header announces {expected} images but the table has {len(ids)} rows")
    if len(set(ids)) != len(ids):
        raise ValueError(f"{path}: duplicate image names in the attribute table")
    return ids, names, values == 1


def read_partition_file(path: str | os.PathLike) -> dict[str, int]:
    """Parse ``list_eval_partition.txt`` (``<file> <0|1|2>``) into ``{image id: partition}``."""
    path = _require_file(Path(path), "partition file")
    partitions: dict[str, int] = {}
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, start=1):
            fields = line.split()
            if not fields:
                continue
            if len(fields) != 2 or fields[1] not in ("0", "1", "2"):
                raise ValueError(f"{path}, line {number}: expected '<image> <0|1|2>', got {line.strip()!r}")
            partitions[fields[0]] = int(fields[1])
    return partitions


def _partitions_for(ids: Sequence[str], partitions: dict[str, int], source: str) -> np.ndarray:
    missing = [i for i in ids if i not in partitions]
    if missing:
        raise ValueError(f"{len(missing)} images have no official partition in {source}, e.g. {missing[:3]}")
    return np.asarray([partitions[i] for i in ids], dtype=np.int8)


def read_official_annotations(data_dir: str | os.PathLike) -> CelebAAnnotations:
    """Annotations of an official CelebA tree (``list_attr_celeba.txt`` and ``list_eval_partition.txt``)."""
    root = Path(data_dir)
    if not root.is_dir():
        raise FileNotFoundError(f"CelebA data_dir not found: {root}")
    _require_file(root / "list_eval_partition.txt", "partition file")
    ids, names, values = read_attribute_table(root / "list_attr_celeba.txt")
    partitions = _partitions_for(ids, read_partition_file(root / "list_eval_partition.txt"), "list_eval_partition.txt")
    return CelebAAnnotations(ids, partitions, values, names)


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


class _ParquetImages:
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
) -> tuple[CelebAAnnotations, _ParquetImages]:
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
    return annotations, _ParquetImages(splits, rows)


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


# --- images ----------------------------------------------------------------------------------------------------


def center_crop_resize(image: Image.Image, size: int, crop_size: int | None = None) -> Image.Image:
    """Center crop (the largest square, or ``crop_size``) and resize to ``size`` x ``size`` RGB."""
    image = image.convert("RGB")
    width, height = image.size
    side = min(width, height) if crop_size is None else min(crop_size, width, height)
    left, top = (width - side) // 2, (height - side) // 2
    image = image.crop((left, top, left + side, top + side))
    return image.resize((size, size), Image.Resampling.BICUBIC, reducing_gap=3.0)


def decode_image(data: bytes | str | os.PathLike, image_id: str) -> Image.Image:
    """Decode and fully load an image; a missing or corrupt file raises ``ValueError`` naming the image."""
    if not isinstance(data, bytes):
        if not data:
            raise ValueError(f"CelebA image {image_id!r} has neither bytes nor a file path")
        if not os.path.isfile(data):
            raise ValueError(f"CelebA image {image_id!r} not found: {data}")
    try:
        with Image.open(io.BytesIO(data) if isinstance(data, bytes) else data) as image:
            image.load()
            return image.copy()
    except (OSError, UnidentifiedImageError, SyntaxError, ValueError) as err:
        raise ValueError(f"CelebA image {image_id!r} could not be decoded: {err}") from err


# --- split selection -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SplitRow:
    """One selected image: its id, concept tuple string and level."""

    image_id: str
    concepts: str
    level: int


def select_split_definitions(
    table: ConceptTable,
    graph: ConceptGraph,
    caps: dict[str, int],
    seed: int = 0,
) -> dict[str, list[SplitRow]]:
    """Pick the images of every split (rows sorted by class, then image id) under per-class ``caps``.

    ``caps`` maps each split of :data:`SPLITS` to its per-class cap. Raises ``ValueError`` when a requested class
    has no image in the partition that feeds a split.
    """
    space = graph.space
    ids = np.asarray(table.image_ids, dtype=object)
    class_index = {c: i for i, c in enumerate(space.all_classes())}
    codes = np.asarray([class_index[tuple(c)] for c in table.concepts.tolist()], dtype=np.int64)
    definitions: dict[str, list[SplitRow]] = {}
    for split_index, split in enumerate(SPLITS):
        partition = SPLIT_PARTITIONS[split]
        classes = graph.training_classes if split == "train" else graph.nodes
        rows: list[SplitRow] = []
        for concept in sorted(classes):
            candidates = ids[(table.partitions == partition) & (codes == class_index[concept])]
            if len(candidates) == 0:
                raise ValueError(
                    f"CelebA class {space.format(concept)} {space.describe(concept)} has no images in official "
                    f"partition {partition} ({PARTITION_NAMES[partition]}), which feeds split {split!r}"
                )
            cap = caps[split]
            if len(candidates) > cap:
                rng = np.random.default_rng([seed, split_index, class_index[concept]])
                candidates = np.sort(candidates[rng.choice(len(candidates), size=cap, replace=False)])
            level = graph.level(concept)
            rows.extend(SplitRow(str(i), space.format(concept), level) for i in candidates)
        definitions[split] = rows
    return definitions


def definitions_from_dataset(published: datasets.DatasetDict) -> dict[str, list[SplitRow]]:
    """Split rows from published definitions (columns ``image_id``, ``concepts``, ``level``)."""
    missing = [s for s in SPLITS if s not in published]
    if missing:
        raise ValueError(f"published split definitions lack the splits {missing}; found {list(published)}")
    return {
        split: [
            SplitRow(i, c, int(lv))
            for i, c, lv in zip(
                published[split]["image_id"], published[split]["concepts"], published[split]["level"], strict=True
            )
        ]
        for split in SPLITS
    }


def check_definitions_against(definitions: dict[str, list[SplitRow]], table: ConceptTable) -> ConceptGraph:
    """Check that every defined image exists locally with the same concepts and levels; return the graph."""
    space = celeba_space()
    local = {i: space.format(c) for i, c in zip(table.image_ids, table.concepts.tolist(), strict=True)}
    absent = sorted({r.image_id for rows in definitions.values() for r in rows if r.image_id not in local})
    if absent:
        raise ValueError(f"{len(absent)} images of the split definitions are missing locally, e.g. {absent[:3]}")
    mismatched = [r for rows in definitions.values() for r in rows if local[r.image_id] != r.concepts]
    if mismatched:
        r = mismatched[0]
        raise ValueError(
            f"{len(mismatched)} images have other concepts locally than in the split definitions, e.g. "
            f"{r.image_id}: {local[r.image_id]} locally vs {r.concepts}"
        )
    graph = celeba_graph(sorted({r.concepts for r in definitions["train"]}))
    wrong = [r for rows in definitions.values() for r in rows if graph.level(r.concepts) != r.level]
    if wrong:
        raise ValueError(f"split definitions give level {wrong[0].level} to class {wrong[0].concepts}")
    return graph


def open_celeba_source(config: CelebAConceptsConfig) -> tuple[CelebAAnnotations, Any]:
    """Annotations and an image reader (``read(ids)`` yielding ``(id, bytes or path)``) for a config's source."""
    if (config.data_dir is None) == (config.parquet is None):
        raise ValueError("give exactly one CelebA source: data_dir (official tree) or parquet (file, dir or Hub id)")
    if config.parquet is not None:
        return read_parquet_annotations(config.parquet, config.parquet_config, config.id_column, config.partition_file)
    annotations = read_official_annotations(config.data_dir)
    images_dir = Path(config.data_dir) / "img_align_celeba"
    if not images_dir.is_dir():
        raise FileNotFoundError(f"CelebA image directory not found: {images_dir}")
    return annotations, _FileImages(images_dir)


def split_definitions_for(
    config: CelebAConceptsConfig, annotations: CelebAAnnotations
) -> tuple[dict[str, list[SplitRow]], ConceptTable]:
    """The split rows a config asks for: selected under its caps, or its published ``split_definitions``."""
    table = concept_table(annotations)
    if config.split_definitions is None:
        graph = celeba_graph(config.training_classes)
        return select_split_definitions(table, graph, config.caps, config.seed), table
    published = datasets.load_dataset(config.split_definitions, config.split_definitions_config)
    definitions = definitions_from_dataset(published)
    check_definitions_against(definitions, table)
    return definitions, table


# --- the builder -----------------------------------------------------------------------------------------------


@dataclass
class CelebAConceptsConfig(datasets.BuilderConfig):
    """Configuration of :class:`CelebAConcepts`.

    Give the source as ``data_dir`` (official tree) or ``parquet`` (a Parquet file, directory or Hub id with
    ``parquet_config`` as its config name), or ``split_definitions`` (published definitions) plus either source.
    """

    training_classes: tuple[str, ...] = DEFAULT_TRAINING_CLASSES
    image_size: int = 64
    crop_size: int | None = None
    max_train_per_class: int = 10_000
    max_test_per_class: int = 100
    max_probe_train_per_class: int = 5_000
    max_probe_val_per_class: int = 500
    seed: int = 0
    on_bad_image: str = "raise"
    parquet: str | tuple[str, ...] | None = None
    parquet_config: str | None = None
    id_column: str | None = None
    partition_file: str | None = None
    split_definitions: str | None = None
    split_definitions_config: str | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        self.training_classes = tuple(celeba_space().format(c) for c in self.training_classes)
        celeba_graph(self.training_classes)
        if isinstance(self.parquet, list):
            self.parquet = tuple(self.parquet)
        if self.image_size < 8:
            raise ValueError(f"image_size must be at least 8, got {self.image_size}")
        for name in ("max_train_per_class", "max_test_per_class", "max_probe_train_per_class",
                     "max_probe_val_per_class"):  # fmt: skip
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")
        if self.on_bad_image not in BAD_IMAGE_ACTIONS:
            raise ValueError(f"on_bad_image must be one of {BAD_IMAGE_ACTIONS}, got {self.on_bad_image!r}")

    @property
    def caps(self) -> dict[str, int]:
        return {
            "train": self.max_train_per_class,
            "test": self.max_test_per_class,
            "probe_train": self.max_probe_train_per_class,
            "probe_val": self.max_probe_val_per_class,
        }


class CelebAConcepts(datasets.GeneratorBasedBuilder):
    """CelebA as a concept graph: ``train`` / ``test`` / ``probe_train`` / ``probe_val`` splits of face images.

    Example::

        builder = CelebAConcepts(data_dir="/data/celeba", cache_dir="/tmp/hf")  # or parquet="flwrlabs/celeba"
        builder.download_and_prepare()
        splits = builder.as_dataset()

    After preparation, :attr:`report` holds the exclusion and skip counts that are also logged.
    """

    BUILDER_CONFIG_CLASS = CelebAConceptsConfig
    BUILDER_CONFIGS = [
        CelebAConceptsConfig(
            name="default",
            description="Paper B's split (train 000, 001, 010, 100; level 1 011, 101, 110; level 2 111), 64x64.",
        ),
        CelebAConceptsConfig(
            name="cpu",
            image_size=32,
            max_train_per_class=2_000,
            max_probe_train_per_class=1_000,
            description="The default split at 32x32 with smaller training caps, for CPU runs.",
        ),
    ]
    DEFAULT_CONFIG_NAME = "default"
    config: CelebAConceptsConfig

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("dataset_name", "celeba_concepts")
        super().__init__(*args, **kwargs)
        self.config.__post_init__()  # validate attributes overridden by keyword arguments
        self.report: dict[str, int] = {}

    def _info(self) -> datasets.DatasetInfo:
        space = celeba_space()
        features = {
            "image": datasets.Image(),
            "image_id": datasets.Value("string"),
            "concepts": datasets.Value("string"),
            "level": datasets.Value("int32"),
        }
        features.update({v.name: datasets.ClassLabel(names=list(v.values)) for v in space.variables})
        return datasets.DatasetInfo(
            description=__doc__,
            features=datasets.Features(features),
            homepage="https://mmlab.ie.cuhk.edu.hk/projects/CelebA.html",
            license="CelebA: non-commercial research purposes only (see the CelebA release agreement)",
        )

    def _split_generators(self, dl_manager: Any) -> list[datasets.SplitGenerator]:
        annotations, reader = open_celeba_source(self.config)
        definitions, table = split_definitions_for(self.config, annotations)
        self.report.update(
            excluded_both_hair=table.num_excluded_both_hair, excluded_neither_hair=table.num_excluded_neither_hair
        )
        for split, rows in definitions.items():
            self.report[f"selected_{split}"] = len(rows)
        return [
            datasets.SplitGenerator(name=split, gen_kwargs={"rows": rows, "reader": reader, "split": split})
            for split, rows in definitions.items()
        ]

    def _generate_examples(self, rows: list[SplitRow], reader: Any, split: str) -> Iterator[tuple[Any, dict]]:
        config = self.config
        space = celeba_space()
        by_id = {r.image_id: r for r in rows}
        skipped = 0
        index = 0
        for image_id, data in reader.read([r.image_id for r in rows]):
            try:
                image = decode_image(data, image_id)
            except ValueError:
                if config.on_bad_image == "raise":
                    raise
                skipped += 1
                continue
            row = by_id[image_id]
            example = {
                "image": center_crop_resize(image, config.image_size, config.crop_size),
                "image_id": image_id,
                "concepts": row.concepts,
                "level": row.level,
            }
            example.update(space.describe(row.concepts))
            yield datasets.builder.Key(0, index), example
            index += 1
        self.report[f"skipped_{split}"] = skipped
        if skipped:
            logger.warning("CelebA split %r: skipped %d images that could not be decoded", split, skipped)
        if index == 0:
            raise ValueError(f"CelebA split {split!r} is empty: all {len(rows)} selected images failed to decode")


class _FileImages:
    """Images of the official tree, read as files from ``img_align_celeba/``."""

    def __init__(self, directory: Path):
        self.directory = directory

    def read(self, image_ids: Sequence[str]) -> Iterator[tuple[str, str]]:
        for image_id in image_ids:
            yield image_id, str(self.directory / image_id)


def load_celeba_concepts(
    data_dir: str | None = None,
    parquet: str | Sequence[str] | None = None,
    config_name: str = "default",
    cache_dir: str | None = None,
    **config_kwargs: Any,
) -> datasets.DatasetDict:
    """Build (or reuse from ``cache_dir``) the CelebA concept splits and return them as a ``DatasetDict``."""
    if isinstance(parquet, list):
        parquet = tuple(parquet)
    builder = CelebAConcepts(
        config_name=config_name, data_dir=data_dir, parquet=parquet, cache_dir=cache_dir, **config_kwargs
    )
    builder.download_and_prepare()
    return builder.as_dataset()


def config_summary(config: CelebAConceptsConfig) -> dict[str, Any]:
    """The selection-relevant fields of a config (for dataset cards and logs)."""
    keep = ("training_classes", "max_train_per_class", "max_test_per_class", "max_probe_train_per_class",
            "max_probe_val_per_class", "seed")  # fmt: skip
    return {f.name: getattr(config, f.name) for f in dataclasses.fields(config) if f.name in keep}
