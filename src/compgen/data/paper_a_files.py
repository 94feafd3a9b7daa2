"""Paper A's published image layout, read as concept-graph rows (Okawa et al. 2023, public code ``load_dataset.py``).

Paper A's synthetic data ship as a zip of Blender renders: ``<root>/train/`` and ``<root>/test/`` hold
``CLEVR_<class>_<index>.png`` images, each beside a ``CLEVR_<class>_<index>.json`` whose first entry is the object's
size value and whose second is its RGBA colour: the per-image values the model is conditioned on in training. The
class string's digits are (shape, color, size), compgen's order. A config of the concept-graph builder with
``data_dir`` set reads such a directory instead of rendering, so a user who has Paper A's zip trains on its exact
images::

    build_concept_graph_dataset("paper-a-h32-train1", data_dir="single-body_2d_3classes", split_preset="H32-train1")

Images are converted to RGB: transparent pixels are composited onto a white background (Paper A's model reads the
four RGBA channels; compgen's models read three) and resized to the config's ``image_size`` when they differ;
16-bit greyscale images are scaled to 8 bits. Files are checked before they are used, and every refusal names the
file: a non-regular file named like an image (a FIFO, a folder) is never opened, two names for one index
(``_1``, ``_01``) are refused, as are images larger than :data:`MAX_IMAGE_PIXELS` (decompression bombs), values that
are no numbers (booleans included), out of range (a colour on the 0-255 scale, a size that is not positive) or nearer
another class's values than the class of the file's name.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image, UnidentifiedImageError

from ..shapes import shapes_continuous_concepts
from .png import encode_png

FILE_PATTERN = re.compile(r"^CLEVR_(?P<concepts>\d+)_(?P<index>\d+)\.png$")
"""The name of one of Paper A's images: its concept class and its index within the class."""
MAX_IMAGE_SIZE = 512
"""The largest ``image_size`` a ``data_dir`` config may resize Paper A's images to."""
MAX_IMAGE_PIXELS = 4096 * 4096
"""An image whose header claims more pixels is refused before it is decoded (Paper A's renders are far smaller)."""
MAX_IMAGE_BYTES = 64 << 20
MAX_VALUES_BYTES = 1 << 20
_DECODE_ERRORS = (UnidentifiedImageError, OSError, SyntaxError, EOFError, ValueError, Image.DecompressionBombError)
_PNG_MODES = {"1", "L", "LA", "P", "PA", "RGB", "RGBA"}
_SIXTEEN_BIT_MODES = {"I;16", "I;16B", "I;16L", "I"}  # how Pillow opens a 16-bit greyscale PNG
_CHANNELS = "rgb"


def check_image_size(value: Any, config_name: str) -> None:
    """Refuse an ``image_size`` that is no int in ``[1, MAX_IMAGE_SIZE]`` (before any image is read)."""
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or not 1 <= value <= MAX_IMAGE_SIZE:
        raise ValueError(
            f"config {config_name!r}: image_size must be an int in [1, {MAX_IMAGE_SIZE}] with data_dir (every image "
            f"is resized to it), got {value!r}"
        )


def paper_fingerprint(directory: str | Path) -> str:
    """Hash of ``directory``'s absolute path and the names, sizes and mtimes of its ``train/`` and ``test/`` files:
    what keys a ``data_dir`` build's cache, so an edited file or another folder of the same name is read anew."""
    root = Path(directory).expanduser().resolve()
    digest = hashlib.sha256(str(root).encode())
    for split in ("train", "test"):
        folder = root / split
        if not folder.is_dir():
            continue  # validation names the missing folder
        for entry in sorted(os.scandir(folder), key=lambda entry: entry.name):
            try:
                info = entry.stat()  # stat never opens the file: a FIFO is safe here
                digest.update(f"{split}/{entry.name}:{info.st_mode}:{info.st_size}:{info.st_mtime_ns}\n".encode())
            except OSError:  # a broken link: refused when read
                digest.update(f"{split}/{entry.name}:missing\n".encode())
    return digest.hexdigest()[:16]


def paper_files_by_class(directory: str | Path, split: str) -> dict[str, list[Path]]:
    """``{class string: [PNG paths in index order]}`` of ``<directory>/<split>``; an error names a missing folder,
    a non-regular file named like an image and images of one class that share an index (``_1`` and ``_01``)."""
    folder = Path(directory).expanduser() / split
    if not folder.is_dir():
        raise FileNotFoundError(
            f"{folder} does not exist: a Paper A data directory holds train/ and test/ folders of "
            "CLEVR_<class>_<index>.png images with their .json values"
        )
    found: dict[tuple[str, int], list[Path]] = {}
    for path in sorted(folder.iterdir()):
        match = FILE_PATTERN.match(path.name)
        if match:
            if not path.is_file():  # checked without opening it: a FIFO would block the build forever
                raise ValueError(f"{path} is not a regular file (a FIFO, device, socket or folder): remove it")
            found.setdefault((match["concepts"], int(match["index"])), []).append(path)
    clashes = [paths for paths in found.values() if len(paths) > 1]
    if clashes:
        listed = "; ".join(" and ".join(path.name for path in paths) for paths in clashes)
        raise ValueError(f"{folder} holds several images with one class and index: {listed}; keep one of each")
    by_class: dict[str, list[Path]] = {}
    for (concepts, _), paths in sorted(found.items()):
        by_class.setdefault(concepts, []).append(paths[0])
    return by_class


def _read_regular(path: Path, limit: int, what: str) -> bytes:
    """The bytes of ``path``, refusing (without blocking) anything but a regular file of at most ``limit`` bytes."""
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO opens at once, and is then refused
    except OSError as error:
        raise ValueError(f"cannot read {what} {path}: {error.strerror}") from None
    with os.fdopen(descriptor, "rb") as file:
        info = os.fstat(descriptor)
        if not stat.S_ISREG(info.st_mode):
            raise ValueError(f"{what} {path} is not a regular file (a FIFO, device, socket or folder)")
        if info.st_size > limit:
            raise ValueError(f"{what} {path} has {info.st_size} bytes, more than Paper A's files ({limit} at most)")
        return file.read(limit + 1)


def _number(values_path: Path, field: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{values_path}: {field} must be a number, got {value!r}")
    if not np.isfinite(value):
        raise ValueError(f"{values_path}: {field} must be finite, got {value!r}")
    return float(value)


def read_paper_values(values_path: Path) -> tuple[float, list[float]]:
    """``(size value, [r, g, b])`` of a values file, each checked: numbers, a positive size, colours in [0, 1]."""
    if not values_path.exists() and not values_path.is_symlink():
        raise ValueError(f"{values_path.with_suffix('.png')} has no values file {values_path.name} (Paper A pairs "
                         "every image with one)")
    raw = _read_regular(values_path, MAX_VALUES_BYTES, "values file")
    try:
        values = json.loads(raw)
        size_value, color = values[0], list(values[1][:3])
        if len(color) != 3:
            raise ValueError(f"the colour has {len(color)} channels")
    except RecursionError:
        raise ValueError(
            f"{values_path} is nested too deeply to hold [size, [r, g, b, a], ...] (Paper A's layout)"
        ) from None
    except (ValueError, TypeError, IndexError, KeyError) as error:
        raise ValueError(
            f"{values_path} must hold [size, [r, g, b, a], ...] with finite numbers (Paper A's layout): {error}"
        ) from None
    size_value = _number(values_path, "size (entry 0)", size_value)
    if size_value <= 0:
        raise ValueError(f"{values_path}: size (entry 0) is {size_value}, but sizes are positive scales (2.7, 1.6)")
    rgb = [_number(values_path, f"colour {_CHANNELS[i]} (entry 1[{i}])", value) for i, value in enumerate(color)]
    for i, channel in enumerate(rgb):
        if not 0 <= channel <= 1:
            raise ValueError(f"{values_path}: colour {_CHANNELS[i]} (entry 1[{i}]) is {channel}, outside [0, 1] "
                             "(Paper A's colours are fractions, not 0-255)")
    return size_value, rgb


def check_paper_class(values_path: Path, space: Any, concepts: str, size_value: float, color: list[float]) -> None:
    """Refuse values nearer another class's colour or size than those of the class in the file's name."""
    table = shapes_continuous_concepts(space)
    parsed = dict(zip(space.names, space.parse(concepts), strict=True))
    nearest = {
        "color": int(np.argmin(((np.asarray(table["color"]) - color) ** 2).sum(axis=1))),
        "size": int(np.argmin(np.abs(np.asarray(table["size"])[:, 0] - size_value))),
    }
    wrong = {name: index for name, index in nearest.items() if index != parsed[name]}
    if wrong:
        found = ", ".join(f"{name} {space.variable(name).values[index]}" for name, index in wrong.items())
        named = ", ".join(f"{name} {space.variable(name).values[parsed[name]]}" for name in wrong)
        raise ValueError(
            f"{values_path} holds another class's values than its name says: its colour {color} and size "
            f"{size_value} are those of {found}, but class {concepts} has {named}"
        )


def _to_rgba(opened: Image.Image, path: Path) -> Image.Image:
    if opened.mode in _SIXTEEN_BIT_MODES:  # Pillow would clip 16-bit levels to 255: every pixel white
        levels = np.asarray(opened).astype(np.int64)
        if levels.size and (levels.min() < 0 or levels.max() > 65535):
            raise ValueError(f"image {path} has pixel levels outside 16 bits ({opened.mode})")
        return Image.fromarray(((levels * 255 + 32767) // 65535).astype(np.uint8), "L").convert("RGBA")
    if opened.mode not in _PNG_MODES:
        raise ValueError(f"image {path} has pixel mode {opened.mode}, which compgen cannot read faithfully")
    return opened.convert("RGBA")


def read_paper_image(path: Path, image_size: int) -> np.ndarray:
    """One image as RGB uint8 ``(image_size, image_size, 3)``; a ``ValueError`` names a file that cannot be read."""
    data = _read_regular(path, MAX_IMAGE_BYTES, "image")
    try:
        opened = Image.open(io.BytesIO(data))  # reads the header only: a bomb is refused before it is decoded
    except _DECODE_ERRORS as error:
        raise ValueError(f"cannot decode image {path}: {error}") from None
    with opened:
        if opened.width * opened.height > MAX_IMAGE_PIXELS:
            raise ValueError(f"image {path} is {opened.width}x{opened.height} pixels, more than {MAX_IMAGE_PIXELS}: "
                             "refused before decoding (a decompression bomb?)")
        try:
            opened.load()
        except _DECODE_ERRORS as error:
            raise ValueError(f"cannot decode image {path}: {error}") from None
        image = _to_rgba(opened, path)
    white = Image.new("RGBA", image.size, (255, 255, 255, 255))
    rgb = Image.alpha_composite(white, image).convert("RGB")
    if rgb.size != (image_size, image_size):
        rgb = rgb.resize((image_size, image_size), Image.Resampling.BICUBIC)
    return np.asarray(rgb, dtype=np.uint8)


def read_paper_example(path: Path, image_size: int, space: Any = None) -> dict[str, Any]:
    """One image as RGB uint8 ``(image_size, image_size, 3)`` with its ``size_value`` and ``color_rgb``.

    Raises a ``ValueError`` naming the file when the image cannot be decoded or its JSON is missing, malformed, out
    of range or (given the concept ``space``) holds another class's values than the file's name.
    """
    values_path = path.with_suffix(".json")
    size_value, color = read_paper_values(values_path)
    if space is not None:
        check_paper_class(values_path, space, FILE_PATTERN.match(path.name)["concepts"], size_value, color)
    return {"image": read_paper_image(path, image_size), "size_value": size_value, "color_rgb": color}


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
    directory: str | Path, split: str, counts: dict[str, int], image_size: int, space: Any = None
) -> Iterator[tuple[str, dict[str, Any]]]:
    """``(class string, example)`` for the first ``counts[class]`` images of each class of ``<directory>/<split>``."""
    for concepts, paths in check_paper_counts(directory, split, counts).items():
        for path in paths:
            yield concepts, read_paper_example(path, image_size, space)


def paper_rows(config: Any, split: str) -> Iterator[tuple[int, dict[str, Any]]]:
    """The builder's rows of a ``data_dir`` config's split; position and rotation are unknown there (NaN)."""
    space, graph = config.space, config.graph
    examples = iter_paper_examples(config.data_dir, split, config.class_counts_for(split), config.image_size, space)
    for key, (concept, example) in enumerate(examples):
        parsed = space.parse(concept)
        yield key, {
            "image": {"bytes": encode_png(example["image"][None])[0], "path": None},
            "concepts": concept,
            "level": graph.level(parsed),
            **dict(zip(space.names, parsed, strict=True)),
            "color_rgb": example["color_rgb"],
            "size_value": example["size_value"],
            "position": [float("nan"), float("nan")],
            "rotation": float("nan"),
        }
