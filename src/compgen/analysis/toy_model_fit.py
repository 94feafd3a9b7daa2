"""The toy model of multiplicative emergence fitted to a real run (Okawa et al. 2023, Sec. 4 and Fig. 7).

    python -m compgen.analysis.toy_model_fit runs/unet/learning_dynamics.jsonl [...] --output results/NAME

Each concept of each class is learned at a step with probability ``p`` (and never forgotten), so the class's accuracy
on that concept is ``chance + (1 - chance) (1 - (1 - p)^t)``; ``p`` is fitted to the run's per-concept probe curve by
least squares (:func:`~compgen.evaluation.emergence.fit_rate`, a grid over ``p``). The toy model's claim is that the
class's *multiplicative* accuracy, which no fit saw, is the product of its concept curves: its sudden rise is the
product of gradual ones. Per level (the mean over its classes) the prediction is compared with the measured
multiplicative accuracy at every evaluation, and the error is the root-mean-square difference. Writes
``toy_model_fit.json`` (the rates, both curves and the errors per run) and ``toy_model_fit_<run>.png`` (overlay).
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..cli import ArgumentParser
from ..evaluation.emergence import concept_curve, fit_concept_rates
from ..evaluation.tracker import own_records, read_log


def toy_model_fit(records: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Fitted rates per class and concept, and per level the measured and predicted multiplicative accuracy at each
    logged step with the root-mean-square error between them (``rmse``) and at the last step (``final_error``); where
    the log holds the pixel scorer's accuracy, the same against it (``measured_pixel``, ``rmse_pixel``,
    ``final_error_pixel``). The rates are fitted to the probes' per-concept curves (the pixel scorer logs none)."""
    if any(not isinstance(r, dict) for r in records):
        raise ValueError("the records are not JSON objects: not a compgen tracker log")
    records = own_records(records)  # a fine-tuning log: the fit is of its own phase, not mixed with its source's
    if not records:
        raise ValueError("need at least one evaluation record")
    if any("concept_accuracy" not in r for r in records):
        raise ValueError("the records hold no per-concept accuracy (concept_accuracy): not a compgen tracker log")
    steps = np.array([r["step"] for r in records], dtype=np.float64)
    space, levels = records[-1]["concept_space"], records[-1]["levels"]
    rates = fit_concept_rates(records)
    predicted = {}
    for name in levels:
        curve = np.ones_like(steps)
        for concept, values in space.items():
            curve *= concept_curve(steps, rates[name][concept], 1.0 / len(values))
        predicted[name] = curve
    by_level: dict[str, dict[str, Any]] = {}
    for level in sorted(set(levels.values())):
        members = sorted(name for name, lv in levels.items() if lv == level)
        measured = np.mean([[r["accuracy"][name] for r in records] for name in members], axis=0)
        model = np.mean([predicted[name] for name in members], axis=0)
        by_level[str(level)] = {
            "classes": members, "measured": [round(float(v), 4) for v in measured],
            "predicted": [round(float(v), 4) for v in model],
            "rmse": round(float(np.sqrt(np.mean((model - measured) ** 2))), 4),
            "final_error": round(float(model[-1] - measured[-1]), 4)}
        if all("pixel_accuracy" in r for r in records):  # the same prediction against the independent scorer
            pixel = np.mean([[r["pixel_accuracy"][name] for r in records] for name in members], axis=0)
            by_level[str(level)].update(
                measured_pixel=[round(float(v), 4) for v in pixel],
                rmse_pixel=round(float(np.sqrt(np.mean((model - pixel) ** 2))), 4),
                final_error_pixel=round(float(model[-1] - pixel[-1]), 4))
        if all("object_rate" in r for r in records):  # a sample without one valid object is wrong on every concept
            by_level[str(level)]["object_rate"] = [
                round(float(np.mean([r["object_rate"][name] for name in members])), 4) for r in records]
    return {"steps": [int(s) for s in steps], "method": "least squares per class and concept (grid over p)",
            "rates": {name: {c: float(f"{p:.4g}") for c, p in r.items()} for name, r in rates.items()},
            "levels": by_level}


def plot_toy_model_fit(fit: dict[str, Any], path: str | os.PathLike, title: str | None = None) -> None:
    """Measured (solid: probes, dotted: pixel scorer) against predicted (dashed) multiplicative accuracy per level,
    the errors in the legend."""
    from ..evaluation.figure_style import level_color, save_figure, subplots

    fig, ax = subplots(figsize=(6, 4))
    for level, row in fit["levels"].items():
        color = level_color(int(level))
        ax.plot(fit["steps"], row["measured"], color=color, linewidth=1.8, label=f"level {level} measured")
        if "measured_pixel" in row:
            ax.plot(fit["steps"], row["measured_pixel"], color=color, linestyle=":", linewidth=1.4,
                    label=f"level {level} measured, pixel scorer")
        pixel = f", pixel {row['rmse_pixel']:.3f}" if "rmse_pixel" in row else ""
        ax.plot(fit["steps"], row["predicted"], color=color, linestyle="--", linewidth=1.4,
                label=f"level {level} toy model (RMSE probes {row['rmse']:.3f}{pixel})")
    ax.set(xlabel="step", ylabel="multiplicative accuracy", ylim=(-0.02, 1.02),
           title=title or "toy model (product of fitted concept curves) vs measured")
    ax.legend(frameon=False, fontsize=7)
    save_figure(fig, path)


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("logs", nargs="+", type=Path, help="learning-dynamics logs (learning_dynamics.jsonl)")
    parser.add_argument("--output", required=True, type=Path, help="folder for toy_model_fit.json and the plots")
    args = parser.parse_args(argv)
    names: dict[str, Path] = {}
    for log in args.logs:  # every log is named and read before anything is written
        name = log.name.removesuffix(".jsonl")
        name = log.parent.name if name == "learning_dynamics" else name
        if name in names:
            parser.error(f"two logs would be fitted under one name, {name!r} ({names[name]} and {log}): fit them "
                         "into separate --output folders, or rename one")
        names[name] = log
    fits = {}
    for name, log in names.items():
        if not log.is_file():
            parser.error(f"{log}: no such log")
        try:
            fits[name] = toy_model_fit(read_log(log))
        except (ValueError, KeyError, TypeError) as error:  # empty, torn, foreign: named, before any output
            parser.error(f"{log}: cannot fit the toy model ({type(error).__name__}: {error})")
    args.output.mkdir(parents=True, exist_ok=True)
    for name, fit in fits.items():
        plot_toy_model_fit(fit, args.output / f"toy_model_fit_{name}.png", title=name)
        print(name, {level: row["rmse"] for level, row in fit["levels"].items()})
    (args.output / "toy_model_fit.json").write_text(json.dumps(fits, indent=1) + "\n")
    return fits


if __name__ == "__main__":
    main()
