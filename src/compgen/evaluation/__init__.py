"""compgen.evaluation: concept probes, compositional accuracy metrics, learning-dynamics tracking and plots.

``fit_probes`` (fit probes to labelled images) lives in :mod:`compgen.evaluation.probes`;
``python -m compgen.evaluation.train_probes`` is the command that trains and saves probes.
"""

from .metrics import (
    additive_accuracy,
    chance_accuracy,
    concept_accuracies,
    level_means,
    multiplicative_accuracy,
    per_image_correctness,
    probability_product_accuracy,
)
from .objects import check_objects
from .pixel_scorer import PixelStatisticsScorer
from .preprocessing import center_objects
from .probes import ConceptProbes, default_shapes_probes, train_shapes_probes
from .score_samples import score_samples
from .scoring import ImageScorer
from .tracker import LearningDynamicsTracker, memorizing_generator, read_log, renderer_generator

__all__ = [
    "ConceptProbes",
    "ImageScorer",
    "LearningDynamicsTracker",
    "PixelStatisticsScorer",
    "additive_accuracy",
    "center_objects",
    "chance_accuracy",
    "check_objects",
    "concept_accuracies",
    "default_shapes_probes",
    "level_means",
    "memorizing_generator",
    "multiplicative_accuracy",
    "per_image_correctness",
    "probability_product_accuracy",
    "read_log",
    "renderer_generator",
    "score_samples",
    "train_shapes_probes",
]
