"""Vectorized, anti-aliased renderer of the synthetic shapes data (one object on a plain background).

Every image of a batch is drawn at once from signed distances on the pixel grid: a circle's distance is
``|p - c| - r``; a regular polygon's is the largest of its edge half-plane distances. Coverage of a pixel
is ``clip(0.5 - distance, 0, 1)`` (a one-pixel anti-aliasing ramp). Per-image parameters (position,
rotation, jittered RGB and size) come from a ``numpy.random.Generator(PCG64(seed))`` and are rounded
to a fixed grid before use, so the same seed gives byte-identical images on any machine (only IEEE
add / multiply / sqrt touch pixels; trigonometry is done per image and rounded away).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .concepts import COLORS, SHAPES, ConceptLike, ConceptSpace, ConceptSpaceLike
from .solids import shaded_coverage

# Canonical class values. Colors as Paper A's code (red, blue, green); size is the object's
# scale in Paper A's renderer units (large 2.7, small 1.6), drawn as circumradius = scale * image_size / 10.
COLOR_RGB: dict[str, tuple[float, float, float]] = {
    "red": (0.9, 0.1, 0.1),
    "blue": (0.1, 0.1, 0.9),
    "green": (0.1, 0.9, 0.1),
}
SIZE_SCALE: dict[str, float] = {"large": 2.7, "small": 1.6}
BACKGROUND_RGB: dict[str, tuple[float, float, float]] = {"white": (1.0, 1.0, 1.0), "black": (0.0, 0.0, 0.0)}

# Polygon vertex count per shape and the factor on the circumradius that gives shapes of similar area.
_SHAPE_SIDES = {"circle": 0, "triangle": 3, "square": 4}
_SHAPE_RADIUS = {"circle": 0.80, "triangle": 1.0, "square": 0.88}
_PARAM_DECIMALS = 6  # per-image parameters are rounded to this many decimals (cross-machine determinism)

PAPER_COLOR_JITTER = 0.35
"""Per-channel colour jitter of the dataset configs: as wide as the renderer allows with red and blue apart
(Paper A samples colours uniformly along the colour axis, Section 4)."""
PAPER_SIZE_JITTER = 0.45
"""Scale jitter of the dataset configs: as wide as the renderer allows with large and small apart."""
SIZE_RANGES: dict[str, float] = {"apart": PAPER_SIZE_JITTER, "touching": 0.55}
"""The size jitter of each ``size_ranges`` choice of the dataset builder. ``"apart"`` (the default data): small scales
1.15-2.05 and large 2.25-3.15, a gap between them. ``"touching"``: Paper A's sampling ("Experimental Setup": the
size axis mapped to [0, 1] and sampled uniformly), the axis 1.05-3.25 cut into two halves that meet at 2.15, each
class's canonical value at the centre of its half."""
MAX_OBJECT_SCALE = 1.4
"""The largest ``object_scale``: at 1.4 the largest object of the touching ranges (scale 3.25) still fits a centred
frame with a pixel to spare."""
MAX_SIZE_JITTER = 1.1
"""Above 0.55 the size ranges overlap (large 2.7 and small 1.6 +- the jitter); below 1.1 each range still holds only its
own class value. Overlapping ranges are for experiments (the size-range arms of ``results/paper-a-hybrids/``), not
for the default data."""
PAPER_POSITION_RANGE = 0.0
"""Position range of the dataset configs: every object at the frame's centre, as one object before Paper A's fixed
camera (Appendix A.1; position is no concept of its 3-variable data, and its code conditions on shape, colour and
size alone). ``docs/tuple_unet_h32.md`` measures what freedom of position does to composition."""


def check_object_scale(object_scale: float) -> None:
    """Refuse an object scale the frame cannot hold (the one check of the renderer's and the probes' option)."""
    if isinstance(object_scale, bool) or not 0.5 <= object_scale <= MAX_OBJECT_SCALE:
        raise ValueError(f"object_scale must be in [0.5, {MAX_OBJECT_SCALE}] so that every object fits the frame, "
                         f"got {object_scale!r}")


RENDER_STYLES = ("flat", "shaded")
"""``flat``: flat polygons, any rotation; ``shaded``: lit 3D solids in one pose (:mod:`compgen.solids`)."""


@dataclass(frozen=True)
class RenderConfig:
    """How images are drawn: the style, size in pixels, pose and the per-image jitter around the class values."""

    image_size: int = 28
    color_jitter: float = 0.1
    """Each RGB channel is drawn uniformly within +-color_jitter of the class color (clipped to [0, 1])."""
    size_jitter: float = 0.1
    """The scale is drawn uniformly within +-size_jitter of the class scale."""
    rotate: bool = True
    """Flat style only: each shape at a uniformly random rotation (``False``: upright, one vertex up)."""
    style: str = "flat"
    """``"flat"`` polygons or ``"shaded"`` solids (sphere, cone, cube), see :data:`RENDER_STYLES`."""
    position_range: float = 1.0
    """Share of the free space the object's centre is drawn from, around the frame's centre: 1 lets the object sit
    anywhere fully inside the frame, 0 centres every object."""
    object_scale: float = 1.0
    """The object's scale in the frame, the pixel budget: its circumradius is ``scale * image_size / 10 *
    object_scale`` (1: Paper A's framing; 1.3 gives every object about 1.7 times the pixels in the same frame)."""

    def __post_init__(self) -> None:
        if self.image_size < 16:
            raise ValueError(f"image_size must be at least 16 pixels, got {self.image_size}")
        if not 0 <= self.color_jitter <= 0.35:
            raise ValueError(f"color_jitter must be in [0, 0.35] to keep colors apart, got {self.color_jitter}")
        if not 0 <= self.size_jitter < MAX_SIZE_JITTER:
            raise ValueError(f"size_jitter must be in [0, {MAX_SIZE_JITTER}) so that each size keeps its own class "
                             f"value, got {self.size_jitter}")
        if self.style not in RENDER_STYLES:
            raise ValueError(f"style must be one of {RENDER_STYLES}, got {self.style!r}")
        if self.style == "shaded" and self.rotate:
            raise ValueError("shaded solids keep one pose (Paper A's renders): set rotate=False with style='shaded'")
        if not 0 <= self.position_range <= 1:
            raise ValueError(f"position_range must be in [0, 1], got {self.position_range}")
        check_object_scale(self.object_scale)


@dataclass
class ShapesBatch:
    """Rendered images with the exact per-image values the papers condition on ("full information")."""

    images: np.ndarray  # (N, H, W, 3) uint8
    concepts: np.ndarray  # (N, V) int64 class indices
    rgb: np.ndarray  # (N, 3) float32, the object's color
    size: np.ndarray  # (N,) float32, the object's scale
    position: np.ndarray  # (N, 2) float32, object center (x, y) in pixels
    rotation: np.ndarray  # (N,) float32, radians

    def __len__(self) -> int:
        return len(self.images)


def check_space(space: ConceptSpace) -> None:
    """Raise a ``ValueError`` unless the renderer can draw ``space`` (shape, color, size[, background])."""
    if space.names[:3] != ("shape", "color", "size") or space.names[3:] not in ((), ("background",)):
        raise ValueError(
            f"the shapes renderer draws spaces (shape, color, size[, background]), got variables {space.names}"
        )
    for name in ("shape", "color"):
        var = space.variable(name)
        reference = SHAPES if name == "shape" else COLORS
        unknown = [v for v in var.values if v not in reference.values]
        if unknown:
            raise ValueError(f"the shapes renderer cannot draw {name} values {unknown}")


def shapes_continuous_concepts(space: ConceptSpaceLike) -> dict[str, list[list[float]]]:
    """Canonical continuous value of every class, per continuous variable: RGB per colour, scale per size.

    These are the ``continuous_concepts`` tables of every concept-conditioned model under ``full`` conditioning
    (Okawa et al. 2023: training conditions on each image's exact values, the dataset's ``color_rgb`` and
    ``size_value`` columns; sampling on these class values)."""
    space = ConceptSpace.from_dict(space)
    return {
        "color": [list(COLOR_RGB[value]) for value in space.variable("color").values],
        "size": [[SIZE_SCALE[value]] for value in space.variable("size").values],
    }


def class_values(space: ConceptSpace, concepts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Canonical (no jitter) RGB ``(N, 3)`` and scale ``(N,)`` of each class: the test-time conditioning."""
    concepts = np.asarray(concepts, dtype=np.int64).reshape(-1, space.num_variables)
    table = shapes_continuous_concepts(space)
    colors = np.array(table["color"], dtype=np.float32)
    scales = np.array([row[0] for row in table["size"]], dtype=np.float32)
    return colors[concepts[:, 1]], scales[concepts[:, 2]]


def render_classes(
    space: ConceptSpace,
    concepts: Sequence[ConceptLike] | np.ndarray,
    seed: int | np.random.Generator = 0,
    config: RenderConfig | None = None,
) -> ShapesBatch:
    """Render one image per entry of ``concepts`` (class strings, tuples or an ``(N, V)`` int array)."""
    check_space(space)
    config = config or RenderConfig()
    if isinstance(concepts, np.ndarray) and concepts.ndim == 2:
        classes = concepts.astype(np.int64)
        if classes.shape[1] != space.num_variables:
            raise ValueError(f"concept array has {classes.shape[1]} columns, the space has {space.num_variables}")
        for j, n in enumerate(space.cardinalities):
            bad = (classes[:, j] < 0) | (classes[:, j] >= n)
            if bad.any():
                raise ValueError(
                    f"concept value {classes[bad, j][0]} out of range for variable {space.names[j]!r} (0..{n - 1})"
                )
    else:
        parsed: dict[object, tuple[int, ...]] = {}  # each distinct class is validated once
        rows = []
        for concept in concepts:
            key = concept if isinstance(concept, str) else tuple(concept)
            if key not in parsed:
                parsed[key] = space.parse(concept)
            rows.append(parsed[key])
        classes = np.array(rows, dtype=np.int64).reshape(-1, space.num_variables)
    rng = seed if isinstance(seed, np.random.Generator) else np.random.Generator(np.random.PCG64(seed))
    n = len(classes)
    s = config.image_size

    base_rgb, base_scale = class_values(space, classes)
    rgb = np.clip(base_rgb + rng.uniform(-config.color_jitter, config.color_jitter, (n, 3)), 0.0, 1.0)
    scale = base_scale + rng.uniform(-config.size_jitter, config.size_jitter, n)
    rotation = rng.uniform(0.0, 2.0 * np.pi, n) if config.rotate else np.zeros(n)
    shape_names = np.array(space.variable("shape").values)[classes[:, 0]]
    radius_factor = np.array([_SHAPE_RADIUS[name] for name in shape_names])
    # The scale in pixels, in the order of operations it had before object_scale (multiplying by 1.0 is exact).
    unit_pixels = scale * s / 10.0 * config.object_scale
    radius = unit_pixels * radius_factor
    # Keep the whole object inside the frame (the circumradius bounds every shape and solid); position_range shrinks
    # the free space around the frame's centre (at 1 the draw is the same as before the option existed).
    margin = unit_pixels + 1.0
    unit_position = rng.uniform(0.0, 1.0, (n, 2))
    if config.position_range != 1.0:
        unit_position = 0.5 + (unit_position - 0.5) * config.position_range
    position = margin[:, None] + unit_position * (s - 2.0 * margin)[:, None]

    rgb = np.round(rgb, _PARAM_DECIMALS).astype(np.float32)
    scale = np.round(scale, _PARAM_DECIMALS).astype(np.float32)
    rotation = np.round(rotation, _PARAM_DECIMALS).astype(np.float32)
    position = np.round(position, _PARAM_DECIMALS).astype(np.float32)
    radius = np.round(radius, _PARAM_DECIMALS).astype(np.float32)

    if space.num_variables == 4:
        bg_table = np.array([BACKGROUND_RGB[v] for v in space.variable("background").values], dtype=np.float32)
        background = bg_table[classes[:, 3]]
    else:
        background = np.ones((n, 3), dtype=np.float32)

    # Coverage of every pixel (and, for solids, its shade), drawn per shape into preallocated buffers.
    coverage = np.empty((n, s, s), dtype=np.float32)
    shade = np.empty((n, s, s), dtype=np.float32) if config.style == "shaded" else None
    grid = np.arange(s, dtype=np.float32) + np.float32(0.5)  # pixel centers
    unit = np.round(unit_pixels, _PARAM_DECIMALS).astype(np.float32)
    for shape_name in np.unique(shape_names):
        idx = np.flatnonzero(shape_names == shape_name)
        if shade is None:
            coverage[idx] = _coverage(_SHAPE_SIDES[str(shape_name)], position[idx], radius[idx], rotation[idx], grid)
        else:
            coverage[idx], shade[idx] = shaded_coverage(str(shape_name), position[idx], unit[idx], s)

    # Composite in float32 and quantize once: pixel = round(255 * (bg + coverage * (fg * shade - bg))), computed as
    # (255 bg + 0.5) + coverage * 255 (fg * shade - bg) and truncated (every value is non-negative).
    base = (background * np.float32(255.0) + np.float32(0.5)).astype(np.float32)
    pixels = np.empty((n, s, s, 3), dtype=np.float32)
    if shade is None:
        span = ((rgb - background) * np.float32(255.0)).astype(np.float32)
        np.multiply(coverage[..., None], span[:, None, None, :], out=pixels)
    else:
        lit = shade[..., None] * rgb[:, None, None, :] - background[:, None, None, :]
        np.multiply(coverage[..., None], lit * np.float32(255.0), out=pixels)
    np.add(pixels, base[:, None, None, :], out=pixels)
    images = pixels.astype(np.uint8)
    return ShapesBatch(images, classes, rgb, scale, position, rotation)


REFERENCE_STYLES: dict[str, dict[str, object]] = {
    "flat": {"style": "flat", "rotate": True},
    "shaded": {"style": "shaded", "rotate": False},
}
"""The looks the dataset builder can give an object (a flat polygon at any rotation includes the upright ones), as
:class:`RenderConfig` fields. The scorers are trained and calibrated on all of them (:func:`render_reference`), so
one scorer judges every shapes dataset."""


def render_reference(
    space: ConceptSpace,
    concepts: np.ndarray,
    seed: int = 0,
    image_size: int = 28,
    color_jitter: float = PAPER_COLOR_JITTER,
    size_jitter: float = PAPER_SIZE_JITTER,
    styles: Sequence[str] = tuple(REFERENCE_STYLES),
    object_scale: float = 1.0,
) -> ShapesBatch:
    """Real renders of ``concepts`` ``(N, V)`` for a scorer, over the dataset's colour and size ranges, with row ``i``
    drawn in ``styles[i % len(styles)]`` (every :data:`REFERENCE_STYLES` look by default), objects anywhere, at the
    data's ``object_scale`` in the frame."""
    unknown = [style for style in styles if style not in REFERENCE_STYLES]
    if not styles or unknown:
        raise ValueError(f"styles must name some of {sorted(REFERENCE_STYLES)}, got {list(styles)}")
    concepts = np.asarray(concepts, dtype=np.int64)
    parts = []
    for index, style in enumerate(styles):
        rows = np.arange(index, len(concepts), len(styles))
        config = RenderConfig(image_size=image_size, color_jitter=color_jitter, size_jitter=size_jitter,
                              object_scale=object_scale, **REFERENCE_STYLES[style])
        parts.append((rows, render_classes(space, concepts[rows], seed=seed + index, config=config)))
    merged = {}
    for field_name in ("images", "concepts", "rgb", "size", "position", "rotation"):
        first = getattr(parts[0][1], field_name)
        out = np.empty((len(concepts), *first.shape[1:]), dtype=first.dtype)
        for rows, batch in parts:
            out[rows] = getattr(batch, field_name)
        merged[field_name] = out
    return ShapesBatch(**merged)


def flat_coverage(shape: str, position: np.ndarray, radius: np.ndarray, image_size: int) -> np.ndarray:
    """Anti-aliased coverage ``(n, s, s)`` of upright flat ``shape`` objects (``circle``, ``triangle``, ``square``) at
    ``position`` ``(n, 2)`` with circumradius-scale ``radius`` ``(n,)``: the renderer's flat style, for other
    renderers built on it (the clips of :mod:`compgen.clips`)."""
    if shape not in _SHAPE_SIDES:
        raise ValueError(f"shape must be one of {sorted(_SHAPE_SIDES)}, got {shape!r}")
    position = np.round(np.asarray(position, dtype=np.float64), _PARAM_DECIMALS).astype(np.float32)
    radius = np.round(np.asarray(radius, dtype=np.float64) * _SHAPE_RADIUS[shape], _PARAM_DECIMALS).astype(np.float32)
    grid = np.arange(image_size, dtype=np.float32) + np.float32(0.5)
    return _coverage(_SHAPE_SIDES[shape], position, radius, np.zeros(len(position), dtype=np.float32), grid)


def _coverage(
    sides: int, position: np.ndarray, radius: np.ndarray, rotation: np.ndarray, grid: np.ndarray
) -> np.ndarray:
    """Anti-aliased coverage ``(n, s, s)`` in [0, 1] of circles (``sides == 0``) or regular ``sides``-gons.

    Coverage is ``clip(0.5 - distance, 0, 1)``. A polygon's distance is the largest edge distance, so its
    coverage is the smallest of ``0.5 - edge distance``; each edge term is separable (a row term plus a column
    term), so every edge costs one full-size add and one minimum.
    """
    n = len(position)
    cx = position[:, 0, None, None]
    cy = position[:, 1, None, None]
    x = grid[None, None, :]
    y = grid[None, :, None]
    coverage = np.empty((n, len(grid), len(grid)), dtype=np.float32)
    if sides == 0:
        dx = x - cx
        dy = y - cy
        np.add(dx * dx, dy * dy, out=coverage)
        np.sqrt(coverage, out=coverage)
        np.subtract((radius + np.float32(0.5))[:, None, None], coverage, out=coverage)
    else:
        half_width = (radius * np.float32(np.cos(np.pi / sides)) + np.float32(0.5)).astype(np.float32)
        edge = np.empty_like(coverage)
        for k in range(sides):
            angle = rotation.astype(np.float64) + 2.0 * np.pi * k / sides
            nx = np.round(np.cos(angle), _PARAM_DECIMALS).astype(np.float32)[:, None, None]
            ny = np.round(np.sin(angle), _PARAM_DECIMALS).astype(np.float32)[:, None, None]
            # 0.5 - (p - c) . n + inradius, split into a column term (x) and a row term (y).
            column = (cx * nx + cy * ny + half_width[:, None, None]) - x * nx
            row = y * ny
            np.subtract(column, row, out=coverage if k == 0 else edge)
            if k:
                np.minimum(coverage, edge, out=coverage)
    return np.clip(coverage, 0.0, 1.0, out=coverage)
