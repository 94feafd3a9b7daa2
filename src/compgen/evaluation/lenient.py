"""Paper B's protocol, a third score beside compgen's two strict scorers: lenient by design, never part of a verdict.

Farid et al. (2025, Sec. 5 and the project page's Shapes2D curves) report a class's accuracy as Paper A's linear probes
on raw pixels read it (Okawa et al. 2023, Appendix A.5: one linear probe per concept on flattened RGB, trained on real
images of every class): the *product of the per-concept accuracies*, with no one-object or typicality check. So a
garbage sample scores near chance (the product of ``1 / k_v``, 0.125 on the 2x2x2 cube), and a hybrid of two classes,
or a sample right on shape half the time and on colour the other half, can count. compgen's strict scorers (the probes
and the pixel statistics, behind :mod:`compgen.evaluation.typicality`) count a sample only when it is one typical
object with every concept right. Logging both makes compgen's curves comparable with Paper B's numbers without
letting the lenient number decide anything (``compgen.evaluation.compare.SCORERS`` holds the strict ones only).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np

from ..concepts import ConceptGraph
from .metrics import concept_accuracies
from .probes import ConceptProbes, fit_probes

logger = logging.getLogger(__name__)

LENIENT_PROTOCOL = ("lenient, Paper B's protocol: linear probes on raw pixels trained on real images of every class, "
                    "the product of the per-concept accuracies, no typicality check")
"""What the third score is, in the words logs and cards keep beside it."""

LENIENT_EPOCHS, LENIENT_LR, LENIENT_VAL_FRACTION = 30, 1e-2, 0.1
"""How the lenient probes are fitted (:func:`~compgen.evaluation.probes.fit_probes`, Adam and cross-entropy): Paper A's
4500 / 500 split is a tenth held out."""
LENIENT_IMAGES_PER_CLASS = 625
"""At most this many real images of each class are fitted on (Paper A's 5000 over 8 classes)."""


def lenient_chance(cardinalities: list[int] | tuple[int, ...]) -> float:
    """The lenient score of uniform guessing: the product over concepts of ``1 / k_v``."""
    return float(np.prod(1.0 / np.asarray(cardinalities, dtype=np.float64)))


def lenient_class_accuracy(predictions: np.ndarray, target: np.ndarray) -> float:
    """Paper B's number for one class: the product over concepts of the share of its images read as the target value
    (not the share of images right on every concept at once, compgen's multiplicative accuracy)."""
    return float(np.prod(concept_accuracies(predictions, target)))


@dataclass
class LenientScorer:
    """Linear probes on raw pixels (no centering, no object check) and their validation accuracy on real images."""

    probes: ConceptProbes
    validation_accuracy: dict[str, float]
    """Per concept, on the held-out tenth of the real images they were fitted on."""
    num_images: int
    """How many real images they were fitted on (the held-out tenth included)."""

    @classmethod
    def fit(cls, images: np.ndarray, concepts: np.ndarray, graph: ConceptGraph, seed: int = 0) -> LenientScorer:
        """Fit the probes on real uint8 ``(N, H, W, 3)`` images of *every* class of ``graph`` (``concepts``: their
        ``(N, V)`` value indices); ``ValueError`` when a class is missing (a probe would never see its values
        together) or a concept takes one value only."""
        concepts = np.asarray(concepts, dtype=np.int64)
        images = np.asarray(images)
        if images.ndim != 4 or images.shape[-1] != 3 or images.dtype != np.uint8:
            raise ValueError(f"lenient probes are fitted on uint8 (N, H, W, 3) images, got {images.dtype} "
                             f"{images.shape}")
        present = {graph.format(tuple(row)) for row in np.unique(concepts, axis=0)}
        missing = [graph.format(node) for node in graph.nodes if graph.format(node) not in present]
        if missing:
            raise ValueError(f"lenient probes need real images of every class; missing {missing}")
        probes = ConceptProbes(graph.space.to_dict(), image_size=images.shape[1], probe_type="linear",
                               center_objects=False)
        accuracy = fit_probes(probes, images, concepts, val_fraction=LENIENT_VAL_FRACTION, epochs=LENIENT_EPOCHS,
                              lr=LENIENT_LR, seed=seed)
        return cls(probes.eval(), accuracy, len(images))

    @classmethod
    def for_split(cls, data, graph: ConceptGraph, seed: int = 0) -> LenientScorer:
        """Fitted on a split of real images of every class (a dataset's ``test`` split:
        :class:`~compgen.data.loading.ConceptImageData`), at most :data:`LENIENT_IMAGES_PER_CLASS` of each."""
        concepts = data.concepts.cpu().numpy()
        keep = np.concatenate([np.flatnonzero((concepts == np.asarray(node)).all(axis=1))[:LENIENT_IMAGES_PER_CLASS]
                               for node in graph.nodes])
        keep.sort()
        return cls.fit(data.images[keep].cpu().numpy(), concepts[keep], graph, seed=seed)

    @classmethod
    def for_run(cls, eval_data, graph: ConceptGraph) -> LenientScorer | None:
        """A training run's lenient scorer, fitted on its dataset's ``test`` split (real images of every class) with one
        seed for every run; ``None`` for clips, or a split that lacks a class (said in the log)."""
        if eval_data is None or eval_data.num_frames > 1:
            return None
        try:
            lenient = cls.for_split(eval_data, graph)
        except ValueError as error:
            logger.info("no lenient score (Paper B's protocol) in this run's evaluations: %s", error)
            return None
        logger.info("lenient probes (Paper B's protocol) fitted on %d real images of the test split; validation "
                    "accuracy %s", lenient.num_images,
                    ", ".join(f"{name} {value:.3f}" for name, value in lenient.validation_accuracy.items()))
        return lenient

    def score(self, images: np.ndarray, concepts: np.ndarray, class_names: list[str], per_class: int
              ) -> dict[str, float]:
        """Per class, the lenient accuracy of ``per_class`` consecutive images of each of ``class_names`` (in order;
        ``concepts``: the ``(N, V)`` classes asked for)."""
        predictions = self.probes.predict(images).numpy()
        return {name: round(lenient_class_accuracy(predictions[i * per_class:(i + 1) * per_class],
                                                   concepts[i * per_class]), 4)
                for i, name in enumerate(class_names)}

    def describe(self) -> dict[str, object]:
        """What a log keeps of these probes: the protocol, the validation accuracy and the number of images."""
        return {"protocol": LENIENT_PROTOCOL, "validation_accuracy": {k: round(v, 4) for k, v in
                                                                       self.validation_accuracy.items()},
                "real_images": self.num_images}
