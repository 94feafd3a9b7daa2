"""Clips scored per class and per level, by both scorers: the learned probes (:mod:`compgen.evaluation.clip_probes`)
and the pixels with the motion (:mod:`compgen.evaluation.clip_scoring`), behind one typicality check.

An atypical clip (a frame without one object, no motion, a broken path, flicker) counts as wrong on every concept for
both scorers, as an image without a valid object does. Accuracy is Paper A's multiplicative accuracy (every concept
right), per class, then averaged per level of the concept graph::

    python -m compgen.evaluation.clip_evaluation --dataset clips-h32-train1     # the real test clips, both scorers
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..atomic_io import atomic_write_text, output_file_problem
from ..cli import ArgumentParser
from ..clips import CLIP_SPACE, render_clips
from ..concepts import ConceptGraph, concept_distance
from .clip_probes import ClipProbes, clip_probes_for, default_clip_probes
from .clip_scoring import CLIP_FAILURES, check_clips, read_clips
from .metrics import additive_accuracy, level_means, multiplicative_accuracy, per_image_correctness
from .scoring import probes_fingerprint
from .tracker import LearningDynamicsTracker, scorer_disagreements


def evaluate_clips(graph: ConceptGraph, clips: np.ndarray, concepts: Sequence[str], probes: ClipProbes
                   ) -> dict[str, Any]:
    """A record of clips ``(N, T, H, W, 3)`` uint8 meant to show ``concepts`` (one class string per clip): per class
    and per level, the multiplicative accuracy by the probes (``accuracy``, ``level_accuracy``) and by the pixels and
    motion (``pixel_accuracy``, ``pixel_level_accuracy``), the share of typical clips and why the others failed."""
    if len(clips) != len(concepts):
        raise ValueError(f"{len(clips)} clips but {len(concepts)} concepts: give one class per clip")
    targets = np.array([CLIP_SPACE.parse(concept) for concept in concepts], dtype=np.int64)
    check = check_clips(clips)
    by_pixels = read_clips(check)
    by_probes = probes.predict(clips)
    by_probes[~check.valid] = -1
    names = [CLIP_SPACE.format(target) for target in targets]
    record: dict[str, Any] = {"num_clips_per_class": {}, "accuracy": {}, "pixel_accuracy": {}, "typical": {},
                              "concept_accuracy": {}, "failures": {}, "additive_accuracy": {},
                              "scorer_agreement": {}}
    for name in sorted(set(names)):
        rows = np.array([label == name for label in names])
        record["num_clips_per_class"][name] = int(rows.sum())
        record["accuracy"][name] = multiplicative_accuracy(by_probes[rows], targets[rows])
        record["pixel_accuracy"][name] = multiplicative_accuracy(by_pixels[rows], targets[rows])
        record["additive_accuracy"][name] = additive_accuracy(by_probes[rows], targets[rows])
        record["scorer_agreement"][name] = float((per_image_correctness(by_probes[rows], targets[rows]).all(1)
                                                  == per_image_correctness(by_pixels[rows], targets[rows]).all(1))
                                                 .mean())
        record["typical"][name] = float(check.valid[rows].mean())
        record["concept_accuracy"][name] = {
            variable: {"probes": float((by_probes[rows, j] == targets[rows, j]).mean()),
                       "pixels": float((by_pixels[rows, j] == targets[rows, j]).mean())}
            for j, variable in enumerate(CLIP_SPACE.names)}
        record["failures"][name] = {reason: int((check.reasons[rows] == reason).sum()) for reason in CLIP_FAILURES}
    levels = {name: graph.level(name) for name in record["accuracy"]}
    record["levels"] = levels
    record["level_accuracy"] = {str(k): v for k, v in level_means(record["accuracy"], levels).items()}
    record["pixel_level_accuracy"] = {str(k): v for k, v in level_means(record["pixel_accuracy"], levels).items()}
    return record


ClipSampler = Callable[[list[str], int], np.ndarray]
"""``(class strings, seed) -> uint8 clips (N, T, H, W, 3)``: how a video generator is sampled for evaluation."""


def evaluate_clip_generator(graph: ConceptGraph, generate: ClipSampler, clips_per_class: int = 20, seed: int = 0,
                            probes: ClipProbes | None = None) -> dict[str, Any]:
    """Sample ``clips_per_class`` clips of every class of ``graph`` from ``generate`` and score them
    (:func:`evaluate_clips`): one evaluation of a video generator's learning dynamics."""
    if clips_per_class < 1:
        raise ValueError(f"clips_per_class must be at least 1, got {clips_per_class}")
    concepts = [graph.format(node) for node in graph.nodes for _ in range(clips_per_class)]
    return evaluate_clips(graph, generate(concepts, seed), concepts, probes or default_clip_probes())


class ClipTracker(LearningDynamicsTracker):
    """The learning dynamics of a video generator: every class of ``graph`` sampled with the same seed at every
    evaluation, scored by both clip scorers (:func:`evaluate_clips`), one record per evaluation in the training loop's
    log, with the image tracker's fields (per class and per level by both scorers, ``object_rate``: the share of
    typical clips), so cards, studies and the headline check read it as they read an image run's.

    Args:
        graph: the clips' concept graph.
        probes: the clip probes (:func:`~compgen.evaluation.clip_probes.default_clip_probes`).
        num_images_per_class: clips sampled per class.
        log_path, seed, sample_dir, samples_per_class: as :class:`LearningDynamicsTracker` (the kept samples are
            clips ``(n, T, H, W, 3)``).
    """

    def __init__(self, graph: ConceptGraph, probes: ClipProbes, num_images_per_class: int = 50,
                 log_path: str | None = None, seed: int = 0, sample_dir: str | None = None,
                 samples_per_class: int = 4) -> None:
        if graph.space.to_dict() != CLIP_SPACE.to_dict():
            raise ValueError(f"clip probes read the clip space {CLIP_SPACE.to_dict()}, the graph has "
                             f"{graph.space.to_dict()}")
        self._start_log(graph, probes, num_images_per_class, log_path, seed, sample_dir, samples_per_class)
        self.version = {"clip_probes": probes_fingerprint(probes), "clip_scoring": "typicality, pixels and motion"}
        """What judged the clips (in every record)."""

    def evaluate(self, generate: ClipSampler, step: int, images_seen: int | None = None, accelerator: Any = None,
                 sampling: dict[str, Any] | None = None) -> dict[str, Any]:
        """Sample, score and log one evaluation of ``generate`` (uint8 clips ``(N, T, H, W, 3)``); returns the
        record."""
        eval_start = time.perf_counter()
        requested = [name for name in self.class_names for _ in range(self.num_images_per_class)]
        clips = np.asarray(generate(requested, self.seed))
        if clips.dtype != np.uint8 or clips.ndim != 5 or clips.shape[0] != len(requested) or clips.shape[-1] != 3:
            raise ValueError(f"generate must return uint8 clips of shape ({len(requested)}, T, H, W, 3), got "
                             f"{clips.dtype} {clips.shape}")
        generate_seconds = time.perf_counter() - eval_start
        scored = evaluate_clips(self.graph, clips, requested, self.probes)
        by_concept = scored.pop("concept_accuracy")
        record = {
            **self._record_head(step, images_seen, eval_start, generate_seconds),
            "num_frames": int(clips.shape[1]),
            "image_size": int(clips.shape[-2]),
            **scored,
            "object_rate": scored["typical"],
            "concept_accuracy": {name: {v: a["probes"] for v, a in row.items()} for name, row in by_concept.items()},
            "pixel_concept_accuracy": {name: {v: a["pixels"] for v, a in row.items()}
                                       for name, row in by_concept.items()},
        }
        record["scorer_disagreements"] = scorer_disagreements(record)
        return self._log(record, clips, step, accelerator, sampling, self.version)


def renderer_clip_generator() -> ClipSampler:
    """A "perfect" video generator: the clip renderer itself, for checking the scorers end to end."""
    return lambda concepts, seed: render_clips(concepts, seed=seed).frames


def memorizing_clip_generator(graph: ConceptGraph) -> ClipSampler:
    """A video generator that only memorized its training clips: it renders the nearest training class instead."""
    nearest = {graph.format(node): graph.format(min(graph.training_classes,
                                                    key=lambda t, c=node: concept_distance(c, t)))
               for node in graph.nodes}
    return lambda concepts, seed: render_clips([nearest[concept] for concept in concepts], seed=seed).frames


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dataset", default="clips-h32-train1",
                        help="a clips config name or an export directory (its test split is scored)")
    parser.add_argument("--config", default=None, help="the config of an export directory (default: its default)")
    parser.add_argument("--cache_dir", default=None)
    parser.add_argument("--output", default=None, help="write the record here (JSON)")
    parser.add_argument("--probes_path", default=None,
                        help="saved clip probes of the clips' shape (default: the default ones for that shape)")
    args = parser.parse_args(argv)
    if args.output and (problem := output_file_problem(args.output)):  # before the scoring, not after it
        parser.error(f"--output {args.output}: {problem}")
    import datasets

    from ..data.clips_builder import ConceptGraphClips, build_clips_dataset

    try:
        if args.dataset in {config.name for config in ConceptGraphClips.BUILDER_CONFIGS}:
            data = build_clips_dataset(args.dataset, cache_dir=args.cache_dir)
        else:
            data = datasets.load_dataset(args.dataset, args.config, cache_dir=args.cache_dir)
        test = data["test"].with_format("numpy")
        clips = np.stack(test["frames"])
        if clips.ndim != 5:
            raise ValueError(f"its test split holds no clips (frames of shape {clips.shape[1:]})")
    except (ValueError, FileNotFoundError, KeyError) as error:
        parser.error(f"--dataset {args.dataset}: {error}")
    try:  # the probes of the clips' own shape (not the builder's default 8 frames at 32 px)
        probes = clip_probes_for(clips.shape[1], clips.shape[2], args.probes_path)
    except ValueError as error:
        parser.error(str(error))
    train_classes = sorted(set(data["train"]["concepts"]))
    record = evaluate_clips(ConceptGraph(CLIP_SPACE, train_classes), clips, list(test["concepts"]), probes)
    text = json.dumps(record, indent=2)
    if args.output:
        atomic_write_text(args.output, text + "\n")
    print(json.dumps({key: record[key] for key in ("level_accuracy", "pixel_level_accuracy", "typical")}, indent=2))
    return record


if __name__ == "__main__":
    main()
