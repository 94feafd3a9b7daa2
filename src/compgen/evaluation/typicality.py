"""Is the object like a real render of its kind? Hybrids and pale objects, which the categorical scorers accept.

Two ways a generator fails a held-out composition without drawing a wrong class (evidence:
``results/paper-a-hybrids/``):

- **hybrids**: a shape inside a fainter ghost of another shape (e.g. a cone inside a pale sphere). Concept probes read
  the solid shape and call it right.
- **pale objects**: the right object with its colour washed toward the background, below anything the data hold.

:class:`TypicalityCheck` screens both before any scorer reads an image, so a failed image counts as wrong on every
concept for the probes and the pixel-statistics scorer alike (as an image without one object does:
:mod:`compgen.evaluation.objects`). Like the pixel scorer it has no learned weights: hybrids are found by the faint
colour a ghost leaves around the object (:func:`ghost_halo`), pale objects by the object's colour strength
(:func:`colour_strength`), each against thresholds set from real renders, clean and corrupted
(:meth:`TypicalityCheck.calibrate`). :func:`fidelity` compares the colour strength of generated images with real
renders per class: a continuous measure beside the categorical accuracy, for objects paler than the data but inside
their range.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
import torch

from ..concepts import ConceptSpace
from ..images import ImageInput, to_float_images
from .objects import ObjectCheck, check_objects, image_layers, max_filter3

HYBRID_OPACITIES = (0.2, 0.3, 0.4)
"""Opacities of the ghost in the stress suite's hybrids (:func:`render_hybrids`): the ghosts generators draw are
fainter than the object (evidence: ``results/paper-a-hybrids/NOTES.md``)."""

GHOST_SCALE = 1.25
"""The ghost of a hybrid is this much larger than its object: generated ghosts reach beyond the object they surround; a
ghost of the object's own size would hide behind a circle."""

PALE_STRENGTHS = (0.15, 0.25)
"""Colour strengths (fraction of the rendered colour's distance from the background) of the stress suite's pale
objects: below the weakest real render with the stress suite's corruptions (the washed-out ``generator`` level 4;
evidence: ``results/paper-a-hybrids/NOTES.md``)."""

PALE_MARGIN = 0.85
"""An object is pale below this fraction of the weakest colour strength of real (and corrupted) renders of its
colour."""

HALO_LEVELS = 3
"""The halo threshold is set above every real render clean and at corruption levels 1-3 (a level-4 blur of 1 px
spreads an edge as wide as a faint ghost: ``docs/evaluation.md`` has what the check does there)."""

HALO_MARGIN = 2.0
"""The halo threshold is this many times the largest halo of those real renders."""

TYPICALITY_VERSION = 1
"""Bumped whenever the typicality check or its calibration changes (in every evaluation record)."""


def colour_strength(images: ImageInput, objects: ObjectCheck | None = None) -> np.ndarray:
    """``(N,)`` how far the object's colour lies from the background: the largest channel difference between the mean
    of the object's core pixels and the background (:func:`~compgen.evaluation.objects.image_layers`); NaN without a
    valid object. Pale (washed toward the background) objects are low."""
    x = to_float_images(images)
    objects = objects if objects is not None else check_objects(x)
    layers = image_layers(x, objects)
    strength = (layers.foreground - layers.background).abs().amax(dim=1).numpy().astype(np.float64)
    return np.where(objects.valid, strength, np.nan)


def ghost_halo(images: ImageInput, objects: ObjectCheck | None = None) -> np.ndarray:
    """``(N,)`` how much faint colour lies 2-5 pixels outside the object: the colour distance to the background
    (3x3 median-filtered, so specks drop out; above the image's noise floor; relative to the object's peak) summed over
    that ring around the object's solid part (distance >= half the peak), over the square root of the solid area.
    Real renders have next to none, mildly blurred too; a ghost shape around the object is a plateau of faint colour
    there (evidence: ``results/paper-a-hybrids/NOTES.md``). 0 without a valid object."""
    from .objects import noise_floor

    x = to_float_images(images)
    objects = objects if objects is not None else check_objects(x)
    n, h, w = objects.distance.shape
    if n == 0:
        return np.zeros(0)
    padded = torch.nn.functional.pad(objects.distance[:, None], (1, 1, 1, 1), mode="replicate")
    smooth = torch.nn.functional.unfold(padded, 3).view(n, 9, h, w).median(dim=1).values
    peak = torch.where(objects.object_mask, objects.distance, torch.zeros_like(smooth)).flatten(1).amax(dim=1)
    peak = peak.clamp(min=1e-3)[:, None, None]
    solid = (objects.distance >= 0.5 * peak) & _dilate(objects.object_mask, 1)
    ring = _dilate(solid, 5) & ~_dilate(solid, 2)
    excess = ((smooth - noise_floor(objects.distance)[:, None, None]) / peak).clamp(min=0.0)
    halo = (excess * ring).sum(dim=(1, 2)) / solid.sum(dim=(1, 2)).clamp(min=1).sqrt()
    return np.where(objects.valid, halo.numpy().astype(np.float64), 0.0)


def _dilate(mask: torch.Tensor, pixels: int) -> torch.Tensor:
    for _ in range(pixels):
        mask = max_filter3(mask.float()) > 0
    return mask


def _render(space: ConceptSpace, concepts: np.ndarray, seed: int, image_size: int, object_scale: float = 1.0):
    from ..shapes import render_reference

    return render_reference(space, concepts, seed=seed, image_size=image_size, object_scale=object_scale)


def render_hybrids(space: ConceptSpace, concepts: np.ndarray, opacity: float | np.ndarray, seed: int = 0,
                   image_size: int = 28) -> np.ndarray:
    """uint8 renders of ``concepts`` over a ghost of another shape: the same colour, place and pose, at
    :data:`GHOST_SCALE` times the object's scale and ``opacity`` (per image or one value), showing where it reaches
    beyond the object, as the hybrids generators draw do (a solid cone inside a pale sphere:
    ``results/paper-a-hybrids/``)."""
    from ..shapes import _SHAPE_RADIUS, _SHAPE_SIDES, REFERENCE_STYLES, _coverage
    from ..solids import shaded_coverage

    concepts = np.asarray(concepts, dtype=np.int64)
    shape_values = space.variable("shape").values
    if len(shape_values) < 2:
        raise ValueError("hybrids need a space with at least two shapes")
    column = space.names.index("shape")
    offset = np.random.default_rng(seed).integers(1, len(shape_values), len(concepts))
    other = (concepts[:, column] + offset) % len(shape_values)
    solid = _render(space, concepts, seed, image_size)
    images = solid.images.astype(np.float32)
    layers = image_layers(solid.images)
    background = layers.background.numpy()[:, None, None, :]
    # The ghost in the object's render style (render_reference draws row i in style i % len(styles)): a flat polygon,
    # or a shaded solid with its shading, as generated ghosts show it.
    styles = np.array([style == "shaded" for style in REFERENCE_STYLES])
    shaded = styles[np.arange(len(concepts)) % len(styles)]
    ghost = np.zeros(images.shape, dtype=np.float32)
    grid = np.arange(image_size, dtype=np.float32) + np.float32(0.5)
    unit = solid.size * image_size / 10.0 * GHOST_SCALE
    for k, name in enumerate(shape_values):
        flat = np.flatnonzero((other == k) & ~shaded)
        radius = unit[flat] * _SHAPE_RADIUS[name]
        coverage = _coverage(_SHAPE_SIDES[name], solid.position[flat], radius, solid.rotation[flat], grid)
        ghost[flat] = coverage[..., None] * (solid.rgb[flat, None, None, :] - background[flat])
        solids = np.flatnonzero((other == k) & shaded)
        coverage, shade = shaded_coverage(name, solid.position[solids], unit[solids], image_size)
        lit = shade[..., None] * solid.rgb[solids, None, None, :] - background[solids]
        ghost[solids] = coverage[..., None] * lit
    alpha = np.broadcast_to(np.asarray(opacity, dtype=np.float32), (len(concepts),))[:, None, None, None]
    mixed = images + (1.0 - layers.coverage.numpy()[..., None]) * alpha * ghost * 255.0
    return np.clip(np.round(mixed), 0, 255).astype(np.uint8)


def render_pale(space: ConceptSpace, concepts: np.ndarray, strength: float | np.ndarray, seed: int = 0,
                image_size: int = 28) -> np.ndarray:
    """uint8 renders of ``concepts`` with every pixel moved toward the background: ``background + strength * (render -
    background)``, so the object keeps ``strength`` of its colour distance."""
    images = _render(space, np.asarray(concepts, dtype=np.int64), seed, image_size).images.astype(np.float32)
    background = np.median(np.concatenate([images[:, 0], images[:, -1], images[:, :, 0], images[:, :, -1]], axis=1),
                           axis=1)[:, None, None, :]
    beta = np.broadcast_to(np.asarray(strength, dtype=np.float32), (len(images),))[:, None, None, None]
    return np.clip(np.round(background + beta * (images - background)), 0, 255).astype(np.uint8)


@dataclass
class Screened:
    """What :meth:`TypicalityCheck.measure` found per image."""

    halo: np.ndarray
    strength: np.ndarray
    pale: np.ndarray
    hybrid: np.ndarray


class TypicalityCheck:
    """Reject hybrids and pale objects (see the module docstring); build it with :meth:`calibrate`.

    Args:
        space: the concept space of the images (the colours the pale thresholds are kept for).
        min_strength: per colour value, the colour strength below which an object of that colour is pale.
        max_halo: the :func:`ghost_halo` above which an object is a hybrid.
    """

    def __init__(self, space: ConceptSpace, min_strength: dict[str, float], max_halo: float) -> None:
        self.space = space
        self.min_strength = {str(k): float(v) for k, v in min_strength.items()}
        self.max_halo = float(max_halo)

    @classmethod
    def calibrate(cls, space: ConceptSpace, image_size: int = 28, images_per_class: int = 50,
                  seed: int = 30_000, object_scale: float = 1.0) -> TypicalityCheck:
        """Thresholds from real renders of every class in every render style, clean and with every corruption of the
        stress suite at levels 1-4: pale below :data:`PALE_MARGIN` of the weakest colour strength of each colour (any
        level); hybrid above :data:`HALO_MARGIN` times the largest halo at levels up to :data:`HALO_LEVELS`. Renders
        are at the data's ``object_scale`` in the frame."""
        return _calibrated(tuple((v.name, v.values) for v in space.variables), image_size, images_per_class, seed,
                           float(object_scale))

    def measure(self, images: ImageInput, objects: ObjectCheck | None = None,
                colours: np.ndarray | None = None) -> Screened:
        """Score every image. ``colours``: per image, the colour value index whose threshold judges paleness (the
        colour asked for); default: the lowest threshold of any colour."""
        x = to_float_images(images)
        objects = objects if objects is not None else check_objects(x)
        strength = colour_strength(x, objects)
        halo = ghost_halo(x, objects)
        floor = np.array([self.min_strength[v] for v in self.space.variable("color").values])
        limit = floor[colours] if colours is not None else np.full(len(x), floor.min())
        pale = objects.valid & (np.nan_to_num(strength) < limit)
        hybrid = objects.valid & ~pale & (halo > self.max_halo)
        return Screened(halo, strength, pale, hybrid)

    def screen(self, images: ImageInput, objects: ObjectCheck, colours: np.ndarray | None = None
               ) -> tuple[ObjectCheck, Screened]:
        """``objects`` with hybrids and pale objects marked invalid (reasons ``"hybrid"`` and ``"pale"``), and the
        measurements behind it (their colour strengths serve the fidelity without measuring the images again)."""
        found = self.measure(images, objects, colours)
        reasons = objects.reasons.copy()
        reasons[found.pale] = "pale"
        reasons[found.hybrid] = "hybrid"
        screened = ObjectCheck(reasons == "ok", reasons, objects.labels, objects.object_mask, objects.background,
                               objects.distance)
        return screened, found


@functools.lru_cache(maxsize=8)
def _calibrated(variables: tuple[tuple[str, tuple[str, ...]], ...], image_size: int, images_per_class: int,
                seed: int, object_scale: float = 1.0) -> TypicalityCheck:
    from ..concepts import ConceptVariable
    from .corruptions import GENERATOR_LEVELS, SEVERITIES, corrupt, to_uint8

    space = ConceptSpace(tuple(ConceptVariable(name, values) for name, values in variables))
    classes = np.repeat(np.array(space.all_classes(), dtype=np.int64), images_per_class, axis=0)
    clean = _render(space, classes, seed, image_size, object_scale).images
    corrupted = [(level, to_uint8(corrupt(clean, kind, level, seed=seed + 7 * index + level)))
                 for index, kind in enumerate(SEVERITIES) for level in range(1, GENERATOR_LEVELS + 1)]
    colour = space.names.index("color")
    strengths, halos = [], []
    for level, images in [(0, clean), *corrupted]:
        objects = check_objects(images)
        strengths.append(colour_strength(images, objects))
        if level <= HALO_LEVELS:
            halos.append(ghost_halo(images, objects))
    strength = np.concatenate(strengths)
    concepts = np.tile(classes, (len(strengths), 1))
    min_strength = {value: PALE_MARGIN * float(np.nanmin(strength[concepts[:, colour] == k]))
                    for k, value in enumerate(space.variable("color").values)}
    return TypicalityCheck(space, min_strength, HALO_MARGIN * float(np.concatenate(halos).max()))


def fidelity(generated: ImageInput, reference: ImageInput) -> dict[str, float]:
    """Colour strength of generated images of one class against real images of it: the medians, their ratio
    (``1.0``: as strong as the data), and the two-sample Kolmogorov-Smirnov statistic (``0``: same distribution)."""
    return strength_fidelity(colour_strength(generated), colour_strength(reference))


def strength_fidelity(ours: np.ndarray, real: np.ndarray) -> dict[str, float]:
    """:func:`fidelity` from colour strengths already measured (NaN entries, images without an object, are left
    out)."""
    ours, real = ours[np.isfinite(ours)], real[np.isfinite(real)]
    if len(ours) == 0 or len(real) == 0:
        return {"strength": float("nan"), "real_strength": float("nan"), "ratio": float("nan"), "ks": float("nan")}
    grid = np.concatenate([ours, real])
    ks = float(np.abs(np.searchsorted(np.sort(ours), grid, side="right") / len(ours)
                      - np.searchsorted(np.sort(real), grid, side="right") / len(real)).max())
    median, real_median = float(np.median(ours)), float(np.median(real))
    return {"strength": median, "real_strength": real_median, "ratio": median / real_median, "ks": ks}


