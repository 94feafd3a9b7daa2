"""Score images of known classes the way every compgen evaluation does: concept probes, the one-object check, and the
independent pixel-statistics scorer. The learning-dynamics tracker scores generated samples with it, and the
tokenizer report scores reconstructions with it, so both judge an image by the same rules."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

import numpy as np

from ..concepts import ConceptSpace
from ..images import to_float_images
from .objects import ObjectCheck, check_objects
from .pixel_scorer import PixelStatisticsScorer
from .probes import ConceptProbes
from .typicality import TYPICALITY_VERSION, TypicalityCheck


def is_shapes_space(space: ConceptSpace) -> bool:
    """Whether the shapes renderer draws ``space`` (so real renders can calibrate the pixel scorer)."""
    from ..shapes import check_space

    try:
        check_space(space)
    except ValueError:
        return False
    return True


@dataclass
class ImageScores:
    """Per-image verdicts of one batch."""

    predictions: np.ndarray
    """``(N, V)`` probe predictions; ``-1`` rows for images without a valid object."""
    probabilities: list[np.ndarray]
    """Per concept ``(N, k_v)`` probe probabilities (zero rows for images without a valid object)."""
    objects: ObjectCheck | None
    """The one-object check, or ``None`` when objects are not required (natural images)."""
    pixel_predictions: np.ndarray | None
    """``(N, V)`` pixel-scorer predictions (``-1`` rows without a valid object), or ``None`` without one."""
    colour_strength: np.ndarray | None = None
    """``(N,)`` the objects' colour strengths the typicality check measured (NaN without an object), or ``None``."""

    @property
    def has_object(self) -> np.ndarray:
        return self.objects.valid if self.objects is not None else np.ones(len(self.predictions), dtype=bool)


PIXEL_SCORER_VERSION = 2
"""Bumped whenever the pixel-statistics scorer or its calibration changes (2: calibrated on every render style)."""


def probes_fingerprint(probes: ConceptProbes) -> str:
    """The first 12 hex digits of a SHA-256 over the probes' config and weights: which probes judged a record."""
    config = dict(probes.config)
    if config.get("object_scale", 1.0) == 1.0:  # probes of Paper A's framing keep the fingerprint they had before
        config.pop("object_scale", None)
        lacked = [key for key in config.pop("_use_default_values", []) if key != "object_scale"]
        if lacked:  # diffusers lists the keys a saved config lacked: object_scale, for probes saved before it
            config["_use_default_values"] = lacked
    digest = hashlib.sha256(json.dumps(config, sort_keys=True, default=str).encode())
    for name, tensor in sorted(probes.state_dict().items()):
        digest.update(name.encode())
        digest.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()[:12]


class ImageScorer:
    """The probes, the one-object check and the pixel scorer together.

    Args:
        probes: trained concept probes.
        require_object: count images without exactly one object of plausible size as wrong on every concept;
            default: on for probes that center objects (the shapes data), off otherwise (faces fill the frame).
        pixel_scorer: the second, independent scorer; default: a
            :class:`~compgen.evaluation.pixel_scorer.PixelStatisticsScorer` calibrated here on real renders of the
            probes' image size when the space is a shapes space and objects are required. ``False`` disables it.
        batch_size: probe batch size.
        typicality: the hybrid and pale-object check (:mod:`compgen.evaluation.typicality`) applied before both
            scorers; default: on wherever the pixel scorer is. ``False`` disables it.
    """

    def __init__(
        self,
        probes: ConceptProbes,
        require_object: bool | None = None,
        pixel_scorer: PixelStatisticsScorer | bool | None = None,
        batch_size: int = 512,
        typicality: TypicalityCheck | bool | None = None,
    ) -> None:
        self.probes = probes
        self.require_object = bool(probes.config.center_objects) if require_object is None else require_object
        if pixel_scorer is None:
            pixel_scorer = self.require_object and is_shapes_space(probes.space)
        object_scale = float(getattr(probes.config, "object_scale", 1.0))
        if pixel_scorer is True:  # calibrated here, for the probes' image size and framing, not in a later score()
            pixel_scorer = PixelStatisticsScorer.calibrate(probes.space, image_size=probes.config.image_size,
                                                           object_scale=object_scale)
        self._pixel_scorer = pixel_scorer
        if typicality is None:
            typicality = bool(pixel_scorer)
        if typicality is True:
            typicality = TypicalityCheck.calibrate(probes.space, image_size=probes.config.image_size,
                                                   object_scale=object_scale)
        self.typicality = typicality or None
        self.batch_size = batch_size
        self.version = {"probes": probes_fingerprint(probes),
                        "pixel_statistics": PIXEL_SCORER_VERSION if pixel_scorer else None,
                        "typicality": TYPICALITY_VERSION if self.typicality else None}
        """What judged the images: the probes' fingerprint and the pixel scorer's version (in every record)."""

    def pixel_scorer(self, image_size: int) -> PixelStatisticsScorer | None:
        """The second scorer for ``image_size`` images, or ``None`` when disabled."""
        if not self._pixel_scorer:
            return None
        if image_size != self.probes.config.image_size:
            raise ValueError(f"these scorers judge {self.probes.config.image_size} px images, got {image_size} px")
        return self._pixel_scorer

    def score(self, images: np.ndarray, concepts: np.ndarray | None = None) -> ImageScores:
        """Score uint8 ``(N, H, W, 3)`` images; ``concepts``: the ``(N, V)`` classes asked for, when known (the
        typicality check judges paleness by the colour asked for).

        The batch is prepared once: converted to float once, and the one-object check runs once and is shared by
        the probes (when they isolate the object), the object rule and the pixel scorer. With a typicality check,
        hybrids and pale objects fail the object rule too (reasons ``"hybrid"``, ``"pale"``)."""
        x = to_float_images(images)
        scorer = self.pixel_scorer(x.shape[-2])
        isolate = self.probes.config.center_objects and self.probes.config.isolate_object
        objects = check_objects(x) if (self.require_object or scorer is not None or isolate) else None
        strength = None
        if objects is not None and self.typicality is not None:
            colour = self.probes.space.names.index("color")
            objects, found = self.typicality.screen(x, objects,
                                                    None if concepts is None else np.asarray(concepts)[:, colour])
            strength = found.strength
        probabilities = [p.numpy() for p in self.probes.predict_proba(x, batch_size=self.batch_size,
                                                                       objects=objects)]
        predictions = np.stack([p.argmax(axis=1) for p in probabilities], axis=1)
        if self.require_object:
            # An image without exactly one object has none of its class's concepts: every concept counts as wrong.
            predictions[~objects.valid] = -1
            probabilities = [np.where(objects.valid[:, None], p, 0.0) for p in probabilities]
        pixel_predictions = scorer.predict(x, objects=objects) if scorer is not None else None
        return ImageScores(predictions, probabilities, objects if self.require_object else None, pixel_predictions,
                           strength)
