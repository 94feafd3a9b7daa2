"""The folder's comparisons of shares of seeds as one family, and the verdicts too near the fidelity bar to read.

    python results/paper-a-sizes/comparisons.py

Reads ``distribution.json`` (written by ``make_summary.py``) and two logs of the same command on two machines. Writes
``comparisons.json``:

- ``family``: every strict Fisher test ``distribution.json`` holds (each arm against the default data of its split,
  ``held_fisher_p_against_default``), with Holm's correction over them
  (:func:`compgen.evaluation.statistics.holm_adjusted`).
- ``also_read``: the other pairs of strict shares the README compares in words, with their Fisher p
  (:func:`compgen.evaluation.statistics.fisher_exact_p`), and Holm's correction over the family and these together.
- ``on_the_bar``: every run whose accuracy part of the criterion passes and whose lowest level fidelity lies within
  :data:`SPREAD` of the bar (:func:`compgen.evaluation.statistics.bar_verdict`): its verdict is not read as an effect.
- ``machine_spread``: the per-level fidelities of the quickstart on H32-train1, seed 0, bf16, on a 2-core AMD EPYC and
  a 2-core Intel Xeon (different commits), and their largest difference, which :data:`SPREAD` covers.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1] / "src"))

from compgen.evaluation.compare import HEADLINE_ACCURACY, HEADLINE_FIDELITY  # noqa: E402
from compgen.evaluation.statistics import bar_verdict, fisher_exact_p, holm_adjusted  # noqa: E402
from compgen.evaluation.tracker import read_log  # noqa: E402

SPREAD = 0.02
"""How near the fidelity bar a run's lowest level fidelity must lie to be called on the bar: at least the largest
level-fidelity difference between the two machines of :data:`MACHINE_RUNS` on the same command and seed."""
MACHINE_RUNS = {
    "2-core AMD EPYC (results/paper-a-reproduction/)":
        "paper-a-reproduction/logs/unet__full__okawa-h32-train1__seed0.jsonl",
    "2-core Intel Xeon (results/paper-a-seeds/cpu-bf16/)":
        "paper-a-seeds/cpu-bf16/logs/unet-bf16__full__okawa-h32-train1__seed0.jsonl",
}
ALSO_READ = [  # (arm, arm): pairs of strict shares the README compares in words
    ("sizes-touching on H32-train1 (7800 steps)", "film on H32-train1 (7800 steps)"),
    ("sizes-touching on H32-train1 (7800 steps)", "sizes-touching on H32-train1"),
    ("film on H32-train1 (7800 steps)", "sizes-touching on H32-train1"),
    ("sizes-touching-scale-1.3 on H32-train1", "scale-1.3 on H32-train1"),
    ("sizes-touching-scale-1.3 on H32-train1", "sizes-touching on H32-train1"),
    ("sizes-touching on H32-train1", "sizes-touching on H32-train2"),
]
COMBINED = "sizes-touching on H32-train1 (seeds 0-19)"
"""An arm made of two others' seeds: its runs are counted once, under the two."""


def counts(arm: dict) -> tuple[int, int]:
    held, total = map(int, arm["held"].split(" of "))
    return held, total


def main() -> None:
    arms = json.loads((HERE / "distribution.json").read_text())["arms"]
    family = {}
    for name, arm in arms.items():
        if "held_fisher_p_against_default" in arm:
            base = f"film on {arm['split']}"
            family[f"{name} against {base}"] = {"held": arm["held"], "against": arms[base]["held"],
                                                "fisher_p": arm["held_fisher_p_against_default"]}
    for name, adjusted in holm_adjusted({k: v["fisher_p"] for k, v in family.items()}).items():
        family[name]["holm_p"] = adjusted
    also = {}
    for first, second in ALSO_READ:
        also[f"{first} against {second}"] = {"held": arms[first]["held"], "against": arms[second]["held"],
                                             "fisher_p": fisher_exact_p(*counts(arms[first]), *counts(arms[second]))}
    together = holm_adjusted({k: v["fisher_p"] for k, v in (family | also).items()})
    for name, row in (family | also).items():
        row["holm_p_with_every_comparison"] = together[name]

    runs, on_bar = [], []
    for name, arm in sorted(arms.items()):
        if name == COMBINED:
            continue
        for seed in arm["seeds"]:
            runs.append(f"{name}, seed {seed['seed']}")
            accuracy, fidelity = min(seed["lowest_accuracy"].values()), min(seed["fidelity"].values())
            if accuracy >= HEADLINE_ACCURACY and bar_verdict(fidelity, HEADLINE_FIDELITY, SPREAD) == "on the bar":
                on_bar.append({"arm": name, "seed": seed["seed"], "held": seed["held"],
                               "lowest_level_fidelity": fidelity, "lowest_level_accuracy": accuracy})

    fidelities = {machine: read_log(HERE.parent / path)[-1]["fidelity_level"] for machine, path in MACHINE_RUNS.items()}
    first, second = fidelities.values()
    differences = {level: round(abs(first[level] - second[level]), 4) for level in first}
    if max(differences.values()) > SPREAD:
        raise ValueError(f"the machines differ by {differences}, more than the spread {SPREAD}")

    result = {
        "family": {"what": "every strict Fisher test of distribution.json: an arm against the default data of its "
                           "split (held_fisher_p_against_default); Holm's correction over them",
                   "tests": len(family), "comparisons": family,
                   "smallest_holm_p": min(row["holm_p"] for row in family.values())},
        "also_read": {"what": "other pairs of strict shares the README compares in words; holm_p_with_every_comparison"
                              " is Holm's correction over these and the family together",
                      "tests": len(family) + len(also), "comparisons": also},
        "on_the_bar": {"what": "runs whose accuracy part passes (every level >= 0.9 by both scorers at the last three "
                               "evaluations) and whose lowest level fidelity is within the spread of 0.75",
                       "spread": SPREAD, "runs": runs, "runs_on_the_bar": on_bar},
        "machine_spread": {"what": "per-level fidelity at step 800 of the quickstart on H32-train1, seed 0, bf16, on "
                                   "two machines (different commits)",
                           "fidelity_level": fidelities, "difference": differences,
                           "largest_difference": max(differences.values())},
    }
    (HERE / "comparisons.json").write_text(json.dumps(result, indent=1) + "\n")
    for name, row in (family | also).items():
        print(f"{name}: {row['held']} against {row['against']}, p {row['fisher_p']}, Holm "
              f"{row.get('holm_p', '-')} / {row['holm_p_with_every_comparison']}")
    print(f"on the bar: {len(on_bar)} of {len(runs)} runs; machine spread {differences}")


if __name__ == "__main__":
    main()
