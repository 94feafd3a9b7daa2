"""Score a generator's samples in one call: images of named classes, as a pipeline returns them, read by every scorer
the concept space has, per class and per level (the numbers a training run logs for the same images)::

    from compgen.evaluation import score_samples

    images = {name: pipe(name, num_images_per_prompt=50).images for name in ("011", "101", "111")}
    result = score_samples(images, graph)     # result["level_accuracy"], result["pixel_level_accuracy"], ...
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from ..concepts import ConceptGraph
from ..images import unit_to_uint8
from .metrics import level_means, multiplicative_accuracy
from .probes import ConceptProbes, default_shapes_probes
from .scoring import ImageScorer, is_shapes_space

SampleImages = Sequence[Any] | np.ndarray | torch.Tensor
"""A class's images: PIL images, uint8 ``(N, H, W, 3)``, float ``(N, H, W, 3)`` in [0, 1] (``output_type="np"``),
or a float tensor ``(N, 3, H, W)`` in [0, 1] (``output_type="pt"``)."""


def as_uint8_images(images: SampleImages, name: str = "images") -> np.ndarray:
    """``images`` in any form a pipeline returns as uint8 ``(N, H, W, 3)``; ``ValueError`` naming what it got."""
    if isinstance(images, torch.Tensor):
        tensor = images.detach().cpu()
        if tensor.dtype == torch.uint8 and tensor.ndim == 4 and tensor.shape[-1] == 3:
            return tensor.numpy()
        if tensor.is_floating_point() and tensor.ndim == 4 and tensor.shape[1] == 3:
            return unit_to_uint8(tensor.permute(0, 2, 3, 1).float().numpy())
        raise ValueError(f"{name}: a tensor must be uint8 (N, H, W, 3) or float (N, 3, H, W) in [0, 1], got "
                         f"{tensor.dtype} {tuple(tensor.shape)}")
    if not isinstance(images, np.ndarray):
        images = list(images)
        if not images:
            raise ValueError(f"{name}: no images")
        if all(hasattr(image, "convert") for image in images):  # PIL images
            images = np.stack([np.asarray(image.convert("RGB")) for image in images])
        else:
            images = np.stack([np.asarray(image) for image in images])
    if images.ndim != 4 or images.shape[-1] != 3 or len(images) == 0:
        raise ValueError(f"{name}: images must be (N, H, W, 3) with N >= 1, got shape {images.shape}")
    if images.dtype == np.uint8:
        return images
    if np.issubdtype(images.dtype, np.floating):
        if not np.isfinite(images).all():
            raise ValueError(f"{name}: the images hold NaN or infinite values")
        return unit_to_uint8(images)
    raise ValueError(f"{name}: images must be uint8 or float in [0, 1], got {images.dtype}")


def score_samples(samples: Mapping[str, SampleImages], graph: ConceptGraph, probes: ConceptProbes | None = None,
                  object_scale: float = 1.0) -> dict[str, Any]:
    """Per class and per level, the multiplicative accuracy of ``samples`` (class string -> its images) by the probes
    (``accuracy``, ``level_accuracy``) and, where the space has one, the pixel statistics (``pixel_accuracy``,
    ``pixel_level_accuracy``), behind the one-object and typicality checks, with ``object_rate`` per class: what
    :class:`~compgen.evaluation.tracker.LearningDynamicsTracker` logs for the same images.

    ``probes`` default to the default shapes probes at the images' size (a shapes space); other spaces need theirs.
    Unknown classes, classes of different image sizes and unreadable inputs are refused, naming them."""
    if not samples:
        raise ValueError("samples: give images of at least one class")
    levels = graph.levels
    unknown = [name for name in samples if name not in levels]
    if unknown:
        raise ValueError(f"classes {unknown} are not classes of the graph ({sorted(levels)})")
    arrays = {name: as_uint8_images(images, f"samples[{name!r}]") for name, images in samples.items()}
    sizes = {array.shape[1:3] for array in arrays.values()}
    if len(sizes) != 1 or len(next(iter(sizes))) != 2 or len(set(next(iter(sizes)))) != 1:
        raise ValueError(f"every class's images must be square and of one size, got {sorted(sizes)}")
    image_size = next(iter(sizes))[0]
    if probes is None:
        if not is_shapes_space(graph.space):
            raise ValueError(f"no default probes for the concept space {graph.space.to_dict()}: pass probes")
        probes = default_shapes_probes(graph.space, image_size=image_size, object_scale=object_scale)
    scorer = ImageScorer(probes)
    result: dict[str, Any] = {"accuracy": {}, "object_rate": {}, "num_images": {}}
    pixel: dict[str, float] = {}
    for name, images in arrays.items():
        target = np.asarray(graph.space.parse(name))
        scores = scorer.score(images, np.repeat(target[None], len(images), axis=0))
        result["accuracy"][name] = multiplicative_accuracy(scores.predictions, target)
        result["object_rate"][name] = float(scores.has_object.mean())
        result["num_images"][name] = len(images)
        if scores.pixel_predictions is not None:
            pixel[name] = multiplicative_accuracy(scores.pixel_predictions, target)
    result["levels"] = {name: int(levels[name]) for name in arrays}
    result["level_accuracy"] = {str(k): v for k, v in level_means(result["accuracy"], levels).items()}
    if pixel:
        result["pixel_accuracy"] = pixel
        result["pixel_level_accuracy"] = {str(k): v for k, v in level_means(pixel, levels).items()}
    return result
