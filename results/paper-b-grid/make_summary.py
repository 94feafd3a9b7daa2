"""The grid's summary.json: Paper B's numbers beside the grid's, per finding, from the machines' results folders.

    python results/paper-b-grid/make_summary.py      # reads h100/summary.json and cpu/summary.json, writes summary.json

Per arm (machine, model, conditioning) and scorer at level 2: each seed's final and peak accuracy, the mean and sample
standard deviation (from the machine folder's ``arms``), how abruptly level 2 rose (each seed's last evaluation below
0.1, its first at or above 0.9, the largest rise between two consecutive evaluations) and each seed's best accuracy
on 011 and 111 at any evaluation; per seed the evaluation steps and those at which the scorers disagreed by more
than 10 points on some class (``scorer_disagreements`` in the log).
"""

from __future__ import annotations

import json
from pathlib import Path

from compgen.evaluation.tracker import read_log

HERE = Path(__file__).resolve().parent
SCORERS = {"probes": "level_accuracy", "pixel statistics": "pixel_level_accuracy"}

PAPER_B = {
    "source": "Farid et al. 2025, Shapes2D, level 2 (class 111) read from the project page's curves "
              "(see the repository's reference notes)",
    "maskgit": {"end": [0.0, 0.02], "peak": 0.14},
    "maskgit-jepa": {"end": [0.36, 0.5], "peak": 0.65},
    "dit-vq": {"end": 0.84, "peak": 0.98, "rise": "abrupt"},
    "dit-kl": {"end": 0.93, "rise": "gradual"},
    "dit conditioning": {"full": 1.0, "full+dropout": {"peak": 0.4, "end": 0.0},
                         "quantized": {"peak": 0.9, "end": 0.53}, "quantized+dropout": 0.0},
}


def rise(records: list[dict], key: str) -> dict:
    """Level 2's last evaluation below 0.1 before it first reached 0.9, that first step, and the largest rise."""
    values = [(r["step"], r[key]["2"]) for r in records]
    first_high = next((step for step, value in values if value >= 0.9), None)
    below = [step for step, value in values if value < 0.1 and (first_high is None or step < first_high)]
    jumps = [b - a for (_, a), (_, b) in zip(values, values[1:], strict=False)]
    return {"last_step_below_0.1": below[-1] if below else None, "first_step_0.9": first_high,
            "largest_rise": round(max(jumps), 4) if jumps else None}


def machine_part(folder: Path) -> dict:
    summary = json.loads((folder / "summary.json").read_text())
    part = {"machine": summary["machine"], "date": summary["date"], "arms": {}}
    for arm, entry in summary["arms"].items():
        runs = entry["runs"]
        records = [read_log(folder / summary["runs"][run]["log"]) for run in runs]
        # Per seed, every evaluation and those at which the two scorers disagreed on some class
        part["arms"][arm] = {"runs": runs, "evaluation_steps": [[r["step"] for r in run] for run in records],
                             "scorer_disagreement_steps": [[r["step"] for r in run if r.get("scorer_disagreements")]
                                                           for run in records]}
        for scorer, key in SCORERS.items():
            level2 = entry[scorer]["2"]
            part["arms"][arm][scorer] = {
                "final": level2["final"], "final_mean": level2["final_mean"], "final_sd": level2["final_sd"],
                "peak": level2["best"], "peak_mean": level2["best_mean"], "peak_sd": level2["best_sd"],
                "rise": [rise(r, key) for r in records],
                "peak_011_111": [{cls: max(r[key.replace("level_", "")][cls] for r in run) for cls in ("011", "111")}
                                 for run in records]}
    return part


def main() -> None:
    summary = {"paper_b": PAPER_B, "chance_multiplicative": 0.125, "parts": {}}
    for name in ("h100", "cpu"):
        if (HERE / name / "summary.json").is_file():
            summary["parts"][name] = machine_part(HERE / name)
    verdicts = HERE / "verdicts.json"
    if verdicts.is_file():
        summary["verdicts"] = json.loads(verdicts.read_text())
    (HERE / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    print(f"wrote {HERE / 'summary.json'}: parts {sorted(summary['parts'])}")


if __name__ == "__main__":
    main()
