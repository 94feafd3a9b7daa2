"""A run's training scalars (``training_log.jsonl``) under its accuracy curves: what an auxiliary objective does.

MaskGIT + JEPA logs, at every logging interval, the cross-entropy, the JEPA loss per layer, the spread of the JEPA
targets (the collapse check) and the ratio of the two objectives' gradient norms on the transformer blocks they share
(:class:`~compgen.training.tasks.maskgit.MaskGITTask`). This module draws them beneath the per-level accuracy by both
scorers on one log-scaled step axis, and summarises them over windows of steps for results folders.

    python -m compgen.analysis.training_diagnostics RUN_DIR --output RUN_DIR/diagnostics.png
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..cli import ArgumentParser
from ..evaluation.figure_style import level_color, save_figure, subplots
from ..evaluation.tracker import read_log

TRAINING_LOG = "training_log.jsonl"


def _series(scalars: Sequence[dict[str, Any]], key: str) -> tuple[np.ndarray, np.ndarray]:
    rows = [(r["step"], r[key]) for r in scalars if key in r]
    return np.array([s for s, _ in rows], dtype=float), np.array([v for _, v in rows], dtype=float)


def layer_keys(scalars: Sequence[dict[str, Any]], prefix: str) -> list[str]:
    """The per-layer keys ``<prefix><layer>`` of a training log, by layer."""
    keys = {key for record in scalars for key in record if key.startswith(prefix)}
    return sorted(keys, key=lambda key: int(key.removeprefix(prefix)))


def plot_training_diagnostics(records: Sequence[dict[str, Any]], scalars: Sequence[dict[str, Any]],
                              path: str | os.PathLike, title: str | None = None) -> None:
    """Per-level accuracy by both scorers (top); the losses (middle); the gradient-norm ratio and the target spread
    (bottom), on one log-scaled step axis."""
    if not scalars:
        raise ValueError("no training scalars to plot")
    fig, (ax_acc, ax_loss, ax_grad) = subplots(3, 1, figsize=(7, 8), sharex=True)
    if records:
        steps = np.array([r["step"] for r in records], dtype=float)
        for level in sorted(records[0]["level_accuracy"], key=int):
            color = level_color(int(level))
            ax_acc.plot(steps, [r["level_accuracy"][level] for r in records], color=color, marker="o", markersize=3,
                        label=f"level {level}, probes")
            if "pixel_level_accuracy" in records[0]:
                ax_acc.plot(steps, [r["pixel_level_accuracy"][level] for r in records], color=color, linestyle="--",
                            label=f"level {level}, pixel scorer")
        ax_acc.legend(frameon=False, fontsize=7, ncol=2)
    ax_acc.set(ylabel="accuracy", ylim=(-0.03, 1.03), title=title or "accuracy per level and training diagnostics")
    for key, style in (("ce", "-"), ("jepa", "-")):
        x, y = _series(scalars, key)
        if len(x):
            ax_loss.plot(x, y, linestyle=style, linewidth=1.6, label=key)
    for key in layer_keys(scalars, "jepa_layer_"):
        x, y = _series(scalars, key)
        ax_loss.plot(x, y, linewidth=0.8, alpha=0.7, label=key.replace("_", " "))
    ax_loss.set(ylabel="loss", yscale="log")
    ax_loss.legend(frameon=False, fontsize=7, ncol=2)
    x, y = _series(scalars, "grad_norm_ratio")
    if len(x):
        ax_grad.plot(x, y, color="black", linewidth=1.2, label="|grad JEPA| / |grad CE| (shared blocks)")
        if (y > 0).all():
            ax_grad.set_yscale("log")
    ax_grad.set(ylabel="gradient-norm ratio", xlabel="step")
    spread_axis = ax_grad.twinx()
    for key in layer_keys(scalars, "jepa_target_spread_"):
        x, y = _series(scalars, key)
        spread_axis.plot(x, y, linestyle=":", linewidth=1, label=key.replace("jepa_target_", "").replace("_", " "))
    spread_axis.set(ylabel="target spread", ylim=(0, 1.2))
    lines = ax_grad.get_legend_handles_labels()
    more = spread_axis.get_legend_handles_labels()
    ax_grad.legend(lines[0] + more[0], lines[1] + more[1], frameon=False, fontsize=7)
    steps = np.array([r["step"] for r in scalars], dtype=float)
    if (steps > 0).any():
        ax_grad.set_xscale("log")
        ax_grad.set_xlim(left=steps[steps > 0].min())
    for ax in (ax_acc, ax_loss, ax_grad):
        ax.grid(alpha=0.3)
    save_figure(fig, path)


def effective_ratio(record: dict[str, Any]) -> float | None:
    """The JEPA term's gradient norm over the *weighted* cross-entropy's (``grad_norm_ratio / ce_weight``; the logged
    ratio is against the unweighted cross-entropy), ``None`` where the record has no ratio; infinite at weight 0."""
    if "grad_norm_ratio" not in record:
        return None
    weight = float(record.get("ce_weight", 1.0))
    return float(record["grad_norm_ratio"]) / weight if weight > 0 else float("inf")


def summarize_diagnostics(scalars: Sequence[dict[str, Any]], windows: Sequence[tuple[int, int]]
                          ) -> list[dict[str, Any]]:
    """Medians of the diagnostics over each ``(first_step, last_step)`` window: the cross-entropy, the JEPA loss, the
    gradient-norm ratio, the smallest per-layer target spread and, for a run whose cross-entropy is weighted
    (``--cross_entropy_warmup_steps`` or ``--cross_entropy_delay_steps``, ``ce_weight`` in its log), the *effective*
    ratio: the JEPA term's gradient over the weighted cross-entropy's, what the optimizer's step is made of
    (:func:`effective_ratio`; records at weight 0 have none and are counted)."""
    rows = []
    spread_keys = layer_keys(scalars, "jepa_target_spread_")
    for first, last in windows:
        inside = [r for r in scalars if first <= r["step"] <= last]
        row: dict[str, Any] = {"steps": [first, last], "records": len(inside)}
        for key in ("ce", "jepa", "grad_norm_ratio"):
            values = [r[key] for r in inside if key in r]
            if values:
                row[key] = round(float(np.median(values)), 6)
        effective = [value for r in inside if (value := effective_ratio(r)) is not None]
        if effective and any("ce_weight" in r for r in inside):
            # Records with the cross-entropy off (weight 0: the JEPA term alone) have no ratio; they are counted.
            finite = [value for value in effective if np.isfinite(value)]
            if finite:
                row["effective_grad_norm_ratio"] = round(float(np.median(finite)), 6)
            if len(finite) < len(effective):
                row["cross_entropy_off_records"] = len(effective) - len(finite)
        spreads = [min(r[k] for k in spread_keys if k in r) for r in inside if any(k in r for k in spread_keys)]
        if spreads:
            row["min_target_spread"] = round(float(np.median(spreads)), 4)
        rows.append(row)
    return rows


def main(argv: Sequence[str] | None = None) -> None:
    parser = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run_dir", help="a run's output directory (training_log.jsonl, learning_dynamics.jsonl)")
    parser.add_argument("--output", required=True, help="the PNG to write")
    parser.add_argument("--title", default=None)
    args = parser.parse_args(argv)
    run_dir = Path(args.run_dir)
    if not (run_dir / TRAINING_LOG).is_file():
        parser.error(f"{run_dir} holds no {TRAINING_LOG} (runs log their training scalars there)")
    evaluations = run_dir / "learning_dynamics.jsonl"
    records = read_log(evaluations) if evaluations.is_file() else []
    plot_training_diagnostics(records, read_log(run_dir / TRAINING_LOG), args.output, args.title)
    print(args.output)


if __name__ == "__main__":
    main()
