"""Paper A's headline per run of this folder, judged by compgen's one criterion, from the runs' logs.

    python results/paper-a-reproduction/headline.py

Reads only this folder: ``summary.json`` (machine, date) and ``logs/*.jsonl`` (the 800-step quickstart runs), and
``cpu-quick-2000-steps/summary.json`` and ``cpu-quick-2000-steps/logs/*.jsonl`` (the earlier 2000-step runs). Per run:
:func:`compgen.evaluation.compare.headline_held` (every level >= 0.9 by both scorers at each of the last three
evaluations, every level's fidelity >= 0.75 at the last), Paper A's own measure (the probes alone, the same
evaluations) and, where a log has no fidelity, the criterion without it (both scorers, the last three evaluations),
labelled as such; the accuracies per level and scorer at those evaluations. Per split: the seeds run and those held by
each measure. Writes ``headline.json``.
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



def split_and_seed(run: str) -> tuple[str, int]:
    """``("H32-trainN", seed)`` of a cell name ``unet__full__okawa-h32-trainN__seedS``."""
    _, _, dataset, seed = run.split("__")
    return dataset.removeprefix("okawa-").replace("h32", "H32"), int(seed.removeprefix("seed"))


def judge(records: list[dict]) -> dict:
    """Every measure of one run, and the accuracies per level and scorer at its last three evaluations."""
    measures = headline_measures(records)
    verdict = {key: measures[key] for key in ("fidelity_logged", "held")}
    verdict["held_both_scorers_without_fidelity"] = measures["held_without_fidelity"]
    verdict |= {key: measures[key] for key in ("held_by_probes_only", "steps", "lowest_accuracy", "fidelity",
                                               "last_three_evaluations")}
    if measures["fidelity_logged"]:
        verdict["fidelity_at_last_three"] = {str(r["step"]): r.get("fidelity_level") for r in records[-3:]}
    return verdict


def judge_folder(folder: Path) -> dict:
    summary = json.loads((folder / "summary.json").read_text())
    runs = {path.stem: judge(read_log(path)) for path in sorted((folder / "logs").glob("*.jsonl"))}
    fidelity = all(run["fidelity_logged"] for run in runs.values())
    key = "held" if fidelity else "held_both_scorers_without_fidelity"
    splits: dict[str, dict] = {}
    for run, verdict in runs.items():
        split, seed = split_and_seed(run)
        entry = splits.setdefault(split, {"seeds": [], "held_seeds": [], "held_by_probes_only_seeds": []})
        entry["seeds"].append(seed)
        if verdict[key]:
            entry["held_seeds"].append(seed)
        if verdict["held_by_probes_only"]:
            entry["held_by_probes_only_seeds"].append(seed)
    for entry in splits.values():
        for name in ("seeds", "held_seeds", "held_by_probes_only_seeds"):
            entry[name].sort()
    return {"criterion": CRITERION if fidelity else WITHOUT_FIDELITY, "probes_only": PROBES_ONLY,
            "machine": summary["machine"], "date": summary["date"], "runs": runs,
            "runs_judged": sorted(runs), "held_runs": sorted(run for run, v in runs.items() if v[key]),
            "held_by_probes_only_runs": sorted(run for run, v in runs.items() if v["held_by_probes_only"]),
            "splits": dict(sorted(splits.items()))}


def main() -> None:
    result = judge_folder(HERE)
    result["precision"] = "bf16 autocast in training, bf16 sampling (each record's sampling.mixed_precision)"
    result["cpu-quick-2000-steps"] = judge_folder(HERE / "cpu-quick-2000-steps")
    (HERE / "headline.json").write_text(json.dumps(result, indent=1) + "\n")
    for name, part in (("800 steps", result), ("2000 steps", result["cpu-quick-2000-steps"])):
        print(f"{name}: {part['criterion']}")
        for split, entry in part["splits"].items():
            print(f"  {split}: held {entry['held_seeds']} of {entry['seeds']}, "
                  f"by the probes alone {entry['held_by_probes_only_seeds']}")


if __name__ == "__main__":
    main()
