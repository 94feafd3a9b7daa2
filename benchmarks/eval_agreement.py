"""Does a cheaper evaluation measure what the current one measures? Every checkpoint of one run is scored under each
evaluation setting (DDIM steps, sampler precision) with the same seed, and each setting's per-level accuracies, by both
scorers, are compared with the reference setting's within their sampling error.

    python benchmarks/eval_agreement.py RUN_DIR --settings 20,no 10,no 20,bf16 10,bf16 \\
        --output results/paper-a-quick/eval_agreement.json

The first setting is the reference. A level "agrees" when the two accuracies differ by at most two standard errors of
the difference of two independent estimates (each a mean over the level's classes of ``images_per_class`` samples; a
class at 0 or 1 counts as one sample away from it, so a standard error is never zero). The two evaluations share their
initial noise, so this bound is loose rather than tight. Needs a run written with checkpoints at the steps to compare
(``--checkpointing_steps 100 --checkpoints_total_limit 50``).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

import torch

from compgen.analysis.rescore import evaluate_run
from compgen.atomic_io import atomic_write_text
from compgen.cli import ArgumentParser
from compgen.training.checkpoint import list_checkpoints

SCORERS = {"probes": ("accuracy", "level_accuracy"), "pixel statistics": ("pixel_accuracy", "pixel_level_accuracy")}


def parse_setting(text: str) -> tuple[int, str]:
    """``"10,bf16"`` -> (10, "bf16")."""
    steps, _, precision = text.partition(",")
    if not steps.isdigit() or int(steps) < 1 or precision not in ("no", "bf16"):
        raise argparse.ArgumentTypeError(f"a setting is STEPS,PRECISION with PRECISION no or bf16, got {text!r}")
    return int(steps), precision


def level_standard_error(record: dict[str, Any], accuracy_key: str, level: str) -> float:
    """Standard error of a level's accuracy: the mean over its classes of binomial proportions of ``n`` samples."""
    n = record["num_images_per_class"]
    values = [record[accuracy_key][name] for name, lv in record["levels"].items() if str(lv) == level]
    clipped = [min(max(p, 1 / n), 1 - 1 / n) for p in values]
    return math.sqrt(sum(p * (1 - p) / n for p in clipped)) / len(values)


def compare(reference: dict[str, Any], candidate: dict[str, Any]) -> dict[str, Any]:
    """Per scorer and level: both accuracies, their difference, two standard errors of it, and whether it is within."""
    rows: dict[str, Any] = {}
    for scorer, (per_class, per_level) in SCORERS.items():
        for level, value in reference[per_level].items():
            other = candidate[per_level][level]
            bound = 2 * math.hypot(level_standard_error(reference, per_class, level),
                                   level_standard_error(candidate, per_class, level))
            rows[f"{scorer} L{level}"] = {"reference": round(value, 4), "candidate": round(other, 4),
                                          "difference": round(other - value, 4), "two_se": round(bound, 4),
                                          "within": abs(other - value) <= bound + 1e-9}
    return rows


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run_dir")
    parser.add_argument("--settings", nargs="+", type=parse_setting, default=[(20, "no"), (10, "bf16")],
                        help="STEPS,PRECISION pairs; the first is the reference")
    parser.add_argument("--images_per_class", type=int, default=50)
    parser.add_argument("--output", required=True)
    args = parser.parse_args(argv)
    if hasattr(os, "sched_getaffinity"):  # one thread per core this process may use (taskset), not per core present
        torch.set_num_threads(len(os.sched_getaffinity(0)))
    checkpoints = list_checkpoints(Path(args.run_dir) / "checkpoints")
    if not checkpoints:
        parser.error(f"{args.run_dir} has no checkpoints to score (train with --checkpointing_steps)")
    if not Path(args.output).resolve().parent.is_dir():
        parser.error(f"--output {args.output}: its directory does not exist")

    rows = []
    for step, checkpoint in checkpoints:
        scored = {}
        for steps, precision in args.settings:
            begin = time.perf_counter()
            record = evaluate_run(args.run_dir, num_inference_steps=steps, checkpoint=str(checkpoint),
                                  images_per_class=args.images_per_class, mixed_precision=precision)
            scored[f"{steps},{precision}"] = {"record": record, "seconds": time.perf_counter() - begin}
        names = list(scored)
        row = {"step": step, "settings": {
            name: {"level_accuracy": value["record"]["level_accuracy"],
                   "pixel_level_accuracy": value["record"]["pixel_level_accuracy"],
                   "generate_s": value["record"]["generate_s"], "seconds": round(value["seconds"], 2)}
            for name, value in scored.items()}}
        row["comparisons"] = {name: compare(scored[names[0]]["record"], scored[name]["record"]) for name in names[1:]}
        rows.append(row)
        print(f"step {step}: " + "; ".join(
            f"{name} {sum(c['within'] for c in cmp.values())}/{len(cmp)} within, generate "
            f"{row['settings'][name]['generate_s']:.1f} s" for name, cmp in row["comparisons"].items())
            + f" (reference generate {row['settings'][names[0]]['generate_s']:.1f} s)", flush=True)

    names = [f"{steps},{precision}" for steps, precision in args.settings]
    summary = {"run_dir": str(args.run_dir), "reference": names[0], "images_per_class": args.images_per_class,
               "machine": platform.processor() or platform.machine(), "torch": torch.__version__,
               "threads": torch.get_num_threads(), "command": " ".join(["python", *sys.argv]),
               "per_setting": {}, "checkpoints": rows}
    for name in names:
        generate = [row["settings"][name]["generate_s"] for row in rows]
        entry: dict[str, Any] = {"generate_s_total": round(sum(generate), 2)}
        if name != names[0]:
            comparisons = [c for row in rows for c in row["comparisons"][name].values()]
            entry |= {"comparisons": len(comparisons), "within_two_se": sum(c["within"] for c in comparisons),
                      "largest_difference": max(abs(c["difference"]) for c in comparisons),
                      "speedup": round(summary["per_setting"].get(names[0], {}).get("generate_s_total", 0)
                                       / max(sum(generate), 1e-9), 2)}
        summary["per_setting"][name] = entry
    atomic_write_text(args.output, json.dumps(summary, indent=1) + "\n")
    return summary


if __name__ == "__main__":
    main()
