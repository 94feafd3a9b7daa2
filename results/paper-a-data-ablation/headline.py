"""Paper A's headline per run of this folder, judged by compgen's criterion as far as the logs allow.

    python results/paper-a-data-ablation/headline.py

Reads only this folder: ``summary.json`` (machine, date) and ``logs/*.jsonl``. These logs were scored before the
colour-strength fidelity was logged, so :func:`compgen.evaluation.compare.headline_held`'s fidelity bar cannot be
applied: each run is judged by the criterion without it (every level >= 0.9 by both scorers at each of the last three
evaluations), labelled as such, and by Paper A's own measure (the probes alone, the same evaluations). Per data
variant: the seeds run and those held by each measure. Writes ``headline.json``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1] / "src"))

from compgen.evaluation.compare import MEASURE_TEXTS, headline_measures  # noqa: E402
from compgen.evaluation.tracker import read_log  # noqa: E402

CRITERION, PROBES_ONLY = MEASURE_TEXTS["without_fidelity"], MEASURE_TEXTS["probes_only"]  # these logs have no fidelity


def judge(records: list[dict]) -> dict:
    """The measures of one run without the fidelity (these logs have none), and its last three evaluations."""
    measures = headline_measures(records)
    return {"fidelity_logged": measures["fidelity_logged"], "held": measures["held_without_fidelity"]} | {
        key: measures[key] for key in ("held_by_probes_only", "steps", "lowest_accuracy", "last_three_evaluations")}


def main() -> None:
    summary = json.loads((HERE / "summary.json").read_text())
    runs = {path.stem: judge(read_log(path)) for path in sorted((HERE / "logs").glob("*.jsonl"))}
    variants: dict[str, dict] = {}
    for run, verdict in runs.items():
        _, _, data, seed = run.split("__")
        entry = variants.setdefault(data, {"seeds": [], "held_seeds": [], "held_by_probes_only_seeds": []})
        entry["seeds"].append(int(seed.removeprefix("seed")))
        if verdict["held"]:
            entry["held_seeds"].append(int(seed.removeprefix("seed")))
        if verdict["held_by_probes_only"]:
            entry["held_by_probes_only_seeds"].append(int(seed.removeprefix("seed")))
    for entry in variants.values():
        for key in ("seeds", "held_seeds", "held_by_probes_only_seeds"):
            entry[key].sort()
    result = {"criterion": CRITERION, "probes_only": PROBES_ONLY, "machine": summary["machine"],
              "date": summary["date"], "precision": "bf16 autocast (the preset's mixed_precision auto on this CPU)",
              "runs": runs, "variants": dict(sorted(variants.items()))}
    (HERE / "headline.json").write_text(json.dumps(result, indent=1) + "\n")
    for data, entry in result["variants"].items():
        print(f"{data}: held {entry['held_seeds']} of {entry['seeds']}, "
              f"by the probes alone {entry['held_by_probes_only_seeds']}")


if __name__ == "__main__":
    main()
