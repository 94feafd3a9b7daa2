"""Learning-dynamics tracker: score a generator on every class of a concept graph during training.

Each call of :meth:`LearningDynamicsTracker.evaluate` generates ``num_images_per_class`` images of every class
in *one* generator call (so the generator can batch), classifies them with the concept probes and records
per-class, per-concept and per-level accuracies. Records go to a JSONL file (one line per evaluation, flushed
at once, so a killed run keeps its curve) and to any Accelerate tracker. The generator gets the same seed at
every evaluation so that changes in the curves come from the model, not from sampling noise.
"""

from __future__ import annotations

import io
import json
import logging
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..atomic_io import atomic_write_bytes
from ..concepts import ConceptGraph, ConceptSpace, concept_distance
from .lenient import LenientScorer, lenient_chance
from .metrics import (
    additive_accuracy,
    chance_accuracy,
    concept_accuracies,
    level_means,
    multiplicative_accuracy,
    per_image_correctness,
    probability_product_accuracy,
)
from .pixel_scorer import PixelStatisticsScorer
from .probes import ConceptProbes
from .scoring import ImageScorer, probes_fingerprint
from .typicality import colour_strength, strength_fidelity

logger = logging.getLogger(__name__)

FIDELITY_REFERENCE_IMAGES = 100
"""Real renders per class that generated colour strengths are compared with."""
FIDELITY_REFERENCE_SEED = 424242

SampleFunction = Callable[[list[str], int], np.ndarray]
"""``generate(concepts, seed) -> uint8 (N, H, W, 3)``: one image per class string of ``concepts`` (a model's sampler, or
the renderer for reference runs). Not to be confused with the ``torch.Generator`` arguments elsewhere."""


class LearningDynamicsTracker:
    """Evaluate a generator on every node of ``graph`` with ``probes`` and log the learning dynamics.

    Args:
        graph: the concept graph (its nodes are evaluated, its training classes define the levels).
        probes: trained concept probes for the graph's concept space.
        num_images_per_class: images generated per class (at least 50 keeps chance-level noise small).
        log_path: JSONL file that gets one record per evaluation (appended), or ``None``.
        seed: generation seed, identical at every evaluation.
        batch_size: probe batch size.
        sample_dir: if given, the first ``samples_per_class`` images of every class are saved there per
            evaluation (``samples_step{step:08d}.npz``) for image grids over time.
        samples_per_class: images per class kept in ``sample_dir``.
        require_object: count samples without exactly one object of plausible size (blank frames, specks,
            fragments, several blobs: :func:`~compgen.evaluation.objects.check_objects`) as wrong on every concept;
            default: on for probes that center objects (the shapes data), off otherwise (faces fill the frame).
        pixel_scorer: the second, independent scorer (no learned weights) whose per-class accuracy and agreement
            with the probes go into every record; default: a
            :class:`~compgen.evaluation.pixel_scorer.PixelStatisticsScorer` calibrated on real renders when the
            graph is a shapes space and ``require_object`` is on, else none. ``False`` disables it.
        lenient: Paper B's protocol (:class:`~compgen.evaluation.lenient.LenientScorer`), logged as a third score
            (``lenient_accuracy``, ``lenient_level_accuracy``) that no strict verdict reads; ``None``: not logged.
    """

    def __init__(
        self,
        graph: ConceptGraph,
        probes: ConceptProbes,
        num_images_per_class: int = 50,
        log_path: str | os.PathLike | None = None,
        seed: int = 0,
        batch_size: int = 512,
        sample_dir: str | os.PathLike | None = None,
        samples_per_class: int = 4,
        require_object: bool | None = None,
        pixel_scorer: PixelStatisticsScorer | bool | None = None,
        lenient: LenientScorer | None = None,
    ) -> None:
        if tuple(probes.space.to_dict().items()) != tuple(graph.space.to_dict().items()):
            raise ValueError(
                f"probes were built for concept space {probes.space.to_dict()}, the graph has {graph.space.to_dict()}"
            )
        self._start_log(graph, probes, num_images_per_class, log_path, seed, sample_dir, samples_per_class)
        self.scorer = ImageScorer(probes, require_object, pixel_scorer, batch_size)
        self.lenient = lenient
        self._reference_strengths: dict[str, np.ndarray] = {}

    def _start_log(self, graph: ConceptGraph, probes: Any, num_images_per_class: int,
                   log_path: str | os.PathLike | None, seed: int, sample_dir: str | os.PathLike | None,
                   samples_per_class: int) -> None:
        """What every tracker holds, images' or clips' (:class:`~compgen.evaluation.clip_evaluation.ClipTracker`):
        the graph, the log and the records."""
        if num_images_per_class < 1:
            raise ValueError(f"num_images_per_class must be at least 1, got {num_images_per_class}")
        self.graph = graph
        self.probes = probes
        self.num_images_per_class = num_images_per_class
        self.log_path = Path(log_path) if log_path is not None else None
        self.seed = seed
        self.sample_dir = Path(sample_dir) if sample_dir is not None else None
        self.samples_per_class = samples_per_class
        self.class_names = [graph.format(c) for c in graph.nodes]
        self.levels = graph.levels
        self.chance = chance_accuracy(graph.space.cardinalities)
        self.records: list[dict[str, Any]] = []
        self.record_fields: dict[str, Any] = {}
        """Fields added to every record (a fine-tuning run's phase: :mod:`compgen.training.fine_tuning`)."""
        self.commit = source_commit()
        self.clock_origin = time.perf_counter()
        """The ``time.perf_counter()`` at which ``wall_clock_s`` reads 0; a resumed run's trainer sets it to the run's
        origin (:class:`~compgen.training.state.TrainState`), so that the log counts the earlier parts too."""

    def evaluate(
        self, generate: SampleFunction, step: int, images_seen: int | None = None, accelerator: Any = None,
        sampling: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Generate, score and log one evaluation; returns the record (also appended to ``self.records``).

        ``sampling`` (the sampler options ``generate`` used, e.g. ``{"num_inference_steps": 20}``) is kept in the
        record, so that a later re-scoring (``compgen.analysis.rescore``) reproduces it."""
        eval_start = time.perf_counter()
        n = self.num_images_per_class
        requested = [name for name in self.class_names for _ in range(n)]
        images = np.asarray(generate(requested, self.seed))
        expected = len(requested)
        if images.dtype != np.uint8 or images.ndim != 4 or images.shape[0] != expected or images.shape[-1] != 3:
            raise ValueError(
                f"generate must return uint8 images of shape ({expected}, H, W, 3), "
                f"got {images.dtype} {images.shape}"
            )
        generate_seconds = time.perf_counter() - eval_start
        concepts = np.asarray([node for node in self.graph.nodes for _ in range(n)], dtype=np.int64)
        scores = self.scorer.score(images, concepts)
        predictions, probabilities, objects = scores.predictions, scores.probabilities, scores.objects
        has_object, pixel_predictions = scores.has_object, scores.pixel_predictions

        accuracy, additive, prob_product, per_concept, object_rate = {}, {}, {}, {}, {}
        failures, pixel_accuracy, pixel_concept, agreement, fidelity = {}, {}, {}, {}, {}
        for i, (name, node) in enumerate(zip(self.class_names, self.graph.nodes, strict=True)):
            rows = slice(i * n, (i + 1) * n)
            target = np.asarray(node)
            accuracy[name] = multiplicative_accuracy(predictions[rows], target)
            additive[name] = additive_accuracy(predictions[rows], target)
            prob_product[name] = probability_product_accuracy([p[rows] for p in probabilities], target)
            object_rate[name] = float(has_object[rows].mean())
            per_concept[name] = dict(
                zip(self.graph.space.names, map(float, concept_accuracies(predictions[rows], target)), strict=True)
            )
            if objects is not None:
                failures[name] = objects.failure_counts(rows)
            if self.scorer.typicality is not None:
                fidelity[name] = strength_fidelity(scores.colour_strength[rows], self._reference_strength(name))
            if pixel_predictions is not None:
                pixel_accuracy[name] = multiplicative_accuracy(pixel_predictions[rows], target)
                pixel_concept[name] = dict(zip(self.graph.space.names, map(
                    float, concept_accuracies(pixel_predictions[rows], target)), strict=True))
                probe_correct = per_image_correctness(predictions[rows], target).all(axis=1)
                pixel_correct = per_image_correctness(pixel_predictions[rows], target).all(axis=1)
                agreement[name] = float((probe_correct == pixel_correct).mean())
        record = {
            **self._record_head(step, images_seen, eval_start, generate_seconds),
            "levels": dict(self.levels),
            "accuracy": accuracy,
            "additive_accuracy": additive,
            "prob_product_accuracy": prob_product,
            "concept_accuracy": per_concept,
            "object_rate": object_rate,
            "level_accuracy": {str(k): v for k, v in level_means(accuracy, self.levels).items()},
        }
        if objects is not None:
            record["object_failures"] = failures
        if fidelity:
            # Colour strength against real renders (compgen.evaluation.typicality.fidelity): 1.0 is as strong as the
            # data; the categorical accuracy cannot see an object drawn paler than the data but inside their range.
            record["fidelity"] = {name: round(f["ratio"], 4) for name, f in fidelity.items()}
            record["fidelity_ks"] = {name: round(f["ks"], 4) for name, f in fidelity.items()}
            record["fidelity_level"] = {str(k): round(v, 4) for k, v in level_means(record["fidelity"],
                                                                                    self.levels).items()}
        if pixel_predictions is not None:
            record["pixel_accuracy"] = pixel_accuracy
            record["pixel_concept_accuracy"] = pixel_concept  # which concept the pixel scorer rejects
            record["pixel_level_accuracy"] = {
                str(k): v for k, v in level_means(pixel_accuracy, self.levels).items()
            }
            record["scorer_agreement"] = agreement
            record["scorer_disagreements"] = scorer_disagreements(record)
            if record["scorer_disagreements"]:
                logger.warning(
                    "step %d: the probes and the pixel-statistics scorer disagree by more than %d points on %s",
                    int(step), round(100 * DISAGREEMENT_THRESHOLD), ", ".join(
                        f"{c} ({accuracy[c]:.2f} vs {pixel_accuracy[c]:.2f})" for c in record["scorer_disagreements"]
                    ),
                )
        if self.lenient is not None:
            self._add_lenient(record, images, concepts)
        if getattr(self.probes, "validation", None):  # probes trained on the run's data: how well they read it
            record["probe_validation"] = self.probes.validation
        return self._log(record, images, step, accelerator, sampling, self.scorer.version)

    def _add_lenient(self, record: dict[str, Any], images: np.ndarray, concepts: np.ndarray) -> None:
        """Paper B's lenient score of the same samples (:mod:`compgen.evaluation.lenient`), beside the strict ones."""
        lenient = self.lenient.score(images, concepts, self.class_names, self.num_images_per_class)
        record["lenient_accuracy"] = lenient
        record["lenient_level_accuracy"] = {str(k): round(v, 4) for k, v in level_means(lenient, self.levels).items()}
        record["lenient_chance"] = lenient_chance(self.graph.space.cardinalities)
        record["lenient_probes"] = {**self.lenient.describe(), "fingerprint": probes_fingerprint(self.lenient.probes)}

    def _record_head(self, step: int, images_seen: int | None, eval_start: float, generate_seconds: float
                     ) -> dict[str, Any]:
        """The fields every record starts with: when it was taken, what it cost, and the graph it scores."""
        return {
            "step": int(step),
            "images_seen": None if images_seen is None else int(images_seen),
            "wall_clock_s": round(time.perf_counter() - self.clock_origin, 3),
            "eval_s": round(time.perf_counter() - eval_start, 3),
            "generate_s": round(generate_seconds, 3),
            "num_images_per_class": self.num_images_per_class,
            "chance": self.chance["multiplicative"],
            "chance_additive": self.chance["additive"],
            "concept_space": self.graph.space.to_dict(),
            "training_classes": [self.graph.format(c) for c in self.graph.training_classes],
        }

    def _log(self, record: dict[str, Any], samples: np.ndarray, step: int, accelerator: Any,
             sampling: dict[str, Any] | None, scorer_version: Any) -> dict[str, Any]:
        """Complete ``record`` (sampling, scorer version, commit), keep it, and write it (the JSONL log, the first
        samples of every class, the Accelerate trackers) on the main process; returns it."""
        if sampling:
            record["sampling"] = dict(sampling)
        record["scorer_version"] = scorer_version
        record["commit"] = self.commit
        record.update(self.record_fields)
        self.records.append(record)
        is_main = accelerator is None or getattr(accelerator, "is_main_process", True)
        if is_main and self.log_path is not None:
            self.log_path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.log_path, "a", encoding="utf-8") as f:
                f.write(json.dumps(record) + "\n")
                f.flush()
                os.fsync(f.fileno())
        if is_main and self.sample_dir is not None and self.samples_per_class > 0:
            self._save_samples(samples, step)
        if accelerator is not None:
            accelerator.log(flat_scalars(record), step=int(step))
        return record

    def _reference_strength(self, name: str) -> np.ndarray:
        """Colour strengths of real renders of class ``name`` (the default data's look, colour and size ranges), the
        fidelity's reference: rendered and measured once per tracker."""
        if name not in self._reference_strengths:
            from ..shapes import PAPER_COLOR_JITTER, PAPER_SIZE_JITTER, RenderConfig, render_classes

            config = RenderConfig(image_size=self.probes.config.image_size, color_jitter=PAPER_COLOR_JITTER,
                                  size_jitter=PAPER_SIZE_JITTER,
                                  object_scale=float(getattr(self.probes.config, "object_scale", 1.0)))
            images = render_classes(self.graph.space, [name] * FIDELITY_REFERENCE_IMAGES,
                                    seed=FIDELITY_REFERENCE_SEED, config=config).images
            self._reference_strengths[name] = colour_strength(images)
        return self._reference_strengths[name]

    def _save_samples(self, images: np.ndarray, step: int) -> None:
        n, k = self.num_images_per_class, min(self.samples_per_class, self.num_images_per_class)
        keep = np.concatenate([np.arange(i * n, i * n + k) for i in range(len(self.class_names))])
        buffer = io.BytesIO()
        np.savez_compressed(buffer, images=images[keep], classes=np.repeat(self.class_names, k), step=step)
        atomic_write_bytes(self.sample_dir / f"samples_step{int(step):08d}.npz", buffer.getvalue())


def source_commit() -> str | None:
    """The git commit of the compgen source being run (``+dirty`` with uncommitted changes), or ``None`` outside a
    git checkout: every evaluation record says which code produced it."""
    import subprocess

    root = Path(__file__).resolve().parents[3]
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=10,
                                check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "src"], cwd=root,
                               capture_output=True, text=True, timeout=10, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return commit + ("+dirty" if dirty else "") if commit else None


DISAGREEMENT_THRESHOLD = 0.1
"""Classes whose probe and pixel-scorer accuracies differ by more than this are flagged in the log and the card."""


def scorer_disagreements(record: dict[str, Any], threshold: float = DISAGREEMENT_THRESHOLD) -> list[str]:
    """Classes of a record on which the probes' and the pixel scorer's accuracies differ by more than ``threshold``."""
    pixel = record.get("pixel_accuracy") or {}
    return [name for name, value in record["accuracy"].items()
            if name in pixel and abs(value - pixel[name]) > threshold + 1e-9]


def flat_scalars(record: dict[str, Any], prefix: str = "eval") -> dict[str, float]:
    """Scalars of a record for ``accelerator.log``: ``eval/accuracy/011``, ``eval/level_accuracy/1``, ..."""
    scalars: dict[str, float] = {}
    for key in ("accuracy", "additive_accuracy", "prob_product_accuracy", "level_accuracy", "object_rate",
                "pixel_accuracy", "pixel_level_accuracy", "scorer_agreement", "fidelity", "fidelity_level",
                "lenient_accuracy", "lenient_level_accuracy"):
        for name, value in record.get(key, {}).items():
            scalars[f"{prefix}/{key}/{name}"] = float(value)
    for name, concepts in record["concept_accuracy"].items():
        for concept, value in concepts.items():
            scalars[f"{prefix}/concept_accuracy/{name}/{concept}"] = float(value)
    scalars[f"{prefix}/seconds"] = float(record["eval_s"])
    return scalars


def append_training_log(path: str | os.PathLike, step: int, scalars: dict[str, float]) -> None:
    """Append one line of training scalars (``{"step": step, **scalars}``) to a run's ``training_log.jsonl``."""
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps({"step": step, **scalars}) + "\n")


def read_log(path: str | os.PathLike) -> list[dict[str, Any]]:
    """Records of a tracker JSONL log, in file order (a truncated last line from a killed run is skipped)."""
    records = []
    with open(path, encoding="utf-8") as f:
        lines = f.read().splitlines()
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            if number == len(lines):
                break
            raise ValueError(f"{path}: line {number} is not valid JSON") from None
    return records


SOURCE_PHASE = "source"
"""The ``phase`` of the records a fine-tuning log (``--init_from``) copies from its source run."""


def own_records(records: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The records a run's own model produced: a fine-tuning log without its source's records (another model's, maybe
    on another graph with other levels). What a run's statistics (final, best, first steps, a fit, whether its
    levels hold) are of; its plots show both phases."""
    return [record for record in records if record.get("phase") != SOURCE_PHASE]


HOLD_EVALUATIONS = 3
HOLD_TOLERANCE = 0.05


def levels_held(records: list[dict[str, Any]], count: int = HOLD_EVALUATIONS, tolerance: float = HOLD_TOLERANCE
                ) -> bool:
    """Whether the levels hold: over the last ``count`` evaluations, no level's accuracy by either scorer (the probes,
    the pixel statistics) moved by more than ``tolerance`` (highest minus lowest). Fewer records: ``False``."""
    if len(records) < count:
        return False
    last = records[-count:]
    for key in ("level_accuracy", "pixel_level_accuracy"):
        for level in last[-1].get(key, {}):
            values = [record.get(key, {}).get(level) for record in last]
            if None in values or max(values) - min(values) > tolerance + 1e-9:
                return False
    return True


def graph_from_record(record: dict[str, Any]) -> ConceptGraph:
    """The concept graph a record was evaluated on (from its ``concept_space`` and ``training_classes``)."""
    space = ConceptSpace.from_dict(record["concept_space"])
    return ConceptGraph(space, record["training_classes"], nodes=list(record["levels"]))


def renderer_generator(space: ConceptSpace, image_size: int = 28) -> SampleFunction:
    """A "perfect generator": the shapes renderer itself at the canonical class values (no jitter)."""
    from ..shapes import RenderConfig, render_classes

    config = RenderConfig(image_size=image_size, color_jitter=0.0, size_jitter=0.0)

    def generate(concepts: list[str], seed: int) -> np.ndarray:
        return render_classes(space, concepts, seed=seed, config=config).images

    return generate


def memorizing_generator(graph: ConceptGraph, image_size: int = 28) -> SampleFunction:
    """A generator that only memorized its training data: it renders the nearest training class instead."""
    render = renderer_generator(graph.space, image_size)
    nearest = {
        graph.format(node): graph.format(min(graph.training_classes, key=lambda t, c=node: concept_distance(c, t)))
        for node in graph.nodes
    }

    def generate(concepts: list[str], seed: int) -> np.ndarray:
        return render([nearest[graph.format(c)] for c in concepts], seed)

    return generate


def format_record(record: dict[str, Any]) -> str:
    """One evaluation record as a progress-bar line: per-level accuracy by both scorers, and where they disagree."""
    levels = record.get("level_accuracy", {})
    text = " ".join(f"L{level}={value:.2f}" for level, value in sorted(levels.items()))
    pixel = record.get("pixel_level_accuracy")
    if pixel:
        text += " | pixel scorer " + " ".join(f"L{level}={value:.2f}" for level, value in sorted(pixel.items()))
    if record.get("scorer_disagreements"):
        text += f" | scorers disagree on {', '.join(record['scorer_disagreements'])}"
    return f"[eval step {record.get('step')}] {text}"
