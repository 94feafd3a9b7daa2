"""Decoding and cropping CelebA images."""

from __future__ import annotations

import io
import os

from PIL import Image, UnidentifiedImageError


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


