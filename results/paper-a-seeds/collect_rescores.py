"""Each run's last evaluation (50 images per class) beside its export rescored with 200 images per class and other
draws: is a seed's miss the model's, or the evaluation's sampling?

    # for each run:
    python -m compgen.analysis.rescore RUN_DIR --images_per_class 200 --seed 1 --output DIR/ARM_seedS.json
    python results/paper-a-seeds/collect_rescores.py DIR STUDY_DIR... --output FILE.json

Per arm and seed: the held-out classes 101 and 111 by both scorers and the level-2 fidelity in the run's own last
evaluation and in the rescore, and the largest change of a class accuracy between the two.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))

from compgen.evaluation.tracker import read_log  # noqa: E402

CLASSES = ("101", "111")


def scores(record: dict) -> dict:
    return {"images_per_class": record["num_images_per_class"],
            **{name: {"probes": round(record["accuracy"][name], 4),
                      "pixel statistics": round(record["pixel_accuracy"][name], 4)} for name in CLASSES},
            "fidelity_level_2": round(record["fidelity_level"]["2"], 4)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("rescores")
    parser.add_argument("studies", nargs="+")
    parser.add_argument("--output", required=True)
    args = parser.parse_args()
    cells = {cell.name: cell for study in map(Path, args.studies) for cell in (study / "cells").iterdir()}
    result: dict[str, dict] = {}
    for path in sorted(Path(args.rescores).glob("*_seed*.json")):
        arm, seed = path.stem.rsplit("_seed", 1)
        cell = cells[f"{arm}__full__okawa-h32-train1__seed{seed}"]
        evaluation = scores(read_log(cell / "learning_dynamics.jsonl")[-1])
        rescore = scores(json.loads(path.read_text()))
        change = max(abs(evaluation[name][scorer] - rescore[name][scorer])
                     for name in CLASSES for scorer in ("probes", "pixel statistics"))
        result.setdefault(arm, {})[seed] = {"evaluation": evaluation, "rescored": rescore,
                                            "largest_class_change": round(change, 4)}
    for seeds in result.values():
        seeds["largest_class_change_over_seeds"] = max(entry["largest_class_change"] for entry in seeds.values())
    command = ("python -m compgen.analysis.rescore RUN_DIR --images_per_class 200 --seed 1 (the export: EMA weights "
               "at step 800, the evaluation's sampler and precision)")
    Path(args.output).write_text(json.dumps({"command": command, "arms": result}, indent=1) + "\n")
    for arm, seeds in result.items():
        print(arm, {seed: entry["largest_class_change"] for seed, entry in seeds.items() if isinstance(entry, dict)})


if __name__ == "__main__":
    main()
