"""Probe input transform: center the object on its ink centroid (and optionally blur it lightly).

A linear probe on raw pixels cannot tell a circle from a triangle when the object sits anywhere in the frame;
moving every object to the image center first makes shape linearly separable (``docs/evaluation.md``).
Our renderer keeps shape linearly separable only with sharp edges, so the blur is off by default.
The "ink" of a pixel is its distance to the background color, estimated from the border pixels, so the
transform works on white or black backgrounds and on noisy generated images (the border also gives the
noise floor, which is subtracted before the centroid is taken).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..images import ImageInput, to_float_images
from .objects import ObjectCheck, check_objects, estimate_background, max_filter3


def ink_weights(images: torch.Tensor, background: torch.Tensor) -> torch.Tensor:
    """Per-pixel ink ``(N, H, W)``: mean absolute distance to the background minus the border's noise floor."""
    distance = (images - background[:, :, None, None]).abs().mean(dim=1)
    border = torch.cat([distance[:, 0, :], distance[:, -1, :], distance[:, 1:-1, 0], distance[:, 1:-1, -1]], dim=1)
    noise_floor = border.mean(dim=1) + 3.0 * border.std(dim=1)
    return (distance - noise_floor[:, None, None]).clamp_(min=0.0)


def center_objects(
    images: ImageInput, blur_sigma: float = 0.0, isolate: bool = False, objects: ObjectCheck | None = None
) -> torch.Tensor:
    """Translate each image so that its ink centroid lands on the image center; blur it if ``blur_sigma`` > 0.

    Accepts uint8 NHWC or float NCHW images and returns float32 ``(N, 3, H, W)`` in [0, 1]. Pixels shifted in
    from outside the frame take the background color. Images without ink (blank) are left in place. With
    ``isolate`` only the largest foreground component and its one-pixel rim are kept (the object of
    :func:`~compgen.evaluation.objects.check_objects`): specks elsewhere are painted over with the background, so
    they neither pull the centroid nor reach the classifier. ``objects``, the one-object check of these very images
    when the caller already ran it, saves running it again.
    """
    x = to_float_images(images)
    n, _, h, w = x.shape
    if n == 0:
        return x
    background = estimate_background(x)
    if isolate:
        mask = (objects if objects is not None else check_objects(x)).object_mask.to(x.device).float()[:, None]
        keep = max_filter3(mask) > 0
        keep |= ~mask.flatten(1).any(dim=1)[:, None, None, None]  # nothing found: leave the image as it is
        x = torch.where(keep, x, background[:, :, None, None])
    weights = ink_weights(x, background)
    mass = weights.sum(dim=(1, 2))
    ys = torch.arange(h, dtype=x.dtype, device=x.device) + 0.5
    xs = torch.arange(w, dtype=x.dtype, device=x.device) + 0.5
    safe_mass = mass.clamp(min=1e-8)
    cy = (weights.sum(dim=2) * ys).sum(dim=1) / safe_mass
    cx = (weights.sum(dim=1) * xs).sum(dim=1) / safe_mass
    has_ink = mass > 1e-6
    shift_x = torch.where(has_ink, cx - w / 2.0, torch.zeros_like(cx))
    shift_y = torch.where(has_ink, cy - h / 2.0, torch.zeros_like(cy))

    # Sample the foreground (image minus background) at positions shifted by the centroid offset; zeros
    # padding then means "background" once it is added back.
    theta = torch.zeros(n, 2, 3, dtype=x.dtype, device=x.device)
    theta[:, 0, 0] = 1.0
    theta[:, 1, 1] = 1.0
    theta[:, 0, 2] = shift_x * 2.0 / w
    theta[:, 1, 2] = shift_y * 2.0 / h
    grid = F.affine_grid(theta, list(x.shape), align_corners=False)
    foreground = x - background[:, :, None, None]
    centered = F.grid_sample(foreground, grid, mode="bilinear", padding_mode="zeros", align_corners=False)
    centered = gaussian_blur(centered, blur_sigma)
    return (centered + background[:, :, None, None]).clamp_(0.0, 1.0)


def gaussian_blur(images: torch.Tensor, sigma: float) -> torch.Tensor:
    """Depthwise 3x3 Gaussian blur (zero padding, so apply it to background-subtracted images); no-op at 0."""
    if sigma <= 0:
        return images
    offsets = torch.tensor([-1.0, 0.0, 1.0], dtype=images.dtype, device=images.device)
    kernel_1d = torch.exp(-(offsets**2) / (2.0 * sigma**2))
    kernel_1d = kernel_1d / kernel_1d.sum()
    kernel = (kernel_1d[:, None] * kernel_1d[None, :]).expand(images.shape[1], 1, 3, 3)
    return F.conv2d(images, kernel, padding=1, groups=images.shape[1])
