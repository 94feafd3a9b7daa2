"""Level 1's decay, evaluation only: how much of a MaskGIT run's end state is the sampler.

Each run's final export is re-scored (both scorers, 50 images per class) over Gumbel temperatures {0, 2, 4.5, 8}
(annealed to 0; compgen's evaluation uses 2, the MaskGIT code Paper B builds on 4.5) x sampling steps {8, 12, 24}, and
its tokenizer's code coverage is measured (``--tokenizer DIR`` alone: only that): the share of each class's
real-image tokens whose code the training classes' tokens use (anywhere; at the same grid position). Writes
``sampler_sweep.json`` and prints a table.

    python results/paper-b-jepa/sampler_sweep.py --dataset okawa-h32-train1 \
        --run maskgit=RUNS/cells/maskgit/... --run jepa-visible-block=RUNS/cells/jepa-visible-block/... \
        --output results/paper-b-jepa/sampler_sweep.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from diffusers import VQModel

from compgen.analysis.rescore import evaluate_run
from compgen.atomic_io import atomic_write_text, output_file_problem
from compgen.data.loading import load_concept_dataset, split_tensors
from compgen.evaluation.tokenizer_report import code_coverage

TEMPERATURES = (0.0, 2.0, 4.5, 8.0)
STEPS = (8, 12, 24)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dataset", required=True, help="the runs' dataset (config name or Hub-layout directory)")
    parser.add_argument("--run", action="append", default=[], metavar="ARM=RUN_DIR")
    parser.add_argument("--tokenizer", default=None,
                        help="also (or only) measure the code coverage of this VQ tokenizer directory")
    parser.add_argument("--images_per_class", type=int, default=50)
    parser.add_argument("--output", required=True)
    args = parser.parse_args()
    runs = dict(item.split("=", 1) for item in args.run)
    for arm, run_dir in runs.items():
        if not (Path(run_dir) / "model_index.json").is_file():
            parser.error(f"--run {arm}={run_dir}: no exported pipeline (model_index.json) there")
    if not runs and not args.tokenizer:
        parser.error("give --run ARM=RUN_DIR (one or more) or --tokenizer DIR")
    if args.tokenizer and not (Path(args.tokenizer) / "config.json").is_file():
        parser.error(f"--tokenizer {args.tokenizer}: no tokenizer (config.json) there")
    if problem := output_file_problem(args.output):
        parser.error(f"--output {args.output}: {problem}")

    dataset = load_concept_dataset(args.dataset)
    train, test = split_tensors(dataset, "train"), split_tensors(dataset, "test")
    training_classes = sorted({"".join(map(str, row.tolist())) for row in train.concepts})
    labels = ["".join(map(str, row.tolist())) for row in test.concepts]
    result = {"dataset": args.dataset, "temperatures": TEMPERATURES, "steps": STEPS, "arms": {}}
    if args.tokenizer:
        result["tokenizer"] = {"path": args.tokenizer, "code_coverage": code_coverage(
            VQModel.from_pretrained(args.tokenizer), test.images.numpy(), labels, training_classes)}
    for arm, run_dir in runs.items():
        coverage = code_coverage(VQModel.from_pretrained(Path(run_dir) / "vqvae"), test.images.numpy(), labels,
                                 training_classes)
        grid = []
        for temperature in TEMPERATURES:
            for steps in STEPS:
                record = evaluate_run(run_dir, num_inference_steps=steps, temperature=temperature,
                                      images_per_class=args.images_per_class)
                grid.append({"temperature": temperature, "num_inference_steps": steps,
                             "accuracy": record["accuracy"], "pixel_accuracy": record["pixel_accuracy"],
                             "level_accuracy": record["level_accuracy"],
                             "pixel_level_accuracy": record["pixel_level_accuracy"]})
                print(f"{arm} T={temperature} steps={steps}: probes {record['level_accuracy']} pixel "
                      f"{record['pixel_level_accuracy']}", flush=True)
        result["arms"][arm] = {"run_dir": str(run_dir), "code_coverage": coverage, "grid": grid}
    atomic_write_text(args.output, json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
