"""Contact sheet of the four data variants of studies/paper_a_sizes.yaml: every class of H32-train1, its smallest,
middle and largest object of 200 renders (test split) per variant, so that the size ranges and the pixel budget can be
seen side by side.

    python results/paper-a-sizes/data_sheets.py   # writes figures/data_variants.png
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1] / "src"))

from compgen.data.concept_graph_builder import build_concept_graph_dataset  # noqa: E402
from compgen.evaluation.figure_style import save_figure, subplots  # noqa: E402

VARIANTS = {"default (sizes apart, scale 1)": {}, "sizes touching": {"size_ranges": "touching"},
            "object scale 1.3": {"object_scale": 1.3},
            "sizes touching, scale 1.3": {"size_ranges": "touching", "object_scale": 1.3}}


def main() -> None:
    with tempfile.TemporaryDirectory() as cache:
        data = {name: build_concept_graph_dataset(f"sheet-{index}", cache_dir=cache, split_preset="H32-train1",
                                                  images_per_class=1, test_images_per_class=200,
                                                  tokenizer_images_per_class=1, **options)["test"]
                for index, (name, options) in enumerate(VARIANTS.items())}
    classes = sorted(set(next(iter(data.values()))["concepts"]))
    fig, axes = subplots(len(classes), 3 * len(VARIANTS), figsize=(3 * len(VARIANTS) * 0.9, len(classes) * 1.0))
    for column, (name, split) in enumerate(data.items()):
        concepts, sizes = np.asarray(split["concepts"]), np.asarray(split["size_value"])
        for row, concept in enumerate(classes):
            rows = np.flatnonzero(concepts == concept)
            order = rows[np.argsort(sizes[rows])]
            for k, index in enumerate((order[0], order[len(order) // 2], order[-1])):
                ax = axes[row, 3 * column + k]
                ax.imshow(np.asarray(split[int(index)]["image"]))
                ax.set_xticks([])
                ax.set_yticks([])
                ax.set_xlabel(f"{sizes[index]:.2f}", fontsize=6, labelpad=1)
                if 3 * column + k == 0:
                    ax.set_ylabel(concept, fontsize=8)
        axes[0, 3 * column + 1].set_title(f"{name}\nsmallest / middle / largest", fontsize=7)
    save_figure(fig, HERE / "figures" / "data_variants.png")


if __name__ == "__main__":
    main()
