"""CelebA's attributes as concepts: the attribute tables, the (gender, smile, hair) space and each image's class.

Images with both or neither of ``Black_Hair`` / ``Blond_Hair`` have no hair concept and are excluded (counted).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ...concepts import ConceptGraph, ConceptLike, ConceptSpace, ConceptVariable

logger = logging.getLogger("compgen.data.celeba")

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


