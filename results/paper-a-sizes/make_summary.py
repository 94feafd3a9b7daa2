"""Paper A's headline by size distribution and pixel budget: the share of seeds held per data variant and split.

    python results/paper-a-sizes/make_summary.py results/paper-a-sizes

Reads the folder's ``summary.json`` and ``logs/`` (written by ``python -m compgen.analysis.results_folder``) and the
baselines, the README's command on the default data, from ``results/paper-a-seeds/`` (:data:`BASELINES`: ten seeds
on H32-train1, three on H32-train2, each with its own date and machine), and the results folders beside it: later
seeds (``more-seeds/``), Paper A's length (``length/``), the other splits (``other-splits/``). Per arm (model of
``studies/paper_a_sizes.yaml`` and its split): per seed whether Paper A's headline holds by compgen's strict criterion
(:func:`compgen.evaluation.compare.headline_held`: both scorers, the last three evaluations, fidelity >= 0.75) and by
Paper A's own measure (the probes alone, same evaluations, no fidelity), each level's lowest accuracy, the fidelity and
the classes below 0.9; per arm the seeds held by each measure (``held_seeds``, ``held_by_probes_only_seeds``: what
the README's counts point at in ``claims.json``) and both shares with their 95% Wilson intervals
(:func:`compgen.evaluation.compare.share_interval`). Writes ``distribution.json``, adds the shares to
``summary.json`` under ``headline_shares`` and draws ``figures/share_held_by_data.png``.
"""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1] / "src"))

from compgen.evaluation.compare import fisher_exact_p, headline_held, share_interval  # noqa: E402
from compgen.evaluation.figure_style import save_figure, subplots  # noqa: E402
from compgen.evaluation.tracker import read_log  # noqa: E402
from compgen.shapes import SIZE_RANGES, SIZE_SCALE  # noqa: E402

DATA = {"film": "default (sizes apart, scale 1)", "sizes-touching": "sizes touching", "scale-1.3": "object scale 1.3",
        "sizes-touching-scale-1.3": "sizes touching, scale 1.3"}
"""Each model of studies/paper_a_sizes.yaml (without its ``-train2`` suffix) and the data it trains on."""
BASELINES = {"H32-train1": ("candidates", "film__full__okawa-h32-train1__"),
             **{f"H32-train{n}": ("film-splits", f"film-other-splits__full__okawa-h32-train{n}__") for n in (2, 3, 4)}}
"""Per split: the folder of ``results/paper-a-seeds/`` and the runs in it that are the README's command on the default
data (FiLM, quickstart, bf16, 800 steps)."""
STEPS = 800
"""The README command's length: a run whose log ends earlier was stopped unfinished and is left out."""
LENGTH_FOLDER, LENGTH_STEPS = "length", 7800
"""Where the Paper-A-length runs are (``studies/paper_a_length.yaml``, a results folder of their own), their length."""
LENGTH_MODELS = {"length-default": "film", "length-touching": "sizes-touching"}
"""Each model of ``studies/paper_a_length.yaml`` and the 800-step model of the same data."""
MORE_SEEDS_FOLDER = "more-seeds"
"""Where later seeds of the 800-step arms are (``studies/paper_a_sizes.yaml``, run on another date: a results folder
of their own); each joins the arm of its model and split."""
OTHER_SPLITS_FOLDER = "other-splits"
"""Where the H32-train3 and -train4 runs at the touching data are (``studies/paper_a_sizes_other_splits.yaml``, a
results folder of their own)."""


def data_variants() -> dict[str, dict]:
    """What each variant draws: the scale range of each size class, the object scale in the frame and the pixels an
    object has against the default (the scale squared)."""
    variants = {}
    for model, (ranges, object_scale) in {"film": ("apart", 1.0), "sizes-touching": ("touching", 1.0),
                                          "scale-1.3": ("apart", 1.3),
                                          "sizes-touching-scale-1.3": ("touching", 1.3)}.items():
        jitter = SIZE_RANGES[ranges]
        variants[DATA[model]] = {
            "size_ranges": ranges, "size_jitter": jitter, "object_scale": object_scale,
            "canonical_scales (held-out classes are sampled at these)": dict(SIZE_SCALE),
            "pixels_against_default": round(object_scale ** 2, 2),
            **{f"{size}_scales": [round(value - jitter, 2), round(value + jitter, 2)]
               for size, value in SIZE_SCALE.items()},
            # H32-train1 shows the cone only large: how far below the smallest cone seen its small class value lies
            "h32_train1_small_cone_below_smallest_cone_seen": round(SIZE_SCALE["large"] - jitter
                                                                    - SIZE_SCALE["small"], 2)}
    return variants


def arm_and_split(run: str) -> tuple[str, str, int]:
    """``(model without its split suffix, split, seed)`` of a study cell name ``model__full__dataset__seedN``."""
    model, _, dataset, seed = run.split("__")
    split = next((f"H32-train{n}" for n in (2, 3, 4) if f"train{n}" in dataset), "H32-train1")
    return model.removesuffix(f"-{split.removeprefix('H32-')}"), split, int(seed.removeprefix("seed"))


def failing_classes(record: dict) -> dict[str, dict]:
    """Classes below 0.9 by either scorer at a record, with both accuracies and the fidelity."""
    found = {}
    for name, probes in record["accuracy"].items():
        pixel = record.get("pixel_accuracy", {}).get(name, probes)
        if min(probes, pixel) < 0.9:
            found[name] = {"probes": round(probes, 4), "pixel statistics": round(pixel, 4),
                           "fidelity": record.get("fidelity", {}).get(name)}
    return found


def seed_row(seed: int, records: list[dict], wall_clock_s: float | None) -> dict:
    strict = headline_held(records)
    probes_only = headline_held(records, scorers=("probes",), min_fidelity=None)
    return {"seed": seed, "held": strict["held"], "held_by_probes_only": probes_only["held"],
            "lowest_accuracy": {k: round(v, 4) for k, v in strict["lowest_accuracy"].items()},
            "fidelity": strict["fidelity"], "failing_classes": failing_classes(records[-1]),
            "wall_clock_s": wall_clock_s}


def shares(seeds: list[dict]) -> dict:
    n = len(seeds)
    strict = sum(s["held"] for s in seeds)
    probes = sum(s["held_by_probes_only"] for s in seeds)
    return {"seeds_run": [s["seed"] for s in seeds],
            "held_seeds": [s["seed"] for s in seeds if s["held"]],
            "held_by_probes_only_seeds": [s["seed"] for s in seeds if s["held_by_probes_only"]],
            "held": f"{strict} of {n}", "held_interval_95": share_interval(strict, n),
            "held_by_probes_only": f"{probes} of {n}", "held_by_probes_only_interval_95": share_interval(probes, n)}


def collect(folder: Path) -> dict:
    summary = json.loads((folder / "summary.json").read_text())
    arms: dict[str, dict] = {}
    for run, entry in sorted(summary["runs"].items()):
        if entry["last_step"] < STEPS:
            continue
        model, split, seed = arm_and_split(run)
        study = "paper_a_sizes_new_seeds" if seed >= 10 else "paper_a_sizes"
        key = f"{model} on {split}" + (" (seeds 10-19)" if seed >= 10 else "")
        arm = arms.setdefault(key, {"data": DATA[model], "split": split, "study": f"studies/{study}.yaml",
                                    "source": folder.name, "seeds": []})
        arm["seeds"].append(seed_row(seed, read_log(folder / entry["log"]), entry.get("wall_clock_s")))
    for split, (name, prefix) in BASELINES.items():
        baseline = HERE.parent / "paper-a-seeds" / name
        base = json.loads((baseline / "summary.json").read_text())
        runs = sorted((run for run in base["runs"] if run.startswith(prefix)), key=lambda run: arm_and_split(run)[2])
        arms[f"film on {split}"] = {
            "data": DATA["film"], "split": split, "study": "studies/paper_a_preset_candidates.yaml",
            "source": f"results/paper-a-seeds/{name} ({base['date']}, {base['machine']})",
            "seeds": [seed_row(arm_and_split(run)[2], read_log(baseline / base["runs"][run]["log"]),
                               base["runs"][run].get("wall_clock_s")) for run in runs]}
    more = folder / MORE_SEEDS_FOLDER
    if (more / "summary.json").is_file():  # later seeds of the arms above: each joins its model and split's arm
        runs = json.loads((more / "summary.json").read_text())["runs"]
        for run, entry in sorted(runs.items(), key=lambda item: arm_and_split(item[0])[1:]):
            if entry["last_step"] < STEPS:
                continue
            model, split, seed = arm_and_split(run)
            source = f"{folder.name}/{MORE_SEEDS_FOLDER}"
            arm = arms.setdefault(f"{model} on {split}", {  # an arm run only on the later date starts here
                "data": DATA[model], "split": split, "study": "studies/paper_a_sizes.yaml", "source": source,
                "seeds": []})
            if seed in {row["seed"] for row in arm["seeds"]}:
                raise ValueError(f"{run}: seed {seed} of {model} on {split} is in the arm already")
            if source not in arm["source"]:
                arm["source"] += f", seeds {seed}+: {source}"
                arm["study"] += "" if "paper_a_sizes.yaml" in arm["study"] else ", studies/paper_a_sizes.yaml"
            arm["seeds"].append(seed_row(seed, read_log(more / entry["log"]), entry.get("wall_clock_s")))
            arm["seeds"].sort(key=lambda row: row["seed"])
    length = folder / LENGTH_FOLDER
    if (length / "summary.json").is_file():  # Paper A's schedule: the README's U-Net to 7800 steps, LR to 0
        runs = json.loads((length / "summary.json").read_text())["runs"]
        for run, entry in sorted(runs.items(), key=lambda item: arm_and_split(item[0])[2]):
            if entry["last_step"] < LENGTH_STEPS:
                continue
            model, split, seed = arm_and_split(run)
            model = LENGTH_MODELS[model]
            key = f"{model} on {split} ({LENGTH_STEPS} steps)"
            arm = arms.setdefault(key, {"data": DATA[model], "split": split,
                                        "study": "studies/paper_a_length.yaml", "source": f"{folder.name}/length",
                                        "seeds": []})
            arm["seeds"].append(seed_row(seed, read_log(length / entry["log"]), entry.get("wall_clock_s")))
    other = folder / OTHER_SPLITS_FOLDER
    if (other / "summary.json").is_file():  # H32-train3 and -train4 at the touching data
        runs = json.loads((other / "summary.json").read_text())["runs"]
        for run, entry in sorted(runs.items(), key=lambda item: arm_and_split(item[0])[1:]):
            if entry["last_step"] < STEPS:
                continue
            model, split, seed = arm_and_split(run)
            arm = arms.setdefault(f"{model} on {split}", {
                "data": DATA[model], "split": split, "study": "studies/paper_a_sizes_other_splits.yaml",
                "source": f"{folder.name}/{OTHER_SPLITS_FOLDER}", "seeds": []})
            arm["seeds"].append(seed_row(seed, read_log(other / entry["log"]), entry.get("wall_clock_s")))
    first, later = arms.get("sizes-touching on H32-train1"), arms.get("sizes-touching on H32-train1 (seeds 10-19)")
    if first and later:  # the chosen data on every seed run: the tighter estimate of its share
        arms["sizes-touching on H32-train1 (seeds 0-19)"] = first | {"seeds": first["seeds"] + later["seeds"],
                                                                     "study": f"{first['study']}, {later['study']}"}
    for arm in arms.values():
        arm.update(shares(arm["seeds"]))
        times = [s["wall_clock_s"] for s in arm["seeds"] if s["wall_clock_s"]]
        arm["wall_clock_s"] = [min(times), max(times)] if times else None
    for key, arm in arms.items():  # Paper A's length against the README's length on the same seeds (paired)
        short = arms.get(key.removesuffix(f" ({LENGTH_STEPS} steps)"))
        if key.endswith(f"({LENGTH_STEPS} steps)") and short is not None:
            rows = {row["seed"]: row for row in short["seeds"]}
            if all(row["seed"] in rows for row in arm["seeds"]):
                arm[f"same_seeds_at_{STEPS}_steps"] = shares([rows[row["seed"]] for row in arm["seeds"]])
    for arm in arms.values():  # each variant against the default data of its split, by both measures
        base = arms.get(f"film on {arm['split']}")
        if base is None or base is arm:
            continue
        for key in ("held", "held_by_probes_only"):
            a, n = map(int, arm[key].split(" of "))
            b, m = map(int, base[key].split(" of "))
            arm[f"{key}_fisher_p_against_default"] = fisher_exact_p(a, n, b, m)
    return {"machine": summary["machine"], "date": summary["date"], "data_variants": data_variants(),
            "arms": dict(sorted(arms.items()))}


def tick_label(name: str, arm: dict) -> str:
    """An arm's data (wrapped), its length and its seeds: the 800-step arms beside Paper A's length."""
    steps = "7800 steps" if "(7800 steps)" in name else "800 steps"
    return f"{textwrap.fill(arm['data'], 16)}\n{steps}\n{len(arm['seeds'])} seeds"


def plot(result: dict, path: Path) -> None:
    """Share of seeds held per data variant, strict and probes-only, one panel per split, with 95% intervals."""
    splits = ["H32-train1", "H32-train2"]
    fig, axes = subplots(1, len(splits), figsize=(11, 4), sharey=True)
    for ax, split in zip(axes, splits, strict=True):
        arms = [(name, arm) for name, arm in result["arms"].items() if arm["split"] == split and "seeds " not in name]
        for offset, (key, label, colour) in enumerate((("held", "strict (both scorers, fidelity)", "tab:blue"),
                                                       ("held_by_probes_only", "probes only (Paper A)", "tab:grey"))):
            for index, (_, arm) in enumerate(arms):
                held, total = map(int, arm[key].split(" of "))
                low, high = arm[f"{key}_interval_95"]
                x = index + (offset - 0.5) * 0.3
                ax.bar(x, held / total, width=0.3, color=colour, label=label if index == 0 else None)
                ax.errorbar(x, held / total, yerr=[[held / total - low], [high - held / total]], color="black",
                            capsize=3)
        ax.set_xticks(range(len(arms)), [tick_label(name, arm) for name, arm in arms], fontsize=7)
        ax.set_title(f"{split}: the README's U-Net")
        ax.set_ylim(0, 1.05)
        ax.axhline(0.8, color="tab:red", linestyle=":", linewidth=1, label="the target: 8 of 10")
    axes[0].set_ylabel("share of seeds that hold Paper A's headline")
    axes[-1].legend(fontsize=7, loc="upper left")  # over its empty default-data bars, clear of the data
    save_figure(fig, path)


def main() -> None:
    folder = Path(sys.argv[1])
    result = collect(folder)
    (folder / "distribution.json").write_text(json.dumps(result, indent=1) + "\n")
    summary = json.loads((folder / "summary.json").read_text())
    keys = ("data", "split", "source", "seeds_run", "held_seeds", "held_by_probes_only_seeds", "held",
            "held_interval_95", "held_fisher_p_against_default",
            "held_by_probes_only", "held_by_probes_only_interval_95", "held_by_probes_only_fisher_p_against_default",
            f"same_seeds_at_{STEPS}_steps")
    summary["headline_shares"] = {name: {k: arm[k] for k in keys if k in arm} for name, arm in result["arms"].items()}
    (folder / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    (folder / "figures").mkdir(exist_ok=True)
    plot(result, folder / "figures" / "share_held_by_data.png")
    for name, arm in result["arms"].items():
        print(f"{name} [{arm['data']}]: strict {arm['held']} {arm['held_interval_95']} "
              f"p={arm.get('held_fisher_p_against_default')}, probes only {arm['held_by_probes_only']} "
              f"{arm['held_by_probes_only_interval_95']} p={arm.get('held_by_probes_only_fisher_p_against_default')}, "
              f"wall-clock {arm['wall_clock_s']}")
        for seed in arm["seeds"]:
            verdict = "held" if seed["held"] else ("probes only" if seed["held_by_probes_only"] else "not held")
            print(f"  seed {seed['seed']}: {verdict}, lowest {seed['lowest_accuracy']}, fidelity {seed['fidelity']}, "
                  f"failing {sorted(seed['failing_classes'])}")


if __name__ == "__main__":
    main()
