"""Score clips (:mod:`compgen.clips`) from their pixels and their motion, with no learned parts: the clips' second,
independent scorer beside the learned probes (:mod:`compgen.evaluation.clip_probes`), as the pixel statistics are for
images.

Every frame goes through the images' one-object check (:func:`~compgen.evaluation.objects.check_objects`); the
object's centre in each frame gives its trajectory. A clip is *typical* (:func:`check_clips`) when every frame shows
one object, the object moves (a turn needs motion), its path is continuous (no step longer than :data:`MAX_STEP` and
no bend sharper than :data:`MAX_BEND` pixels between steps: a teleporting object or shuffled frames fail), and neither
the scene's colour nor the object's size flickers. A typical clip is read as:

- ``shape``: the object's horizontal asymmetry, the offset of its centre of mass from the middle of its extent (a
  triangle, pointing left as drawn, carries its mass right of the middle; a circle none), median over frames;
- ``time_of_day``: the scene's brightness (the median border colour), dark for night;
- ``turn``: the sign of the summed cross products of successive steps (on the screen, y down, a left turn bends the
  path counter-clockwise: negative).

An atypical clip gets no reading (``-1``) and counts as wrong on every concept, as an image without a valid object.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
import torch

from .objects import MAX_OBJECT_AREA_FRACTION, MIN_OBJECT_AREA_FRACTION, check_objects

CLIP_FAILURES = ("object", "still", "jump", "flicker")
"""Why a clip is not typical: a frame without exactly one object; no motion to read a turn from; a step or a bend
too large for a continuous path (a teleport, shuffled frames); the scene's colour or the object's size changing
between frames."""

REFERENCE_FRAMES = 8
"""The frame count the motion limits below are stated for (the builder's default clips)."""
REFERENCE_SIZE = 32
"""The frame size the object's area limits are stated for (the builder's default clips)."""
MAX_STEP = 5.0
"""Longest step between frames, pixels, at :data:`REFERENCE_FRAMES` (the data's longest is under 3.1 px). A clip of
``T`` frames sweeps the same arc in ``T - 1`` steps: the limit scales by ``(REFERENCE_FRAMES - 1) / (T - 1)``
(:func:`motion_limits`)."""
MAX_BEND = 3.0
"""Largest change of the step between frames (second difference of the path), pixels, at :data:`REFERENCE_FRAMES`
(the data's: under 1.2 px, plus the centre's measurement noise); scaled as :data:`MAX_STEP`. A bend grows as the
square of the step, but a limit that grew so would let about 70% of shuffled 4-frame clips through; scaled linearly
every real clip of 4 to 8 frames passes and shuffled ones about as often as a shuffle keeps or reverses the order."""
MIN_PATH = 3.0
"""Shortest path, end to end over the clip, in pixels: below it the object stands still (the data's: over 6 px)."""
MAX_SCENE_CHANGE = 0.08
"""Largest change of the scene's colour across frames (any channel, [0, 1]); the data's scene never changes."""
MAX_AREA_RATIO = 2.0
"""Largest ratio of the object's area in its largest and smallest frame (the data's: under 1.6)."""
NIGHT_BRIGHTNESS = 0.5
"""Mean scene colour below which a clip is at night (the data's days are above 0.84, nights below 0.18)."""
TRIANGLE_ASYMMETRY = 0.078
"""Offset of the object's centre of mass right of the middle of its extent, as a share of its width, above which it is
a triangle (the data's circles: at most 0.056; triangles: at least 0.10)."""


@dataclass
class ClipCheck:
    """The typicality of a batch of clips, and what it measured."""

    valid: np.ndarray
    """Bool ``(N,)``."""
    reasons: np.ndarray
    """``(N,)`` strings: ``"ok"`` or one of :data:`CLIP_FAILURES` (the first that applies)."""
    trajectory: np.ndarray
    """``(N, T, 2)`` the object's centre (x, y) in pixels in every frame (NaN where a frame has none)."""
    background: np.ndarray
    """``(N, T, 3)`` the scene's colour in every frame, in [0, 1]."""
    asymmetry: np.ndarray
    """``(N, T)`` the object's horizontal asymmetry in every frame (see the module docstring)."""


def _as_clips(frames: np.ndarray | torch.Tensor) -> np.ndarray:
    clips = frames.numpy() if isinstance(frames, torch.Tensor) else np.asarray(frames)
    if clips.ndim != 5 or clips.shape[-1] != 3 or clips.dtype != np.uint8:
        raise ValueError(f"clips must be uint8 (N, T, H, W, 3), got {clips.dtype} {tuple(clips.shape)}")
    if clips.shape[1] < 3:
        raise ValueError(f"a clip needs at least 3 frames to show a turn, got {clips.shape[1]}")
    return clips


def motion_limits(num_frames: int) -> tuple[float, float]:
    """The longest step and the sharpest bend (pixels) a real clip of ``num_frames`` frames shows, with room:
    :data:`MAX_STEP` and :data:`MAX_BEND` scaled to its frame count."""
    scale = (REFERENCE_FRAMES - 1) / (num_frames - 1)
    return MAX_STEP * scale, MAX_BEND * scale


def object_area_limits(height: int, width: int) -> tuple[float, float]:
    """The one-object check's area fractions for a frame of ``height x width``: the clips' object has the same size in
    pixels at any frame size (:class:`~compgen.clips.ClipConfig`), so the images' limits hold in pixels as they are at
    :data:`REFERENCE_SIZE` (fractions of a 28 px frame would reject the object at 56 or 64 px)."""
    reference = REFERENCE_SIZE * REFERENCE_SIZE / (height * width)
    return MIN_OBJECT_AREA_FRACTION * reference, MAX_OBJECT_AREA_FRACTION * reference


def check_clips(frames: np.ndarray | torch.Tensor) -> ClipCheck:
    """Decide per clip ``(N, T, H, W, 3)`` uint8 whether it is typical (see the module docstring)."""
    clips = _as_clips(frames)
    n, t, h, w, _ = clips.shape
    min_area, max_area = object_area_limits(h, w)
    objects = check_objects(clips.reshape(n * t, h, w, 3), min_area_fraction=min_area, max_area_fraction=max_area)
    mask = objects.object_mask.view(n, t, h, w).numpy()
    weight = (objects.distance.view(n, t, h, w) * objects.object_mask.view(n, t, h, w)).numpy()
    area = weight.sum(axis=(2, 3))
    with np.errstate(invalid="ignore", divide="ignore"):
        centre_x = (weight * (np.arange(w) + 0.5)).sum(axis=(2, 3)) / area
        centre_y = (weight * (np.arange(h) + 0.5)[:, None]).sum(axis=(2, 3)) / area
        columns = mask.any(axis=2)
        first = np.argmax(columns, axis=2)
        last = w - 1 - np.argmax(columns[..., ::-1], axis=2)
        asymmetry = (centre_x - (first + last + 1) / 2) / (last - first + 1)
    trajectory = np.stack([centre_x, centre_y], axis=-1)
    background = objects.background.view(n, t, 3).numpy()
    pixels = mask.sum(axis=(2, 3))

    frame_ok = objects.valid.reshape(n, t).all(axis=1)
    steps = np.diff(trajectory, axis=1)
    with np.errstate(invalid="ignore"):
        longest = np.linalg.norm(steps, axis=-1).max(axis=1)
        sharpest = np.linalg.norm(np.diff(steps, axis=1), axis=-1).max(axis=1)
        path = np.linalg.norm(trajectory[:, -1] - trajectory[:, 0], axis=-1)
        scene = np.abs(background - np.median(background, axis=1, keepdims=True)).max(axis=(1, 2))
        sizes = pixels.max(axis=1) / np.maximum(pixels.min(axis=1), 1)
    max_step, max_bend = motion_limits(t)
    reasons = np.full(n, "ok", dtype="<U7")
    for reason, failed in (("flicker", (scene > MAX_SCENE_CHANGE) | (sizes > MAX_AREA_RATIO)),
                           ("jump", ~((longest <= max_step) & (sharpest <= max_bend))),
                           ("still", ~(path >= MIN_PATH)), ("object", ~frame_ok)):
        reasons[failed] = reason  # the last that applies wins: a missing object first, then motion, then flicker
    return ClipCheck(reasons == "ok", reasons, trajectory, background, asymmetry)


def read_clips(check: ClipCheck) -> np.ndarray:
    """``(N, 3)`` class indices (shape, time of day, turn) of checked clips; ``-1`` on every concept of an atypical
    one."""
    with warnings.catch_warnings():  # a clip without an object in any frame has no asymmetry: atypical, set to -1
        warnings.simplefilter("ignore", RuntimeWarning)
        shape = np.nanmedian(check.asymmetry, axis=1) > TRIANGLE_ASYMMETRY
    night = check.background.mean(axis=(1, 2)) < NIGHT_BRIGHTNESS
    steps = np.diff(check.trajectory, axis=1)
    bend = (steps[:, :-1, 0] * steps[:, 1:, 1] - steps[:, :-1, 1] * steps[:, 1:, 0]).sum(axis=1)
    left = bend < 0
    readings = np.stack([shape, night, left], axis=1).astype(np.int64)
    readings[~check.valid] = -1
    return readings


def score_clips_by_pixels(frames: np.ndarray | torch.Tensor) -> tuple[np.ndarray, ClipCheck]:
    """The clips' class readings ``(N, 3)`` by pixels and motion (``-1`` where atypical), and their check."""
    check = check_clips(frames)
    return read_clips(check), check

