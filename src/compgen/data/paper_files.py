"""Paper A's published image layout, read as concept-graph rows (Okawa et al. 2023, public code ``load_dataset.py``).

Paper A's synthetic data ship as a zip of Blender renders: ``<root>/train/`` and ``<root>/test/`` hold
``CLEVR_<class>_<index>.png`` images, each beside a ``CLEVR_<class>_<index>.json`` whose first entry is the object's
size value and whose second is its RGBA colour: the per-image values the model is conditioned on in training. The
class string's digits are (shape, color, size), compgen's order. A config of the concept-graph builder with
``data_dir`` set reads such a directory instead of rendering, so a user who has Paper A's zip trains on its exact
images::

    build_concept_graph_dataset("paper-a-h32-train1", data_dir="single-body_2d_3classes", split_preset="H32-train1")

Images are converted to RGB: transparent pixels are composited onto a white background (Paper A's model reads the
four RGBA channels; compgen's models read three) and resized to the config's ``image_size`` when they differ.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image, UnidentifiedImageError

FILE_PATTERN = re.compile(r"^CLEVR_(?P<concepts>\d+)_(?P<index>\d+)\.png$")
"""The name of one of Paper A's images: its concept class and its index within the class."""


def paper_files_by_class(directory: str | Path, split: str) -> dict[str, list[Path]]:
    """``{class string: [PNG paths in index order]}`` of ``<directory>/<split>``; an error names a missing folder."""
    folder = Path(directory).expanduser() / split
    if not folder.is_dir():
        raise FileNotFoundError(
            f"{folder} does not exist: a Paper A data directory holds train/ and test/ folders of "
            "CLEVR_<class>_<index>.png images with their .json values"
        )
    found: dict[str, list[tuple[int, Path]]] = {}
    for path in folder.iterdir():
        match = FILE_PATTERN.match(path.name)
        if match:
            found.setdefault(match["concepts"], []).append((int(match["index"]), path))
    return {concepts: [path for _, path in sorted(paths)] for concepts, paths in sorted(found.items())}


def read_paper_example(path: Path, image_size: int) -> dict[str, Any]:
    """One image as RGB uint8 ``(image_size, image_size, 3)`` with its ``size_value`` and ``color_rgb``.

    Raises a ``ValueError`` naming the file when the image cannot be decoded or its JSON is missing or malformed.
    """
    values_path = path.with_suffix(".json")
    if not values_path.is_file():
        raise ValueError(f"{path} has no values file {values_path.name} (Paper A pairs every image with one)")
    try:
        values = json.loads(values_path.read_text())
        size_value = float(values[0])
        color = [float(channel) for channel in values[1][:3]]
        if len(color) != 3 or not np.isfinite([size_value, *color]).all():
            raise ValueError("not finite")
    except (ValueError, TypeError, IndexError, KeyError) as error:
        raise ValueError(
            f"{values_path} must hold [size, [r, g, b, a], ...] with finite numbers (Paper A's layout): {error}"
        ) from None
    try:
        with Image.open(path) as opened:
            opened.load()
            image = opened.convert("RGBA")
    except (UnidentifiedImageError, OSError) as error:
        raise ValueError(f"cannot decode image {path}: {error}") from None
    white = Image.new("RGBA", image.size, (255, 255, 255, 255))
    rgb = Image.alpha_composite(white, image).convert("RGB")
    if rgb.size != (image_size, image_size):
        rgb = rgb.resize((image_size, image_size), Image.Resampling.BICUBIC)
    return {"image": np.asarray(rgb, dtype=np.uint8), "size_value": size_value, "color_rgb": color}


def check_paper_counts(directory: str | Path, split: str, counts: dict[str, int]) -> dict[str, list[Path]]:
    """The first ``counts[class]`` image paths of each class of ``<directory>/<split>``; a class with fewer images
    than asked for is an error that names it (ask for fewer with ``class_counts`` or ``test_images_per_class``)."""
    files = paper_files_by_class(directory, split)
    chosen = {}
    for concepts, count in counts.items():
        available = files.get(concepts, [])
        if len(available) < count:
            raise ValueError(
                f"{Path(directory) / split} holds {len(available)} images of class {concepts}, but the config asks "
                f"for {count}; set images_per_class / class_counts (test: test_images_per_class) to at most that"
            )
        chosen[concepts] = available[:count]
    return chosen


def iter_paper_examples(
    directory: str | Path, split: str, counts: dict[str, int], image_size: int
) -> Iterator[tuple[str, dict[str, Any]]]:
    """``(class string, example)`` for the first ``counts[class]`` images of each class of ``<directory>/<split>``."""
    for concepts, paths in check_paper_counts(directory, split, counts).items():
        for path in paths:
            yield concepts, read_paper_example(path, image_size)
