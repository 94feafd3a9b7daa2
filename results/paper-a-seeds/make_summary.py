"""The ten-seed distribution of Paper A's headline, from the folders the results-folder command wrote.

    python results/paper-a-seeds/make_summary.py FOLDER [FOLDER ...]   # e.g. cpu-bf16/ (its summary.json, logs/)

Per arm (a model of studies/paper_a_seeds.yaml: bf16, fp32, or a candidate preset) and seed: whether the headline holds
(compgen.evaluation.compare.headline_held: every level >= 0.9 by both scorers at each of the last three evaluations,
every level's fidelity >= 0.75 at the last), each level's lowest accuracy over those evaluations and its fidelity, the
classes below 0.9 by either scorer with the concepts the pixel scorer rejects in them (its per-concept accuracy, where
the log has it), and the run's wall-clock; per arm the share of seeds held, the highest level's lowest accuracy at the
worst seed and its mean over the seeds, and the wall-clock's range; across the arms that ran seeds 0-9, which arms
hold each seed. Written to each folder's distribution.json and printed as a table.

Then this folder's own summary.json, from every distribution.json of :data:`FOLDERS` and the JSON files in causes/:
the preset chosen and the data it ran on, each arm's seeds and held seeds, Fisher exact p-values between arms, the
seeds across arms, Paper A's modulation on the other splits (``results/paper-a-reproduction/``'s logs judged by the
same criterion), the 200-image rescores' class results that cross 0.9, and the runs the pale trajectories analysed.
It reads only files already written; nothing is trained or sampled.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1] / "src"))

from compgen.evaluation.compare import fisher_exact_p, headline_held  # noqa: E402
from compgen.evaluation.tracker import read_log  # noqa: E402

FOLDERS = ("cpu-bf16", "cpu-fp32", "candidates", "film-splits", "fullres-splits", "causes/seed-streams")
"""The folders of the results-folder command, each with its distribution.json."""
CHOSEN = {"command": "examples/train_tuple_unet.py --preset quickstart --concept_modulation film",
          "make": "make quickstart", "folder": "candidates", "arm": "film"}
"""The README's command these runs chose: the quickstart preset with FiLM concept modulation (its arm here)."""
DATA = {"these_runs": "okawa-h32-train1",
        "current_default": "okawa-h32-train1-sizes-touching",
        "current_results": "results/paper-a-sizes/",
        "note": "every run here trained on okawa-h32-train1, the default data when it ran; the README's command now "
                "trains on okawa-h32-train1-sizes-touching (the Makefile's quickstart), measured in "
                "results/paper-a-sizes/ with this folder's film arm as its baseline"}
"""The data these runs trained on, and where the current default data is measured."""
BASELINE = {"cpu-bf16": "unet-bf16", "cpu-fp32": "unet-fp32"}
"""The quickstart preset alone (Paper A's modulation), bf16 and fp32: what the FiLM arms are compared with."""
REPRODUCTION = HERE.parent / "paper-a-reproduction"
"""Paper A's modulation on the four splits, seeds 0-2 (its logs are judged here by :func:`headline_held`)."""
THRESHOLD = 0.9
"""A class result's threshold, the headline's accuracy."""


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
        arm["held_seeds"] = [s["seed"] for s in seeds if s["held"]]
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
            "runs_held": f"{sum(sum(held.values()) for held in ten.values())} of {10 * len(ten)}",
            "held_runs": sum(sum(held.values()) for held in ten.values()), "runs": 10 * len(ten)}


def shares(arm: dict) -> dict:
    """An arm's seeds, the seeds it holds, and the seeds that reach the accuracy part alone (both scorers >= 0.9 at
    the last three evaluations, fidelity not asked)."""
    return {"seeds": [s["seed"] for s in arm["seeds"]], "held_seeds": arm["held_seeds"],
            "accuracy_part_held_seeds": arm["accuracy_part_held"]["seeds"],
            "top_level_lowest_accuracy": arm["top_level_lowest_accuracy"], "wall_clock_s": arm["wall_clock_s"]}


def fisher_between(arms: dict[str, dict], first: tuple[str, str], second: tuple[str, str]) -> dict:
    """The held shares of two arms (folder, arm) and the Fisher exact p-value between them."""
    one, other = arms[first[0]][first[1]], arms[second[0]][second[1]]
    a, n, b, m = len(one["held_seeds"]), len(one["seeds"]), len(other["held_seeds"]), len(other["seeds"])
    return {"held": [f"{a} of {n}", f"{b} of {m}"], "p": fisher_exact_p(a, n, b, m)}


def reproduction_other_splits() -> dict:
    """Paper A's modulation (``--preset quickstart`` alone) on H32-train2 to -train4, seeds 0-2, by the one criterion:
    the logs of ``results/paper-a-reproduction/`` (whose README counts by both scorers at step 800 alone)."""
    splits: dict[str, dict] = {}
    for log in sorted((REPRODUCTION / "logs").glob("unet__full__okawa-h32-train[234]__seed*.jsonl")):
        entry = splits.setdefault(log.stem.split("__")[2], {"seeds": [], "held_seeds": []})
        entry["seeds"].append(seed_of(log.stem))
        if headline_held(read_log(log))["held"]:
            entry["held_seeds"].append(seed_of(log.stem))
    return {"source": "results/paper-a-reproduction/logs", "splits": splits}


def other_splits(arms: dict[str, dict], reproduction: dict) -> dict:
    """Per modulation, the runs on H32-train2 to -train4 (``split seed S``) and those that hold, over the three
    splits together: FiLM (film-splits/), FiLM with the full-resolution modulation (fullres-splits/) and Paper A's
    modulation (:func:`reproduction_other_splits`)."""
    result = {}
    for name, folder in (("film", "film-splits"), ("film-fullres", "fullres-splits")):
        runs = [(arm.rsplit(" on ", 1)[1], entry) for arm, entry in arms.get(folder, {}).items()]
        result[name] = {"runs": [f"{split} seed {seed}" for split, entry in runs for seed in entry["seeds"]],
                        "held_runs": [f"{split} seed {seed}" for split, entry in runs for seed in entry["held_seeds"]]}
    splits = reproduction["splits"].items()
    result["paper-a-modulation"] = {
        "runs": [f"{split} seed {seed}" for split, entry in splits for seed in entry["seeds"]],
        "held_runs": [f"{split} seed {seed}" for split, entry in splits for seed in entry["held_seeds"]]}
    return result


def rescore_crossings(path: Path) -> dict:
    """Per arm of the 200-image rescores: the largest class change, every class result (class, scorer) on the other
    side of 0.9 in the rescore than in the run's last evaluation, and the seeds whose level-2 fidelity crosses 0.75."""
    result = {}
    for arm, seeds in json.loads(path.read_text())["arms"].items():
        crossing, fidelity = [], []
        runs = {seed: entry for seed, entry in seeds.items() if isinstance(entry, dict)}
        for seed, entry in runs.items():
            before, after = entry["evaluation"], entry["rescored"]
            for name in ("101", "111"):
                for scorer in ("probes", "pixel statistics"):
                    if (before[name][scorer] >= THRESHOLD) != (after[name][scorer] >= THRESHOLD):
                        crossing.append({"seed": int(seed), "class": name, "scorer": scorer,
                                         "evaluation": before[name][scorer], "rescored": after[name][scorer]})
            if (before["fidelity_level_2"] >= 0.75) != (after["fidelity_level_2"] >= 0.75):
                fidelity.append(int(seed))
        result[arm] = {"seeds": sorted(map(int, runs)),
                       "largest_class_change_over_seeds": seeds["largest_class_change_over_seeds"],
                       "class_results_crossing_0.9": crossing,
                       "crossing_up": [c for c in crossing if c["rescored"] >= THRESHOLD],
                       "crossing_down": [c for c in crossing if c["rescored"] < THRESHOLD],
                       "seeds_level_2_fidelity_crossing_0.75": fidelity}
    return result


def write_summary() -> dict:
    """This folder's summary.json from the distribution.json files of :data:`FOLDERS` and causes/."""
    dists = {name: json.loads((HERE / name / "distribution.json").read_text()) for name in FOLDERS
             if (HERE / name / "distribution.json").is_file()}
    arms = {name: {arm: shares(entry) for arm, entry in dist["arms"].items()} for name, dist in dists.items()}
    chosen = arms[CHOSEN["folder"]][CHOSEN["arm"]]
    ten = [arm for arm, entry in arms["candidates"].items() if entry["seeds"] == list(range(10))]
    fisher = {f"candidates/{arm} against candidates/{CHOSEN['arm']}": fisher_between(
        arms, ("candidates", arm), ("candidates", CHOSEN["arm"])) for arm in ten if arm != CHOSEN["arm"]}
    for arm, folder in (("film", "cpu-bf16"), ("film-fp32", "cpu-fp32"), ("film-fp32-readme", "cpu-fp32")):
        fisher[f"candidates/{arm} against {folder}/{BASELINE[folder]}"] = fisher_between(
            arms, ("candidates", arm), (folder, BASELINE[folder]))
    trajectory = json.loads((HERE / "causes" / "pale_trajectory.json").read_text())
    reproduction = reproduction_other_splits()
    summary = {
        "status": (f"in progress: no measured preset holds Paper A's headline for 9 of 10 seeds on "
                   f"{DATA['these_runs']}; the preset chosen, {CHOSEN['command']} ({CHOSEN['make']}), held for "
                   f"{len(chosen['held_seeds'])} of {len(chosen['seeds'])} seeds there"),
        "preset_chosen": {**CHOSEN, "held_seeds": chosen["held_seeds"], "seeds": chosen["seeds"]},
        "data": DATA,
        "criterion": {"accuracy": THRESHOLD, "evaluations": 3, "fidelity": 0.75,
                      "function": "compgen.evaluation.compare.headline_held",
                      "accuracy_part_alone": "headline_held(records, min_fidelity=None): both scorers >= 0.9 at "
                                             "each of the last three evaluations, fidelity not asked"},
        "arms": arms,
        "fisher_p": fisher,
        "seeds_across_arms": dists["candidates"]["seeds_across_arms"],
        "paper_a_modulation_other_splits": reproduction,
        "other_splits_together": other_splits(arms, reproduction),
        "rescored_200_images": rescore_crossings(HERE / "causes" / "rescored_200_images.json"),
        "pale_trajectory": {"runs": list(trajectory["runs"]),
                            "first_timestep": next(iter(trajectory["runs"].values()))["101"]["timesteps"][0]},
        "files": [f"{name}/distribution.json" for name in dists] + [
            "causes/rescored_200_images.json", "causes/pale_trajectory.json", "quickstart_fresh_clone.json",
            "causes/pale_held_out_rescored.json", "causes/pilot_dropout_guidance_seed0.json"],
    }
    (HERE / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    return summary


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
    print(write_summary()["status"])


if __name__ == "__main__":
    main()
