"""The stress suite: how well a scorer reads corrupted real renders, per corruption and severity level.

    python -m compgen.analysis.stress_suite [--probes_path DIR] [--split_preset H32-train1] [--json FILE]

renders real images of every class in every render style (flat polygons, shaded solids) with a seed no scorer was
trained on, corrupts them with every corruption of :mod:`compgen.evaluation.corruptions` at levels 1-5 and prints
markdown tables of the accuracy (every concept right) of the concept probes (saved ones, or the default probes) and
of the pixel-statistics scorer. Levels 1-4 span what
half-trained generators draw; ``docs/evaluation.md`` holds the tables and ``tests/test_scorer_robustness.py`` holds
every scorer to >= 0.98 there.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from ..cli import ArgumentParser
from ..concepts import ConceptSpace, get_split_preset
from ..evaluation.corruptions import SEVERITIES, corrupt, to_uint8
from ..evaluation.scoring import ImageScorer

STRESS_COLOR_JITTER = 0.2
"""Colour spread of the stress suite's renders under ``color_shift``: the dataset's +-0.35 already reaches the edge of
each colour class, so a shifted colour could leave its class; at +-0.2 every level-1-4 shift stays inside it."""


def stress_test(
    predict: Callable[[np.ndarray], np.ndarray],
    space: ConceptSpace,
    images_per_class: int = 50,
    seed: int = 2024,
    image_size: int = 28,
    kinds: Sequence[str] | None = None,
    levels: Sequence[int] = (1, 2, 3, 4, 5),
    style: str = "flat",
) -> dict[str, dict[str, dict[str, float]]]:
    """Accuracy of a scorer on corrupted real renders: ``{kind: {level: {concept: accuracy, "all": ...}}}``.

    ``predict(uint8 NHWC images) -> (N, V)`` value indices (``-1`` for "no valid object" counts as wrong), e.g.
    ``lambda images: probes.predict(images).numpy()``. Renders ``images_per_class`` images of every class of
    ``space`` with the dataset's colour and size ranges from ``seed`` (keep it apart from any seed the scorer was
    trained on), corrupts them at each level and compares the predictions with the true classes. Level ``"0"`` is
    the clean images. ``style`` is a :data:`~compgen.shapes.REFERENCE_STYLES` look (flat polygons or shaded solids).
    """
    from ..shapes import PAPER_COLOR_JITTER, PAPER_SIZE_JITTER, REFERENCE_STYLES, RenderConfig, render_classes

    kinds = list(kinds or SEVERITIES)
    classes = np.repeat(np.array(space.all_classes(), dtype=np.int64), images_per_class, axis=0)

    def score(images: np.ndarray, concepts: np.ndarray) -> dict[str, float]:
        predicted = np.asarray(predict(images))
        correct = predicted == concepts
        result = {name: float(correct[:, j].mean()) for j, name in enumerate(space.names)}
        result["all"] = float(correct.all(axis=1).mean())
        return result

    results: dict[str, dict[str, dict[str, float]]] = {}
    for index, kind in enumerate(kinds):
        jitter = STRESS_COLOR_JITTER if kind == "color_shift" else PAPER_COLOR_JITTER
        config = RenderConfig(image_size=image_size, color_jitter=jitter, size_jitter=PAPER_SIZE_JITTER,
                              **REFERENCE_STYLES[style])
        batch = render_classes(space, classes, seed=seed + index, config=config)
        results[kind] = {"0": score(batch.images, batch.concepts)}
        for level in levels:
            corrupted = to_uint8(corrupt(batch.images, kind, level, seed=seed * 100 + index * 10 + level))
            results[kind][str(level)] = score(corrupted, batch.concepts)
    return results


def typicality_test(
    scorer: ImageScorer, space: ConceptSpace, images_per_class: int = 50, seed: int = 2024, image_size: int = 28,
) -> dict[str, dict[str, dict]]:
    """What the evaluation path (the one-object and typicality checks, then each scorer) does with real renders, hybrids
    and pale objects: ``{"real": {kind: {level: {scorer: accepted}}}, "hybrid": {opacity: {"<size> <shape>":
    {scorer: rejected}}}, "pale": {strength: {scorer: rejected}}}``, scorers ``"probes"`` and ``"pixel statistics"``.

    A real render (clean, and with every corruption of :data:`SEVERITIES` at levels 1-4) is accepted when a scorer
    reads its class. A hybrid (:func:`~compgen.evaluation.typicality.render_hybrids`, grouped by its solid object's
    size and shape) or a pale object (:func:`~compgen.evaluation.typicality.render_pale`) is rejected when a scorer
    reads neither it as its class nor as the class of its ghost's shape (a failed check gives every concept ``-1``)."""
    from ..evaluation.corruptions import GENERATOR_LEVELS
    from ..evaluation.typicality import HYBRID_OPACITIES, PALE_STRENGTHS, render_hybrids, render_pale
    from ..shapes import render_reference

    classes = np.repeat(np.array(space.all_classes(), dtype=np.int64), images_per_class, axis=0)
    shape, size = space.names.index("shape"), space.names.index("size")
    others = [j for j in range(space.num_variables) if j != shape]

    def read(images: np.ndarray) -> dict[str, np.ndarray]:
        scores = scorer.score(images, classes)
        found = {"probes": scores.predictions}
        if scores.pixel_predictions is not None:
            found["pixel statistics"] = scores.pixel_predictions
        return found

    def accepted(images: np.ndarray, any_shape: bool) -> dict[str, np.ndarray]:
        """Per scorer and image: read as its class (``any_shape``: as any shape with the class's other values)."""
        result = {}
        for name, predicted in read(images).items():
            right = (predicted == classes).all(axis=1)
            if any_shape:
                right |= (predicted[:, shape] >= 0) & (predicted[:, others] == classes[:, others]).all(axis=1)
            result[name] = right
        return result

    def rejected(images: np.ndarray, rows: np.ndarray | None = None) -> dict[str, float]:
        return {name: float(1.0 - right[rows if rows is not None else slice(None)].mean())
                for name, right in accepted(images, True).items()}

    real = render_reference(space, classes, seed=seed, image_size=image_size).images
    results: dict[str, dict[str, dict]] = {"real": {}, "hybrid": {}, "pale": {}}
    for index, kind in enumerate(SEVERITIES):
        results["real"][kind] = {}
        if index == 0:
            results["real"][kind]["0"] = {name: float(right.mean()) for name, right in accepted(real, False).items()}
        for level in range(1, GENERATOR_LEVELS + 1):
            corrupted = to_uint8(corrupt(real, kind, level, seed=seed * 100 + index * 10 + level))
            results["real"][kind][str(level)] = {name: float(right.mean())
                                                 for name, right in accepted(corrupted, False).items()}
    groups = {f"{space.variable('size').values[z]} {space.variable('shape').values[k]}":
              (classes[:, size] == z) & (classes[:, shape] == k)
              for z in range(space.variable("size").num_values) for k in range(space.variable("shape").num_values)}
    for opacity in HYBRID_OPACITIES:
        images = render_hybrids(space, classes, opacity, seed, image_size)
        results["hybrid"][str(opacity)] = {group: rejected(images, rows) for group, rows in groups.items()}
    for strength in PALE_STRENGTHS:
        results["pale"][str(strength)] = rejected(render_pale(space, classes, strength, seed, image_size))
    return results


def stress_markdown(results: dict[str, dict[str, dict[str, float]]], concept: str = "all") -> str:
    """A markdown table of :func:`stress_test` results: one row per corruption, one column per level."""
    levels = sorted({level for by_level in results.values() for level in by_level}, key=int)
    header = "| corruption | " + " | ".join("clean" if level == "0" else f"level {level}" for level in levels) + " |"
    lines = [header, "|---|" + "---|" * len(levels)]
    for kind, by_level in results.items():
        cells = [f"{by_level[level][concept]:.3f}" if level in by_level else "" for level in levels]
        lines.append(f"| {kind} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> dict[str, dict]:
    from ..evaluation.pixel_scorer import PixelStatisticsScorer
    from ..evaluation.probes import ConceptProbes, default_shapes_probes
    from ..shapes import REFERENCE_STYLES

    parser = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--split_preset", default="H32-train1", help="the concept graph whose space is rendered")
    parser.add_argument("--probes_path", default=None,
                        help="saved ConceptProbes; default: the default shapes probes")
    parser.add_argument("--images_per_class", type=int, default=50)
    parser.add_argument("--seed", type=int, default=2024, help="render seed (keep it apart from training seeds)")
    parser.add_argument("--json", default=None, help="also write the results as JSON here")
    args = parser.parse_args(argv)

    space = get_split_preset(args.split_preset).graph().space
    probes = ConceptProbes.from_pretrained(args.probes_path) if args.probes_path else default_shapes_probes(space)
    scorers: dict[str, Callable[[np.ndarray], np.ndarray]] = {
        "probes": lambda images: probes.predict(images).numpy(),
        "pixel statistics": PixelStatisticsScorer.calibrate(space).predict,
    }
    results = {}
    for name, predict in scorers.items():
        for style in REFERENCE_STYLES:
            key = f"{name}, {style}"
            results[key] = stress_test(predict, space, images_per_class=args.images_per_class, seed=args.seed,
                                       style=style)
            print(f"\n### {name} on {style} renders: accuracy with every concept right\n")
            print(stress_markdown(results[key]))
    results["typicality"] = typicality_test(ImageScorer(probes), space, images_per_class=args.images_per_class,
                                            seed=args.seed)
    print("\n### the evaluation path on real renders, hybrids and pale objects\n")
    print(json.dumps(results["typicality"], indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1) + "\n")
    return results


if __name__ == "__main__":
    main()
