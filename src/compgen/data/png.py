"""A fast PNG encoder for the small RGB renders of the shapes datasets (part of what fixes their bytes)."""

from __future__ import annotations

import struct
import zlib

import numpy as np


def encode_png(images: np.ndarray) -> list[bytes]:
    """Encode ``(N, H, W, 3)`` uint8 images as RGB PNG files (no filter, zlib level 6).

    About twice as fast as PIL for small images and smaller output, since the per-image overhead dominates.
    """
    images = np.ascontiguousarray(images, dtype=np.uint8)
    if images.ndim != 4 or images.shape[-1] != 3:
        raise ValueError(f"expected (N, H, W, 3) uint8 images, got shape {images.shape}")
    n, height, width, _ = images.shape
    scanlines = np.zeros((n, height, 1 + 3 * width), dtype=np.uint8)  # filter byte 0 ("None") per row
    scanlines[:, :, 1:] = images.reshape(n, height, 3 * width)
    header = b"\x89PNG\r\n\x1a\n" + _png_chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
    end = _png_chunk(b"IEND", b"")
    return [header + _png_chunk(b"IDAT", zlib.compress(rows.tobytes(), 6)) + end for rows in scanlines]


def _png_chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
