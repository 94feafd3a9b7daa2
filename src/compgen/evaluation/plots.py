"""Learning-dynamics plots (matplotlib, PNG) from tracker records, in Paper A's style.

``python -m compgen.evaluation.plots LOG.jsonl --output-dir DIR [--samples-dir DIR]`` writes every plot.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from ..atomic_io import atomic_write_bytes  # noqa: E402
from ..cli import ArgumentParser  # noqa: E402
from ..concepts import ConceptGraph  # noqa: E402
from .figure_style import LEVEL_COLORS, level_color, save_figure, subplots  # noqa: E402
from .tracker import graph_from_record, read_log  # noqa: E402

__all__ = ["LEVEL_COLORS", "level_color", "save_figure", "subplots"]  # figure helpers, re-exported for plot users


def moving_average(values: Sequence[float], window: int) -> np.ndarray:
    """Trailing moving average over the last ``window`` points (shorter at the start); window 1 is a no-op."""
    values = np.asarray(values, dtype=np.float64)
    if window <= 1 or values.size == 0:
        return values
    cumulative = np.concatenate([[0.0], np.cumsum(values)])
    index = np.arange(1, values.size + 1)
    start = np.maximum(index - window, 0)
    return (cumulative[index] - cumulative[start]) / (index - start)


def _x_values(records: Sequence[dict[str, Any]], x_key: str) -> np.ndarray:
    values = [r.get(x_key) for r in records]
    if any(v is None for v in values):
        raise ValueError(f"some records have no {x_key!r}; plot against 'step' instead")
    return np.asarray(values, dtype=np.float64)


def _style_axis(ax: plt.Axes, x: np.ndarray, log_x: bool, x_label: str, y_label: str) -> None:
    if log_x and (x > 0).any():
        ax.set_xscale("log")
        ax.set_xlim(left=x[x > 0].min())
    ax.set_ylim(-0.03, 1.03)
    ax.set_xlabel(x_label)
    ax.set_ylabel(y_label)
    ax.grid(alpha=0.3)


def plot_learning_dynamics(
    records: Sequence[dict[str, Any]],
    path: str | os.PathLike,
    metric: str = "accuracy",
    log_x: bool = True,
    smoothing: int = 1,
    x_key: str = "step",
    title: str | None = None,
    dashed_metric: str | None = None,
) -> None:
    """Accuracy vs training step, one line per class colored by level (Paper A Fig. 5 style).

    ``metric`` is ``"accuracy"`` (multiplicative), ``"additive_accuracy"`` or ``"prob_product_accuracy"``;
    ``smoothing`` is a trailing moving-average window in evaluations; ``dashed_metric`` (e.g. ``"pixel_accuracy"``,
    the second scorer's) is drawn dashed beside it per class, so a class the two scorers read apart shows.
    """
    if not records:
        raise ValueError("no records to plot")
    x = _x_values(records, x_key)
    levels = records[0]["levels"]
    fig, ax = subplots(figsize=(6, 4))
    seen_levels = set()
    for name, level in sorted(levels.items(), key=lambda item: (item[1], item[0])):
        y = moving_average([r[metric][name] for r in records], smoothing)
        label = f"level {level}" if level not in seen_levels else None
        seen_levels.add(level)
        ax.plot(x, y, color=level_color(level), linewidth=1.8, label=label)
        ax.annotate(name, (x[-1], y[-1]), fontsize=7, color=level_color(level), xytext=(3, 0),
                    textcoords="offset points", va="center")
        if dashed_metric is not None:
            ax.plot(x, moving_average([r[dashed_metric][name] for r in records], smoothing), color=level_color(level),
                    linewidth=1.2, linestyle="--", alpha=0.8)
    if dashed_metric is not None:
        ax.plot([], [], color="gray", linestyle="--", label=f"{dashed_metric.replace('_', ' ')} (dashed)")
    ax.axhline(records[0]["chance"], color="gray", linestyle=":", linewidth=1, label="chance")
    boundary = next((r["phase_start_step"] for r in records if "phase_start_step" in r), None)
    if boundary is not None and x_key == "step":  # a fine-tuning run (--init_from): where the second phase starts
        ax.axvline(boundary, color="black", linestyle="--", linewidth=1, label="fine-tuning starts")
    _style_axis(ax, x, log_x, x_key.replace("_", " "), metric.replace("_", " "))
    ax.legend(frameon=False, fontsize=8)
    ax.set_title(title or f"{metric.replace('_', ' ')} per class")
    save_figure(fig, path)


def plot_multiplicative_vs_additive(
    records: Sequence[dict[str, Any]],
    path: str | os.PathLike,
    concept_class: str | None = None,
    log_x: bool = True,
    smoothing: int = 1,
) -> None:
    """Multiplicative vs additive (and probability-product) accuracy of one class (Paper A Fig. 6).

    The default class is the first class of the highest level.
    """
    levels = records[0]["levels"]
    name = concept_class or max(levels, key=lambda c: (levels[c], -list(levels).index(c)))
    if name not in levels:
        raise ValueError(f"unknown class {name!r}; the log has {sorted(levels)}")
    x = _x_values(records, "step")
    fig, ax = subplots(figsize=(5.5, 3.8))
    for metric, style, label in (
        ("accuracy", "-", "multiplicative"),
        ("additive_accuracy", "--", "additive"),
        ("prob_product_accuracy", ":", "probability product"),
    ):
        if metric not in records[-1]:  # a clip tracker's records have no probability product
            continue
        ax.plot(x, moving_average([r[metric][name] for r in records], smoothing), style,
                color=level_color(levels[name]), linewidth=1.8, label=label)
    _style_axis(ax, x, log_x, "step", "accuracy")
    ax.legend(frameon=False, fontsize=8)
    ax.set_title(f"class {name} (level {levels[name]})")
    save_figure(fig, path)


def plot_concept_accuracy(
    records: Sequence[dict[str, Any]], path: str | os.PathLike, log_x: bool = True, smoothing: int = 1
) -> None:
    """Per-concept accuracy curves, one panel per class (which concept is the bottleneck, and when): the probes'
    solid, the pixel scorer's dashed where the log has them (the two can disagree on one concept, e.g. the shape of
    a small object)."""
    levels = records[0]["levels"]
    names = list(levels)
    concepts = list(records[0]["concept_space"])
    x = _x_values(records, "step")
    columns = min(4, len(names))
    rows = -(-len(names) // columns)
    fig, axes = subplots(rows, columns, figsize=(3.2 * columns, 2.6 * rows), squeeze=False, sharey=True)
    for ax, name in zip(axes.flat, names, strict=False):
        for k, concept in enumerate(concepts):
            y = moving_average([r["concept_accuracy"][name][concept] for r in records], smoothing)
            ax.plot(x, y, color=f"C{k}", linewidth=1.5, label=concept)
            if all(name in r.get("pixel_concept_accuracy", {}) for r in records):
                y = moving_average([r["pixel_concept_accuracy"][name][concept] for r in records], smoothing)
                ax.plot(x, y, color=f"C{k}", linewidth=1.2, linestyle="--",
                        label=f"{concept} (pixel scorer)" if name == names[0] else None)
        _style_axis(ax, x, log_x, "step", "accuracy")
        ax.set_title(f"{name} (level {levels[name]})", color=level_color(levels[name]), fontsize=9)
    for ax in list(axes.flat)[len(names):]:
        ax.axis("off")
    axes.flat[0].legend(frameon=False, fontsize=7)
    save_figure(fig, path)


def _graph_layout(graph: ConceptGraph) -> dict[tuple[int, ...], np.ndarray]:
    """2-D positions of the nodes: each variable is a direction, a cube (3 variables) or a 4-cube projection."""
    directions = np.array([[1.0, 0.0], [0.0, 1.0], [0.55, 0.4], [-0.35, 0.55], [0.3, -0.45]])
    if graph.space.num_variables > len(directions):
        raise ValueError(f"concept graphs with more than {len(directions)} variables cannot be drawn")
    scale = np.array([[1.0], [1.0], [1.0], [1.6], [1.2]])
    return {node: (np.asarray(node, dtype=np.float64)[:, None] * (directions * scale)[: len(node)]).sum(0)
            for node in graph.nodes}


def plot_concept_graph(
    graph: ConceptGraph,
    path: str | os.PathLike,
    accuracy: dict[str, float] | None = None,
    title: str | None = None,
) -> None:
    """The concept graph as a (hyper)cube; nodes colored by accuracy, training classes with a thick outline."""
    layout = _graph_layout(graph)
    fig, ax = subplots(figsize=(4.8, 4.2))
    for a, b in graph.edges:
        ax.plot(*np.stack([layout[a], layout[b]]).T, color="#BBBBBB", linewidth=1.2, zorder=1)
    cmap = plt.get_cmap("viridis")
    for node, (px, py) in layout.items():
        name = graph.format(node)
        value = None if accuracy is None else accuracy.get(name)
        face = cmap(value) if value is not None else "white"
        is_train = node in graph.training_classes
        ax.scatter(px, py, s=520, c=[face], edgecolors="black", linewidths=3.0 if is_train else 0.8,
                   marker="s" if is_train else "o", zorder=2)
        ax.annotate(name, (px, py), xytext=(0, 16), textcoords="offset points", ha="center", fontsize=8)
        if value is not None:
            ax.annotate(f"{value:.2f}", (px, py), ha="center", va="center", fontsize=7,
                        color="white" if value < 0.6 else "black", zorder=3)
    if accuracy is not None:
        mappable = matplotlib.cm.ScalarMappable(norm=matplotlib.colors.Normalize(0, 1), cmap=cmap)
        fig.colorbar(mappable, ax=ax, shrink=0.8, label="accuracy")
    ax.set_title(title or f"concept graph {', '.join(graph.space.names)} (squares: training)", fontsize=9)
    ax.set_aspect("equal")
    ax.margins(0.18)
    ax.axis("off")
    save_figure(fig, path)


def load_sample_files(sample_dir: str | os.PathLike) -> list[tuple[int, np.ndarray, np.ndarray]]:
    """``(step, images, classes)`` of every ``samples_step*.npz`` a tracker wrote, by step."""
    samples = []
    for file in sorted(Path(sample_dir).glob("samples_step*.npz")):
        with np.load(file, allow_pickle=False) as data:
            samples.append((int(data["step"]), data["images"], data["classes"]))
    return sorted(samples, key=lambda item: item[0])


def plot_sample_grid(
    samples: Sequence[tuple[int, np.ndarray, np.ndarray]], path: str | os.PathLike, max_columns: int = 8
) -> None:
    """Generated samples over time: one row per class, one column per evaluation (first sample of each; a clip is
    shown as the strip of its frames)."""
    if not samples:
        raise ValueError("no samples to plot")
    if len(samples) > max_columns:
        keep = np.unique(np.linspace(0, len(samples) - 1, max_columns).round().astype(int))
        samples = [samples[i] for i in keep]
    classes = list(dict.fromkeys(str(c) for c in samples[0][2]))
    frames = samples[0][1].shape[1] if samples[0][1].ndim == 5 else 1
    fig, axes = subplots(len(classes), len(samples),
                         figsize=(1.1 * frames * len(samples) + 0.6, 1.1 * len(classes)), squeeze=False)
    for column, (step, images, names) in enumerate(samples):
        names = [str(c) for c in names]
        for row, name in enumerate(classes):
            ax = axes[row, column]
            picture = images[names.index(name)]
            ax.imshow(np.concatenate(list(picture), axis=1) if picture.ndim == 4 else picture,
                      interpolation="nearest")
            ax.set_xticks([])
            ax.set_yticks([])
            if row == 0:
                ax.set_title(f"{step}", fontsize=7)
            if column == 0:
                ax.set_ylabel(name, fontsize=8, rotation=0, labelpad=14, va="center")
    save_figure(fig, path)


def plot_all(
    log_path: str | os.PathLike,
    output_dir: str | os.PathLike,
    samples_dir: str | os.PathLike | None = None,
    smoothing: int = 1,
    prefix: str = "",
) -> list[Path]:
    """Every plot of a tracker log (and its samples, if any); returns the written paths."""
    from .emergence import emergence_report, format_emergence_report, plot_emergence_order

    records = read_log(log_path)
    if not records:
        raise ValueError(f"{log_path} holds no records")
    output = Path(output_dir)
    graph = graph_from_record(records[0])
    log_x = any(r["step"] > 0 for r in records)
    paths = {name: output / f"{prefix}{name}.png" for name in (
        "learning_dynamics", "learning_dynamics_additive", "multiplicative_vs_additive", "concept_accuracy",
        "concept_graph")}
    plot_learning_dynamics(records, paths["learning_dynamics"], log_x=log_x, smoothing=smoothing)
    plot_learning_dynamics(records, paths["learning_dynamics_additive"], metric="additive_accuracy",
                           log_x=log_x, smoothing=smoothing)
    plot_multiplicative_vs_additive(records, paths["multiplicative_vs_additive"], log_x=log_x, smoothing=smoothing)
    plot_concept_accuracy(records, paths["concept_accuracy"], log_x=log_x, smoothing=smoothing)
    plot_concept_graph(graph, paths["concept_graph"], accuracy=records[-1]["accuracy"],
                       title=f"final accuracy at step {records[-1]['step']} (squares: training)")
    written = list(paths.values())
    if samples_dir is not None and load_sample_files(samples_dir):
        grid_path = output / f"{prefix}samples.png"
        plot_sample_grid(load_sample_files(samples_dir), grid_path)
        written.append(grid_path)
    if len(records) >= 2:
        report = emergence_report(records)
        report_path = output / f"{prefix}emergence.md"
        atomic_write_bytes(report_path, (format_emergence_report(report) + "\n").encode("utf-8"))
        plot_emergence_order(report, output / f"{prefix}emergence_order.png")
        written += [report_path, output / f"{prefix}emergence_order.png"]
    return written


def main(argv: Sequence[str] | None = None) -> None:
    parser = ArgumentParser(description="Turn a learning-dynamics JSONL log into PNG plots.")
    parser.add_argument("log", help="JSONL log written by LearningDynamicsTracker")
    parser.add_argument("--output_dir", required=True)
    parser.add_argument("--samples_dir", default=None, help="directory of samples_step*.npz from the tracker")
    parser.add_argument("--smoothing", type=int, default=1, help="moving-average window in evaluations")
    parser.add_argument("--prefix", default="", help="prefix of the written file names")
    args = parser.parse_args(argv)
    for path in plot_all(args.log, args.output_dir, args.samples_dir, args.smoothing, args.prefix):
        print(path)


if __name__ == "__main__":
    main()
