"""Multiplicative emergence toy model (Okawa et al. 2023, section 4) and its fit to measured curves.

If a capability needs ``n`` atomic abilities, each learned at a step with probability ``p`` and never
forgotten, it is present at step ``t`` with probability ``P(n, t) = (1 - (1 - p)^t)^n``: the larger ``n``,
the more sudden the rise. Fitting one rate per concept to the measured per-concept accuracy curves and
multiplying the fitted curves predicts when each class (and level) of the concept graph emerges.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from .curves import first_step_at
from .tracker import graph_from_record


def emergence_probability(n: int, t: np.ndarray | float, p: float) -> np.ndarray:
    """``P(n, t) = (1 - (1 - p)^t)^n``: probability that all ``n`` atomic abilities are learned by step ``t``."""
    if not 0.0 < p <= 1.0:
        raise ValueError(f"p must be in (0, 1], got {p}")
    return (1.0 - (1.0 - p) ** np.asarray(t, dtype=np.float64)) ** n


def critical_time(n: int, p: float, threshold: float = 0.9) -> int:
    """``t* = ceil(log(1 - P*^(1/n)) / log(1 - p))``: first step with ``P(n, t) >= P*``."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"p must be in (0, 1), got {p}")
    if not 0.0 < threshold < 1.0:
        raise ValueError(f"threshold must be in (0, 1), got {threshold}")
    if n < 1:
        raise ValueError(f"n must be at least 1, got {n}")
    return math.ceil(math.log(1.0 - threshold ** (1.0 / n)) / math.log(1.0 - p))


def concept_curve(t: np.ndarray, p: float, chance: float) -> np.ndarray:
    """Per-concept accuracy under the toy model: chance until learned, then 1."""
    return chance + (1.0 - chance) * emergence_probability(1, t, p)


def fit_rate(steps: Sequence[float], accuracy: Sequence[float], chance: float = 0.0) -> float:
    """Least-squares rate ``p`` of :func:`concept_curve` for one measured per-concept accuracy curve.

    A log-spaced grid search over ``p`` (the loss is one-dimensional and the curve family is monotone in p).
    """
    steps = np.asarray(steps, dtype=np.float64)
    accuracy = np.asarray(accuracy, dtype=np.float64)
    if steps.shape != accuracy.shape or steps.size == 0:
        raise ValueError("steps and accuracy must be non-empty sequences of the same length")
    grid = np.logspace(-7, 0, 1401)[:-1]
    predicted = chance + (1.0 - chance) * (1.0 - (1.0 - grid[:, None]) ** steps[None, :])
    loss = ((predicted - accuracy[None, :]) ** 2).sum(axis=1)
    return float(grid[int(np.argmin(loss))])


def first_crossing(steps: Sequence[float], values: Sequence[float], threshold: float) -> float | None:
    """First step whose value is at least ``threshold`` (``None`` if never)."""
    step = first_step_at(list(steps), list(values), threshold)
    return None if step is None else round(float(step), 1)


def fit_concept_rates(records: Sequence[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Fitted rate ``p`` per class and concept, ``{class: {concept: p}}``, from tracker records."""
    if not records:
        raise ValueError("need at least one tracker record")
    space = records[0]["concept_space"]
    steps = [r["step"] for r in records]
    rates: dict[str, dict[str, float]] = {}
    for name in records[0]["concept_accuracy"]:
        rates[name] = {}
        for concept, values in space.items():
            curve = [r["concept_accuracy"][name][concept] for r in records]
            rates[name][concept] = fit_rate(steps, curve, chance=1.0 / len(values))
    return rates


def emergence_report(records: Sequence[dict[str, Any]], threshold: float = 0.9) -> dict[str, Any]:
    """Predicted vs measured emergence step per class and per level.

    The prediction multiplies the fitted per-concept curves of a class; a class (level) has emerged once its
    (mean) multiplicative accuracy reaches ``threshold``. Steps are ``None`` when a curve never gets there
    (the prediction is searched up to 100x the last logged step).
    """
    graph = graph_from_record(records[0])
    steps = np.array([r["step"] for r in records], dtype=np.float64)
    horizon = np.unique(np.concatenate([steps, np.geomspace(1.0, max(steps.max(), 1.0) * 100.0, 2000)]))
    rates = fit_concept_rates(records)
    space = records[0]["concept_space"]
    predicted_curves = {}
    classes: dict[str, dict[str, Any]] = {}
    for name, level in graph.levels.items():
        curve = np.ones_like(horizon)
        for concept, values in space.items():
            curve *= concept_curve(horizon, rates[name][concept], 1.0 / len(values))
        predicted_curves[name] = curve
        classes[name] = {
            "level": level,
            "rates": rates[name],
            "predicted_step": first_crossing(horizon, curve, threshold),
            "measured_step": first_crossing(steps, [r["accuracy"][name] for r in records], threshold),
        }
    levels: dict[str, dict[str, Any]] = {}
    for level in sorted(set(graph.levels.values())):
        members = [n for n, lv in graph.levels.items() if lv == level]
        mean_curve = np.mean([predicted_curves[n] for n in members], axis=0)
        levels[str(level)] = {
            "classes": members,
            "predicted_step": first_crossing(horizon, mean_curve, threshold),
            "measured_step": first_crossing(steps, [r["level_accuracy"][str(level)] for r in records], threshold),
        }
    return {"threshold": threshold, "classes": classes, "levels": levels}


def format_emergence_report(report: dict[str, Any]) -> str:
    """A markdown table of :func:`emergence_report`."""
    lines = [
        f"Emergence (multiplicative accuracy >= {report['threshold']}): predicted by the toy model vs measured",
        "",
        "| level | classes | predicted step | measured step |",
        "|---|---|---|---|",
    ]
    for level, row in report["levels"].items():
        lines.append(f"| {level} | {', '.join(row['classes'])} | {row['predicted_step']} | {row['measured_step']} |")
    return "\n".join(lines)


def plot_toy_model(
    path: str | os.PathLike, p: float = 0.01, max_n: int = 5, threshold: float = 0.9, steps: int = 1000
) -> None:
    """Paper A Fig. 7: (a) P(n, t) for n = 1..max_n, (b) critical time t* against n."""
    from .figure_style import save_figure, subplots

    fig, (left, right) = subplots(1, 2, figsize=(9, 3.5))
    t = np.arange(steps + 1)
    colors = [f"C{i}" for i in range(max_n)]
    for n in range(1, max_n + 1):
        left.plot(t, emergence_probability(n, t, p), color=colors[n - 1], label=f"n = {n}")
    left.axhline(threshold, color="gray", linestyle=":", linewidth=1)
    left.set(xlabel="optimization step t", ylabel="P(n, t)", title=f"(a) learning n abilities, p = {p}")
    left.legend(frameon=False)
    ns = np.arange(1, max_n + 1)
    right.plot(ns, [critical_time(int(n), p, threshold) for n in ns], "o-", color="black")
    right.set(xlabel="number of composed concepts n", ylabel="critical time t*", title=f"(b) t* at P* = {threshold}")
    save_figure(fig, path)


def plot_emergence_order(report: dict[str, Any], path: str | os.PathLike, title: str | None = None) -> None:
    """When each class first reaches the threshold, measured (filled) and predicted by the toy model (open), classes
    ordered by level as in Paper A Fig. 5 (training classes, then level 1, then level 2). Paper A's ordering holds
    when the filled markers rise level by level; a class that never got there sits on the "never" line."""
    from .figure_style import level_color, save_figure, subplots

    classes = sorted(report["classes"].items(), key=lambda item: (item[1]["level"], item[0]))
    known = [row[key] for _, row in classes for key in ("measured_step", "predicted_step") if row[key]]
    never = 2.0 * max(known) if known else 1.0
    fig, ax = subplots(figsize=(1.0 + 0.7 * len(classes), 3.6))
    for x, (_, row) in enumerate(classes):
        color = level_color(row["level"])
        measured, predicted = row["measured_step"], row["predicted_step"]
        ax.scatter(x, measured or never, s=60, color=color, marker="o" if measured else "x",
                   label=f"level {row['level']}" if all(r["level"] != row["level"] for _, r in classes[:x]) else None)
        ax.scatter(x, predicted or never, s=60, facecolors="none", edgecolors=color, marker="s")
    ax.axhline(never, color="gray", linestyle=":", linewidth=1)
    ax.text(len(classes) - 0.5, never, "never", va="bottom", ha="right", color="gray", fontsize=8)
    ax.set_xticks(range(len(classes)), [name for name, _ in classes])
    ax.set_yscale("log")
    ax.set(xlabel="class (ordered by level)", ylabel=f"first step with accuracy >= {report['threshold']}",
           title=title or "emergence order: measured (filled) vs toy model (open squares)")
    ax.legend(frameon=False, fontsize=8)
    save_figure(fig, path)
