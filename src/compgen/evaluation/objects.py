"""Find the object in a shapes image: background, foreground layers and the one-object check.

A shapes image (Okawa et al. 2023, Appendix A.1) is *one* object on a plain background. Generated images fail that
in ways a classifier would not notice: blank or near-blank frames, a few specks, an object torn into fragments,
or two objects at once. :func:`check_objects` finds the foreground as the pixels that differ from the estimated
background colour by more than the image's own noise floor, splits it into 8-connected components, and accepts an
image only when exactly one component has a plausible object area and holds most of the foreground. Every other
image is "no valid object" and counts as wrong on every concept (:class:`~compgen.evaluation.LearningDynamicsTracker`).

:func:`image_layers` models an image as ``background + coverage * (foreground - background)``: the same model the
renderer draws with (``compgen.shapes``), estimated from pixels alone. The corruptions of the probe stress suite
(:mod:`compgen.evaluation.corruptions`) and the pixel-statistics scorer (:mod:`compgen.evaluation.pixel_scorer`)
are built on it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from ..images import ImageInput, to_float_images

OBJECT_FAILURES = ("blank", "fragments", "several", "oversized", "hybrid", "pale")
"""Why an image has no valid object: nothing drawn; only pieces too small to be an object (specks, fragments) or
pieces that together outweigh the largest; two or more object-sized blobs; one blob larger than any real object; and,
set by the typicality check (:mod:`compgen.evaluation.typicality`), two shapes superposed or a colour too weak."""

MIN_OBJECT_AREA_FRACTION = 6.0 / 784
"""Smallest plausible object, as a fraction of the frame: 6 foreground pixels at 28x28. The smallest real object
(a small triangle at the bottom of its size range, about 13.5 px^2) shows at least 9 foreground pixels in every
render of ``tests/unit/test_objects.py``, darkened or noisy as generated images are."""

MAX_OBJECT_AREA_FRACTION = 320.0 / 784
"""Largest plausible object: twice the largest real object (a large circle at the top of its range, about
160 px^2 at 28x28)."""

FOREGROUND_THRESHOLD = 0.15
"""A pixel is foreground when its colour distance to the background exceeds the noise floor by this much."""

MAIN_COMPONENT_SHARE = 0.5
"""The object component must hold at least this share of all foreground pixels; otherwise the image is fragments."""


def estimate_background(images: torch.Tensor) -> torch.Tensor:
    """Per-image background color ``(N, 3)``: the per-channel median of the one-pixel image border."""
    border = torch.cat(
        [images[:, :, 0, :], images[:, :, -1, :], images[:, :, 1:-1, 0], images[:, :, 1:-1, -1]], dim=2
    )
    return border.median(dim=2).values


def colour_distance(images: torch.Tensor, background: torch.Tensor) -> torch.Tensor:
    """Per-pixel ``(N, H, W)`` largest absolute channel difference from the background ``(N, 3)``.

    The largest channel (rather than the mean) gives every object colour the same contrast on white and on black:
    red on white differs by 0.9 in green and blue, red on black by 0.9 in red.
    """
    return (images - background[:, :, None, None]).abs().amax(dim=1)


def _border(values: torch.Tensor) -> torch.Tensor:
    """The one-pixel border of ``(N, H, W)`` maps, flattened to ``(N, 2H + 2W - 4)``."""
    return torch.cat([values[:, 0, :], values[:, -1, :], values[:, 1:-1, 0], values[:, 1:-1, -1]], dim=1)


def noise_floor(distance: torch.Tensor) -> torch.Tensor:
    """Per-image ``(N,)`` level of background noise: mean plus three standard deviations of the border distance."""
    border = _border(distance)
    return border.mean(dim=1) + 3.0 * border.std(dim=1)


def max_filter3(values: torch.Tensor) -> torch.Tensor:
    """3x3 maximum filter over the last two dimensions, zero outside the frame (for non-negative maps: labels,
    masks, coverage). Shifted slices, many times faster than ``max_pool2d`` on the CPU."""
    padded = F.pad(values, (1, 1, 1, 1))
    rows = torch.maximum(torch.maximum(padded[..., :-2], padded[..., 1:-1]), padded[..., 2:])
    return torch.maximum(torch.maximum(rows[..., :-2, :], rows[..., 1:-1, :]), rows[..., 2:, :])


def connected_components(mask: torch.Tensor) -> torch.Tensor:
    """8-connected component labels ``(N, H, W)`` of a boolean ``mask``: 0 is background, and each component's
    pixels share one positive label (the largest flat index + 1 among its pixels). Pure torch, batched.

    Each round spreads the largest label to the 3x3 neighbourhood and then follows labels as pointers (a pixel
    takes the label of the pixel its label names, which is never smaller), so labels travel exponentially fast.
    """
    n, h, w = mask.shape
    ids = torch.arange(1, h * w + 1, device=mask.device, dtype=torch.float32).expand(n, h * w)
    maskf = mask.flatten(1).float()
    labels = ids * maskf
    for _ in range(h * w):
        grown = max_filter3(labels.view(n, h, w)).view(n, h * w) * maskf
        pointed = grown.gather(1, (grown.long() - 1).clamp(min=0))
        grown = torch.maximum(grown, pointed) * maskf
        if torch.equal(grown, labels):
            break
        labels = grown
    return labels.view(n, h, w).long()


@dataclass
class ObjectCheck:
    """The result of :func:`check_objects` for a batch of images."""

    valid: np.ndarray
    """Bool ``(N,)``: exactly one object of plausible area, holding most of the foreground."""
    reasons: np.ndarray
    """``(N,)`` strings: ``"ok"`` or one of :data:`OBJECT_FAILURES`."""
    labels: torch.Tensor
    """``(N, H, W)`` component labels of the foreground (0: background)."""
    object_mask: torch.Tensor
    """Bool ``(N, H, W)``: the pixels of the largest component (the object of a valid image)."""
    background: torch.Tensor
    """``(N, 3)`` estimated background colour."""
    distance: torch.Tensor
    """``(N, H, W)`` colour distance of every pixel to the background."""

    def failure_counts(self, rows: slice | np.ndarray | None = None) -> dict[str, int]:
        """How many images (of ``rows``) failed for each reason of :data:`OBJECT_FAILURES`."""
        reasons = self.reasons if rows is None else self.reasons[rows]
        return {reason: int((reasons == reason).sum()) for reason in OBJECT_FAILURES}

    def rows(self, start: int, stop: int) -> ObjectCheck:
        """The check of images ``start:stop`` (the check of every image is independent of the others)."""
        return ObjectCheck(self.valid[start:stop], self.reasons[start:stop], self.labels[start:stop],
                           self.object_mask[start:stop], self.background[start:stop], self.distance[start:stop])


def check_objects(
    images: ImageInput,
    min_area_fraction: float = MIN_OBJECT_AREA_FRACTION,
    max_area_fraction: float = MAX_OBJECT_AREA_FRACTION,
    threshold: float = FOREGROUND_THRESHOLD,
) -> ObjectCheck:
    """Decide per image whether it shows exactly one object (see the module docstring for the rules).

    Accepts uint8 NHWC or float NCHW images. Components smaller than ``min_area_fraction`` of the frame are specks:
    they do not make an image invalid as long as the object holds :data:`MAIN_COMPONENT_SHARE` of the foreground.
    """
    x = to_float_images(images)
    n, _, h, w = x.shape
    background = estimate_background(x) if n else torch.zeros(0, 3)
    distance = colour_distance(x, background) if n else torch.zeros(0, h, w)
    if n == 0:
        empty = torch.zeros(0, h, w)
        return ObjectCheck(np.zeros(0, bool), np.zeros(0, "<U9"), empty.long(), empty.bool(), background, distance)
    mask = distance > (noise_floor(distance) + threshold)[:, None, None]
    labels = connected_components(mask)
    # Pixel count of every label (index 0 collects the background).
    counts = torch.zeros(n, h * w + 1, dtype=torch.long).scatter_add_(
        1, labels.flatten(1), torch.ones(n, h * w, dtype=torch.long)
    )
    counts[:, 0] = 0
    frame = h * w
    min_area, max_area = min_area_fraction * frame, max_area_fraction * frame
    foreground = counts.sum(dim=1)
    largest_area, largest_label = counts.max(dim=1)
    objects = (counts >= min_area).sum(dim=1)

    several = objects >= 2
    fragments = ~several & (foreground > 0) & ((objects == 0) | (largest_area < MAIN_COMPONENT_SHARE * foreground))
    oversized = (objects == 1) & ~fragments & (largest_area > max_area)
    reasons = np.full(n, "ok", dtype="<U9")
    for reason, where in (("blank", foreground == 0), ("fragments", fragments), ("several", several),
                          ("oversized", oversized)):
        reasons[where.numpy()] = reason
    object_mask = (labels == largest_label[:, None, None]) & mask
    return ObjectCheck(reasons == "ok", reasons, labels, object_mask, background, distance)


DARK_BACKGROUND = 0.5
"""Mean background intensity below which :func:`image_layers` counts an object's inside as fully covered."""


@dataclass
class ImageLayers:
    """An image as ``background + coverage * (foreground - background)``, the renderer's compositing model."""

    background: torch.Tensor
    """``(N, 3)`` background colour."""
    foreground: torch.Tensor
    """``(N, 3)`` object colour (mean of the object's core pixels)."""
    coverage: torch.Tensor
    """``(N, H, W)`` fraction of each pixel covered by the object, in [0, 1]."""

    def composite(self) -> torch.Tensor:
        """The image ``(N, 3, H, W)`` these layers describe."""
        span = (self.foreground - self.background)[:, :, None, None]
        return self.background[:, :, None, None] + self.coverage[:, None] * span


def image_layers(images: ImageInput, check: ObjectCheck | None = None) -> ImageLayers:
    """Estimate background, object colour and coverage from pixels (exact, up to uint8 rounding, on real renders).

    The object colour is the mean of the object component's core pixels (colour distance >= 80% of its largest);
    coverage is each pixel's projection onto the background-to-object colour segment, kept only on the object
    component and its one-pixel rim (anti-aliased edge pixels fall below the foreground threshold); on a dark
    background, 1 inside the object (pixels whose 3x3 neighbourhood is all object), where shade and coverage look
    alike.
    """
    x = to_float_images(images)
    check = check or check_objects(x)
    background = check.background
    object_distance = torch.where(check.object_mask, check.distance, torch.zeros_like(check.distance))
    peak = object_distance.flatten(1).amax(dim=1)
    core = check.object_mask & (check.distance >= 0.8 * peak[:, None, None])
    weight = core.float()
    count = weight.sum(dim=(1, 2)).clamp(min=1.0)
    foreground = (x * weight[:, None]).sum(dim=(2, 3)) / count[:, None]
    foreground = torch.where((peak > 0)[:, None], foreground, background)
    span = foreground - background
    squared = (span**2).sum(dim=1).clamp(min=1e-6)
    projection = ((x - background[:, :, None, None]) * span[:, :, None, None]).sum(dim=1) / squared[:, None, None]
    near_object = max_filter3(check.object_mask.float()) > 0
    coverage = torch.where(near_object, projection.clamp(0.0, 1.0), torch.zeros_like(projection))
    # On a dark background a shaded solid's dark side lies between its lit colour and the background, where partial
    # coverage lies too: the colour cannot tell them apart, so pixels whose 3x3 neighbourhood is all object count as
    # fully covered. (On a light background shade moves pixels away from the background and the projection stands,
    # also where blur leaves a wide, partly covered rim.)
    dark = background.mean(dim=1) < DARK_BACKGROUND
    interior = (-max_filter3(-check.object_mask.float()) > 0) & dark[:, None, None]
    coverage = torch.where(interior, torch.ones_like(coverage), coverage)
    return ImageLayers(background, foreground, coverage)
