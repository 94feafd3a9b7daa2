"""Image corruptions that imitate how generators draw imperfect images, at graded severities.

Half-trained diffusion models draw the right object on a light grey, noisy background, with washed-out colours, soft
edges and the odd speck (samples: ``tests/data/README.md``). A scorer must see through all of it. The corruptions here
serve twice:

- as training augmentations of the concept probes (:class:`ProbeAugmentation`), so that the probes judge the object
  and not the rendering quality;
- as the stress suite (:mod:`compgen.analysis.stress_suite`) that checks every scorer on real renders with known
  classes (``tests/test_scorer_robustness.py``, ``docs/evaluation.md``).

Each corruption works on float ``(N, 3, H, W)`` images in [0, 1] and draws its randomness from a
``torch.Generator``, so a seed gives the same corrupted images on any machine. Shapes corruptions use the layer model
of :func:`~compgen.evaluation.objects.image_layers` (background, object colour, coverage), so that they change the
background or the object colour without touching the other.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from ..images import ImageInput, to_float_images
from .objects import ImageLayers, image_layers, max_filter3

SEVERITIES: dict[str, tuple[float, ...]] = {
    # Background moved toward a darker grey by this fraction (object colour kept), hue tint up to a tenth of it.
    "background": (0.05, 0.10, 0.15, 0.22, 0.30),
    # The whole image darkened by this fraction (an exposure change: background and object alike).
    "brightness": (0.05, 0.10, 0.15, 0.22, 0.30),
    # Gaussian pixel noise of this standard deviation.
    "noise": (0.01, 0.02, 0.035, 0.05, 0.08),
    # Gaussian blur of this standard deviation in pixels.
    "blur": (0.3, 0.5, 0.7, 1.0, 1.4),
    # Object colour moved toward its grey level by this fraction, plus a random offset of up to half of it.
    "color_shift": (0.05, 0.10, 0.15, 0.20, 0.30),
    # This many isolated one-pixel specks of random colour, away from the object.
    "specks": (1, 2, 3, 5, 8),
    # The object moved by up to this many pixels (a random sub-pixel offset, bilinear resampling).
    "subpixel_shift": (0.25, 0.5, 0.75, 1.0, 1.5),
    # What half-trained generators show at once: grey background, washed-out object, noise and soft edges.
    "generator": (1, 2, 3, 4, 5),
}
"""Severity levels 1-5 of each corruption (the value is the corruption's magnitude at that level)."""

GENERATOR_LEVELS = 4
"""Levels 1-4 span what half-trained generators show (the samples of ``tests/data/README.md``); level 5 goes beyond.
The stress suite requires >= 0.98 at levels 1-4."""

_GENERATOR_MIX = {  # level -> (background, color_shift, noise, blur)
    1: (0.05, 0.05, 0.01, 0.0),
    2: (0.10, 0.10, 0.02, 0.3),
    3: (0.15, 0.15, 0.03, 0.5),
    4: (0.22, 0.20, 0.05, 0.7),
    5: (0.30, 0.30, 0.08, 1.0),
}


def _uniform(shape: tuple[int, ...], low: float, high: float, generator: torch.Generator | None) -> torch.Tensor:
    return torch.rand(shape, generator=generator) * (high - low) + low


def change_background(layers: ImageLayers, amount: torch.Tensor, generator: torch.Generator | None) -> ImageLayers:
    """Move each background ``amount`` ``(N,)`` of the way toward black (a grey tint on white), with a hue tint of up
    to a tenth of ``amount`` per channel."""
    n = len(amount)
    hue = _uniform((n, 3), -1.0, 1.0, generator) * amount[:, None] * 0.1
    background = (layers.background * (1.0 - amount[:, None]) + hue).clamp(0.0, 1.0)
    return ImageLayers(background, layers.foreground, layers.coverage)


def shift_object_color(layers: ImageLayers, amount: torch.Tensor, generator: torch.Generator | None) -> ImageLayers:
    """Wash the object colour out toward its grey level by ``amount`` ``(N,)`` and add a random offset of up to half
    of ``amount`` per channel (the colour stays nearest to its class colour at every level of :data:`SEVERITIES`)."""
    n = len(amount)
    grey = layers.foreground.mean(dim=1, keepdim=True)
    washed = layers.foreground + amount[:, None] * (grey - layers.foreground)
    offset = _uniform((n, 3), -0.5, 0.5, generator) * amount[:, None]
    return ImageLayers(layers.background, (washed + offset).clamp(0.0, 1.0), layers.coverage)


def shift_object(layers: ImageLayers, max_shift: float, generator: torch.Generator | None) -> ImageLayers:
    """Move each object by a random offset of up to ``max_shift`` pixels per axis (bilinear resampling of coverage)."""
    n, h, w = layers.coverage.shape
    offset = _uniform((n, 2), -max_shift, max_shift, generator)
    theta = torch.zeros(n, 2, 3)
    theta[:, 0, 0] = theta[:, 1, 1] = 1.0
    theta[:, 0, 2] = -offset[:, 0] * 2.0 / w
    theta[:, 1, 2] = -offset[:, 1] * 2.0 / h
    grid = F.affine_grid(theta, [n, 1, h, w], align_corners=False)
    coverage = F.grid_sample(layers.coverage[:, None], grid, mode="bilinear", padding_mode="zeros",
                             align_corners=False)[:, 0]
    return ImageLayers(layers.background, layers.foreground, coverage)


def add_noise(images: torch.Tensor, std: torch.Tensor | float, generator: torch.Generator | None) -> torch.Tensor:
    """Add Gaussian noise of standard deviation ``std`` (a number or per image ``(N,)``)."""
    std = torch.as_tensor(std, dtype=images.dtype).reshape(-1, 1, 1, 1)
    return images + std * torch.randn(images.shape, generator=generator)


def blur(images: torch.Tensor, sigma: float) -> torch.Tensor:
    """Gaussian blur of standard deviation ``sigma`` pixels (reflected borders, so a tinted background stays even)."""
    if sigma <= 0:
        return images
    radius = max(1, int(np.ceil(3.0 * sigma)))
    offsets = torch.arange(-radius, radius + 1, dtype=images.dtype)
    kernel = torch.exp(-(offsets**2) / (2.0 * sigma**2))
    kernel = kernel / kernel.sum()
    channels = images.shape[1]
    padded = F.pad(images, (radius, radius, radius, radius), mode="reflect")
    horizontal = F.conv2d(padded, kernel.view(1, 1, 1, -1).expand(channels, 1, 1, -1), groups=channels)
    return F.conv2d(horizontal, kernel.view(1, 1, -1, 1).expand(channels, 1, -1, 1), groups=channels)


def add_specks(images: torch.Tensor, coverage: torch.Tensor, count: int, generator: torch.Generator | None
               ) -> torch.Tensor:
    """Set ``count`` random pixels per image, at least two pixels away from the object, to random saturated colours."""
    n, _, h, w = images.shape
    if count <= 0:
        return images
    near_object = max_filter3(max_filter3(coverage)) > 0
    scores = torch.rand(n, h * w, generator=generator).masked_fill(near_object.flatten(1), -1.0)
    positions = scores.topk(count, dim=1).indices
    colours = torch.rand(n, count, 3, generator=generator).round()  # corners of the RGB cube: full contrast
    out = images.clone().flatten(2)
    out.scatter_(2, positions[:, None, :].expand(n, 3, count), colours.permute(0, 2, 1))
    return out.view_as(images)


def corrupt(
    images: ImageInput, kind: str, level: int, seed: int = 0, generator: torch.Generator | None = None
) -> torch.Tensor:
    """Apply corruption ``kind`` at severity ``level`` (1-5, see :data:`SEVERITIES`); returns float NCHW in [0, 1].

    The randomness (noise, tint hue, offsets, speck positions) comes from ``generator``, or a fresh one seeded with
    ``seed``.
    """
    if kind not in SEVERITIES:
        raise ValueError(f"unknown corruption {kind!r}; choose one of {sorted(SEVERITIES)}")
    if not 1 <= level <= len(SEVERITIES[kind]):
        raise ValueError(f"severity level must be in 1..{len(SEVERITIES[kind])}, got {level}")
    generator = generator or torch.Generator().manual_seed(seed)
    x = to_float_images(images)
    n = len(x)
    magnitude = float(SEVERITIES[kind][level - 1])
    if kind == "generator":
        background, colour, noise, sigma = _GENERATOR_MIX[int(magnitude)]
        layers = image_layers(x)
        layers = change_background(layers, torch.full((n,), background), generator)
        layers = shift_object_color(layers, torch.full((n,), colour), generator)
        out = add_noise(blur(layers.composite(), sigma), noise, generator)
    elif kind in ("background", "color_shift", "subpixel_shift", "specks"):
        layers = image_layers(x)
        if kind == "background":
            out = change_background(layers, torch.full((n,), magnitude), generator).composite()
        elif kind == "color_shift":
            out = shift_object_color(layers, torch.full((n,), magnitude), generator).composite()
        elif kind == "subpixel_shift":
            out = shift_object(layers, magnitude, generator).composite()
        else:
            out = add_specks(x, layers.coverage, int(magnitude), generator)
    elif kind == "brightness":
        out = x * (1.0 - magnitude)
    elif kind == "noise":
        out = add_noise(x, magnitude, generator)
    else:
        out = blur(x, magnitude)
    return out.clamp(0.0, 1.0)


def to_uint8(images: torch.Tensor) -> np.ndarray:
    """Float NCHW in [0, 1] -> uint8 NHWC, rounded as a generator's output is."""
    return (images.clamp(0.0, 1.0) * 255.0).round().to(torch.uint8).permute(0, 2, 3, 1).numpy()


@dataclass(frozen=True)
class ProbeAugmentation:
    """Random corruptions applied to each training batch of concept probes.

    Each corruption is applied to an image with probability ``probability`` at a magnitude drawn uniformly between
    0 and its maximum here, which lies a little beyond the generator levels of :data:`SEVERITIES`, so that the
    probes judge the object, not the rendering quality. ``layered=True`` (the shapes data) also changes the
    background and the object colour separately and adds specks; ``layered=False`` (natural images such as CelebA)
    applies photometric changes to the whole image.
    """

    layered: bool = True
    probability: float = 0.5
    background: float = 0.35
    brightness: float = 0.35
    contrast: float = 0.3
    saturation: float = 0.3
    noise: float = 0.08
    blur: float = 1.2
    color_shift: float = 0.3
    specks: int = 4
    subpixel_shift: float = 1.0

    def __call__(self, images: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
        """Augment float NCHW images in [0, 1] (same shape and dtype, clamped to [0, 1])."""
        n = len(images)
        if n == 0:
            return images

        def chosen() -> torch.Tensor:
            return torch.rand(n, generator=generator) < self.probability

        def amount(maximum: float) -> torch.Tensor:
            return chosen().float() * _uniform((n,), 0.0, maximum, generator)

        x = images.float()
        if self.layered:
            layers = image_layers(x)
            layers = change_background(layers, amount(self.background), generator)
            layers = shift_object_color(layers, amount(self.color_shift), generator)
            if self.subpixel_shift > 0:
                shifted = shift_object(layers, self.subpixel_shift, generator)
                keep = chosen()[:, None, None]
                layers = ImageLayers(layers.background, layers.foreground,
                                     torch.where(keep, shifted.coverage, layers.coverage))
            x = layers.composite()
            x = x * (1.0 - amount(self.brightness))[:, None, None, None]
            if self.specks > 0:
                count = int(torch.randint(1, self.specks + 1, (1,), generator=generator))
                x = torch.where(chosen()[:, None, None, None], add_specks(x, layers.coverage, count, generator), x)
        else:
            x = x * (1.0 - amount(self.brightness))[:, None, None, None]
            mean = x.mean(dim=(1, 2, 3), keepdim=True)
            x = mean + (x - mean) * (1.0 + _signed(amount(self.contrast), generator))[:, None, None, None]
            grey = x.mean(dim=1, keepdim=True)
            x = grey + (x - grey) * (1.0 + _signed(amount(self.saturation), generator))[:, None, None, None]
        sigma = float(_uniform((1,), 0.0, self.blur, generator))
        blurred = blur(x, sigma)
        x = torch.where(chosen()[:, None, None, None], blurred, x)
        x = add_noise(x, amount(self.noise), generator)
        return x.clamp(0.0, 1.0).to(images.dtype)


def _signed(magnitude: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
    """``magnitude`` with a random sign per entry."""
    return magnitude * (torch.randint(0, 2, magnitude.shape, generator=generator) * 2 - 1)
