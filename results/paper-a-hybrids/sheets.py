"""Sample sheets of several runs side by side: one row per class, one column of samples per run.

    python results/paper-a-hybrids/sheets.py OUT.png NAME=SAMPLE_DIR [NAME=SAMPLE_DIR ...] [--per_class 4]

A SAMPLE_DIR holds ``samples_step*.npz`` files (a training run's ``samples/``, or ``compgen.analysis.rescore
--sample_dir``); the last step's file is drawn.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("output")
    parser.add_argument("runs", nargs="+", help="NAME=SAMPLE_DIR")
    parser.add_argument("--per_class", type=int, default=4)
    parser.add_argument("--scale", type=int, default=3)
    args = parser.parse_args()
    columns, names, classes = [], [], None
    for entry in args.runs:
        name, directory = entry.split("=", 1)
        data = np.load(sorted(Path(directory).glob("samples_step*.npz"))[-1])
        images, labels = data["images"], data["classes"].astype(str)
        classes = classes or sorted(set(labels))
        rows = [np.concatenate(list(images[labels == c][: args.per_class]), axis=1) for c in classes]
        columns.append(np.pad(np.concatenate(rows, axis=0), ((0, 0), (0, 4), (0, 0)), constant_values=0))
        names.append(name)
    grid = np.concatenate(columns, axis=1)
    top, left, s = 14, 30, args.scale
    sheet = Image.new("RGB", (grid.shape[1] * s + left, grid.shape[0] * s + top), "white")
    sheet.paste(Image.fromarray(grid).resize((grid.shape[1] * s, grid.shape[0] * s), Image.NEAREST), (left, top))
    draw = ImageDraw.Draw(sheet)
    for i, c in enumerate(classes):
        draw.text((2, top + i * 28 * s + 14 * s - 5), c, fill="black")
    width = columns[0].shape[1] * s
    for j, name in enumerate(names):
        draw.text((left + j * width + 2, 1), name, fill="black")
    sheet.save(args.output)


if __name__ == "__main__":
    main()
