"""compgen's runs overlaid on Paper B's digitised Shapes2D curves, per class, on a step axis and on samples seen.

    python -m compgen.analysis.paper_b_curves LOG.jsonl [...] --output_dir results/NAME/figures [--figure maskgit]

Farid et al. (2025, project page, Shapes2D curves of plain MaskGIT and of MaskGIT + JEPA) read each class with
Paper A's linear probes on raw pixels, the product of the per-concept accuracies: compgen's lenient score
(:mod:`compgen.evaluation.lenient`) is that protocol, its two strict scorers are not. Each run's three scores are drawn
beside Paper B's points (``paper_figures/``, how they were read in its README), and :func:`agreement` says in numbers
where the curves meet: per class, compgen's score at each of Paper B's steps that its run covers, interpolated on the
log-step axis, against Paper B's reading.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..atomic_io import atomic_write_text
from ..cli import ArgumentParser
from ..evaluation.figure_style import level_color, save_figure, subplots
from ..evaluation.tracker import own_records, read_log

PAPER_B_CURVES = Path(__file__).parent / "paper_figures" / "farid2025_shapes2d_curves.csv"
"""Paper B's per-class points, digitised from its two Shapes2D figures (``paper_figures/README.md``)."""
PAPER_B_FIGURES = ("maskgit", "maskgit_jepa")
PAPER_B_BATCH_SIZE = 64
"""Paper B does not publish its batch: its samples-seen axis assumes Paper A's 64 unless told otherwise."""
SCORES = {"lenient": "lenient_accuracy", "probes": "accuracy", "pixel statistics": "pixel_accuracy"}
"""The record keys of each score: Paper B's lenient protocol first, then compgen's strict two."""
SCORE_STYLES = {"lenient": "-", "probes": "--", "pixel statistics": ":"}
X_AXES = {"step": "training step", "images_seen": "training images seen"}


def paper_b_curves(figure: str = "maskgit", path: str | Path = PAPER_B_CURVES) -> dict[str, dict[str, Any]]:
    """Paper B's points of one figure: ``{class: {"level": int, "step": array, "accuracy": array}}``, by step."""
    if figure not in PAPER_B_FIGURES:
        raise ValueError(f"unknown Paper B figure {figure!r}; choose one of {list(PAPER_B_FIGURES)}")
    curves: dict[str, dict[str, Any]] = {}
    with open(path, encoding="utf-8", newline="") as f:
        for row in csv.DictReader(f):
            if row["figure"] != figure:
                continue
            entry = curves.setdefault(row["class"], {"level": int(row["level"]), "step": [], "accuracy": []})
            entry["step"].append(float(row["step"]))
            entry["accuracy"].append(float(row["accuracy"]))
    for entry in curves.values():
        order = np.argsort(entry["step"])
        entry["step"] = np.asarray(entry["step"])[order]
        entry["accuracy"] = np.asarray(entry["accuracy"])[order]
    return dict(sorted(curves.items()))


def run_curve(records: Sequence[dict[str, Any]], score: str, class_name: str) -> tuple[np.ndarray, np.ndarray]:
    """A run's steps and one class's score at each evaluation; ``ValueError`` naming what the log lacks."""
    if score not in SCORES:
        raise ValueError(f"unknown score {score!r}; choose from {list(SCORES)}")
    key = SCORES[score]
    records = own_records(records)
    missing = [int(r["step"]) for r in records if class_name not in r.get(key, {})]
    if missing:
        hint = (" (a log from before the lenient score: python -m compgen.analysis.rescore RUN --lenient_dataset D "
                "scores an export)" if score == "lenient" else "")
        raise ValueError(f"the log has no {key!r} of class {class_name} at steps {missing[:5]}{hint}")
    return (np.asarray([float(r["step"]) for r in records]),
            np.asarray([float(r[key][class_name]) for r in records]))


def agreement(records: Sequence[dict[str, Any]], figure: str = "maskgit", score: str = "lenient"
              ) -> dict[str, dict[str, Any]]:
    """Per class of Paper B's figure: at each of its steps inside the run's evaluated range, the run's score
    (interpolated in log step) minus Paper B's reading; their mean and mean absolute value, and how many points."""
    result = {}
    for name, paper in paper_b_curves(figure).items():
        steps, values = run_curve(records, score, name)
        inside = (paper["step"] >= steps.min()) & (paper["step"] <= steps.max())
        if not inside.any():
            result[name] = {"points": 0}
            continue
        ours = np.interp(np.log(paper["step"][inside]), np.log(steps), values)
        difference = ours - paper["accuracy"][inside]
        result[name] = {"level": paper["level"], "points": int(inside.sum()),
                        "steps": [float(paper["step"][inside].min()), float(paper["step"][inside].max())],
                        "mean_difference": round(float(difference.mean()), 4),
                        "mean_absolute_difference": round(float(np.abs(difference).mean()), 4)}
    return result


def plot_overlay(runs: dict[str, Sequence[dict[str, Any]]], path: str | Path, figure: str = "maskgit",
                 x_axis: str = "step", scores: Sequence[str] = tuple(SCORES),
                 paper_batch_size: int = PAPER_B_BATCH_SIZE) -> None:
    """One panel per class: Paper B's points (markers, in the level's colour) and each run's scores (a colour per
    run, a line style per score). ``x_axis`` ``"images_seen"`` multiplies Paper B's steps by ``paper_batch_size``."""
    if x_axis not in X_AXES:
        raise ValueError(f"unknown x axis {x_axis!r}; choose from {list(X_AXES)}")
    if paper_batch_size < 1:
        raise ValueError(f"paper_batch_size must be >= 1, got {paper_batch_size}")
    paper = paper_b_curves(figure)
    fig, axes = subplots(2, 4, figsize=(16, 7.5), sharex=True, sharey=True)
    run_colors = [f"C{i}" for i in range(len(runs))]
    for ax, (name, points) in zip(axes.flat, paper.items(), strict=True):
        scale = paper_batch_size if x_axis == "images_seen" else 1
        ax.plot(points["step"] * scale, points["accuracy"], "o", color=level_color(points["level"]),
                markeredgecolor="black", markersize=5, label=f"Paper B ({figure})")
        for color, (run_name, records) in zip(run_colors, runs.items(), strict=True):
            own = own_records(records)
            per_step = (np.asarray([r["images_seen"] for r in own], dtype=np.float64)
                        / np.asarray([r["step"] for r in own], dtype=np.float64)) if x_axis == "images_seen" else 1
            for score in scores:
                steps, values = run_curve(records, score, name)
                ax.plot(steps * per_step, values, SCORE_STYLES[score], color=color, label=f"{run_name}: {score}")
        ax.set_xscale("log")
        ax.set_ylim(-0.03, 1.03)
        ax.grid(alpha=0.3)
        ax.set_title(f"{name} (level {points['level']})")
    for ax in axes[-1]:
        ax.set_xlabel(X_AXES[x_axis] + (f" (Paper B: steps x {paper_batch_size}, assumed)"
                                        if x_axis == "images_seen" else ""))
    handles, labels = axes.flat[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncol=min(len(labels), 4), fontsize=8)
    fig.suptitle(f"compgen's runs on Paper B's {figure} curves (lenient: Paper B's protocol; probes, pixel "
                 "statistics: compgen's strict scorers)")
    save_figure(fig, path)


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("logs", nargs="+", help="learning-dynamics logs (.jsonl), one run each")
    parser.add_argument("--output_dir", required=True, help="where the figures and agreement.json go")
    parser.add_argument("--figure", choices=PAPER_B_FIGURES, default="maskgit", help="Paper B's figure to overlay")
    parser.add_argument("--scores", nargs="+", choices=list(SCORES), default=list(SCORES))
    parser.add_argument("--paper_batch_size", type=int, default=PAPER_B_BATCH_SIZE,
                        help="Paper B's batch for its samples-seen axis (not published; default Paper A's 64)")
    parser.add_argument("--name", default=None, help="file name prefix (default: paper_b_<figure>)")
    args = parser.parse_args(argv)
    if args.paper_batch_size < 1:
        parser.error(f"--paper_batch_size must be >= 1, got {args.paper_batch_size}")
    paths = [Path(log) for log in args.logs]
    for path in paths:
        if not path.is_file():
            parser.error(f"no log at {path}")
    runs = {path.stem: read_log(path) for path in paths}
    try:  # every score of every run checked before any figure is drawn
        agreements = {name: {score: agreement(records, args.figure, score) for score in args.scores}
                      for name, records in runs.items()}
    except ValueError as error:
        parser.error(str(error))
    output = Path(args.output_dir)
    output.mkdir(parents=True, exist_ok=True)
    prefix = args.name or f"paper_b_{args.figure}"
    for x_axis in X_AXES:
        plot_overlay(runs, output / f"{prefix}_overlay_{x_axis}.png", args.figure, x_axis, args.scores,
                     args.paper_batch_size)
    atomic_write_text(output / f"{prefix}_agreement.json", json.dumps(
        {"figure": args.figure, "paper_batch_size": args.paper_batch_size, "runs": agreements}, indent=1) + "\n")
    return agreements


if __name__ == "__main__":
    main()
