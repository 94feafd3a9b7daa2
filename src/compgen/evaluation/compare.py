"""Compare training arms (e.g. MaskGIT vs MaskGIT + JEPA) over several seeds from their learning-dynamics logs.

Each arm is a list of runs, each run the records of its ``learning_dynamics.jsonl``. Per arm and level we report
the final and best multiplicative accuracy (mean +- std over seeds) and the first step at which each seed's level
accuracy reaches given thresholds, and plot the mean curve per level and arm with a band of +- one std.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..atomic_io import atomic_write_text
from .curves import first_step_at
from .figure_style import level_color, save_figure, subplots
from .statistics import fisher_exact_p as fisher_exact_p  # stated once, there
from .statistics import share_interval as share_interval

Records = Sequence[dict[str, Any]]
DEFAULT_THRESHOLDS = (0.5, 0.9)


COLLAPSE_PEAK = 0.5
"""A level *rises then collapses* in a run when its accuracy peaked at this or more ..."""
COLLAPSE_DROP = 0.3
"""... and its final accuracy lies this far or more below the peak: a held-out class drawn, then lost (evidence:
``results/paper-a-h100-flat-data/``, ``results/paper-a-reproduction/``)."""


def rose_then_collapsed(best: float, final: float) -> bool:
    """Whether a level that peaked at ``best`` and ended at ``final`` rose then collapsed (:data:`COLLAPSE_PEAK`,
    :data:`COLLAPSE_DROP`): the one rule every summary applies."""
    return best >= COLLAPSE_PEAK and final <= best - COLLAPSE_DROP


@dataclass
class LevelSummary:
    """One arm's statistics at one level over its seeds."""

    final: list[float]
    best: list[float]
    first_step: dict[float, list[int | None]]
    """Per threshold, each seed's first evaluated step with level accuracy >= threshold (``None``: never)."""

    @staticmethod
    def _mean_std(values: Sequence[float]) -> str:
        """Mean and *sample* standard deviation (n - 1) over seeds; a single seed is its value."""
        array = np.asarray(values, dtype=np.float64)
        if len(array) == 1:
            return f"{array[0]:.3f}"
        return f"{array.mean():.3f} +- {array.std(ddof=1):.3f}"

    def final_text(self) -> str:
        return self._mean_std(self.final)

    def best_text(self) -> str:
        return self._mean_std(self.best)

    def first_step_text(self, threshold: float) -> str:
        """Each seed's first evaluation step at ``threshold`` ("never" where it is not reached), in seed order:
        the steps are evaluation steps, never averaged into one that was not evaluated."""
        steps = self.first_step[threshold]
        if not any(step is not None for step in steps):
            return "never"
        return " / ".join("never" if step is None else str(step) for step in steps)

    @property
    def collapsed(self) -> list[bool]:
        """Per seed: the level peaked at :data:`COLLAPSE_PEAK` or more, then ended :data:`COLLAPSE_DROP` below it."""
        return [rose_then_collapsed(best, final) for best, final in zip(self.best, self.final, strict=True)]

    def collapse_text(self) -> str:
        collapsed = self.collapsed
        return f"{sum(collapsed)}/{len(collapsed)}"


SCORERS = {"probes": "level_accuracy", "pixel statistics": "pixel_level_accuracy"}
"""The two strict scorers of an evaluation record and the key of their per-level accuracy: what verdicts read."""

LENIENT_SCORER = "lenient (Paper B's protocol)"
REPORTED_SCORERS = {**SCORERS, LENIENT_SCORER: "lenient_level_accuracy"}
"""Every score a summary reports: the strict two and Paper B's lenient protocol (:mod:`compgen.evaluation.lenient`),
which is reported beside them and never read by a verdict (:func:`headline_held` takes :data:`SCORERS` only)."""


def scorer_slug(scorer: str) -> str:
    """A scorer's name as a file name part (``pixel statistics`` -> ``pixel_statistics``)."""
    return re.sub(r"[^a-z0-9]+", "_", scorer.lower()).strip("_")


HEADLINE_ACCURACY, HEADLINE_EVALUATIONS, HEADLINE_FIDELITY = 0.9, 3, 0.75
"""Paper A's headline (every level, the held-out ones included, emerges) holds in a run when every level is at
:data:`HEADLINE_ACCURACY` or more by both scorers at each of the last :data:`HEADLINE_EVALUATIONS` evaluations, and
every level's colour-strength fidelity is :data:`HEADLINE_FIDELITY` or more at the last (drawn, not ghosted)."""


def headline_held(records: Records, scorers: Sequence[str] = tuple(SCORERS),
                  min_fidelity: float | None = HEADLINE_FIDELITY) -> dict[str, Any]:
    """Whether Paper A's headline holds at the end of a run (:data:`HEADLINE_ACCURACY`), with why not: the lowest
    level accuracy of the ``scorers`` over the last evaluations and the lowest level fidelity at the last, per level.

    The defaults are compgen's strict criterion (both scorers, fidelity >= :data:`HEADLINE_FIDELITY`);
    ``scorers=("probes",), min_fidelity=None`` is Paper A's own measure (Sec. 3: the probes alone)."""
    unknown = [name for name in scorers if name not in SCORERS]
    if not scorers or unknown:
        raise ValueError(f"scorers must name some of {sorted(SCORERS)}, got {list(scorers)}")
    keys = [SCORERS[name] for name in scorers]
    last = list(records[-HEADLINE_EVALUATIONS:])
    accuracy = {level: min(float(r[key][level]) for r in last for key in keys if key in r)
                for level in last[-1]["level_accuracy"]}
    fidelity = {level: float(value) for level, value in last[-1].get("fidelity_level", {}).items()}
    scored = len(last) == HEADLINE_EVALUATIONS and all(all(k in r for k in keys) for r in last)
    fidelity_ok = min_fidelity is None or (bool(fidelity) and min(fidelity.values()) >= min_fidelity)
    held = scored and min(accuracy.values()) >= HEADLINE_ACCURACY and fidelity_ok
    return {"held": held, "lowest_accuracy": accuracy, "fidelity": fidelity,
            "steps": [int(r["step"]) for r in last]}


def result_lines(records: Records) -> list[str]:
    """A run's result as it prints at its end (and ``python -m compgen.quickstart --report``): the per-level accuracy
    at its last evaluation by both scorers with its fidelity, and Paper A's headline verdict with why not."""
    last = records[-1]
    chance = last.get("chance")
    lines = [f"step {last['step']}: per-level accuracy (multiplicative"
             + (f"; chance {chance:.4g})" if isinstance(chance, int | float) else ")"), "",
             "| level | " + " | ".join(scorer for scorer, key in SCORERS.items() if key in last) + " | fidelity |",
             "|---|" + "---|" * sum(key in last for key in SCORERS.values()) + "---|"]
    for level in sorted(last["level_accuracy"], key=int):
        values = [f"{last[key][level]:.2f}" for key in SCORERS.values() if key in last]
        fidelity = last.get("fidelity_level", {}).get(level)
        lines.append(f"| {level} | " + " | ".join(values) + f" | {'-' if fidelity is None else f'{fidelity:.2f}'} |")
    scorers = [name for name, key in SCORERS.items() if key in last]  # own images: the probes alone, no fidelity
    held = headline_held(records, scorers, HEADLINE_FIDELITY if "fidelity_level" in last else None)
    by = "both scorers" if len(scorers) == len(SCORERS) else "the probes (no second scorer here)"
    fidelity = ", fidelity >= 0.75" if "fidelity_level" in last else ""
    lines += ["", f"Paper A's headline (every level >= 0.9 by {by} at the last three evaluations{fidelity}): "
              f"{'holds' if held['held'] else 'does not hold'} here{headline_reason(held)}"]
    return lines


def print_run_result(output_dir: str | os.PathLike) -> None:
    """A run's last lines: its result at the last evaluation (:func:`result_lines`) and where its model card is,
    printed below the timing table."""
    from .tracker import own_records, read_log

    log = Path(output_dir) / "learning_dynamics.jsonl"
    records = own_records(read_log(log)) if log.is_file() else []
    if records and "level_accuracy" in records[-1]:
        print("\n".join([*result_lines(records), f"model card: {Path(output_dir) / 'README.md'}"]), flush=True)


def headline_reason(held: dict) -> str:
    """Why the headline does not hold, from :func:`~compgen.evaluation.compare.headline_held`'s result: the levels
    under 0.9 at the last three evaluations and under 0.75 fidelity at the last ("" when it holds)."""
    if held["held"]:
        return ""
    reasons = [f"level {level} at {value:.2f} (its lowest of the last {len(held['steps'])} evaluations)"
               for level, value in sorted(held["lowest_accuracy"].items()) if value < HEADLINE_ACCURACY]
    reasons += [f"level {level}'s fidelity {value:.2f} (pale or partial objects)"
                for level, value in sorted(held["fidelity"].items()) if value < HEADLINE_FIDELITY]
    if len(held["steps"]) < HEADLINE_EVALUATIONS:
        reasons.append(f"only {len(held['steps'])} evaluations")
    return f": {', '.join(reasons)}" if reasons else ""


MEASURE_TEXTS = {
    "criterion": "compgen.evaluation.compare.headline_held: every level >= 0.9 by both scorers at each of the last "
                 "three evaluations, and every level's fidelity >= 0.75 at the last",
    "without_fidelity": "headline_held(records, min_fidelity=None): every level >= 0.9 by both scorers at each of the "
                        "last three evaluations; where a log has no fidelity, the full criterion cannot be applied",
    "probes_only": "headline_held(records, scorers=('probes',), min_fidelity=None): Paper A's own measure",
}
"""What each reading of :func:`headline_measures` is, in the words a results folder's JSON keeps beside it."""


def headline_measures(records: Records) -> dict[str, Any]:
    """Every reading of Paper A's headline on one run, for a results folder: compgen's criterion where the log has the
    fidelity (``held``, else ``None``), the same without the fidelity, Paper A's probes-only measure, and each level's
    lowest accuracy, the fidelity and both scorers' levels at the last three evaluations."""
    strict = headline_held(records)
    fidelity_logged = "fidelity_level" in records[-1]
    return {
        "fidelity_logged": fidelity_logged,
        "held": strict["held"] if fidelity_logged else None,
        "held_without_fidelity": headline_held(records, min_fidelity=None)["held"],
        "held_by_probes_only": headline_held(records, scorers=("probes",), min_fidelity=None)["held"],
        "steps": strict["steps"],
        "lowest_accuracy": {level: round(value, 4) for level, value in strict["lowest_accuracy"].items()},
        "fidelity": strict["fidelity"],
        "last_three_evaluations": {
            str(record["step"]): {scorer: {level: round(float(value), 4) for level, value in record[key].items()}
                                  for scorer, key in SCORERS.items() if key in record}
            for record in records[-HEADLINE_EVALUATIONS:]},
    }


def level_curve(records: Records, level: int | str, key: str = "level_accuracy") -> tuple[np.ndarray, np.ndarray]:
    """(steps, level accuracy) of one run by the scorer whose per-level table is ``key``; keys may be ints or
    strings (after JSON)."""
    steps = np.asarray([record["step"] for record in records], dtype=np.int64)
    values = np.asarray([_level_value(record, level, key) for record in records], dtype=np.float64)
    return steps, values


def _level_value(record: dict[str, Any], level: int | str, key: str = "level_accuracy") -> float:
    table = record[key]
    return float(table[str(level)] if str(level) in table else table[int(level)])


def run_levels(records: Records) -> list[int]:
    if not records:
        raise ValueError("a run has no evaluation records")
    return sorted(int(level) for level in records[0]["level_accuracy"])


def summarize_arm(runs: Sequence[Records], thresholds: Sequence[float] = DEFAULT_THRESHOLDS,
                  key: str = "level_accuracy") -> dict[int, LevelSummary]:
    """Per level: final and best accuracy of every seed, and the first step each threshold is reached (by the
    scorer whose per-level table is ``key``)."""
    if not runs:
        raise ValueError("an arm needs at least one run")
    summary = {}
    for level in run_levels(runs[0]):
        final, best, first = [], [], {t: [] for t in thresholds}
        for records in runs:
            steps, values = level_curve(records, level, key)
            final.append(float(values[-1]))
            best.append(float(values.max()))
            for threshold in thresholds:
                step = first_step_at(steps.tolist(), values.tolist(), threshold)
                first[threshold].append(None if step is None else int(step))
        summary[level] = LevelSummary(final, best, first)
    return summary


def arm_summaries(arms: Mapping[str, Sequence[Records]]) -> dict[str, dict[str, dict[str, dict[str, Any]]]]:
    """``{arm: {scorer: {level: statistics}}}`` over every run of each arm, for the scorers its runs logged (a study's
    ``summary.json`` ``"arms"``): the final mean, the final and best accuracy of every seed, the first steps at 0.5
    and 0.9 and whether it rose then collapsed."""
    summaries: dict[str, dict[str, dict[str, dict[str, Any]]]] = {}
    for scorer, key in REPORTED_SCORERS.items():
        for arm, runs in arms.items():
            if runs and all(key in r[0] for r in runs):
                summaries.setdefault(arm, {})[scorer] = {
                    str(level): {"final_mean": float(sum(s.final) / len(s.final)), "final": s.final, "best": s.best,
                                 "first_step_0.5": s.first_step[0.5], "first_step_0.9": s.first_step[0.9],
                                 "rose_then_collapsed": s.collapsed}
                    for level, s in summarize_arm(runs, key=key).items()}
    return summaries


def comparison_markdown(
    arms: Mapping[str, Sequence[Records]], thresholds: Sequence[float] = DEFAULT_THRESHOLDS, title: str | None = None,
    key: str = "level_accuracy",
) -> str:
    """A markdown table: one row per (level, arm) with final / best accuracy and first steps to each threshold."""
    summaries = {name: summarize_arm(runs, thresholds, key) for name, runs in arms.items()}
    header = ["level", "arm", "seeds", "final accuracy", "best accuracy"] + [f"first step >= {t}" for t in thresholds]
    header.append("rose then collapsed")
    lines = [f"# {title}", ""] if title else []
    lines += [
        "Multiplicative accuracy per level (mean +- sample standard deviation over seeds; one seed: its value). First "
        f"steps are each seed's first evaluation at the threshold. Rose then collapsed: seeds whose level peaked at "
        f">= {COLLAPSE_PEAK} and ended >= {COLLAPSE_DROP} below the peak.",
        "",
        "| " + " | ".join(header) + " |",
        "|" + "---|" * len(header),
    ]
    levels = sorted({level for summary in summaries.values() for level in summary})
    for level in levels:
        for name, summary in summaries.items():
            if level not in summary:
                continue
            entry = summary[level]
            row = [str(level), name, str(len(entry.final)), entry.final_text(), entry.best_text()]
            row += [entry.first_step_text(t) for t in thresholds]
            row.append(entry.collapse_text())
            lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines) + "\n"


def mean_curves(runs: Sequence[Records], level: int, key: str = "level_accuracy"
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(steps, mean, sample std) of one level over runs, on the steps all runs evaluated (std 0 for one run)."""
    curves = [dict(zip(*level_curve(records, level, key), strict=True)) for records in runs]
    common = sorted(set.intersection(*(set(curve) for curve in curves)))
    if not common:
        raise ValueError("the runs share no evaluation step")
    values = np.asarray([[curve[step] for step in common] for curve in curves], dtype=np.float64)
    spread = values.std(axis=0, ddof=1) if len(curves) > 1 else np.zeros(len(common))
    return np.asarray(common), values.mean(axis=0), spread


def plot_comparison(
    arms: Mapping[str, Sequence[Records]],
    path: str | os.PathLike,
    log_x: bool = True,
    title: str | None = None,
    max_columns: int = 4,
) -> None:
    """One panel per arm (at most ``max_columns`` per row): mean level accuracy vs step, colored by level, with a
    +- std band over seeds."""
    if not arms:
        raise ValueError("plot_comparison needs at least one arm")
    columns = min(len(arms), max_columns)
    rows = -(-len(arms) // columns)
    fig, axes = subplots(rows, columns, figsize=(5 * columns, 3.8 * rows), sharey=True, squeeze=False)
    flat_axes = axes.ravel()
    for ax, (name, runs) in zip(flat_axes[: len(arms)], arms.items(), strict=True):
        for level in run_levels(runs[0]):
            steps, mean, std = mean_curves(runs, level)
            color = level_color(level)
            ax.plot(steps, mean, color=color, linewidth=1.8, label=f"level {level}")
            ax.fill_between(steps, np.clip(mean - std, 0, 1), np.clip(mean + std, 0, 1), color=color, alpha=0.2)
        if log_x:
            ax.set_xscale("log")
        ax.set_ylim(-0.03, 1.03)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
        ax.set_title(f"{name} ({len(runs)} seed{'s' if len(runs) != 1 else ''})")
        ax.legend(frameon=False, fontsize=8)
    for ax in flat_axes[len(arms):]:
        ax.set_visible(False)
    for row in axes:
        row[0].set_ylabel("multiplicative accuracy")
    if title:
        fig.suptitle(title)
    save_figure(fig, path)


def plot_level_overlay(
    arms: Mapping[str, Sequence[Records]],
    path: str | os.PathLike,
    key: str = "level_accuracy",
    log_x: bool = True,
    title: str | None = None,
) -> None:
    """One panel per level: every arm's mean accuracy (band: +- one std over seeds), to compare arms level by
    level (e.g. MaskGIT, MaskGIT + JEPA, DiT and the U-Net on level 2)."""
    if not arms:
        raise ValueError("plot_level_overlay needs at least one arm")
    levels = sorted({level for runs in arms.values() for level in run_levels(runs[0])})
    fig, axes = subplots(1, len(levels), figsize=(5 * len(levels), 3.8), sharey=True, squeeze=False)
    colors = [f"C{i}" for i in range(len(arms))]
    for ax, level in zip(axes[0], levels, strict=True):
        for color, (name, runs) in zip(colors, arms.items(), strict=True):
            if level not in run_levels(runs[0]):
                continue
            steps, mean, std = mean_curves(runs, level, key)
            ax.plot(steps, mean, color=color, linewidth=1.8, label=name)
            ax.fill_between(steps, np.clip(mean - std, 0, 1), np.clip(mean + std, 0, 1), color=color, alpha=0.15)
        if log_x:
            ax.set_xscale("log")
        ax.set_ylim(-0.03, 1.03)
        ax.set_xlabel("step")
        ax.set_title(f"level {level}")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("multiplicative accuracy")
    axes[0][-1].legend(frameon=False, fontsize=8)
    if title:
        fig.suptitle(title)
    save_figure(fig, path)


def write_comparison_report(
    arms: Mapping[str, Sequence[Records]],
    report_dir: str | os.PathLike,
    thresholds: Sequence[float] = DEFAULT_THRESHOLDS,
    title: str = "Comparison",
    notes: str = "",
) -> str:
    """Write ``README.md`` (table + plot + ``notes``) and ``learning_dynamics.png`` to ``report_dir``; returns the
    markdown."""
    from pathlib import Path

    report_dir = Path(report_dir)
    report_dir.mkdir(parents=True, exist_ok=True)
    plot_comparison(arms, report_dir / "learning_dynamics.png", title=title)
    text = comparison_markdown(arms, thresholds, title=title)
    text += "\n![mean learning dynamics per level, band = +- std over seeds](learning_dynamics.png)\n"
    if notes:
        text += "\n" + notes.strip() + "\n"
    atomic_write_text(report_dir / "README.md", text)
    return text
