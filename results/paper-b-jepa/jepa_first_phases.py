"""The jepa-first run of seed 0 (``choices-jepa-first/``) by phase, and its wall-clock over both of its parts.

    python results/paper-b-jepa/jepa_first_phases.py

Reads ``choices-jepa-first/training_logs/`` and ``choices-jepa-first/logs/`` only. The summaries' diagnostics take
medians over fixed windows of steps; the window 3001-10000 holds records with the cross-entropy off (weight 0, up to
step 8000) and on. Here each window is cut where the weight changes: medians of the cross-entropy and the JEPA loss
over the records at weight 0 and at weight 1 inside it. The run was stopped and resumed from a checkpoint that did
not carry the clock, so its log's clock restarts; ``summary.json`` keeps the last part's clock, and the run's time is
the sum of each part's last evaluation (:func:`compgen.analysis.results_folder.run_wall_clock`, a lower bound).
Writes ``jepa_first_phases.json``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1] / "src"))

from compgen.analysis.results_folder import run_wall_clock  # noqa: E402
from compgen.evaluation.tracker import read_log  # noqa: E402

RUN = "jepa-first__full__okawa-h32-train1__seed0"
WINDOWS = [(1, 1000), (1001, 3000), (3001, 10000)]
"""The summaries' windows that hold records at weight 0."""


def median(records: list[dict], key: str) -> float | None:
    values = [float(r[key]) for r in records if key in r]
    return round(float(np.median(values)), 6) if values else None


def main() -> None:
    folder = HERE / "choices-jepa-first"
    scalars = read_log(folder / "training_logs" / f"{RUN}.jsonl")
    evaluations = read_log(folder / "logs" / f"{RUN}.jsonl")
    windows = []
    for first, last in WINDOWS:
        inside = [r for r in scalars if first <= int(r["step"]) <= last]
        for weight in sorted({float(r["ce_weight"]) for r in inside}):
            part = [r for r in inside if float(r["ce_weight"]) == weight]
            windows.append({"window": [first, last], "ce_weight": weight,
                            "steps": [int(part[0]["step"]), int(part[-1]["step"])], "records": len(part),
                            "ce": median(part, "ce"), "jepa": median(part, "jepa")})
    total, parts = run_wall_clock(evaluations)
    clocks = [float(r["wall_clock_s"]) for r in evaluations]
    result = {"run": RUN, "cross_entropy_off_until_step": max(int(r["step"]) for r in scalars
                                                              if float(r["ce_weight"]) == 0.0),
              "windows_by_weight": windows,
              "wall_clock": {"parts": parts, "total_s": total, "last_part_s": clocks[-1],
                             "part_ends_s": [before for before, after in zip(clocks, clocks[1:], strict=False)
                                             if after < before] + [clocks[-1]],
                             "what": "the sum of each part's last evaluation: a lower bound (a part's time from its "
                                     "last evaluation to its checkpoint is not in the log)"}}
    (HERE / "jepa_first_phases.json").write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
