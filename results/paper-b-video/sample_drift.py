"""How much a run's evaluation samples change as it trains, beside how many of its clips are typical: every
evaluation draws its clips from the same starting noise (the evaluation's seed), so the mean absolute pixel difference
(of 255) between the kept clips of two evaluations says how far the model moved what it draws. A model whose clips
stop changing draws what its starting noise gives.

    python results/paper-b-video/sample_drift.py --run NAME=CELL_DIR ... \
        --output results/paper-b-video/sample_drift.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from compgen.atomic_io import atomic_write_text
from compgen.evaluation.plots import load_sample_files
from compgen.evaluation.tracker import read_log


def drift(cell: Path) -> dict:
    """Per evaluation the typical clips (of every clip scored; at the last, each class's share and concept accuracy
    by both scorers, an atypical clip wrong on every concept), and the mean absolute pixel difference between
    consecutive evaluations' kept clips and from the first to the last."""
    clips = {step: images.astype(np.float64) for step, images, _ in load_sample_files(cell / "samples")}
    steps = sorted(clips)

    def difference(a: int, b: int) -> float:
        return round(float(np.abs(clips[a] - clips[b]).mean()), 3)

    records = read_log(cell / "learning_dynamics.jsonl")
    typical = {record["step"]: round(record["num_images_per_class"] * sum(record["typical"].values()))
               for record in records}
    last = records[-1]
    return {"steps": steps, "typical_clips": [typical[step] for step in steps],
            "clips_per_evaluation": last["num_images_per_class"] * len(last["typical"]),
            "last_evaluation": {"step": last["step"], "typical": last["typical"],
                                "concept_accuracy_probes": last["concept_accuracy"],
                                "concept_accuracy_pixels": last["pixel_concept_accuracy"]},
            "consecutive": [difference(a, b) for a, b in zip(steps[:-1], steps[1:], strict=True)],
            "first_to_last": difference(steps[0], steps[-1]), "kept_clips": int(clips[steps[0]].shape[0])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run", action="append", required=True, metavar="NAME=CELL_DIR")
    parser.add_argument("--output", required=True)
    args = parser.parse_args()
    results = {name: drift(Path(cell)) for name, cell in (item.split("=", 1) for item in args.run)}
    atomic_write_text(args.output, json.dumps(results, indent=2) + "\n")
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
