"""Scenes of a floor, a back wall and one shaded object, rendered exactly: the six factors of DeepMind's Shapes3D
(``3dshapes``), the harder image benchmark of Farid et al. 2025 (Sec. 5), at compgen's own drawing.

The factors and their value sets are the public dataset's (its catalogue card): floor hue, wall hue and object hue,
10 values each, linearly spaced in [0, 1]; scale, 8 values in [0.75, 1.25]; shape, 4 (cube, cylinder, sphere,
capsule); orientation, 15 values in [-30, 30] degrees. Every combination is 480,000 scenes. What is compgen's choice,
since it renders rather than downloads (the public file cannot be fetched here): the drawing itself. The camera looks
at the back wall; orientation turns the scene about the vertical axis, which tilts the line where floor meets wall
and turns the cube (round shapes look the same from every side, as in the public data, where orientation moves the
room instead); light comes from the upper left; an object's colour is its hue at full saturation, shaded. Each image
is a deterministic function of its six factor values (no noise), so a class's images differ only in the free factors.

Factor values are indices into :data:`FACTOR_VALUES`; :func:`render_scenes` takes an ``(N, 6)`` index array in
:data:`FACTORS` order and returns uint8 images with the continuous values that made them.
"""

from __future__ import annotations

import colorsys
from dataclasses import dataclass

import numpy as np

FACTORS = ("floor_hue", "wall_hue", "object_hue", "scale", "shape", "orientation")
"""The six factors, in the public dataset's order."""
SHAPES = ("cube", "cylinder", "sphere", "capsule")
FACTOR_VALUES: dict[str, np.ndarray] = {
    "floor_hue": np.linspace(0.0, 0.9, 10),
    "wall_hue": np.linspace(0.0, 0.9, 10),
    "object_hue": np.linspace(0.0, 0.9, 10),
    "scale": np.linspace(0.75, 1.25, 8),
    "shape": np.arange(4, dtype=np.float64),
    "orientation": np.linspace(-30.0, 30.0, 15),
}
"""Each factor's values (the catalogue's: hues in steps of 0.1 from 0, the hue circle's 1.0 being its 0.0)."""
IMAGE_SIZES = (32, 64)
"""64 px is the public size; 32 px the CPU size."""
HORIZON = 0.58
"""Where the floor meets the wall at orientation 0, as a share of the height from the top."""
BASE = 0.9
"""Where the object stands, as a share of the height from the top."""
OBJECT_HEIGHT = 0.42
"""The object's height at scale 1, as a share of the frame's height."""
TILT = 0.35
"""How much the floor line tilts per radian of orientation (the rise over the frame's width)."""


@dataclass
class ScenesBatch:
    """Rendered scenes with the factor indices and values that made them."""

    images: np.ndarray
    """``(N, H, W, 3)`` uint8."""
    factors: np.ndarray
    """``(N, 6)`` int64 indices into :data:`FACTOR_VALUES`, in :data:`FACTORS` order."""
    values: np.ndarray
    """``(N, 6)`` float32: each factor's value (hues in [0, 1), scale, shape index, orientation in degrees)."""
    object_mask: np.ndarray
    """``(N, H, W)`` bool: the object's pixels."""


def _rgb(hue: np.ndarray, value: np.ndarray | float = 1.0, saturation: float = 1.0) -> np.ndarray:
    """``(..., 3)`` RGB in [0, 1] of hues (any shape) at ``saturation``, scaled by ``value``."""
    base = np.array([colorsys.hsv_to_rgb(float(h), saturation, 1.0) for h in np.ravel(hue)]).reshape(*np.shape(hue), 3)
    return base * np.asarray(value)[..., None]


def check_factors(factors: np.ndarray) -> np.ndarray:
    """``factors`` as an ``(N, 6)`` int64 index array, each index in its factor's range; ``ValueError`` naming the
    first factor out of range."""
    factors = np.asarray(factors)
    if factors.ndim != 2 or factors.shape[1] != len(FACTORS):
        raise ValueError(f"factors must be (N, {len(FACTORS)}) indices in the order {FACTORS}, got {factors.shape}")
    if not np.issubdtype(factors.dtype, np.integer):
        raise ValueError(f"factors must be integer indices, got {factors.dtype}")
    for j, name in enumerate(FACTORS):
        bad = (factors[:, j] < 0) | (factors[:, j] >= len(FACTOR_VALUES[name]))
        if bad.any():
            raise ValueError(f"{name} index {int(factors[bad, j][0])} out of range 0..{len(FACTOR_VALUES[name]) - 1}")
    return factors.astype(np.int64)


def render_scenes(factors: np.ndarray, image_size: int = 32) -> ScenesBatch:
    """Render one scene per row of ``factors`` (indices, :data:`FACTORS` order) at ``image_size`` px."""
    if image_size not in IMAGE_SIZES:
        raise ValueError(f"image_size must be one of {IMAGE_SIZES}, got {image_size}")
    factors = check_factors(factors)
    n, size = len(factors), image_size
    values = np.stack([FACTOR_VALUES[name][factors[:, j]] for j, name in enumerate(FACTORS)], axis=1)
    floor_hue, wall_hue, object_hue, scale, shape, degrees = values.T
    angle = np.deg2rad(degrees)
    y, x = (np.mgrid[0:size, 0:size] + 0.5) / size  # (H, W) in [0, 1], y down
    x, y = x[None], y[None]
    horizon = HORIZON + TILT * np.tan(angle)[:, None, None] * (x - 0.5)
    floor = y >= horizon
    depth = np.clip((y - horizon) / (1.0 - HORIZON), 0.0, 1.0)  # nearer floor is lighter
    wall_light = 0.75 + 0.15 * (1.0 - y / HORIZON)
    background = np.where(floor[..., None], _rgb(floor_hue, 1.0)[:, None, None] * (0.7 + 0.3 * depth)[..., None],
                          _rgb(wall_hue, 1.0)[:, None, None] * wall_light[..., None])

    height = OBJECT_HEIGHT * scale[:, None, None]
    top = BASE - height
    v = (y - top) / height  # 0 at the object's top, 1 at its base
    u = (x - 0.5) / (0.5 * height)  # -1..1 across a width equal to the height
    inside = np.zeros((n, size, size), dtype=bool)
    light = np.ones((n, size, size))
    for index, name in enumerate(SHAPES):
        rows = shape == index
        if not rows.any():
            continue
        uu, vv, turn = u[rows], v[rows], angle[rows][:, None, None]
        if name == "cube":  # a square box turned about the vertical axis: two faces, lit differently
            c, s = np.abs(np.cos(turn)), np.abs(np.sin(turn))
            half = 0.8 * (c + s)
            mask = (np.abs(uu) <= half) & (vv >= 0) & (vv <= 1)
            edge = 0.8 * (c - s) * np.sign(turn + 1e-9)  # where the two visible faces meet
            shade = np.where(uu < edge, 0.95, 0.65)
        elif name == "cylinder":  # seen from a little above: round top and bottom edges, its top face lit
            rim = 0.12
            body = (np.abs(uu) <= 0.8) & (vv >= rim) & (vv <= 1 - rim)
            top, bottom = ((uu / 0.8) ** 2 + ((vv - centre) / rim) ** 2 <= 1.0 for centre in (rim, 1 - rim))
            mask = body | top | bottom
            shade = 0.55 + 0.45 * np.sqrt(np.clip(1.0 - ((uu / 0.8 + 0.3) / 1.3) ** 2, 0.0, 1.0))
            shade = np.where(top & (vv < rim), 1.0, shade)
        elif name == "sphere":
            du, dv = uu / 1.0, (vv - 0.5) / 0.5
            r2 = du ** 2 + dv ** 2
            mask = r2 <= 1.0
            nz = np.sqrt(np.clip(1.0 - r2, 0.0, 1.0))
            shade = np.clip(0.35 + 0.65 * (nz * 0.8 - du * 0.35 - dv * 0.35), 0.3, 1.0)
        else:  # capsule: a cylinder with round ends
            radius = 0.65
            cap = radius / 2.0  # the caps' height in v units (the object's height is 2 in u units)
            middle = (np.abs(uu) <= radius) & (vv >= cap) & (vv <= 1 - cap)
            ends = [(uu / radius) ** 2 + ((vv - centre) / cap) ** 2 <= 1.0 for centre in (cap, 1 - cap)]
            mask = middle | ends[0] | ends[1]
            shade = 0.55 + 0.45 * np.sqrt(np.clip(1.0 - ((uu / radius + 0.4) / 1.2) ** 2, 0.0, 1.0))
        inside[rows], light[rows] = mask, shade
    colour = _rgb(object_hue, 1.0)[:, None, None] * light[..., None]
    image = np.where(inside[..., None], colour, background)
    images = np.clip(np.rint(image * 255.0), 0, 255).astype(np.uint8)
    return ScenesBatch(images, factors, values.astype(np.float32), inside)


def contact_sheet(image_size: int = 32) -> np.ndarray:
    """One row per factor: the factor stepped through its values, the others at their first value (the middle for
    scale and orientation); an ``(rows * size, columns * size, 3)`` uint8 image laying out the factors."""
    base = np.array([0, 3, 6, 4, 0, 7])
    rows = []
    width = max(len(values) for values in FACTOR_VALUES.values())
    for j, name in enumerate(FACTORS):
        count = len(FACTOR_VALUES[name])
        factors = np.repeat(base[None], count, axis=0)
        factors[:, j] = np.arange(count)
        if name in ("scale", "orientation"):
            factors[:, 4] = 0  # the cube shows the turn
        images = render_scenes(factors, image_size).images
        row = np.full((image_size, width * image_size, 3), 255, dtype=np.uint8)
        row[:, : count * image_size] = np.concatenate(list(images), axis=1)
        rows.append(row)
    return np.concatenate(rows, axis=0)
