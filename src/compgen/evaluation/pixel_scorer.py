"""A second, independent scorer for the shapes data: pixel statistics with thresholds set from real renders.

The concept probes (:mod:`compgen.evaluation.probes`) are neural networks; a reader has to trust their training to
trust a learning curve. This scorer has no learned weights. It finds the one object of an image
(:func:`~compgen.evaluation.objects.check_objects`), models the image as background + coverage x object colour
(:func:`~compgen.evaluation.objects.image_layers`) and reads each concept off a measured statistic:

- **shape**: the outline's *corner harmonics*. The support function ``h(theta)`` (how far the object reaches in each
  direction from its centroid) of a circle is flat, a triangle's repeats three times per turn and a square's four
  times; the 3rd and 4th Fourier magnitudes of ``h`` relative to its mean tell them apart at any rotation. The outline
  is the coverage's 0.5 level, traced at 4x resolution so that small objects keep their corners. An object
  stretched far more than any real render (a 2nd harmonic above three times the largest seen in calibration, e.g. the
  sliver a generator draws for a triangle) is no known shape: its shape counts as wrong.
- **size**: the object's area, the sum of its coverage (blur and anti-aliasing move coverage around but keep its sum),
  compared with a per-shape threshold between the small and large areas of real renders;
- **colour**: the object colour, white-balanced by the estimated background, nearest to each colour's mean in real
  renders; **background** (4-variable spaces): the border colour nearest to each background's mean.

:meth:`PixelStatisticsScorer.calibrate` sets every threshold from real renders of every class over the dataset's
colour and size ranges, in every render style (flat polygons and shaded solids:
:func:`compgen.shapes.render_reference`), and checks that it then scores all of them correctly (100% on clean real
images).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from ..concepts import ConceptSpace
from ..images import ImageInput, to_float_images
from .objects import ObjectCheck, check_objects, image_layers, max_filter3

UPSAMPLE = 4
"""The outline is traced on coverage upsampled this many times (bilinear), so a 3-pixel triangle keeps its corners."""

NUM_DIRECTIONS = 36
"""Directions at which the support function is sampled (every 10 degrees)."""

_CHUNK = 256  # images per feature pass


@dataclass
class ObjectStatistics:
    """Per-image measurements of the object (NaN where an image has no valid object)."""

    valid: np.ndarray
    """Bool ``(N,)``: the image shows exactly one object (:func:`~compgen.evaluation.objects.check_objects`)."""
    area_fraction: np.ndarray
    """``(N,)`` object area (sum of coverage) as a fraction of the frame."""
    triangle_harmonic: np.ndarray
    """``(N,)`` 3rd Fourier magnitude of the support function over its mean (triangles are high)."""
    square_harmonic: np.ndarray
    """``(N,)`` 4th Fourier magnitude of the support function over its mean (squares are high)."""
    elongation: np.ndarray
    """``(N,)`` 2nd Fourier magnitude of the support function over its mean (slivers and ellipses are high)."""
    color: np.ndarray
    """``(N, 3)`` object colour, white-balanced by the background (divided by it on light backgrounds)."""
    background: np.ndarray
    """``(N, 3)`` estimated background colour."""


def measure_objects(images: ImageInput, objects: ObjectCheck | None = None) -> ObjectStatistics:
    """Measure the object of every image (uint8 NHWC or float NCHW); ``objects``: their one-object check, when the
    caller already ran it."""
    x = to_float_images(images)
    parts = [_measure_chunk(x[start : start + _CHUNK],
                            objects.rows(start, start + _CHUNK) if objects is not None else None)
             for start in range(0, len(x), _CHUNK)]
    if not parts:
        empty = np.zeros(0)
        return ObjectStatistics(np.zeros(0, bool), empty, empty, empty, empty, np.zeros((0, 3)), np.zeros((0, 3)))
    names = ("valid", "area_fraction", "triangle_harmonic", "square_harmonic", "elongation", "color", "background")
    return ObjectStatistics(*(np.concatenate([getattr(part, name) for part in parts]) for name in names))


def _measure_chunk(x: torch.Tensor, check: ObjectCheck | None = None) -> ObjectStatistics:
    check = check if check is not None else check_objects(x)
    layers = image_layers(x, check)
    n, h, w = layers.coverage.shape
    area = layers.coverage.sum(dim=(1, 2))

    fine = F.interpolate(layers.coverage[:, None], scale_factor=UPSAMPLE, mode="bilinear", align_corners=False)[:, 0]
    inside = fine >= 0.5
    ys = (torch.arange(h * UPSAMPLE, dtype=torch.float32) + 0.5) / UPSAMPLE
    xs = (torch.arange(w * UPSAMPLE, dtype=torch.float32) + 0.5) / UPSAMPLE
    count = inside.sum(dim=(1, 2)).clamp(min=1)
    cy = (inside.sum(dim=2) * ys).sum(dim=1) / count
    cx = (inside.sum(dim=1) * xs).sum(dim=1) / count
    # The support function peaks on the outline: measure it there only (pixels inside with a neighbour outside).
    eroded = max_filter3((~inside).float()) == 0
    image, row, column = (inside & ~eroded).nonzero(as_tuple=True)
    angles = torch.arange(NUM_DIRECTIONS, dtype=torch.float32) * (2 * np.pi / NUM_DIRECTIONS)
    reach = (xs[column] - cx[image])[:, None] * torch.cos(angles) + (ys[row] - cy[image])[:, None] * torch.sin(angles)
    support = torch.zeros(n, NUM_DIRECTIONS).scatter_reduce_(
        0, image[:, None].expand(-1, NUM_DIRECTIONS), reach, reduce="amax", include_self=False
    )
    spectrum = torch.fft.rfft(support, dim=1).abs()
    mean = spectrum[:, 0].clamp(min=1e-6)

    background = layers.background
    light = background.mean(dim=1, keepdim=True) > 0.5
    balanced = torch.where(light, layers.foreground / background.clamp(min=0.05), layers.foreground - background)
    valid = check.valid & (inside.flatten(1).any(dim=1)).numpy()
    nan = np.where(valid, 1.0, np.nan)
    return ObjectStatistics(
        valid=valid,
        area_fraction=(area / (h * w)).numpy() * nan,
        triangle_harmonic=(spectrum[:, 3] / mean).numpy() * nan,
        square_harmonic=(spectrum[:, 4] / mean).numpy() * nan,
        elongation=(spectrum[:, 2] / mean).numpy() * nan,
        color=balanced.clamp(0.0, 1.5).numpy() * nan[:, None],
        background=background.numpy(),
    )


def _midpoint(below: np.ndarray, above: np.ndarray, what: str) -> float:
    """A threshold between two sets of measurements that must not overlap (else calibration fails loudly)."""
    low, high = float(np.max(below)), float(np.min(above))
    if low >= high:
        raise ValueError(f"pixel statistics cannot separate {what} on real renders ({low:.4f} >= {high:.4f})")
    return (low + high) / 2.0


class PixelStatisticsScorer:
    """Classify every concept of shapes images from pixel statistics (see the module docstring).

    Build it with :meth:`calibrate`; :meth:`predict` has the interface of ``ConceptProbes.predict`` except that an
    image without a valid object gets ``-1`` for every concept (it is wrong on all of them).

    Args:
        space: the concept space (variables ``shape``, ``color``, ``size`` and optionally ``background``).
        triangle_threshold: triangle when the 3rd harmonic is at least this.
        square_threshold: otherwise square when the 4th harmonic is at least this (unused without squares).
        max_elongation: an object whose 2nd harmonic exceeds this is no known shape (shape wrong).
        size_thresholds: per shape name, the area fraction from which an object is ``large``.
        color_prototypes: ``(num_colors, 3)`` white-balanced mean object colour per colour value.
        background_prototypes: ``(num_backgrounds, 3)`` mean border colour per background value, or ``None``.
    """

    def __init__(
        self,
        space: ConceptSpace,
        triangle_threshold: float,
        square_threshold: float,
        max_elongation: float,
        size_thresholds: dict[str, float],
        color_prototypes: np.ndarray,
        background_prototypes: np.ndarray | None = None,
    ) -> None:
        self.space = space
        self.triangle_threshold = triangle_threshold
        self.square_threshold = square_threshold
        self.max_elongation = max_elongation
        self.size_thresholds = dict(size_thresholds)
        self.color_prototypes = np.asarray(color_prototypes, dtype=np.float64)
        self.background_prototypes = None if background_prototypes is None else np.asarray(background_prototypes)

    @classmethod
    def calibrate(cls, space: ConceptSpace, image_size: int = 28, images_per_class: int = 200,
                  seed: int = 31337, object_scale: float = 1.0) -> PixelStatisticsScorer:
        """Set the thresholds from real renders of every class of ``space`` over the dataset's colour and size
        ranges, at the data's ``object_scale`` in the frame, and check that they classify every one of those renders
        correctly."""
        return _calibrated(tuple((v.name, v.values) for v in space.variables), image_size, images_per_class, seed,
                           float(object_scale))

    def classify(self, stats: ObjectStatistics) -> np.ndarray:
        """Value indices ``(N, V)`` from measured statistics; ``-1`` rows for images without a valid object."""
        shape_values = self.space.variable("shape").values
        n = len(stats.valid)
        shape_name = np.full(n, "circle", dtype=object)
        if "square" in shape_values:
            shape_name[stats.square_harmonic >= self.square_threshold] = "square"
        if "triangle" in shape_values:
            shape_name[stats.triangle_harmonic >= self.triangle_threshold] = "triangle"
        if "circle" not in shape_values:  # a space without circles: the weaker harmonic decides
            shape_name[shape_name == "circle"] = shape_values[0]
        shape_index = np.array([shape_values.index(s) for s in shape_name], dtype=np.int64)
        columns = {"shape": np.where(stats.elongation > self.max_elongation, -1, shape_index)}
        threshold = np.array([self.size_thresholds[s] for s in shape_name])
        size_values = self.space.variable("size").values
        columns["size"] = np.where(stats.area_fraction >= threshold, size_values.index("large"),
                                   size_values.index("small"))
        distances = np.linalg.norm(np.nan_to_num(stats.color)[:, None, :] - self.color_prototypes[None], axis=2)
        columns["color"] = distances.argmin(axis=1)
        if self.background_prototypes is not None:
            distances = np.linalg.norm(stats.background[:, None, :] - self.background_prototypes[None], axis=2)
            columns["background"] = distances.argmin(axis=1)
        predictions = np.stack([columns[name] for name in self.space.names], axis=1).astype(np.int64)
        predictions[~stats.valid] = -1
        return predictions

    def predict(self, images: ImageInput, objects: ObjectCheck | None = None) -> np.ndarray:
        """Value index per concept ``(N, V)`` in variable order; ``-1`` for images without one valid object.
        ``objects``: the one-object check of ``images``, when the caller already ran it."""
        return self.classify(measure_objects(images, objects))


@functools.lru_cache(maxsize=8)
def _calibrated(
    variables: tuple[tuple[str, tuple[str, ...]], ...], image_size: int, images_per_class: int, seed: int,
    object_scale: float = 1.0,
) -> PixelStatisticsScorer:
    from ..concepts import ConceptVariable
    from ..shapes import render_reference

    space = ConceptSpace(tuple(ConceptVariable(name, values) for name, values in variables))
    if space.names[:3] != ("shape", "color", "size"):
        raise ValueError(f"the pixel-statistics scorer reads shapes spaces (shape, color, size[, background]), "
                         f"got {space.names}")
    classes = np.repeat(np.array(space.all_classes(), dtype=np.int64), images_per_class, axis=0)
    batch = render_reference(space, classes, seed=seed, image_size=image_size, object_scale=object_scale)
    stats = measure_objects(batch.images)
    if not stats.valid.all():
        raise ValueError(f"{int((~stats.valid).sum())} real renders failed the one-object check")
    shapes = np.array(space.variable("shape").values)[batch.concepts[:, 0]]
    triangle = square = float("inf")
    if "triangle" in shapes:
        triangle = _midpoint(stats.triangle_harmonic[shapes != "triangle"],
                             stats.triangle_harmonic[shapes == "triangle"], "triangles from other shapes")
    if "square" in shapes:
        others = (shapes != "square") & (shapes != "triangle")
        square = _midpoint(stats.square_harmonic[others], stats.square_harmonic[shapes == "square"],
                           "squares from circles") if others.any() else 0.0
    max_elongation = 3.0 * float(stats.elongation.max())
    large = batch.concepts[:, 2] == space.variable("size").index("large")
    size_thresholds = {
        str(shape): _midpoint(stats.area_fraction[(shapes == shape) & ~large],
                              stats.area_fraction[(shapes == shape) & large], f"small from large {shape}s")
        for shape in np.unique(shapes)
    }
    colors = np.stack([stats.color[batch.concepts[:, 1] == k].mean(axis=0)
                       for k in range(space.variable("color").num_values)])
    backgrounds = None
    if "background" in space.names:
        column = space.names.index("background")
        backgrounds = np.stack([stats.background[batch.concepts[:, column] == k].mean(axis=0)
                                for k in range(space.variable("background").num_values)])
    scorer = PixelStatisticsScorer(space, triangle, square, max_elongation, size_thresholds, colors, backgrounds)
    wrong = (scorer.classify(stats) != batch.concepts).any(axis=1)
    if wrong.any():
        raise ValueError(f"the calibrated pixel-statistics scorer misreads {int(wrong.sum())} of {len(wrong)} real "
                         "renders; the thresholds do not separate the classes")
    return scorer
