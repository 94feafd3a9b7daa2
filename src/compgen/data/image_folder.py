"""A folder of one's own labelled images as a concept-graph dataset: ``datasets``' ImageFolder layout (the images
and a ``metadata.csv`` or ``metadata.jsonl`` with ``file_name`` and one column per concept variable), the training
classes named, and compgen builds the rest: the concept space, the splits (held-out classes by level) and probe
splits from the images (docs/datasets.md, "Your own images")::

    python -m compgen.train tuple-unet --dataset my_images/ --training_classes 00 01 10

Values are names (``red``) or integers (their own digits); a class is one digit per variable, in the metadata's
column order. Optional float columns ``<variable>_value`` carry per-image values for full conditioning.
"""

from __future__ import annotations

import csv
import json
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

METADATA_NAMES = ("metadata.csv", "metadata.jsonl")
"""The metadata files of ``datasets``' ImageFolder layout."""
VALUE_SUFFIX = "_value"
"""A float column ``<variable>_value``: the variable's per-image value (full-information conditioning)."""
TEST_SHARE = 0.2
"""The share of each training class's images held back for the ``test`` split (every held-out class is all test)."""
PROBE_VAL_SHARE = 0.2
"""The share of every class's images the probes are validated on (``probe_val``); the rest is ``probe_train``."""


def metadata_file(directory: str | os.PathLike) -> Path | None:
    """The folder's ``metadata.csv`` or ``metadata.jsonl`` (``None`` when it has neither)."""
    found = [Path(directory) / name for name in METADATA_NAMES if (Path(directory) / name).is_file()]
    return found[0] if found else None


def is_image_folder(directory: str | os.PathLike) -> bool:
    """Whether ``directory`` is an image folder of one's own (a metadata file, no Parquet export beside it)."""
    directory = Path(directory)  # a Hub-layout export keeps its Parquet files at the top or under data/
    return (metadata_file(directory) is not None and not (directory / "data").is_dir()
            and not any(directory.glob("*.parquet")))


def read_metadata(directory: str | os.PathLike) -> list[dict[str, str]]:
    """The metadata rows of an image folder, every value as text; ``ValueError`` naming what is missing."""
    path = metadata_file(directory)
    if path is None:
        raise ValueError(f"{directory}: no {' or '.join(METADATA_NAMES)} (datasets' ImageFolder layout)")
    if path.suffix == ".csv":
        with path.open(newline="") as handle:
            rows = [dict(row) for row in csv.DictReader(handle)]
    else:
        lines = [line for line in path.read_text().splitlines() if line.strip()]
        rows = [{k: str(v) for k, v in json.loads(line).items()} for line in lines]
    if not rows or "file_name" not in rows[0]:
        raise ValueError(f"{path}: needs a file_name column and at least one row")
    return rows


def concept_columns(rows: Sequence[dict[str, str]]) -> list[str]:
    """The concept variables of the metadata: every column but ``file_name`` and the ``*_value`` columns, in order."""
    return [c for c in rows[0] if c != "file_name" and not c.endswith(VALUE_SUFFIX)]


def has_continuous_values(directory: str | os.PathLike) -> bool:
    """Whether an image folder's metadata carries ``<variable>_value`` columns (else quantized conditioning)."""
    return any(column.endswith(VALUE_SUFFIX) for column in read_metadata(directory)[0])


def _variable_values(name: str, column: list[str]) -> list[str]:
    values = sorted(set(column))
    if all(v.lstrip("-").isdigit() for v in values):
        integers = sorted(int(v) for v in values)
        if integers != list(range(len(integers))):
            raise ValueError(f"column {name!r}: integer values must be 0..K-1 (their own digits), got {integers}")
        values = [str(i) for i in integers]
    if len(values) < 2:
        raise ValueError(f"column {name!r} has {len(values)} value ({values}): a concept variable needs two or more")
    if len(values) > 10:
        raise ValueError(f"column {name!r} has {len(values)} values: a class names each by one digit (at most 10)")
    return values


def load_image_folder(directory: str | os.PathLike, training_classes: Sequence[str], seed: int = 0):
    """The ``DatasetDict`` (``train``, ``test``, ``probe_train``, ``probe_val``) of an image folder with
    ``training_classes`` (one digit per variable): :func:`labelled_images_dataset` of its images and metadata. A
    missing or unreadable image is refused, naming it."""
    from PIL import Image, UnidentifiedImageError

    directory = Path(directory)
    rows = read_metadata(directory)
    images = []
    for row in rows:
        path = directory / row["file_name"]
        try:
            with Image.open(path) as image:
                images.append(np.asarray(image.convert("RGB")))
        except (FileNotFoundError, UnidentifiedImageError, OSError) as error:
            raise ValueError(f"{path}: missing or unreadable ({type(error).__name__}: {error})") from error
    return labelled_images_dataset(images, rows, training_classes, [row["file_name"] for row in rows], seed)


def labelled_split_dataset(split, training_classes: Sequence[str], seed: int = 0):
    """A ``datasets`` split of images with attribute columns as text or integers (a Hub dataset or a Parquet export
    of one's own images, no ``ClassLabel`` columns) as a concept-graph ``DatasetDict``
    (:func:`labelled_images_dataset`)."""
    if "image" not in split.column_names:
        raise ValueError(f"a dataset of one's own images needs an image column, got {split.column_names}")
    columns = [c for c in split.column_names if c not in ("image", "file_name")]
    rows = [{c: str(value) for c, value in zip(columns, values, strict=True)}
            for values in zip(*(split[c] for c in columns), strict=True)]
    images = [np.asarray(image.convert("RGB")) for image in split["image"]]
    return labelled_images_dataset(images, rows, training_classes, [f"row {i}" for i in range(len(rows))], seed)


def labelled_images_dataset(images: Sequence[np.ndarray], rows: Sequence[dict[str, str]],
                            training_classes: Sequence[str], where: Sequence[str], seed: int = 0):
    """Images with one row of attributes each (text: names or integers; ``<variable>_value`` floats) as the
    ``DatasetDict`` compgen trains on: the concept space from the columns, ``train`` (the training classes less a
    :data:`TEST_SHARE`), ``test`` (that share and every held-out class), ``probe_train`` / ``probe_val`` (every class).
    Refused with a ``ValueError`` naming the problem: an unknown value or class, a class without images, a variable
    with one value, images not square or not of one size (``where`` names each image)."""
    import datasets

    from ..concepts import ConceptGraph, ConceptSpace, ConceptVariable

    names = concept_columns(rows)
    if not names:
        raise ValueError(f"no concept columns beside file_name and the *{VALUE_SUFFIX} columns: {list(rows[0])}")
    variables = {name: _variable_values(name, [row[name] for row in rows]) for name in names}
    space = ConceptSpace(tuple(ConceptVariable(name, tuple(values)) for name, values in variables.items()))
    if not training_classes:
        raise ValueError("--training_classes: name the training classes (one digit per variable, e.g. 00 01 10)")
    training = sorted({space.format(space.parse(c)) for c in training_classes})  # an unknown digit is named here
    graph = ConceptGraph(space, training)
    classes = [space.format(tuple(variables[n].index(row[n]) for n in names)) for row in rows]
    empty = sorted(set(graph.levels) - set(classes))
    if empty:
        shape = " x ".join(map(str, space.cardinalities))
        raise ValueError(f"classes {empty} have no images: every class of the {shape} space needs some (the held-out "
                         "ones to test on)")
    size = images[0].shape
    for array, name in zip(images, where, strict=True):
        if array.shape[0] != array.shape[1] or array.shape != size:
            raise ValueError(f"{name}: {array.shape[1]}x{array.shape[0]} px; every image must be square and of one "
                             f"size (the first is {size[1]}x{size[0]} px)")
    value_columns = [f"{n}{VALUE_SUFFIX}" for n in names if f"{n}{VALUE_SUFFIX}" in rows[0]]
    order = np.random.default_rng(seed).permutation(len(rows))
    split_of, probe_val = {}, set()
    for name in sorted(set(classes)):
        members = [i for i in order if classes[i] == name]
        held = int(np.ceil(TEST_SHARE * len(members))) if name in training else len(members)
        split_of |= {i: "test" if k < held else "train" for k, i in enumerate(members)}
        probe_val |= set(members[:max(1, int(PROBE_VAL_SHARE * len(members)))])
    features = datasets.Features({"image": datasets.Image(),
                                  **{n: datasets.ClassLabel(names=variables[n]) for n in names},
                                  **{column: datasets.Value("float32") for column in value_columns},
                                  "concepts": datasets.Value("string"), "level": datasets.Value("int32")})

    def split(indices: list[int]) -> datasets.Dataset:
        return datasets.Dataset.from_dict({
            "image": [images[i] for i in indices],
            **{n: [variables[n].index(rows[i][n]) for i in indices] for n in names},
            **{column: [float(rows[i][column]) for i in indices] for column in value_columns},
            "concepts": [classes[i] for i in indices], "level": [graph.levels[classes[i]] for i in indices],
        }, features=features)

    train = [i for i in order if split_of[i] == "train"]
    if not train:
        raise ValueError("no training images: the training classes need more than one image each")
    return datasets.DatasetDict({
        "train": split(train), "test": split([i for i in order if split_of[i] == "test"]),
        "probe_train": split([i for i in order if i not in probe_val]),
        "probe_val": split([i for i in order if i in probe_val]),
    })
