"""Sample sheets of the last evaluation: per run (one row), the samples the tracker saved of every class, so that a
failing seed can be looked at beside a holding one.

    python results/paper-a-sizes/sheets.py OUT.png STUDY_DIR/cells/RUN [...]
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1] / "src"))

from compgen.evaluation.figure_style import save_figure, subplots  # noqa: E402
from compgen.evaluation.plots import load_sample_files  # noqa: E402


def main() -> None:
    out, runs = Path(sys.argv[1]), [Path(arg) for arg in sys.argv[2:]]
    last = [load_sample_files(run / "samples")[-1] for run in runs]
    classes = list(dict.fromkeys(str(c) for c in last[0][2]))
    per_class = min(int(np.sum(np.asarray(names).astype(str) == classes[0])) for _, _, names in last)
    fig, axes = subplots(len(runs), len(classes) * per_class, squeeze=False,
                         figsize=(0.55 * len(classes) * per_class + 1.2, 0.62 * len(runs) + 0.4))
    for row, (run, (step, images, names)) in enumerate(zip(runs, last, strict=True)):
        names = np.asarray(names).astype(str)
        for index, name in enumerate(classes):
            for k, image in enumerate(images[names == name][:per_class]):
                ax = axes[row, index * per_class + k]
                ax.imshow(image, interpolation="nearest")
                ax.set_xticks([])
                ax.set_yticks([])
                if row == 0 and k == 0:
                    ax.set_title(name, fontsize=7, loc="left")
        axes[row, 0].set_ylabel(f"{run.name.rsplit('__', 1)[1]}\nstep {step}", fontsize=6, rotation=0, labelpad=18,
                                va="center")
    save_figure(fig, out)


if __name__ == "__main__":
    main()
