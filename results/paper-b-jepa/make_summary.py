"""The JEPA comparison's summary.json and curves, from the machine folders the results-folder command wrote.

    python results/paper-b-jepa/make_summary.py   # reads cpu/, choices/ and every choices-*/ folder
                                                  # (summary.json, logs, training_logs),
                                                  # mechanism/ and every mechanism-*/ folder

Per arm (MaskGIT, MaskGIT + JEPA, and any JEPA-choice arm) and scorer: every level's end, peak (with its step) and
first step at 0.9 per seed; Paper B's precondition (plain MaskGIT's level 2 rises, then falls towards 0: its peak, its
end, and the end's share of the peak) and its effect (the JEPA arm's level 2 against MaskGIT's, at the end and at the
peak, for the main arms and for every choice run in both objectives); the JEPA term's diagnostics over windows of
steps (medians of the cross-entropy, the JEPA loss, the gradient-norm ratio on the shared blocks and the smallest
target spread); each cell's wall-clock; the mechanism measures of the final models. Figures: level 2 (and levels 0,
1) of every cell against the step, both scorers.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1] / "src"))

from compgen.analysis.results_folder import run_wall_clock  # noqa: E402
from compgen.analysis.training_diagnostics import summarize_diagnostics  # noqa: E402
from compgen.evaluation.figure_style import level_color, save_figure, subplots  # noqa: E402
from compgen.evaluation.tracker import read_log  # noqa: E402

SCORERS = {"probes": "level_accuracy", "pixel statistics": "pixel_level_accuracy"}
PAPER_B = {
    "source": "Farid et al. 2025, Shapes2D, MaskGIT and MaskGIT + JEPA curves on its project page (maskgit.png, "
              "maskgit_jepa.png), log-scaled step axis, positions read off the plots (one run each)",
    "maskgit": {"training_classes_learned_by_step": 1000, "level2_peak": 0.14, "level2_peak_step": 3000,
                "level2_near_zero_from_step": 20000},
    "maskgit_jepa": {"every_class_below_0.1_until_step": 8000, "level2_peak": 0.65, "level2_peak_step": 20000,
                     "level2_end": 0.36, "end_step": 80000},
}
SETUP = {  # the study's cells (studies/paper_b_jepa.yaml, the cpu-long preset of examples/train_maskgit_jepa.py)
    "steps": 20000, "hidden_size": 128, "num_layers": 4, "num_heads": 4, "train_batch_size": 64,
    "learning_rate": 3e-4, "lr_warmup_steps": 1000, "jepa_weight": 0.6, "jepa_layers": [2, 3, 4],
    "jepa_momentum": [0.996, 1.0], "eval_images_per_class": 50,
}
WINDOWS = [(1, 1000), (1001, 3000), (3001, 10000), (10001, 20000), (20001, 80000)]
NEAR_ZERO = 0.05
PAIRED_STEPS = 2000  # every cell's levels this many cross-entropy steps in: a delayed arm against a fresh run
FOLDERS = ("cpu", "choices", *sorted(path.name for path in HERE.glob("choices-*") if path.is_dir()))
"""``paper_b_jepa.yaml``, then ``paper_b_jepa_choices.yaml``: one results folder per arm run on its own, each found by
its name, so a new arm's folder needs no registration here."""


def arm_of(cell: str) -> str:
    return cell.split("__")[0]


def level_numbers(records: list[dict], scorer_key: str, level: str) -> dict:
    values = [float(r[scorer_key][level]) for r in records]
    steps = [int(r["step"]) for r in records]
    peak = max(range(len(values)), key=values.__getitem__)
    first = next((s for s, v in zip(steps, values, strict=True) if v >= 0.9), None)
    return {"end": round(values[-1], 4), "end_step": steps[-1], "peak": round(values[peak], 4),
            "peak_step": steps[peak], "first_step_0.9": first,
            "end_share_of_peak": round(values[-1] / values[peak], 4) if values[peak] > 0 else None}


def level2_difference(jepa: dict, plain: dict) -> dict:
    """A JEPA arm's level 2 above its plain MaskGIT arm's, seed by seed, at the end and at the peak, per scorer."""
    return {scorer: {key: [round(j - p, 4) for j, p in zip(jepa["level2"][scorer][key], plain["level2"][scorer][key],
                                                           strict=False)]
                     for key in ("end", "peak")} for scorer in SCORERS}


def plot_curves(cells: dict[str, list[dict]], path: Path) -> None:
    fig, axes = subplots(2, 3, figsize=(13, 6.5), sharex=True, sharey=True)
    styles = {"maskgit": "-", "maskgit-jepa": "--"}
    for row, (scorer, key) in enumerate(SCORERS.items()):
        for column, level in enumerate(("0", "1", "2")):
            ax = axes[row][column]
            for cell, records in sorted(cells.items()):
                arm, seed = arm_of(cell), int(cell.rsplit("seed", 1)[1])
                ax.plot([r["step"] for r in records], [r[key][level] for r in records],
                        linestyle=styles.get(arm, ":"), marker="osD^"[seed % 4], markersize=3,
                        color=level_color(int(level)) if arm == "maskgit" else None,
                        alpha=1.0 if arm != "maskgit" else 1.0 - 0.35 * seed, label=f"{arm}, seed {seed}")
            ax.set(xscale="log", ylim=(-0.03, 1.03), title=f"level {level}, {scorer}")
            ax.grid(alpha=0.3)
            if row == 1:
                ax.set_xlabel("step")
    axes[0][0].legend(frameon=False, fontsize=7)
    save_figure(fig, path)


def main() -> None:
    machine = json.loads((HERE / "cpu" / "summary.json").read_text())
    summary: dict = {"paper_b": PAPER_B, "setup": SETUP, "machine": machine["machine"], "date": machine["date"],
                     "near_zero": NEAR_ZERO, "cells": {}, "arms": {}}
    runs = {}  # cell name -> (its machine folder, its run entry): the main study's, then the choice arms'
    for folder in FOLDERS:
        if (HERE / folder / "summary.json").is_file():
            part = json.loads((HERE / folder / "summary.json").read_text())
            runs |= {name: (HERE / folder, run) for name, run in part["runs"].items()}
            summary.setdefault("folders", {})[folder] = {"machine": part["machine"], "date": part["date"]}
    cells = {name: read_log(folder / run["log"]) for name, (folder, run) in runs.items()}
    for name, records in sorted(cells.items()):
        clock, parts = run_wall_clock(records)  # a run resumed from an older checkpoint: the sum of its parts
        entry = {"last_step": int(records[-1]["step"]),
                 "wall_clock_s": records[-1].get("wall_clock_s") if parts == 1 else clock,
                 "evaluations": len(records), "levels": {}}
        for scorer, key in SCORERS.items():
            entry["levels"][scorer] = {level: level_numbers(records, key, level) for level in ("0", "1", "2")}
        folder, run = runs[name]
        scalars = read_log(folder / run["training_log"]) if run.get("training_log") else []
        # the cross-entropy's delay (--cross_entropy_delay_steps), read from the log: its last step at weight 0
        delay = max((int(r["step"]) for r in scalars if r.get("ce_weight") == 0.0), default=0)
        record = next((r for r in records if int(r["step"]) == delay + PAIRED_STEPS), None)
        if record is not None:
            entry[f"at_{PAIRED_STEPS}_cross_entropy_steps"] = {"step": delay + PAIRED_STEPS} | {
                scorer: {level: round(float(record[key][level]), 4) for level in ("0", "1", "2")}
                for scorer, key in SCORERS.items()}
        if scalars:
            if any("grad_norm_ratio" in r for r in scalars):
                entry["diagnostics"] = [row for row in summarize_diagnostics(scalars, WINDOWS) if row["records"]]
        summary["cells"][name] = entry
    for arm in sorted({arm_of(name) for name in cells}):
        names = sorted(name for name in cells if arm_of(name) == arm)
        summary["arms"][arm] = {
            "cells": names,
            "level2": {scorer: {key: [summary["cells"][n]["levels"][scorer]["2"][key] for n in names]
                                for key in ("end", "peak", "peak_step", "first_step_0.9")}
                       for scorer in SCORERS},
        }
    # Paper B's precondition: plain MaskGIT's level 2 rises, then falls towards 0 (its end near 0, or far below its
    # peak); and its effect: the JEPA arm's level 2 above MaskGIT's, seed by seed.
    if "maskgit" in summary["arms"]:
        precondition = {}
        for scorer in SCORERS:
            ends, peaks = (summary["arms"]["maskgit"]["level2"][scorer][k] for k in ("end", "peak"))
            precondition[scorer] = {"falls_to_near_zero": [end <= NEAR_ZERO for end in ends],
                                    "end_below_half_of_peak": [end < 0.5 * peak for end, peak in
                                                               zip(ends, peaks, strict=True)]}
        summary["precondition"] = precondition
    arms = summary["arms"]
    if {"maskgit", "maskgit-jepa"} <= set(arms):
        summary["effect_jepa_minus_maskgit"] = level2_difference(arms["maskgit-jepa"], arms["maskgit"])
    # Each choice run in both objectives (maskgit-X against jepa-X: visible blocks, label smoothing, 8 layers).
    summary["choice_effects_jepa_minus_maskgit"] = {
        choice: level2_difference(arms[f"jepa-{choice}"], arms[f"maskgit-{choice}"])
        for choice in sorted(a.removeprefix("maskgit-") for a in arms if a.startswith("maskgit-"))
        if f"jepa-{choice}" in arms}
    records = {}  # the main study's six final models, then the choice arms'
    for folder in ("mechanism", *sorted(path.name for path in HERE.glob("mechanism-*") if path.is_dir())):
        if (HERE / folder / "mechanism.json").is_file():
            records |= json.loads((HERE / folder / "mechanism.json").read_text())
    if records:
        summary["mechanism"] = {label: {"polysemantic_heads_per_layer":
                                        record["polysemanticity"]["polysemantic_heads_per_layer"],
                                        "polysemantic_heads": record["polysemanticity"]["polysemantic_heads"],
                                        "effective_concepts_per_layer":
                                        record["polysemanticity"]["effective_concepts_per_layer"],
                                        "circuit_overlap_mean": record["circuit_overlap"]["mean"],
                                        "circuit_overlap_per_layer": record["circuit_overlap"]["per_layer"],
                                        "circuit_overlap_pairs": record["circuit_overlap"]["pairs"]}
                                for label, record in records.items()}
    (HERE / "figures").mkdir(exist_ok=True)
    plot_curves(cells, HERE / "figures" / "levels.png")
    (HERE / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")


if __name__ == "__main__":
    main()
