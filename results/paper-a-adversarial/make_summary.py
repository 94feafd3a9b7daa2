"""The adversarial split's summary.json and plots: every class through both phases, both scorers.

    python results/paper-a-adversarial/make_summary.py   # reads logs/ (compgen.analysis.results_folder output)

Per seed: each class's accuracy at the end of the first phase (okawa-fail1), at the fine-tuning runs' first evaluation
(the loaded weights, before any update) and at their end, per arm (the same learning rate, a tenth of it); the
classes right (>= 0.9) after the first phase and wrong (< 0.5) after fine-tuning ("forgotten"), and those wrong then
right ("learned"). Plots ``figures/phases_<arm>_seed<S>.png``: per class, probes solid and pixel scorer dashed, the
phase boundary dotted.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

HERE = Path(__file__).resolve().parent
RIGHT, WRONG = 0.9, 0.5
ARMS = ("plus-101-same-lr", "plus-101-tenth-lr")


def read(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def per_class(record: dict) -> dict[str, list[float]]:
    return {c: [round(record["accuracy"][c], 3), round(record["pixel_accuracy"][c], 3)] for c in record["accuracy"]}


def plot(records: list[dict], path: Path, title: str) -> None:
    from compgen.evaluation.figure_style import save_figure, subplots

    fig, ax = subplots(figsize=(7, 4))
    steps = [r["step"] for r in records]
    for i, name in enumerate(sorted(records[-1]["accuracy"])):
        color = f"C{i}"
        ax.plot(steps, [r["accuracy"][name] for r in records], color=color, label=name)
        ax.plot(steps, [r["pixel_accuracy"][name] for r in records], color=color, linestyle="--", linewidth=1)
    boundary = next(r["phase_start_step"] for r in records if "phase_start_step" in r)
    ax.axvline(boundary, color="black", linestyle=":", linewidth=1)
    ax.text(boundary, 1.02, " fine-tuning with 101", fontsize=7)
    ax.set(xlabel="step", ylabel="multiplicative accuracy", ylim=(-0.02, 1.08), title=title)
    ax.legend(frameon=False, fontsize=7, ncol=2, title="probes solid, pixel dashed", title_fontsize=7)
    save_figure(fig, path)


def main() -> None:
    summary: dict = {"right": RIGHT, "wrong": WRONG, "seeds": {}}
    for log in sorted((HERE / "logs").glob("plus-101-*__seed*.jsonl")):
        arm, seed = re.match(r"(plus-101-[a-z-]+?)__full__.*__seed(\d+)\.jsonl$", log.name).groups()
        records = read(log)
        source = [r for r in records if r.get("phase") == "source"]
        tuned = [r for r in records if r.get("phase") == "fine-tune"]
        before, boundary, after = per_class(source[-1]), per_class(tuned[0]), per_class(tuned[-1])
        entry = summary["seeds"].setdefault(seed, {"first_phase_end": before, "first_phase_step": source[-1]["step"]})
        entry[arm] = {
            "boundary": boundary, "end": after, "end_step": tuned[-1]["step"],
            "forgotten": sorted(c for c in after if min(before[c]) >= RIGHT and max(after[c]) < WRONG),
            "learned": sorted(c for c in after if max(before[c]) < WRONG and min(after[c]) >= RIGHT),
        }
        plot(records, HERE / "figures" / f"phases_{arm}_seed{seed}.png", f"{arm}, seed {seed}")
    (HERE / "summary_phases.json").write_text(json.dumps(summary, indent=1) + "\n")


if __name__ == "__main__":
    main()
