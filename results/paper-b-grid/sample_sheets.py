"""Sample sheets of one class per arm of a study: each seed's samples at its peak and at its last evaluation.

    python results/paper-b-grid/sample_sheets.py STUDY_DIR [...] --output results/paper-b-grid/h100/figures --cls 111

One PNG per arm (``samples_<arm>_<cls>.png``): a row per seed, the samples the tracker kept (4 per class and
evaluation) at the seed's first step with its best accuracy on the class (probes), then at its last step, scaled 3x.
``sheets.json`` beside them names the steps and the accuracies (probes / pixel scorer) shown.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
from PIL import Image

from compgen.evaluation.plots import load_sample_files
from compgen.evaluation.tracker import read_log


def seed_row(cell: Path, cls: str) -> tuple[np.ndarray, dict]:
    records = read_log(cell / "learning_dynamics.jsonl")
    peak = max(records, key=lambda r: (r["accuracy"][cls], -r["step"]))
    last = records[-1]
    samples = {step: images[classes == cls] for step, images, classes in load_sample_files(cell / "samples")}
    gap = np.full((28, 8, 3), 255, np.uint8)
    row = np.concatenate([*samples[peak["step"]], gap, *samples[last["step"]]], axis=1)
    shown = {"peak_step": peak["step"], "last_step": last["step"],
             "peak": [peak["accuracy"][cls], peak["pixel_accuracy"][cls]],
             "last": [last["accuracy"][cls], last["pixel_accuracy"][cls]]}
    return row, shown


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("studies", nargs="+", type=Path)
    parser.add_argument("--output", required=True, type=Path)
    parser.add_argument("--cls", default="111")
    args = parser.parse_args()
    arms: dict[str, list[Path]] = {}
    for study in args.studies:
        for cell in sorted((study / "cells").iterdir()):
            if (cell / "learning_dynamics.jsonl").is_file() and (cell / "samples").is_dir():
                arms.setdefault(cell.name.rsplit("__seed", 1)[0], []).append(cell)
    args.output.mkdir(parents=True, exist_ok=True)
    index = {}
    for arm, cells in sorted(arms.items()):
        rows, shown = zip(*(seed_row(cell, args.cls) for cell in cells), strict=True)
        sheet = np.concatenate([np.pad(r, ((2, 2), (0, 0), (0, 0)), constant_values=255) for r in rows])
        name = f"samples_{arm}_{args.cls}.png"
        Image.fromarray(sheet).resize((sheet.shape[1] * 3, sheet.shape[0] * 3), Image.NEAREST).save(args.output / name)
        index[name] = {cell.name: entry for cell, entry in zip(cells, shown, strict=True)}
    (args.output / "sheets.json").write_text(json.dumps(index, indent=1) + "\n")
    print(f"{len(index)} sheets -> {args.output}")


if __name__ == "__main__":
    main()
