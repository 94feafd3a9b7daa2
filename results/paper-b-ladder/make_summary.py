"""The ladder's summary.json: Paper B's numbers beside the ladder's, rung by rung, from the machine folders.

    python results/paper-b-ladder/make_summary.py   # reads h200-vq/, h200-kl/ and cpu-vq/summary.json

Per rung (MaskGIT, GIVT, MAR, DiT), tokenizer and scorer: every level's final accuracy per seed, mean and sample
standard deviation, each seed's peak and the first step at which each level reached 0.9; each cell's wall-clock and
the study's (from ``gpu_jobs.txt``, the line ``benchmarks/gpu_check.sh`` wrote). Under ``cpu_vq``, the same for the
DiT and the flow DiT over VQ latents, side by side on one CPU. Per machine folder, the images per class each
evaluation drew (``eval_images_per_class``).
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

HERE = Path(__file__).resolve().parent
SCORERS = ("probes", "pixel statistics")
RUNGS = ("maskgit", "givt", "mar", "dit")
PAPER_B = {
    "source": "Farid et al. 2025, Shapes2D, level 2 (class 111) at the end of training, read from its curves "
              "(see the repository's reference notes)",
    "maskgit": [0.0, 0.02], "givt": 0.7, "mar": 0.88, "dit": 0.84,
}


def _stats(values: list[float]) -> dict:
    return {"per_seed": values, "mean": round(statistics.mean(values), 3),
            "sd": round(statistics.stdev(values), 3) if len(values) > 1 else 0.0}


def rung_summary(runs: dict, prefix: str) -> dict:
    cells = sorted(name for name in runs if name.split("__")[0] == prefix)
    out = {"cells": cells, "wall_clock_s": [runs[c]["wall_clock_s"] for c in cells]}
    for scorer in SCORERS:
        out[scorer] = {}
        for level in ("0", "1", "2"):
            entries = [runs[c]["levels"][level][scorer] for c in cells]
            out[scorer][level] = {"final": _stats([e["final"] for e in entries]),
                                  "peak": _stats([e["best"] for e in entries]),
                                  "first_step_0.9": [e["first_step_0.9"] for e in entries]}
    return out


def machine_runs(folder: Path) -> dict:
    """A machine folder's summary, each run with its wall-clock (its log's last record)."""
    machine = json.loads((folder / "summary.json").read_text())
    for run in machine["runs"].values():
        log = (folder / run["log"]).read_text().splitlines()
        run["wall_clock_s"] = json.loads(log[-1])["wall_clock_s"]
    return machine


def main() -> None:
    summary = {"paper_b": PAPER_B, "tokenizers": {}}
    for tokenizer in ("vq", "kl"):
        machine = machine_runs(HERE / f"h200-{tokenizer}")
        summary["machine"], summary["date"] = machine["machine"].split(",")[0], machine["date"]
        jobs = (HERE / f"h200-{tokenizer}" / "gpu_jobs.txt").read_text()  # benchmarks/gpu_check.sh's job line
        summary.setdefault("study_wall_clock_s", {})[tokenizer] = int(jobs.split("wall_s=")[1].split()[0])
        summary["tokenizers"][tokenizer] = {
            rung: rung_summary(machine["runs"], rung if rung == "maskgit" else f"{rung}-{tokenizer}")
            for rung in RUNGS if not (rung == "maskgit" and tokenizer == "kl")}
    first_log = next((HERE / "h200-vq" / "logs").glob("*.jsonl")).read_text().splitlines()[0]
    summary["chance"] = json.loads(first_log)["chance"]
    # The images each evaluation drew per class, per machine folder (what a count of hybrids "of 50" is out of)
    summary["eval_images_per_class"] = {
        folder: sorted({json.loads(line)["num_images_per_class"] for log in (HERE / folder / "logs").glob("*.jsonl")
                        for line in log.read_text().splitlines() if line.strip()})
        for folder in ("h200-vq", "h200-kl", "cpu-vq")}
    # The same MaskGIT arm in Paper B's grid (results/paper-b-grid/, on an H100), for comparison across studies.
    grid = json.loads((HERE.parent / "paper-b-grid" / "h100" / "summary.json").read_text())
    arm = grid["studies"]["paper-b-grid"]["arms"]["maskgit (full) on okawa-h32-train1"]
    summary["paper_b_grid_h100_maskgit_level2_final_mean"] = {
        scorer: round(arm[scorer]["2"]["final_mean"], 3) for scorer in SCORERS}
    cpu = machine_runs(HERE / "cpu-vq")  # the DiT's two objectives side by side on one CPU
    summary["cpu_vq"] = {"machine": cpu["machine"], "date": cpu["date"],
                         "rungs": {rung: rung_summary(cpu["runs"], f"{rung}-vq") for rung in ("dit", "flow-dit")}}
    (HERE / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")


if __name__ == "__main__":
    main()
