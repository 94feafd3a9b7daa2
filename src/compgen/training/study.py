"""Controlled studies as one command: a grid of models x conditioning x seeds x datasets, run, resumed and summarized.

Paper B's findings are comparisons under control: the same tokens under a categorical or a continuous objective, the
same model under complete or partial conditioning. A study file (YAML) names the grid; ``examples/run_study.py``
runs every cell through the example training scripts, resumes unfinished cells, skips finished ones, reports failed
ones while the rest go on, and writes ``summary.md`` / ``summary.json`` with plots. Example (``studies/``)::

    name: objective-h32
    datasets: [okawa-h32-train1]    # config names, export directories, Hub ids, or new configs (see below)
    seeds: [0, 1, 2]
    steps: 2000
    conditioning: [full]            # any of full, quantized, full+dropout, quantized+dropout
    dropout: 0.1                    # the concept-dropout rate of the +dropout modes (Paper B: about 10%)
    flags: {eval_steps: 250}        # for every cell
    tokenizer:                      # trained once per dataset, shared by every model with tokens: true
      script: examples/train_vq_tokenizer.py
      flags: {preset: cpu-quick}
    models:
      maskgit: {script: examples/train_maskgit_jepa.py, tokens: true, flags: {preset: cpu-quick, jepa_weight: 0}}
      dit: {script: examples/train_dit.py, tokens: true, flags: {preset: cpu-quick},
            conditioning: [full, quantized]}   # a model's own modes replace the study's

A dataset entry may also define a new concept-graph config, exported once into the study's ``data/`` directory::

    datasets:
      - {name: h32-train2, training_classes: ["000", "001", "011", "101"]}
      - {name: tiny, split_preset: H32-train1, images_per_class: 32, test_images_per_class: 4}

The tokenizer trains on each study dataset's training split, unless ``tokenizer: {dataset: ...}`` names one dataset
(a name or a config mapping, as above) for a single tokenizer shared by every cell, e.g. one trained on all eight
classes when the training-split tokenizer caps the held-out classes (its name then labels every result)::

    tokenizer:
      script: examples/train_vq_tokenizer.py
      dataset: {name: h32-all-classes, split_preset: H32-train1, training_classes: [...all eight...]}

Every conditioning mode means the same for every model (:data:`CONDITIONING_MODES`): ``full`` feeds the per-image
continuous values (colour RGB, size) during training and the class values at test time, ``quantized`` the class
indices only; ``+dropout`` replaces each concept by its learned null embedding with probability ``dropout``.
"""

from __future__ import annotations

import json
import os
import shlex
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..atomic_io import atomic_write_text
from .runner import RunResult, run_in_process, worker_pool

CONDITIONING_MODES: dict[str, tuple[str, bool]] = {
    "full": ("full", False),
    "quantized": ("quantized", False),
    "full+dropout": ("full", True),
    "quantized+dropout": ("quantized", True),
}
"""Study conditioning mode -> (the models' ``--conditioning``, whether concepts are dropped at the study's rate)."""

TOKENIZER_DIR = "tokenizer"
CELLS_DIR = "cells"


@dataclass(frozen=True)
class Cell:
    """One training run of a study."""

    model: str
    conditioning: str
    seed: int
    dataset: str
    command: tuple[str, ...]
    output_dir: Path

    @property
    def name(self) -> str:
        return f"{self.model}/{self.conditioning}/{self.dataset}/seed{self.seed}"

    @property
    def arm(self) -> str:
        return f"{self.model} ({self.conditioning})"


@dataclass
class Study:
    """A study file, validated (see the module docstring for the format)."""

    name: str
    models: dict[str, dict[str, Any]]
    seeds: list[int]
    steps: int
    datasets: list[str | dict[str, Any]] = field(default_factory=lambda: ["okawa-h32-train1"])
    conditioning: list[str] = field(default_factory=lambda: ["full"])
    dropout: float = 0.1
    flags: dict[str, Any] = field(default_factory=dict)
    tokenizer: dict[str, Any] | None = None
    description: str = ""

    @classmethod
    def from_file(cls, path: str | os.PathLike) -> Study:
        import yaml

        with open(path, encoding="utf-8") as f:
            spec = yaml.safe_load(f)
        if not isinstance(spec, dict):
            raise ValueError(f"{path}: a study file is a YAML mapping")
        return cls.from_dict(spec, source=str(path))

    @classmethod
    def from_dict(cls, spec: dict[str, Any], source: str = "study") -> Study:
        known = {f for f in cls.__dataclass_fields__}
        unknown = sorted(set(spec) - known)
        if unknown:
            raise ValueError(f"{source}: unknown study keys {unknown}; known: {sorted(known)}")
        missing = sorted({"name", "models", "seeds", "steps"} - set(spec))
        if missing:
            raise ValueError(f"{source}: missing study keys {missing}")
        study = cls(**spec)
        study.validate(source)
        return study

    def validate(self, source: str = "study") -> None:
        if not self.models:
            raise ValueError(f"{source}: no models")
        for name, model in self.models.items():
            if not isinstance(model, dict) or "script" not in model:
                raise ValueError(f"{source}: model {name!r} needs a script")
            extra = sorted(set(model) - {"script", "tokens", "flags", "conditioning"})
            if extra:
                raise ValueError(f"{source}: model {name!r} has unknown keys {extra}")
            if not Path(model["script"]).is_file():
                raise ValueError(f"{source}: model {name!r}: no script at {model['script']}")
            if model.get("tokens") and self.tokenizer is None:
                raise ValueError(f"{source}: model {name!r} uses tokens but the study has no tokenizer")
        modes = list(self.conditioning) + [c for m in self.models.values() for c in m.get("conditioning", [])]
        bad = [c for c in modes if c not in CONDITIONING_MODES]
        if bad:
            raise ValueError(f"{source}: unknown conditioning modes {bad}; choose from {list(CONDITIONING_MODES)}")
        if not self.seeds or not all(isinstance(s, int) for s in self.seeds):
            raise ValueError(f"{source}: seeds must be a non-empty list of integers")
        if not isinstance(self.steps, int) or self.steps < 1:
            raise ValueError(f"{source}: steps must be a positive integer")
        if not 0 < self.dropout < 1:
            raise ValueError(f"{source}: dropout must be in (0, 1)")
        if self.tokenizer is not None:
            if "script" not in self.tokenizer:
                raise ValueError(f"{source}: the tokenizer needs a script")
            extra = sorted(set(self.tokenizer) - {"script", "flags", "dataset"})
            if extra:
                raise ValueError(f"{source}: the tokenizer has unknown keys {extra}")
        for entry in self.datasets + ([self.tokenizer.get("dataset")] if self.tokenizer else []):
            if entry is None:
                continue
            if isinstance(entry, dict) and not entry.get("name"):
                raise ValueError(f"{source}: a dataset defined in the study needs a name: {entry}")
            if not isinstance(entry, str | dict):
                raise ValueError(f"{source}: a dataset is a name or a config mapping, got {entry!r}")

    @property
    def dataset_names(self) -> list[str]:
        return [entry if isinstance(entry, str) else entry["name"] for entry in self.datasets]

    def _defined_datasets(self) -> list[dict[str, Any]]:
        """The dataset configs the study defines (its datasets' and its tokenizer's)."""
        entries = list(self.datasets) + [(self.tokenizer or {}).get("dataset")]
        return [entry for entry in entries if isinstance(entry, dict)]

    def tokenizer_dataset(self, dataset: str) -> str:
        """The dataset whose training split trains the tokenizer of ``dataset``'s cells."""
        entry = (self.tokenizer or {}).get("dataset")
        if entry is None:
            return dataset
        return entry if isinstance(entry, str) else entry["name"]

    def dataset_flags(self, output_dir: Path, name: str) -> dict[str, str]:
        """``--dataset`` (and ``--dataset_config``) for one dataset of the study."""
        for entry in self._defined_datasets():
            if entry["name"] == name:
                return {"dataset": str(output_dir / "data" / _slug(name)), "dataset_config": name}
        return {"dataset": name}

    def prepare_datasets(self, output_dir: Path) -> None:
        """Export the datasets the study defines (once; a later run finds them)."""
        from ..data.concept_graph_builder import ConceptGraphShapesConfig
        from ..data.export import export_concept_graph_configs

        for entry in self._defined_datasets():
            target = output_dir / "data" / _slug(entry["name"])
            if not (target / "README.md").is_file():
                export_concept_graph_configs([ConceptGraphShapesConfig(**entry)], target,
                                             cache_dir=str(output_dir / "data" / ".cache"))

    def tokenizer_dir(self, output_dir: Path, dataset: str) -> Path:
        return output_dir / TOKENIZER_DIR / _slug(self.tokenizer_dataset(dataset))

    def tokenizer_commands(self, output_dir: Path) -> list[tuple[str, ...]]:
        """One tokenizer run per tokenizer dataset (only if a model uses tokens)."""
        if self.tokenizer is None or not any(m.get("tokens") for m in self.models.values()):
            return []
        datasets = dict.fromkeys(self.tokenizer_dataset(dataset) for dataset in self.dataset_names)
        return [(self.tokenizer["script"], *flags_to_argv(
                    self.tokenizer.get("flags", {}) | self.dataset_flags(output_dir, dataset)
                    | {"output_dir": str(self.tokenizer_dir(output_dir, dataset)), "resume_from_checkpoint": "latest"}))
                for dataset in datasets]

    def cells(self, output_dir: Path) -> list[Cell]:
        """Every cell of the grid, in a fixed order (dataset, model, conditioning, seed)."""
        cells = []
        for dataset in self.dataset_names:
            for model_name, model in self.models.items():
                for mode in model.get("conditioning", self.conditioning):
                    conditioning, dropped = CONDITIONING_MODES[mode]
                    for seed in self.seeds:
                        directory = output_dir / CELLS_DIR / _slug(f"{model_name}__{mode}__{dataset}__seed{seed}")
                        flags = self.flags | model.get("flags", {}) | {
                            "conditioning": conditioning, "concept_dropout": self.dropout if dropped else 0.0,
                            "seed": seed, "max_train_steps": self.steps, **self.dataset_flags(output_dir, dataset),
                            "output_dir": str(directory), "resume_from_checkpoint": "latest"}
                        if model.get("tokens"):
                            flags["vqvae_path"] = str(self.tokenizer_dir(output_dir, dataset))
                        command = (model["script"], *flags_to_argv(flags))
                        cells.append(Cell(model_name, mode, seed, dataset, command, directory))
        return cells


def flags_to_argv(flags: dict[str, Any]) -> list[str]:
    """``{"preset": "cpu-quick", "use_ema": False}`` -> ``["--preset", "cpu-quick", "--no_use_ema"]``."""
    argv: list[str] = []
    for name, value in flags.items():
        if isinstance(value, bool):
            argv.append(f"--{name}" if value else f"--no_{name}")
        elif value is not None:
            argv += [f"--{name}", str(value)]
    return argv


def _slug(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "-" for c in text)


def cell_finished(cell: Cell, steps: int) -> bool:
    """A cell is finished when its export is complete and its log reached the last step."""
    from ..evaluation.tracker import read_log

    log = cell.output_dir / "learning_dynamics.jsonl"
    if not ((cell.output_dir / "model_index.json").is_file() or (cell.output_dir / "config.json").is_file()):
        return False
    if not log.is_file():
        return True  # trained without evaluation
    records = read_log(log)
    return bool(records) and records[-1]["step"] >= steps


def _run_cell(command: tuple[str, ...], threads: int | None) -> RunResult:
    if threads:
        import torch

        torch.set_num_threads(threads)
    return run_in_process(list(command))


def run_study(study: Study, output_dir: str | os.PathLike, parallel: int = 1, threads_per_worker: int | None = None,
              progress: bool = True) -> dict[str, Any]:
    """Run (or resume) every unfinished cell, then summarize; returns the summary (also written to disk).

    Tokenizers train first (one per dataset), then the cells, one after another in this process (``parallel=1``:
    the right choice on one GPU) or over ``parallel`` worker processes with ``threads_per_worker`` threads each (a
    multi-core CPU). A failing cell is reported and the others go on.
    """
    from concurrent.futures import as_completed

    from tqdm.auto import tqdm

    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    study.prepare_datasets(output_dir)
    statuses: dict[str, dict[str, Any]] = {}
    for command in study.tokenizer_commands(output_dir):
        if (Path(command[command.index("--output_dir") + 1]) / "config.json").is_file():
            continue
        result = _run_cell(command, threads_per_worker)
        statuses[f"tokenizer {command[command.index('--dataset') + 1]}"] = asdict(result)
        if result.status != "ok":
            raise RuntimeError(f"the study's tokenizer failed ({result.error}); its cells cannot run")

    cells = study.cells(output_dir)
    todo = [cell for cell in cells if not cell_finished(cell, study.steps)]
    for cell in cells:
        if cell not in todo:
            statuses[cell.name] = {"status": "finished before", "seconds": 0.0}
    bar = tqdm(total=len(cells), initial=len(cells) - len(todo), desc=f"study {study.name}", disable=not progress)
    if parallel <= 1:
        for cell in todo:
            statuses[cell.name] = asdict(_run_cell(cell.command, threads_per_worker))
            bar.update(1)
    else:
        # Spawned, not forked, workers: this process may already have run torch (a tokenizer).
        with worker_pool(parallel) as pool:
            futures = {pool.submit(_run_cell, cell.command, threads_per_worker or 1): cell for cell in todo}
            for future in as_completed(futures):
                cell = futures[future]
                try:
                    statuses[cell.name] = asdict(future.result())
                except Exception as error:  # a worker that died takes only its cell with it
                    statuses[cell.name] = {"status": "failed", "seconds": 0.0, "error": repr(error)}
                bar.update(1)
    bar.close()
    return write_summary(study, output_dir, cells, statuses)


def write_summary(study: Study, output_dir: Path, cells: Sequence[Cell], statuses: dict[str, dict[str, Any]]
                  ) -> dict[str, Any]:
    """``summary.json`` and ``summary.md`` (both scorers, per arm: final and best per-level accuracy, mean and spread
    over seeds, first steps to 0.5 and 0.9), a learning-dynamics plot per cell and an overlay per level of the arms'
    mean curves."""
    from ..evaluation.compare import SCORERS, comparison_markdown, plot_level_overlay, summarize_arm
    from ..evaluation.plots import plot_learning_dynamics
    from ..evaluation.tracker import read_log

    plots = output_dir / "plots"
    arms: dict[str, list[list[dict[str, Any]]]] = {}
    cell_entries = []
    for cell in cells:
        log = cell.output_dir / "learning_dynamics.jsonl"
        records = read_log(log) if log.is_file() else []
        status = statuses.get(cell.name, {"status": "not run"})
        if records:
            arms.setdefault(cell.arm, []).append(records)
            plot_learning_dynamics(records, plots / f"{cell.output_dir.name}.png", title=cell.name)
        cell_entries.append({"cell": cell.name, "arm": cell.arm, "seed": cell.seed, "dataset": cell.dataset,
                             "output_dir": str(cell.output_dir), "command": shlex.join(cell.command),
                             "last_step": records[-1]["step"] if records else None, **status})
    summary: dict[str, Any] = {"study": study.name, "description": study.description, "steps": study.steps,
                               "cells": cell_entries, "arms": {}}
    lines = [f"# Study {study.name}", "", study.description.strip(), ""] if study.description else \
        [f"# Study {study.name}", ""]
    failed = [c for c in cell_entries if c.get("status") == "failed"]
    lines += [f"{len(cells)} cells ({len({c.arm for c in cells})} model x conditioning arms x {len(study.seeds)} "
              f"seeds x {len(study.datasets)} datasets), {study.steps} steps each; {len(failed)} failed.", ""]
    if study.tokenizer is not None:
        used = sorted({study.tokenizer_dataset(d) for d in study.dataset_names})
        summary["tokenizer_datasets"] = used
        lines += [f"Token models decode through a tokenizer trained on the training split of {', '.join(used)}.", ""]
    for cell in failed:
        lines.append(f"- failed: `{cell['cell']}`: {cell.get('error')}")
    if failed:
        lines.append("")
    for scorer, key in SCORERS.items():
        scored = {arm: runs for arm, runs in arms.items() if all(key in r[0] for r in runs)}
        if not scored:
            continue
        for arm, runs in scored.items():
            summary["arms"].setdefault(arm, {})[scorer] = {
                str(level): {"final_mean": float(sum(s.final) / len(s.final)), "final": s.final, "best": s.best,
                             "first_step_0.5": s.first_step[0.5], "first_step_0.9": s.first_step[0.9]}
                for level, s in summarize_arm(runs, key=key).items()}
        lines += [f"## {scorer}", "", comparison_markdown(scored, key=key), ""]
        overlay = plots / f"overlay_{scorer.replace(' ', '_')}.png"
        plot_level_overlay(scored, overlay, key=key, title=f"{study.name}: {scorer}")
        lines += [f"![mean accuracy per level, {scorer}](plots/{overlay.name})", ""]
    lines += ["## Cells", "", "| cell | status | wall-clock (s) | last step |", "|---|---|---|---|"]
    lines += [f"| {c['cell']} | {c.get('status')} | {c.get('seconds', 0):.0f} | {c['last_step']} |"
              for c in cell_entries]
    atomic_write_text(output_dir / "summary.json", json.dumps(summary, indent=2) + "\n")
    atomic_write_text(output_dir / "summary.md", "\n".join(lines) + "\n")
    return summary
