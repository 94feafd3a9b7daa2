"""Paper A's headline per run of this folder, judged by compgen's one criterion, from the runs' logs.

    python results/paper-a-quick/headline.py

Reads only this folder: ``summary.json`` (machine, date), ``logs/*.jsonl`` and the last three evaluations that
``profiles/quickstart_seed0_typicality_idle.json`` kept (seed 0 rerun with the typicality check and the fidelity).
Per run: :func:`compgen.evaluation.compare.headline_held` (every level >= 0.9 by both scorers at each of the last three
evaluations, every level's fidelity >= 0.75 at the last) where the log has the fidelity; where it has not (every log
under ``logs/``, scored before the fidelity was logged), the criterion without it (both scorers, the last three
evaluations), labelled as such; Paper A's own measure (the probes alone, the same evaluations); the accuracies per
level and scorer at those evaluations. Writes ``headline.json``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1] / "src"))

from compgen.evaluation.compare import MEASURE_TEXTS, headline_measures  # noqa: E402
from compgen.evaluation.tracker import read_log  # noqa: E402

CRITERION, WITHOUT_FIDELITY, PROBES_ONLY = (MEASURE_TEXTS[key]
                                            for key in ("criterion", "without_fidelity", "probes_only"))

TYPICALITY_PROFILE = "profiles/quickstart_seed0_typicality_idle.json"


def judge(records: list[dict]) -> dict:
    """Every measure of one run, and the accuracies per level and scorer at its last three evaluations."""
    measures = headline_measures(records)
    logged = measures["fidelity_logged"]
    return {"fidelity_logged": logged, "criterion": CRITERION if logged else WITHOUT_FIDELITY,
            "held": measures["held"] if logged else measures["held_without_fidelity"]} | {
        key: measures[key] for key in ("held_by_probes_only", "steps", "lowest_accuracy", "fidelity",
                                       "last_three_evaluations")}


def main() -> None:
    summary = json.loads((HERE / "summary.json").read_text())
    runs = {path.stem: judge(read_log(path)) for path in sorted((HERE / "logs").glob("*.jsonl"))}
    profile = json.loads((HERE / TYPICALITY_PROFILE).read_text())
    runs["quickstart_seed0_typicality"] = judge(profile["last_three_evaluations"]) | {"source": TYPICALITY_PROFILE}
    seeds = {name: runs[name] for name in ("quickstart_seed0", "quickstart_seed1", "quickstart_seed2")}
    result = {"criterion": CRITERION, "without_fidelity": WITHOUT_FIDELITY, "probes_only": PROBES_ONLY,
              "machine": summary["machine"], "date": summary["date"],
              "precision": "bf16 autocast in training, bf16 sampling (each record's sampling.mixed_precision)",
              "runs": runs,
              "quickstart_seeds": {"runs": sorted(seeds),
                                   "held_without_fidelity": sorted(n for n, v in seeds.items() if v["held"]),
                                   "held_by_probes_only": sorted(n for n, v in seeds.items()
                                                                 if v["held_by_probes_only"])}}
    (HERE / "headline.json").write_text(json.dumps(result, indent=1) + "\n")
    for name, verdict in runs.items():
        print(f"{name}: held {verdict['held']} ({'with' if verdict['fidelity_logged'] else 'without'} fidelity), "
              f"probes only {verdict['held_by_probes_only']}, lowest {verdict['lowest_accuracy']}, "
              f"fidelity {verdict['fidelity']}")


if __name__ == "__main__":
    main()
