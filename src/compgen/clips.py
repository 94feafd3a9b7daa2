"""Short clips of one moving object, rendered exactly: compgen's concept graph in time (Paper B studies composition in
video as well as images; its CoVLA clips' concepts are the time of day and the turn direction).

A clip's concepts are the object's ``shape`` (circle or triangle, seen in every frame), the ``time_of_day`` (a day or a
night scene, seen in every frame) and the ``turn`` (the object's path bends right or left): the turn exists only in
time. The object travels along a circular arc whose centre, radius and starting angle are drawn at random, so any
single frame is equally likely under either turn; only the order of the frames tells them apart. Every parameter is
drawn from a ``numpy.random.Generator(PCG64(seed))`` and rounded as in :mod:`compgen.shapes`, so a seed gives
byte-identical clips on any machine.

Screen convention: ``x`` right, ``y`` down (image rows). A *left* turn rotates the heading counter-clockwise as seen on
the screen; :attr:`ClipsBatch.turn_rate` is the signed heading change per frame, positive for left.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .concepts import ConceptLike, ConceptSpace, ConceptVariable
from .shapes import flat_coverage

CLIP_SPACE = ConceptSpace((
    ConceptVariable("shape", ("circle", "triangle")),
    ConceptVariable("time_of_day", ("day", "night")),
    ConceptVariable("turn", ("right", "left")),
))
"""The clips' concept space: ``"000"`` is a circle by day turning right, ``"111"`` a triangle at night turning left."""

BACKGROUND_RGB = {"day": (0.80, 0.88, 1.00), "night": (0.08, 0.08, 0.24)}
"""The scene's colour by time of day (a pale sky, a dark night), each channel drawn within +-``background_jitter``."""
OBJECT_RGB = (0.95, 0.55, 0.10)
"""The object's colour (orange, visible in either scene), each channel drawn within +-``object_jitter``."""
_DECIMALS = 6


@dataclass(frozen=True)
class ClipConfig:
    """How clips are drawn: frames, frame size and the ranges of the per-clip draws."""

    num_frames: int = 8
    image_size: int = 32
    object_radius: tuple[float, float] = (3.0, 4.0)
    """The object's circumradius-scale in pixels (uniform in this range)."""
    path_radius: tuple[float, float] = (5.0, 7.0)
    """The radius of the arc the object travels, in pixels."""
    sweep: tuple[float, float] = (0.6 * np.pi, 0.9 * np.pi)
    """How far the heading turns over the clip, in radians (108 to 162 degrees)."""
    background_jitter: float = 0.05
    object_jitter: float = 0.05

    def __post_init__(self) -> None:
        for name in ("num_frames", "image_size"):  # 8.0 frames passed the range check, then broke the renderer
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | np.integer):
                raise ValueError(f"{name} must be an int, got {value!r}")
        if not 4 <= self.num_frames <= 32:
            raise ValueError(f"num_frames must be in 4..32 (a turn needs frames to be seen), got {self.num_frames}")
        if not 24 <= self.image_size <= 64:
            raise ValueError(f"image_size must be in 24..64 pixels, got {self.image_size}")
        for name in ("object_radius", "path_radius", "sweep"):
            low, high = getattr(self, name)
            if not 0 < low <= high:
                raise ValueError(f"{name} must be a range 0 < low <= high, got {(low, high)}")
        if self.sweep[1] >= 2 * np.pi:
            raise ValueError(f"sweep must stay under a full turn (2 pi), got {self.sweep}")
        reach = self.object_radius[1] + self.path_radius[1] + 1.0
        if 2 * reach > self.image_size:
            raise ValueError(f"the object's path (reach {reach:g} px from its centre) does not fit a "
                             f"{self.image_size}-pixel frame")
        for name in ("background_jitter", "object_jitter"):
            if not 0 <= getattr(self, name) <= 0.1:
                raise ValueError(f"{name} must be in [0, 0.1] to keep day and night apart, got {getattr(self, name)}")


@dataclass
class ClipsBatch:
    """Rendered clips with the exact per-clip values that made them."""

    frames: np.ndarray
    """``(N, T, H, W, 3)`` uint8."""
    concepts: np.ndarray
    """``(N, 3)`` int64 class indices (shape, time of day, turn)."""
    background_rgb: np.ndarray
    """``(N, 3)`` float32."""
    object_rgb: np.ndarray
    """``(N, 3)`` float32."""
    object_radius: np.ndarray
    """``(N,)`` float32, pixels."""
    turn_rate: np.ndarray
    """``(N,)`` float32, the heading's change per frame in radians, positive for a left turn."""
    trajectory: np.ndarray
    """``(N, T, 2)`` float32, the object's centre (x, y) in pixels in every frame."""

    def __len__(self) -> int:
        return len(self.frames)


def parse_clip_classes(concepts: Sequence[ConceptLike] | np.ndarray, space: ConceptSpace = CLIP_SPACE) -> np.ndarray:
    """``(N, 3)`` class indices of class strings, tuples or an index array, each checked against ``space``."""
    if isinstance(concepts, np.ndarray) and concepts.ndim == 2:
        classes = concepts.astype(np.int64)
        if classes.shape[1] != space.num_variables:
            raise ValueError(f"concept array has {classes.shape[1]} columns, the clip space has {space.num_variables}")
        bad = (classes < 0) | (classes >= np.array(space.cardinalities))
        if bad.any():
            row, column = map(int, np.argwhere(bad)[0])
            raise ValueError(f"concept value {classes[row, column]} out of range for variable "
                             f"{space.names[column]!r} (0..{space.cardinalities[column] - 1})")
        return classes
    return np.array([space.parse(concept) for concept in concepts], dtype=np.int64).reshape(-1, space.num_variables)


def render_clips(concepts: Sequence[ConceptLike] | np.ndarray, seed: int | np.random.Generator = 0,
                 config: ClipConfig | None = None) -> ClipsBatch:
    """Render one clip per entry of ``concepts`` (class strings such as ``"101"``, tuples or an ``(N, 3)`` array)."""
    config = config or ClipConfig()
    classes = parse_clip_classes(concepts)
    rng = seed if isinstance(seed, np.random.Generator) else np.random.Generator(np.random.PCG64(seed))
    n, frames, size = len(classes), config.num_frames, config.image_size

    def draw(low: float, high: float, shape: tuple[int, ...] | int = n) -> np.ndarray:
        return rng.uniform(low, high, shape)

    times = CLIP_SPACE.variable("time_of_day").values
    background = np.array([BACKGROUND_RGB[times[i]] for i in classes[:, 1]]) + draw(
        -config.background_jitter, config.background_jitter, (n, 3))
    obj = np.asarray(OBJECT_RGB)[None, :] + draw(-config.object_jitter, config.object_jitter, (n, 3))
    radius = draw(*config.object_radius)
    path = draw(*config.path_radius)
    sweep = draw(*config.sweep)
    start = draw(0.0, 2.0 * np.pi)
    reach = radius + path + 1.0  # the arc's centre leaves room for the whole path and object in the frame
    centre = reach[:, None] + draw(0.0, 1.0, (n, 2)) * (size - 2.0 * reach)[:, None]
    left = classes[:, 2] == 1
    # On the screen (y down) a left turn is counter-clockwise: the angle along the arc decreases.
    direction = np.where(left, -1.0, 1.0)
    steps = np.arange(frames) / (frames - 1)
    angle = start[:, None] + direction[:, None] * sweep[:, None] * steps[None, :]
    trajectory = centre[:, None, :] + path[:, None, None] * np.stack([np.cos(angle), np.sin(angle)], axis=-1)

    background = np.round(np.clip(background, 0.0, 1.0), _DECIMALS).astype(np.float32)
    obj = np.round(np.clip(obj, 0.0, 1.0), _DECIMALS).astype(np.float32)
    radius = np.round(radius, _DECIMALS).astype(np.float32)
    trajectory = np.round(trajectory, _DECIMALS).astype(np.float32)
    turn_rate = np.round(np.where(left, 1.0, -1.0) * sweep / (frames - 1), _DECIMALS).astype(np.float32)

    coverage = np.empty((n, frames, size, size), dtype=np.float32)
    shapes = np.array(CLIP_SPACE.variable("shape").values)[classes[:, 0]]
    for shape in np.unique(shapes):
        rows = np.flatnonzero(shapes == shape)
        cover = flat_coverage(str(shape), trajectory[rows].reshape(-1, 2), np.repeat(radius[rows], frames), size)
        coverage[rows] = cover.reshape(len(rows), frames, size, size)
    # pixel = round(255 * (bg + coverage * (fg - bg))), as the image renderer composites
    base = (background * np.float32(255.0) + np.float32(0.5))[:, None, None, None, :]
    span = ((obj - background) * np.float32(255.0))[:, None, None, None, :]
    pixels = coverage[..., None] * span + base
    return ClipsBatch(pixels.astype(np.uint8), classes, background, obj, radius, turn_rate, trajectory)


def canonical_clip_values() -> dict[str, list[list[float]]]:
    """Per class value of each continuous variable at its class's centre (``full`` conditioning at test time):
    ``time_of_day`` as the scene's RGB, ``turn`` as the heading change per frame of the middle sweep over 8 frames."""
    config = ClipConfig()
    rate = float(np.mean(config.sweep)) / (config.num_frames - 1)
    return {"time_of_day": [list(BACKGROUND_RGB[name]) for name in CLIP_SPACE.variable("time_of_day").values],
            "turn": [[-rate], [rate]]}
