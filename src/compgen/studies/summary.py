"""A study's summary: both scorers per arm (final and best per-level accuracy, mean and spread over seeds, first steps
to 0.5 and 0.9), a learning-dynamics plot per cell and an overlay per level of the arms' mean curves."""

from __future__ import annotations

import json
import shlex
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..atomic_io import atomic_write_text
from .records import steps_done

if TYPE_CHECKING:
    from .cells import Cell
    from .study import Study


def write_summary(study: Study, output_dir: Path, cells: Sequence[Cell], statuses: dict[str, dict[str, Any]]
                  ) -> dict[str, Any]:
    """``summary.json`` and ``summary.md`` (both scorers, per arm: final and best per-level accuracy, mean and spread
    over seeds, first steps to 0.5 and 0.9), a learning-dynamics plot per cell and an overlay per level of the arms'
    mean curves."""
    from ..evaluation.compare import (
        REPORTED_SCORERS,
        arm_summaries,
        comparison_markdown,
        plot_level_overlay,
        scorer_slug,
    )
    from ..evaluation.plots import plot_learning_dynamics
    from ..evaluation.tracker import own_records, read_log

    plots = output_dir / "plots"
    arms: dict[str, list[list[dict[str, Any]]]] = {}
    cell_entries = []
    for cell in cells:
        log = cell.output_dir / "learning_dynamics.jsonl"
        records = read_log(log) if log.is_file() else []
        status = statuses.get(cell.name, {"status": "not run"})
        if own_records(records):  # a fine-tuning cell's statistics are of its own phase (its plot shows both)
            arms.setdefault(cell.arm, []).append(own_records(records))
            plot_learning_dynamics(records, plots / f"{cell.output_dir.name}.png", title=cell.name)
        cell_entries.append({"cell": cell.name, "arm": cell.arm, "seed": cell.seed, "dataset": cell.dataset,
                             "output_dir": str(cell.output_dir), "command": shlex.join(cell.command),
                             "last_step": _last_step(cell.output_dir, records), **status})
    summary: dict[str, Any] = {"study": study.name, "description": study.description, "steps": study.steps,
                               "cells": cell_entries, "arms": {}}
    lines = [f"# Study {study.name}", "", study.description.strip(), ""] if study.description else \
        [f"# Study {study.name}", ""]
    failed = [c for c in cell_entries if c.get("status") == "failed"]
    lines += [f"{len(cells)} cells ({len({c.arm for c in cells})} model x conditioning x dataset arms x "
              f"{len(study.seeds)} seeds), {study.steps} steps each; {len(failed)} failed.", ""]
    if study.tokenizer is not None:
        used = sorted({study.tokenizer_dataset(d) for d in study.dataset_names})
        summary["tokenizer_datasets"] = used
        lines += [f"Token models with `tokens: true` decode through a tokenizer trained on {', '.join(used)}.", ""]
    lines += tokenizer_sections(study, output_dir, summary)
    for cell in failed:
        lines.append(f"- failed: `{cell['cell']}`: {cell.get('error')}")
    if failed:
        lines.append("")
    summary["arms"] = arm_summaries(arms)
    for scorer, key in REPORTED_SCORERS.items():
        scored = {arm: runs for arm, runs in arms.items() if all(key in r[0] for r in runs)}
        if not scored:
            continue
        lines += [f"## {scorer}", "", comparison_markdown(scored, key=key), ""]
        overlay = plots / f"overlay_{scorer_slug(scorer)}.png"
        plot_level_overlay(scored, overlay, key=key, title=f"{study.name}: {scorer}")
        lines += [f"![mean accuracy per level, {scorer}](plots/{overlay.name})", ""]
    lines += ["## Cells", "", "| cell | status | wall-clock (s) | last step |", "|---|---|---|---|"]
    lines += [f"| {c['cell']} | {c.get('status')} | {c.get('seconds', 0):.0f} | {c['last_step']} |"
              for c in cell_entries]
    atomic_write_text(output_dir / "summary.json", json.dumps(summary, indent=2) + "\n")
    atomic_write_text(output_dir / "summary.md", "\n".join(lines) + "\n")
    return summary


def _last_step(output_dir: Path, records: Sequence[dict[str, Any]]) -> int | None:
    """The last logged step of a cell: its log's, else its export's record (a cell trained with ``no_eval``)."""
    if records:
        return records[-1]["step"]
    done = steps_done(output_dir)
    return None if done is None else done[0] + done[1]


def tokenizer_sections(study: Study, output_dir: Path, summary: dict[str, Any]) -> list[str]:
    """Each study tokenizer's reconstruction accuracy per class by both scorers (its ``vq_reconstruction.json``),
    into ``summary["tokenizers"]`` and as Markdown: what its token models can draw at best from real tokens."""
    from ..evaluation.tokenizer_tables import RECONSTRUCTION_REPORT_NAME, reconstruction_markdown

    lines = []
    for run in study.tokenizer_runs(output_dir):
        path = run.output_dir / RECONSTRUCTION_REPORT_NAME
        if not path.is_file():
            continue
        report = json.loads(path.read_text())
        summary.setdefault("tokenizers", {})[run.name] = {
            "output_dir": str(run.output_dir), "tokenizer_data": report.get("tokenizer_data"),
            "classes": {name: {"probes": entry["probe_accuracy_reconstructed"],
                               "pixel scorer": entry.get("pixel_accuracy_reconstructed")}
                        for name, entry in report["classes"].items()}}
        lines += [f"## Reconstruction accuracy of {run.name}", "", reconstruction_markdown(report), ""]
    return lines
