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


ImageInput = np.ndarray | torch.Tensor


def to_float_images(images: ImageInput) -> torch.Tensor:
    """Convert uint8 NHWC (numpy or torch) or float NCHW images to a float32 ``(N, 3, H, W)`` tensor in [0, 1]."""
    tensor = torch.from_numpy(np.ascontiguousarray(images)) if isinstance(images, np.ndarray) else images
    if not isinstance(tensor, torch.Tensor):
        raise ValueError(f"images must be a numpy array or a torch tensor, got {type(images).__name__}")
    if tensor.ndim != 4:
        raise ValueError(f"images must be a 4-d batch, got shape {tuple(tensor.shape)}")
    if tensor.dtype == torch.uint8:
        if tensor.shape[-1] != 3:
            raise ValueError(f"uint8 images must be NHWC with 3 channels, got shape {tuple(tensor.shape)}")
        return tensor.permute(0, 3, 1, 2).float().div_(255.0)
    if not tensor.is_floating_point():
        raise ValueError(f"images must be uint8 NHWC or float NCHW in [0, 1], got dtype {tensor.dtype}")
    if tensor.shape[1] != 3:
        raise ValueError(f"float images must be NCHW with 3 channels, got shape {tuple(tensor.shape)}")
    return tensor.float()
