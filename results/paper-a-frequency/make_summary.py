"""The critical-frequency sweeps' summary.json and plot: final accuracy per level against N, both scorers.

    python results/paper-a-frequency/make_summary.py   # reads colour/summary.json and shape/summary.json

Each sweep folder is ``python -m compgen.analysis.results_folder`` output of one study
(``studies/paper_a_frequency_*.yaml``): one run per N and seed, named
``unet__full__h32-train1-<class>-x<N>__seed<S>``. Per sweep, level and scorer: the final accuracy per N (each seed
and the mean), and the critical N, the smallest N from which every mean final accuracy is at least 0.9 (``None``:
none). Writes ``summary.json`` and ``figures/frequency_<sweep>.png``.
"""

from __future__ import annotations

import json
import re
import statistics
from pathlib import Path

HERE = Path(__file__).resolve().parent
SCORERS = ("probes", "pixel statistics")
RUN = re.compile(r"h32-train1-(\d{3})-x(\d+)__seed(\d+)$")
THRESHOLD = 0.9


def critical_n(ns: list[int], means: list[float]) -> int | None:
    """The smallest N from which every mean final accuracy is at least :data:`THRESHOLD`."""
    for i, n in enumerate(ns):
        if all(m >= THRESHOLD for m in means[i:]):
            return n
    return None


def sweep_summary(machine: dict) -> dict:
    rows: dict[int, dict[int, dict]] = {}
    varied = None
    for name, run in machine["runs"].items():
        match = RUN.search(name)
        if match is None:
            continue
        varied, n, seed = match.group(1), int(match.group(2)), int(match.group(3))
        rows.setdefault(n, {})[seed] = run
    ns = sorted(rows)
    out = {"class": varied, "n": ns, "seeds": {n: sorted(rows[n]) for n in ns}, "levels": {}}
    for level in ("0", "1", "2"):
        out["levels"][level] = {}
        for scorer in SCORERS:
            per_n = [[rows[n][s]["levels"][level][scorer]["final"] for s in sorted(rows[n])] for n in ns]
            means = [round(statistics.mean(v), 3) for v in per_n]
            out["levels"][level][scorer] = {"final": per_n, "mean": means, "critical_n": critical_n(ns, means)}
    out["varied_class_fidelity"] = [round(statistics.mean(rows[n][s]["final_per_class"][varied]["fidelity"]
                                                      for s in rows[n]), 3) for n in ns]
    out["varied_class_final"] = {
        scorer: [round(statistics.mean(rows[n][s]["final_per_class"][varied][scorer] for s in rows[n]), 3)
                 for n in ns] for scorer in SCORERS}
    return out


def plot(name: str, sweep: dict, path: Path) -> None:
    from compgen.evaluation.figure_style import level_color, save_figure, subplots

    fig, ax = subplots(figsize=(6, 4))
    x = [max(n, 0.5) for n in sweep["n"]]  # N = 0 sits at 0.5 on the log axis
    for level, by_scorer in sweep["levels"].items():
        for scorer, style in zip(SCORERS, ("-", "--"), strict=True):
            row = by_scorer[scorer]
            ax.plot(x, row["mean"], style, marker="o", color=level_color(int(level)),
                    label=f"level {level}, {scorer}")
            for xi, per_seed in zip(x, row["final"], strict=True):  # each seed's final accuracy, faint
                ax.scatter([xi] * len(per_seed), per_seed, s=8, color=level_color(int(level)), alpha=0.35,
                           marker="o" if scorer == "probes" else "x")
            if row["critical_n"] is not None and scorer == "probes":
                ax.axvline(max(row["critical_n"], 0.5), color=level_color(int(level)), linestyle=":", linewidth=1)
    ax.set_xscale("log")
    ax.set_xticks(x, [str(n) for n in sweep["n"]])
    ax.set(xlabel=f"images of class {sweep['class']} (others: 1250)", ylabel="final multiplicative accuracy",
           ylim=(-0.02, 1.02),
           title=f"critical frequency, {name}\n(lines: mean; points: seeds; dotted: critical N, probes)")
    ax.legend(frameon=False, fontsize=7)
    save_figure(fig, path)


def main() -> None:
    from compgen.data.concept_graph_builder import ConceptGraphShapes

    other = ConceptGraphShapes.builder_configs["okawa-h32-train1"].images_per_class
    summary = {"threshold": THRESHOLD, "other_classes_images": other, "sweeps": {}}
    for name in ("colour", "shape"):
        path = HERE / name / "summary.json"
        if path.is_file():
            machine = json.loads(path.read_text())
            summary["sweeps"][name] = sweep_summary(machine) | {"machine": machine["machine"], "date": machine["date"]}
            plot(name, summary["sweeps"][name], HERE / "figures" / f"frequency_{name}.png")
    (HERE / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")


if __name__ == "__main__":
    main()
