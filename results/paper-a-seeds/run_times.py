"""The whole training command's time per seed (its profile total: startup, training steps, evaluations, export) of
two study arms run side by side, and their ratio seed by seed: the README command in bf16 and in fp32.

    python results/paper-a-seeds/run_times.py BF16_RUN_DIR... --fp32 FP32_RUN_DIR... --output FILE.json

Each RUN_DIR is a study's output directory (``cells/*/profile.json``, written by every training run).
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path


def profile_totals(study_dirs: list[str]) -> dict[int, dict]:
    """Seed -> the run's profile total, training steps and evaluation sampling (s)."""
    found = {}
    for study in map(Path, study_dirs):
        for cell in sorted((study / "cells").iterdir()):
            profile = json.loads((cell / "profile.json").read_text())
            found[int(cell.name.rsplit("seed", 1)[1])] = {
                "total_s": profile["total_s"], "training_steps_s": profile["phases"]["training steps"],
                "evaluation_sampling_s": profile["phases"].get("evaluation: sampling")}
    return dict(sorted(found.items()))


def spread(runs: dict[int, dict]) -> dict[str, float]:
    totals = [run["total_s"] for run in runs.values()]
    return {"min": min(totals), "max": max(totals), "median": round(statistics.median(totals), 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("bf16", nargs="+")
    parser.add_argument("--fp32", nargs="+", required=True)
    parser.add_argument("--output", required=True)
    parser.add_argument("--note", default="")
    args = parser.parse_args()
    bf16, fp32 = profile_totals(args.bf16), profile_totals(args.fp32)
    ratios = {seed: round(fp32[seed]["total_s"] / bf16[seed]["total_s"], 3) for seed in bf16 if seed in fp32}
    result = {
        "note": args.note,
        "bf16": bf16, "fp32": fp32, "fp32_over_bf16_by_seed": ratios,
        "bf16_total_s": spread(bf16), "fp32_total_s": spread(fp32),
        "fp32_over_bf16_max": max(ratios.values()),
    }
    medians = result["fp32_total_s"]["median"], result["bf16_total_s"]["median"]
    result["fp32_median_over_bf16_median"] = round(medians[0] / medians[1], 3)
    Path(args.output).write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k not in ("bf16", "fp32")}, indent=1))


if __name__ == "__main__":
    main()
