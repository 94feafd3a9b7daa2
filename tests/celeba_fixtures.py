"""Miniature CelebA copies in the exact official and Hub Parquet layouts, written under a test's tmp_path.

Images are small JPEGs whose mean color encodes the three concepts (red = male, green = not smiling,
blue = blond) under noise, so a probe can learn them.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path

import datasets
import numpy as np
from PIL import Image

from compgen.data.celeba import CELEBA_ATTRIBUTES

IMAGE_WIDTH, IMAGE_HEIGHT = 18, 22  # the aligned CelebA aspect (178 x 218), shrunk
HUB_BOOL_CONFIG = "img_align+identity+attr"  # the config name of the flwrlabs/celeba mirror


@dataclass
class MiniCelebA:
    """Rows of a miniature CelebA: official file names, (N, 40) -1/1 attributes, partitions and JPEG bytes."""

    image_ids: list[str]
    attributes: np.ndarray
    partitions: np.ndarray
    jpegs: list[bytes]

    def column(self, name: str) -> np.ndarray:
        return self.attributes[:, CELEBA_ATTRIBUTES.index(name)]

    def class_of(self, index: int) -> str | None:
        """Concept string of a row, or None for ambiguous hair."""
        black, blond = self.column("Black_Hair")[index] == 1, self.column("Blond_Hair")[index] == 1
        if black == blond:
            return None
        male, smiling = self.column("Male")[index] == 1, self.column("Smiling")[index] == 1
        return f"{int(male)}{int(not smiling)}{int(blond)}"


def make_mini_celeba(
    per_class: tuple[int, int, int] = (4, 3, 3),
    extra_000_train: int = 6,
    num_both_hair: int = 3,
    num_neither_hair: int = 2,
    seed: int = 0,
) -> MiniCelebA:
    """``per_class[p]`` images of each of the 8 classes in partition p, more 000 in train, plus ambiguous hair."""
    rng = np.random.default_rng(seed)
    specs: list[tuple[int, int, int, int, int]] = []  # (male, smiling, black, blond, partition)
    for partition, count in enumerate(per_class):
        for code in range(8):
            male, not_smiling, blond = (code >> 2) & 1, (code >> 1) & 1, code & 1
            n = count + (extra_000_train if code == 0 and partition == 0 else 0)
            specs += [(male, 1 - not_smiling, 1 - blond, blond, partition)] * n
    specs += [(int(rng.integers(2)), int(rng.integers(2)), 1, 1, int(rng.integers(3))) for _ in range(num_both_hair)]
    specs += [(int(rng.integers(2)), int(rng.integers(2)), 0, 0, int(rng.integers(3))) for _ in range(num_neither_hair)]
    order = rng.permutation(len(specs))
    attributes = np.where(rng.random((len(specs), len(CELEBA_ATTRIBUTES))) < 0.3, 1, -1).astype(np.int64)
    partitions = np.zeros(len(specs), dtype=np.int64)
    jpegs = []
    for row, spec_index in enumerate(order):
        male, smiling, black, blond, partition = specs[spec_index]
        for name, value in (("Male", male), ("Smiling", smiling), ("Black_Hair", black), ("Blond_Hair", blond)):
            attributes[row, CELEBA_ATTRIBUTES.index(name)] = 1 if value else -1
        partitions[row] = partition
        mean = np.array([200 if male else 50, 50 if smiling else 200, 200 if blond else 50], dtype=np.float64)
        pixels = np.clip(mean + rng.normal(0, 25, (IMAGE_HEIGHT, IMAGE_WIDTH, 3)), 0, 255).astype(np.uint8)
        buffer = io.BytesIO()
        Image.fromarray(pixels).save(buffer, format="JPEG", quality=90)
        jpegs.append(buffer.getvalue())
    ids = [f"{i + 1:06d}.jpg" for i in range(len(specs))]
    return MiniCelebA(ids, attributes, partitions, jpegs)


def write_official_tree(root: Path, mini: MiniCelebA) -> Path:
    """``img_align_celeba/*.jpg``, ``list_attr_celeba.txt`` and ``list_eval_partition.txt`` as CelebA ships them."""
    images = root / "img_align_celeba"
    images.mkdir(parents=True, exist_ok=True)
    for image_id, data in zip(mini.image_ids, mini.jpegs, strict=True):
        (images / image_id).write_bytes(data)
    lines = [str(len(mini.image_ids)), " ".join(CELEBA_ATTRIBUTES) + " "]
    for image_id, row in zip(mini.image_ids, mini.attributes, strict=True):
        lines.append(image_id + " " + " ".join(f"{v:2d}" for v in row))
    (root / "list_attr_celeba.txt").write_text("\n".join(lines) + "\n")
    partition_lines = [f"{i} {p}" for i, p in zip(mini.image_ids, mini.partitions, strict=True)]
    (root / "list_eval_partition.txt").write_text("\n".join(partition_lines) + "\n")
    return root


def _split_dataset(mini: MiniCelebA, partition: int, encoding: str, id_column: bool) -> datasets.Dataset:
    rows = np.flatnonzero(mini.partitions == partition)
    data: dict[str, list] = {
        # Stored like images pushed from files: the bytes plus the original file name.
        "image": [{"bytes": mini.jpegs[r], "path": mini.image_ids[r]} for r in rows],
    }
    features: dict[str, datasets.features.features.FeatureType] = {"image": datasets.Image()}
    if id_column:
        data["image_id"] = [mini.image_ids[r] for r in rows]
        features["image_id"] = datasets.Value("string")
    else:
        data["celeb_id"] = [int(r % 7) + 1 for r in rows]  # identity, not an image id
        features["celeb_id"] = datasets.Value("int64")
    for a, name in enumerate(CELEBA_ATTRIBUTES):
        values = mini.attributes[rows, a]
        data[name] = (values == 1).tolist() if encoding == "bool" else values.tolist()
        features[name] = datasets.Value("bool" if encoding == "bool" else "int64")
    return datasets.Dataset.from_dict(data, features=datasets.Features(features))


def write_hub_bool_layout(root: Path, mini: MiniCelebA) -> Path:
    """Like ``flwrlabs/celeba``: config dir, splits train/valid/test, bool attributes, ``celeb_id``, no image id."""
    config_dir = root / HUB_BOOL_CONFIG
    config_dir.mkdir(parents=True, exist_ok=True)
    for partition, split in enumerate(("train", "valid", "test")):
        _split_dataset(mini, partition, "bool", id_column=False).to_parquet(
            str(config_dir / f"{split}-00000-of-00001.parquet")
        )
    card = ["---", "configs:", f"- config_name: {HUB_BOOL_CONFIG}", "  data_files:"]
    for split in ("train", "valid", "test"):
        card += [f"  - split: {split}", f"    path: {HUB_BOOL_CONFIG}/{split}-*"]
    (root / "README.md").write_text("\n".join(card + ["---", "", "# mini CelebA (bool)", ""]))
    return root


def write_hub_pm1_layout(root: Path, mini: MiniCelebA) -> Path:
    """Like the -1/1 integer mirrors: ``data/{train,validation,test}-*.parquet``, no README, an ``image_id`` column."""
    data_dir = root / "data"
    data_dir.mkdir(parents=True, exist_ok=True)
    for partition, split in enumerate(("train", "validation", "test")):
        _split_dataset(mini, partition, "pm1", id_column=True).to_parquet(
            str(data_dir / f"{split}-00000-of-00001.parquet")
        )
    return root
