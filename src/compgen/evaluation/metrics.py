"""Compositional accuracy metrics (Okawa et al. 2023, Eq. 2) as pure functions on numpy or torch arrays.

A generated image of class ``c`` is correct only when the probes recognise *every* concept of ``c``:
the multiplicative accuracy of a class is the mean over its images of the product of the per-concept 0/1
correctness. The additive variant averages the per-concept correctness instead, and the probability-product
variant multiplies the probes' probabilities of the target values (a smooth version of the multiplicative one).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np


def _as_numpy(array: Any) -> np.ndarray:
    if hasattr(array, "detach"):
        array = array.detach().cpu().numpy()
    return np.asarray(array)


def _targets_like(predictions: np.ndarray, targets: Any) -> np.ndarray:
    targets = _as_numpy(targets).astype(np.int64)
    if targets.ndim == 1:
        targets = np.broadcast_to(targets, predictions.shape)
    if targets.shape != predictions.shape:
        raise ValueError(f"targets of shape {targets.shape} do not match predictions of shape {predictions.shape}")
    return targets


def per_image_correctness(predictions: Any, targets: Any) -> np.ndarray:
    """Boolean ``(N, V)``: whether each image's predicted value of each concept equals its target.

    ``targets`` is ``(N, V)`` or a single class ``(V,)`` shared by every image.
    """
    predictions = _as_numpy(predictions).astype(np.int64)
    if predictions.ndim != 2:
        raise ValueError(f"predictions must be (N, V) value indices, got shape {predictions.shape}")
    return predictions == _targets_like(predictions, targets)


def multiplicative_accuracy(predictions: Any, targets: Any) -> float:
    """Paper A Eq. 2: mean over images of the product of per-concept 0/1 correctness (NaN for no images)."""
    correct = per_image_correctness(predictions, targets)
    return float(correct.all(axis=1).mean()) if len(correct) else float("nan")


def additive_accuracy(predictions: Any, targets: Any) -> float:
    """Mean over images and concepts of the per-concept 0/1 correctness (NaN for no images)."""
    correct = per_image_correctness(predictions, targets)
    return float(correct.mean()) if len(correct) else float("nan")


def concept_accuracies(predictions: Any, targets: Any) -> np.ndarray:
    """Per-concept accuracy ``(V,)``: the fraction of images whose value of each concept is right."""
    correct = per_image_correctness(predictions, targets)
    return correct.mean(axis=0) if len(correct) else np.full(correct.shape[1], np.nan)


def probability_product_accuracy(probabilities: Sequence[Any], targets: Any) -> float:
    """Mean over images of the product over concepts of the probability given to the target value.

    ``probabilities`` is one ``(N, k_v)`` array per concept; ``targets`` is ``(N, V)`` or ``(V,)``.
    """
    probabilities = [_as_numpy(p).astype(np.float64) for p in probabilities]
    if not probabilities or any(p.ndim != 2 for p in probabilities):
        raise ValueError("probabilities must be a non-empty list of (N, k_v) arrays, one per concept")
    n = len(probabilities[0])
    targets = _targets_like(np.zeros((n, len(probabilities)), dtype=np.int64), targets)
    if n == 0:
        return float("nan")
    product = np.ones(n)
    for j, p in enumerate(probabilities):
        product *= p[np.arange(n), targets[:, j]]
    return float(product.mean())


def chance_accuracy(cardinalities: Sequence[int]) -> dict[str, float]:
    """Accuracy of uniform random guessing: multiplicative ``prod 1/k_v`` and additive ``mean 1/k_v``."""
    inverse = 1.0 / np.asarray(cardinalities, dtype=np.float64)
    return {"multiplicative": float(inverse.prod()), "additive": float(inverse.mean())}


def level_means(class_scores: Mapping[str, float], levels: Mapping[str, int]) -> dict[int, float]:
    """Mean score over the classes of each level, ``{level: mean}`` in increasing level order."""
    missing = [c for c in class_scores if c not in levels]
    if missing:
        raise ValueError(f"classes {missing} have no level")
    by_level: dict[int, list[float]] = {}
    for concept_class, score in class_scores.items():
        by_level.setdefault(int(levels[concept_class]), []).append(float(score))
    return {level: float(np.mean(by_level[level])) for level in sorted(by_level)}
