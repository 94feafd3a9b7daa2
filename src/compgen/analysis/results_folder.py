"""Results folders: the logs, numbers and figures behind every result the docs report, in one place per experiment.

    python -m compgen.analysis.results_folder LOG_OR_STUDY_DIR [...] --output results/NAME --machine "..." [--date D]

writes ``results/NAME/logs/*.jsonl`` (the learning-dynamics logs; ``training_logs/`` the training scalars of runs that
logged them), ``summary.json`` (per run: final, best and first
step at 0.9 of every level by both scorers, whether a level rose then collapsed, the run's command when a study ran
it, its wall-clock; per study arm: the study summary) and ``figures/`` (the studies' overlays; learning dynamics,
emergence order, sample grids and training diagnostics of the runs named with ``--figures``). The folder's
``README.md`` is written by hand: what was run and what it shows.
:func:`unbacked_numbers` lists the numbers a README quotes that its ``summary.json`` does not hold, so a test can hold
every results README to its data.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
from collections.abc import Sequence
from datetime import date as dates
from pathlib import Path
from typing import Any

from ..atomic_io import atomic_write_text
from ..cli import ArgumentParser
from ..evaluation.compare import REPORTED_SCORERS, Records, arm_summaries, headline_held, rose_then_collapsed
from ..evaluation.curves import first_step_at
from ..evaluation.tracker import own_records, read_log


def run_summary(records: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Per level and scorer: final, best (with its step) and first step at 0.9 (with the run's first evaluation step,
    before which nothing is known); whether the level rose then
    collapsed (peak >= :data:`~compgen.evaluation.compare.COLLAPSE_PEAK`, final that far below); final per class."""
    records = own_records(records)  # a fine-tuning log: its own phase (its source's may have other levels)
    if not records:
        raise ValueError("a run has no evaluation records")
    levels = sorted(records[0]["level_accuracy"], key=int)
    # A first step at 0.9 equal to first_evaluation_step says only "by then": a run may evaluate from a late step
    # (--eval_start_step), and nothing before its first evaluation is known.
    summary: dict[str, Any] = {"first_evaluation_step": int(records[0]["step"]), "last_step": int(records[-1]["step"]),
                               "levels": {}}
    for level in levels:
        entry = {}
        for scorer, key in REPORTED_SCORERS.items():
            if key not in records[0]:
                continue
            values = [float(record[key][level]) for record in records]
            peak = max(range(len(values)), key=values.__getitem__)
            first = first_step_at([int(r["step"]) for r in records], list(values), 0.9)
            entry[scorer] = {"final": round(values[-1], 4), "best": round(values[peak], 4),
                             "best_step": int(records[peak]["step"]), "first_step_0.9": first,
                             "rose_then_collapsed": rose_then_collapsed(values[peak], values[-1])}
        summary["levels"][level] = entry
    last = records[-1]
    summary["final_per_class"] = {
        name: {"probes": round(float(value), 4), "pixel statistics": round(float(last.get("pixel_accuracy", {})
                                                                                  .get(name, float("nan"))), 4),
               "level": int(last["levels"][name]),
               **({"lenient": last["lenient_accuracy"][name]} if "lenient_accuracy" in last else {})}
        for name, value in last["accuracy"].items()}
    if "fidelity" in last:  # the typicality check's verdicts and the colour-strength fidelity at the last evaluation
        for name, entry in summary["final_per_class"].items():
            failures = last.get("object_failures", {}).get(name, {})
            entry.update(fidelity=last["fidelity"][name], fidelity_ks=last["fidelity_ks"][name],
                         hybrid=int(failures.get("hybrid", 0)), pale=int(failures.get("pale", 0)))
        summary["final_fidelity_level"] = dict(last["fidelity_level"])
    summary["headline"] = headline_held(records)  # Paper A's criterion: both scorers, last three, fidelity
    summary["wall_clock_s"], parts = run_wall_clock(records)
    if parts > 1:  # resumed from checkpoints that did not carry the clock
        summary["wall_clock_parts"] = parts
    for key in ("scorer_version", "commit"):
        if key in last:
            summary[key] = last[key]
    return summary


def run_wall_clock(records: Sequence[dict[str, Any]]) -> tuple[float, int]:
    """A run's wall-clock seconds and the number of parts it was trained in, from its evaluation records.

    A run resumed from a checkpoint that carries the clock logs it on (``compgen.training.state``); one resumed from an
    older checkpoint starts again at 0, so the clock falls where a part begins. Such a run's time is the sum of each
    part's last evaluation: a lower bound (an earlier part's time from its last evaluation to its checkpoint is not in
    the log)."""
    clocks = [float(record.get("wall_clock_s", 0.0)) for record in records]
    ends = [before for before, after in zip(clocks, clocks[1:], strict=False) if after < before]
    return round(sum(ends) + clocks[-1], 1), len(ends) + 1


def seed_statistics(final: Sequence[float], best: Sequence[float],
                    first_steps: dict[str, Sequence[int | None]]) -> dict[str, Any]:
    """An arm's numbers at one level by one scorer, from its seeds: mean and *sample* standard deviation (n - 1) of
    the final and the best accuracy (rounded to 3 digits, as the docs print them), and each seed's first step at every
    threshold (never averaged: a mean of steps is no evaluation step)."""
    import numpy as np

    stats: dict[str, Any] = {"seeds": len(final)}
    for name, values in (("final", final), ("best", best)):
        array = np.asarray(values, dtype=np.float64)
        stats[name] = [round(float(v), 4) for v in array]
        stats[f"{name}_mean"] = round(float(array.mean()), 3)
        stats[f"{name}_sd"] = round(float(array.std(ddof=1)), 3) if len(array) > 1 else None
    for threshold, steps in first_steps.items():
        stats[f"first_step_{threshold}"] = list(steps)
    return stats


def arm_statistics(arms: dict[str, Sequence[str]], summary: dict[str, Any],
                   thresholds: Sequence[float] = (0.5, 0.9)) -> dict[str, Any]:
    """``{arm: {scorer: {level: seed_statistics}}}`` for arms given as lists of run names of ``summary["runs"]``."""
    from ..evaluation.compare import summarize_arm

    out: dict[str, Any] = {}
    for arm, names in arms.items():
        runs = [own_records(read_log(summary["_dir"] / summary["runs"][name]["log"])) for name in names]
        out[arm] = {"runs": list(names)}
        for scorer, key in REPORTED_SCORERS.items():
            if key not in runs[0][0]:
                continue
            out[arm][scorer] = {
                str(level): seed_statistics(entry.final, entry.best,
                                            {str(t): entry.first_step[t] for t in thresholds})
                for level, entry in summarize_arm(runs, thresholds, key).items()}
    return out


def _add_run(runs: dict[str, dict[str, Any]], name: str, run: dict[str, Any]) -> None:
    """Add a run under ``name``, refusing a second run of that name (one would silently replace the other's log)."""
    if name in runs and Path(runs[name]["log"]).resolve() != Path(run["log"]).resolve():
        raise ValueError(f"two runs are named {name!r}: {runs[name]['log']} and {run['log']}; give them to separate "
                         "results folders, or rename one (a results folder keys its logs by run name)")
    runs[name] = run


def _safe_study_name(name: str) -> str:
    """A study's name as part of a file name in the results folder: no path separators, no ``..``, not empty."""
    if not name or "/" in name or "\\" in name or name in (".", "..") or name.startswith(".."):
        raise ValueError(f"study name {name!r} cannot name files in a results folder (a path would write outside "
                         "--output); rename the study")
    return name


def collect_runs(sources: Sequence[str | Path]) -> dict[str, dict[str, Any]]:
    """``{run name: {"log": path, "samples": dir or None, "command": str or None}}`` from learning-dynamics logs and
    study directories (every cell of a study that logged, named after its cell directory)."""
    runs: dict[str, dict[str, Any]] = {}
    for source in map(Path, sources):
        if source.is_dir() and (source / "summary.json").is_file():  # a study
            study = json.loads((source / "summary.json").read_text())
            for cell in study["cells"]:
                directory = Path(cell["output_dir"])
                if not directory.is_dir():  # a study directory copied from where it ran: its cells moved with it
                    directory = source / "cells" / directory.name
                log = directory / "learning_dynamics.jsonl"
                if log.is_file():
                    _add_run(runs, directory.name, {"log": log, "samples": directory / "samples",
                                                    "command": cell.get("command")})
        elif source.is_file():
            _add_run(runs, source.name.removesuffix(".jsonl").removesuffix("_learning_dynamics"),
                     {"log": source, "samples": None, "command": None})
        else:
            raise FileNotFoundError(f"{source} is neither a learning-dynamics log nor a study directory "
                                    "(with summary.json)")
    if not runs:
        raise ValueError(f"no learning-dynamics logs in {[str(s) for s in sources]}")
    return runs


def write_results(sources: Sequence[str | Path], output: str | Path, machine: str, date: str | None = None,
                  figures: Sequence[str] = (), arms: dict[str, Sequence[str]] | None = None) -> dict[str, Any]:
    """Copy the logs of ``sources`` into ``output/logs``, write ``output/summary.json``, the studies' overlays and,
    for the runs named in ``figures``, every plot of :func:`~compgen.evaluation.plots.plot_all`."""
    from ..evaluation.plots import plot_all
    from .training_diagnostics import TRAINING_LOG, plot_training_diagnostics

    output = Path(output)
    runs = collect_runs(sources)
    for source in map(Path, sources):  # every study's name checked before anything is written
        if source.is_dir() and (source / "summary.json").is_file():
            _safe_study_name(str(json.loads((source / "summary.json").read_text())["study"]))
    summaries = {}
    for name, run in runs.items():  # every log is read and summarized before anything is written
        try:
            records = read_log(run["log"])
            summaries[name] = run_summary(records)
        except (ValueError, KeyError, TypeError, AttributeError, IndexError) as error:
            raise ValueError(f"{run['log']}: not a compgen learning-dynamics log ({type(error).__name__}: "
                             f"{error})") from error
    (output / "logs").mkdir(parents=True, exist_ok=True)
    summary: dict[str, Any] = {"date": date or dates.today().isoformat(), "machine": machine, "runs": {}}
    for name, run in runs.items():
        target = output / "logs" / f"{name}.jsonl"
        shutil.copyfile(run["log"], target)
        records = read_log(target)
        summary["runs"][name] = {"log": f"logs/{target.name}", "command": run["command"], **summaries[name]}
        scalars = Path(run["log"]).parent / TRAINING_LOG  # the training scalars (a task's diagnostics), if logged
        if scalars.is_file():
            (output / "training_logs").mkdir(exist_ok=True)
            shutil.copyfile(scalars, output / "training_logs" / f"{name}.jsonl")
            summary["runs"][name]["training_log"] = f"training_logs/{name}.jsonl"
        if name in figures:
            samples = run["samples"] if run["samples"] is not None and run["samples"].is_dir() else None
            plot_all(target, output / "figures", samples_dir=samples, prefix=f"{name}_")
            if scalars.is_file():
                plot_training_diagnostics(records, read_log(scalars), output / "figures" / f"{name}_diagnostics.png",
                                          title=name)
    study_arms: dict[str, dict[str, dict[str, Records]]] = {}
    for source in map(Path, sources):
        if source.is_dir() and (source / "summary.json").is_file():
            study = json.loads((source / "summary.json").read_text())
            # A study run in parts (e.g. seeds on two machines) merges into one entry, its arms' statistics over
            # every part's runs; the first part's overlays stay.
            name = _safe_study_name(str(study["study"]))
            summary.setdefault("studies", {}).setdefault(name, {"steps": study["steps"]})
            for cell in study["cells"]:
                run_name = Path(cell["output_dir"]).name
                if run_name in summary["runs"]:
                    study_arms.setdefault(name, {}).setdefault(cell["arm"], {})[run_name] = own_records(read_log(
                        output / summary["runs"][run_name]["log"]))
            if (source / "plots").is_dir():
                (output / "figures").mkdir(parents=True, exist_ok=True)
                for overlay in (source / "plots").glob("overlay_*.png"):
                    target = output / "figures" / f"{name}_{overlay.name}"
                    if not target.exists():
                        shutil.copyfile(overlay, target)
    for name, entry in summary.get("studies", {}).items():
        entry["arms"] = arm_summaries({arm: list(runs.values()) for arm, runs in study_arms.get(name, {}).items()})
    if arms:
        summary["arms"] = arm_statistics(arms, {**summary, "_dir": output})
    atomic_write_text(output / "summary.json", json.dumps(summary, indent=1) + "\n")
    return summary


_NUMBER = re.compile(r"(?<![\w.])(\d+\.\d+|\d{3,})(?![\w.])")


def _numbers_in(value: Any, found: set[float]) -> None:
    if isinstance(value, bool) or value is None:
        return
    if isinstance(value, int | float):
        found.add(float(value))
    elif isinstance(value, str):
        found.update(float(token) for token in _NUMBER.findall(value))
    elif isinstance(value, dict):
        for key, item in value.items():
            _numbers_in(key, found)
            _numbers_in(item, found)
    elif isinstance(value, list | tuple):
        for item in value:
            _numbers_in(item, found)


def unbacked_numbers(readme: str, summary: dict[str, Any]) -> list[str]:
    """Numbers in ``readme`` (decimals, and integers of three digits or more) that no value of ``summary`` gives at
    the precision they are printed with (a mean of seeds must be in the summary as such, not recomputed by eye)."""
    held: set[float] = set()
    _numbers_in(summary, held)
    missing = []
    for token in _NUMBER.findall(readme):
        decimals = len(token.split(".")[1]) if "." in token else 0
        value = float(token)
        if not any(abs(round(number, decimals) - value) < 10 ** -(decimals + 3) for number in held):
            missing.append(token)
    return missing


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("sources", nargs="+", help="learning-dynamics logs (.jsonl) or study directories")
    parser.add_argument("--output", required=True, help="the results folder, e.g. results/paper-a-reproduction")
    parser.add_argument("--machine", required=True, help="what ran it, e.g. '2-core AMD EPYC (AVX2), CPU'")
    parser.add_argument("--date", default=None, help="when it ran (default: today)")
    parser.add_argument("--figures", nargs="*", default=[], help="runs that get every plot (dynamics, emergence "
                        "order, samples); the studies' overlays are always copied")
    parser.add_argument("--arm", nargs="+", action="append", default=[], metavar=("NAME", "RUN"),
                        help="an arm and its runs (one per seed): mean, sample standard deviation and each seed's "
                        "first steps per level and scorer go into summary.json under 'arms'")
    args = parser.parse_args(argv)
    arms = {arm[0]: arm[1:] for arm in args.arm}
    for name, runs in arms.items():  # checked before anything is written: a run counted twice is one seed, not two
        if not runs:
            parser.error(f"--arm {name}: name its runs, one per seed")
        if len(set(runs)) != len(runs):
            parser.error(f"--arm {name}: a run is named twice ({sorted({r for r in runs if runs.count(r) > 1})}); "
                         "each seed's run once")
    if len(arms) != len(args.arm):
        parser.error("--arm: an arm is named twice")
    try:
        unknown = sorted((set(args.figures) | {run for runs in arms.values() for run in runs})
                         - set(collect_runs(args.sources)))
        if unknown:
            raise ValueError(f"--figures or --arm names runs that are not among the sources: {unknown}")
        summary = write_results(args.sources, args.output, args.machine, args.date, figures=args.figures, arms=arms)
    except (ValueError, FileNotFoundError) as error:  # checked before anything is written
        parser.error(str(error))
    print(f"{len(summary['runs'])} runs -> {args.output}")
    return summary


if __name__ == "__main__":
    main()


def stale_runs(folder: Path) -> list[str]:
    """Runs of ``folder``'s summary.json whose levels or last step are not what their logs give now: a summary written
    before its log changed (a run resumed, a log re-scored) would otherwise back a README it no longer matches."""
    summary_path = folder / "summary.json"
    if not summary_path.is_file():
        return []
    problems = []
    for name, run in json.loads(summary_path.read_text()).get("runs", {}).items():
        log = folder / run["log"] if isinstance(run, dict) and isinstance(run.get("log"), str) else None
        if log is None or not log.is_file() or "levels" not in run:
            continue
        fresh = run_summary(own_records(read_log(log)))
        for key in ("last_step", "levels"):
            if run.get(key) != fresh.get(key):
                problems.append(f"{folder.name}/summary.json: {name}'s {key!r} is not what {run['log']} gives")
    return problems
