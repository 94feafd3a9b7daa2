"""Export H32 splits whose two size ranges touch or overlap, for ``examples/train_tuple_unet.py --dataset DIR
--dataset_config NAME`` (the default data keep them apart: scale 2.7 and 1.6 +- 0.45).

    python results/paper-a-hybrids/export_size_ranges.py OUT_DIR --splits train2 --size_jitter 0.55 0.7

writes one config per split and jitter, named ``h32-<split>-sizejitter<jitter x 100, 3 digits>``.
"""

from __future__ import annotations

import argparse

from compgen.data.concept_graph_builder import ConceptGraphShapesConfig
from compgen.data.export import export_concept_graph_configs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("output_dir")
    parser.add_argument("--splits", nargs="+", default=["train2"])
    parser.add_argument("--size_jitter", nargs="+", type=float, default=[0.55, 0.7])
    args = parser.parse_args()
    configs = [ConceptGraphShapesConfig(name=f"h32-{split}-sizejitter{round(jitter * 100):03d}",
                                        split_preset=f"H32-{split}", size_jitter=jitter)
               for split in args.splits for jitter in args.size_jitter]
    export_concept_graph_configs(configs, args.output_dir)


if __name__ == "__main__":
    main()
