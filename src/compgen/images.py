"""Conversions between stored images (uint8 NHWC, as datasets and evaluation hold them) and model tensors.

Generators model images as float NCHW in [-1, 1] (diffusers' convention); pipelines return float NHWC in [0, 1]
(``output_type="np"``); the evaluation scores uint8 NHWC. These helpers are the one place the scalings live.
"""

from __future__ import annotations

import numpy as np
import torch


def uint8_to_signed(images: torch.Tensor | np.ndarray) -> torch.Tensor:
    """uint8 ``(N, H, W, C)`` -> float32 ``(N, C, H, W)`` in [-1, 1], on the input's device."""
    tensor = torch.as_tensor(images)
    if tensor.dtype != torch.uint8 or tensor.ndim != 4:
        raise ValueError(f"expected uint8 images (N, H, W, C), got {tensor.dtype} {tuple(tensor.shape)}")
    return tensor.permute(0, 3, 1, 2).float().div(127.5).sub(1.0).contiguous()


def signed_to_uint8(images: torch.Tensor) -> np.ndarray:
    """float ``(N, C, H, W)`` in about [-1, 1] -> uint8 ``(N, H, W, C)`` numpy (clipped and rounded)."""
    array = ((images.detach().float().clamp(-1.0, 1.0) + 1.0) * 127.5).round().to(torch.uint8)
    return array.permute(0, 2, 3, 1).cpu().numpy()


def unit_to_uint8(images: np.ndarray) -> np.ndarray:
    """float ``(N, H, W, C)`` in about [0, 1] (a pipeline's ``output_type="np"``) -> uint8, clipped and rounded."""
    return np.clip(np.rint(np.asarray(images) * 255.0), 0, 255).astype(np.uint8)
