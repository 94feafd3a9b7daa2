"""The ten-seed distribution of Paper A's headline, from the folders the results-folder command wrote.

    python results/paper-a-seeds/make_summary.py FOLDER [FOLDER ...]   # e.g. cpu-before/ (its summary.json, logs/)

Per arm (a model of studies/paper_a_seeds.yaml: bf16, fp32, or a candidate preset) and seed: whether the headline holds
(compgen.evaluation.compare.headline_held: every level >= 0.9 by both scorers at each of the last three evaluations,
every level's fidelity >= 0.75 at the last), each level's lowest accuracy over those evaluations and its fidelity, the
classes below 0.9 by either scorer with the concepts the pixel scorer rejects in them (its per-concept accuracy, where
the log has it), and the run's wall-clock; per arm the share of seeds held, the highest level's lowest accuracy at the
worst seed and its mean over the seeds, and the wall-clock's range; across the arms that ran seeds 0-9, which arms
hold each seed. Written to each folder's distribution.json and printed as a table.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1] / "src"))

from compgen.evaluation.compare import headline_held  # noqa: E402
from compgen.evaluation.tracker import read_log  # noqa: E402


def arm_of(run: str) -> str:
    """The model, and its dataset where that is not the headline split (``film-other-splits on okawa-h32-train2``)."""
    model, _, dataset, _ = run.split("__")
    return model if dataset == "okawa-h32-train1" else f"{model} on {dataset}"


def seed_of(run: str) -> int:
    return int(run.rsplit("seed", 1)[1])


def failing_classes(records: list[dict]) -> dict[str, dict]:
    """Classes below 0.9 by either scorer at the last record, with each scorer's concept accuracies there and, where
    logged, the pixel scorer's per-concept accuracy at every evaluation (when a concept went wrong)."""
    record, found = records[-1], {}
    for name, probes in record["accuracy"].items():
        pixel = record.get("pixel_accuracy", {}).get(name, probes)
        if min(probes, pixel) < 0.9:
            entry = {"probes": round(probes, 4), "pixel statistics": round(pixel, 4),
                     "fidelity": record.get("fidelity", {}).get(name)}
            for key, label in (("concept_accuracy", "probes by concept"),
                               ("pixel_concept_accuracy", "pixel statistics by concept")):
                if name in record.get(key, {}):
                    entry[label] = {c: round(v, 4) for c, v in record[key][name].items()}
            if all(name in r.get("pixel_concept_accuracy", {}) for r in records):
                entry["pixel statistics by concept over the run"] = {
                    "steps": [r["step"] for r in records],
                    **{c: [round(r["pixel_concept_accuracy"][name][c], 4) for r in records]
                       for c in record["pixel_concept_accuracy"][name]}}
            found[name] = entry
    return found


def distribution(folder: Path) -> dict:
    summary = json.loads((folder / "summary.json").read_text())
    arms: dict[str, dict] = {}
    for run, entry in sorted(summary["runs"].items(), key=lambda item: (arm_of(item[0]), seed_of(item[0]))):
        records = read_log(folder / entry["log"])
        held = headline_held(records)
        row = {"seed": seed_of(run), "held": held["held"], "last_step": records[-1]["step"],
               "lowest_accuracy": {k: round(v, 4) for k, v in held["lowest_accuracy"].items()},
               "fidelity": held["fidelity"], "failing_classes": failing_classes(records),
               "wall_clock_s": entry.get("wall_clock_s")}
        arms.setdefault(arm_of(run), {"seeds": []})["seeds"].append(row)
    for arm in arms.values():
        seeds = arm["seeds"]
        arm["held"] = f"{sum(s['held'] for s in seeds)} of {len(seeds)}"
        accurate = [s["seed"] for s in seeds if min(s["lowest_accuracy"].values()) >= 0.9]
        arm["accuracy_part_held"] = {"seeds": accurate, "share": f"{len(accurate)} of {len(seeds)}"}
        top = max(seeds[0]["lowest_accuracy"], key=int)  # the highest level (2 on H32): how far the seeds get
        arm["top_level_lowest_accuracy"] = {"level": top, "worst_seed": min(s["lowest_accuracy"][top] for s in seeds),
                                            "mean_over_seeds": round(sum(s["lowest_accuracy"][top] for s in seeds)
                                                                     / len(seeds), 4)}
        times = [s["wall_clock_s"] for s in seeds if s["wall_clock_s"]]
        arm["wall_clock_s"] = [min(times), max(times)] if times else None
    return {"folder": folder.name, "machine": summary["machine"], "date": summary["date"], "arms": arms,
            "seeds_across_arms": seeds_across_arms(arms)}


def seeds_across_arms(arms: dict[str, dict]) -> dict | None:
    """Over the arms that ran seeds 0-9 on the headline split: per seed, the arms that hold it, and how many of those
    arms hold a seed (does a seed hold or fail whatever the change, or do the changes move which seeds hold?)."""
    ten = {name: {s["seed"]: s["held"] for s in arm["seeds"]} for name, arm in arms.items()
           if " on " not in name and sorted(s["seed"] for s in arm["seeds"]) == list(range(10))}
    if len(ten) < 2:
        return None
    by_seed = {seed: sorted(name for name, held in ten.items() if held[seed]) for seed in range(10)}
    return {"arms": sorted(ten), "held_by_seed": by_seed,
            "arms_holding_each_seed": {seed: f"{len(names)} of {len(ten)}" for seed, names in by_seed.items()},
            "share_held_per_arm": {name: sum(held.values()) for name, held in sorted(ten.items())},
            "runs_held": f"{sum(sum(held.values()) for held in ten.values())} of {10 * len(ten)}"}


def main() -> None:
    for folder in map(Path, sys.argv[1:]):
        result = distribution(folder)
        (folder / "distribution.json").write_text(json.dumps(result, indent=1) + "\n")
        for name, arm in result["arms"].items():
            print(f"{folder.name} {name}: held {arm['held']}, wall-clock {arm['wall_clock_s']} s")
            for seed in arm["seeds"]:
                verdict = "held" if seed["held"] else "not held"
                print(f"  seed {seed['seed']}: {verdict}, lowest {seed['lowest_accuracy']}, fidelity "
                      f"{seed['fidelity']}, failing {sorted(seed['failing_classes'])}")


if __name__ == "__main__":
    main()
