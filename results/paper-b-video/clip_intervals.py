"""How many clips each level's score at the last evaluation rests on, with its Wilson interval, from the logs.

    python results/paper-b-video/clip_intervals.py

Reads ``factorized/logs/*.jsonl`` (the factorized study's evaluations). Per run and level at its last evaluation: the
clips scored (clips per class times the level's classes), the clips right by each scorer (the level's accuracy times
the clips) and the 95% Wilson interval of that share (:func:`compgen.evaluation.statistics.share_interval`). Writes
``clip_intervals.json``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1] / "src"))

from compgen.evaluation.compare import SCORERS  # noqa: E402
from compgen.evaluation.statistics import share_interval  # noqa: E402
from compgen.evaluation.tracker import read_log  # noqa: E402

SCORER_NAMES = {"probes": "probes", "pixel statistics": "pixels and motion"}
"""The clip scorers under the keys the image scorers share in the logs."""


def main() -> None:
    runs = {}
    for log in sorted((HERE / "factorized" / "logs").glob("*.jsonl")):
        last = read_log(log)[-1]
        per_class = last["num_clips_per_class"]  # clips scored per class
        levels = {}
        for level in sorted(last["level_accuracy"]):
            clips = sum(per_class[name] for name, value in last["levels"].items() if str(value) == level)
            row = {"clips": clips}
            for scorer, key in SCORERS.items():
                right = round(float(last[key][level]) * clips)
                if abs(right - float(last[key][level]) * clips) > 1e-6:
                    raise ValueError(f"{log.name}: level {level}'s {key} is no whole number of {clips} clips")
                row[SCORER_NAMES[scorer]] = {"right": right, "interval_95": share_interval(right, clips)}
            levels[level] = row
        runs[log.stem] = {"step": int(last["step"]), "clips_per_class": per_class, "levels": levels}
    (HERE / "clip_intervals.json").write_text(json.dumps({"runs": runs}, indent=1) + "\n")
    for name, run in runs.items():
        print(name, run["step"], {level: (row["probes"]["right"], row["clips"], row["probes"]["interval_95"])
                                  for level, row in run["levels"].items()})


if __name__ == "__main__":
    main()
