"""Fine-tuning: start a run from another run's weights (``--init_from PATH``), with one log across both phases.

Paper A's adversarial experiment (Okawa et al. 2023, Sec. 5 and Fig. 9) trains on one training set, then fine-tunes
on another (a missing class added) and asks which capabilities the second phase teaches and which classes it makes
the model forget. ``PATH`` is an exported run (a pipeline directory: the component whose weights fit the model is
loaded; its EMA weights, which the run evaluated), one checkpoint directory (its raw weights), or a run directory
with checkpoints but no export (its latest checkpoint). Modules outside the model (an EMA shadow, a JEPA target) start
fresh from the loaded weights; the optimizer starts fresh, at the fine-tuning run's learning rate.

The fine-tuning run's ``learning_dynamics.jsonl`` starts with the source run's records (``"phase": "source"``, up to
the step the weights were taken at), then its own, whose steps continue the source's (``step`` = source step + steps
taken here; ``"phase": "fine-tune"``, ``"phase_start_step"``), beginning with an evaluation of the loaded weights on
the new data's graph before any update: a class right before and wrong after shows as a fall across the boundary.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file
from torch import nn

from ..evaluation.tracker import read_log
from .checkpoint import CHECKPOINTS_DIR, MODEL_NAME, list_checkpoints

SOURCE_PHASE, FINE_TUNE_PHASE = "source", "fine-tune"


@dataclass(frozen=True)
class InitialWeights:
    """Where a fine-tuning run's weights come from: the weight files that may fit its model, the step they were
    taken at and the source run's records up to it."""

    path: Path
    weight_files: tuple[Path, ...]
    step: int
    records: tuple[dict[str, Any], ...]


def _latest_checkpoint(run_dir: Path) -> tuple[int, Path] | None:
    found = [(step, path) for step, path in list_checkpoints(run_dir / CHECKPOINTS_DIR)
             if (path / MODEL_NAME).is_file()]
    return found[-1] if found else None


def resolve_initial_weights(path: str | Path) -> InitialWeights:
    """Check ``--init_from PATH`` before any work: which weight files it holds, at which step, and its source log.
    Raises ``ValueError`` naming what is missing."""
    source = Path(path).expanduser()
    if not source.exists():
        raise ValueError(f"--init_from {path}: no such directory")
    if not source.is_dir():
        raise ValueError(f"--init_from {path}: not a directory (give an exported run, a checkpoint directory or a "
                         "run directory)")
    if (source / "model_index.json").is_file() or (source / "config.json").is_file():  # an export
        files = tuple(sorted(source.glob("*/diffusion_pytorch_model.safetensors"))
                      + sorted(source.glob("diffusion_pytorch_model.safetensors")))
        if not files:
            raise ValueError(f"--init_from {path}: an export without safetensors weights")
        log = source / "learning_dynamics.jsonl"
        records = read_log(log) if log.is_file() else []
        latest = _latest_checkpoint(source)
        step = records[-1]["step"] if records else latest[0] if latest else 0
        return InitialWeights(source, files, step, tuple(records))
    latest = _latest_checkpoint(source)
    checkpoint = source if (source / MODEL_NAME).is_file() else latest[1] if latest else None
    if checkpoint is None:
        raise ValueError(f"--init_from {path}: holds no export (model_index.json), no checkpoint ({MODEL_NAME}) and "
                         "no checkpoints/checkpoint-N directory")
    state = checkpoint / "trainer_state.json"
    if not state.is_file():
        raise ValueError(f"--init_from {path}: {checkpoint} has no trainer_state.json")
    step = int(json.loads(state.read_text())["step"])
    log = checkpoint.parents[1] / "learning_dynamics.jsonl"
    records = [r for r in read_log(log) if r["step"] <= step] if log.is_file() else []
    return InitialWeights(checkpoint, (checkpoint / MODEL_NAME,), step, tuple(records))


def load_initial_weights(model: nn.Module, initial: InitialWeights) -> str:
    """Load into ``model`` (or the one child module it fits, e.g. MaskGIT's transformer inside its JEPA wrapper) the
    first weight file of ``initial`` whose tensor names match exactly; returns what was loaded where. Raises
    ``ValueError`` when no file fits, naming the nearest mismatch."""
    targets = [("model", model)] + [(f"model.{name}", child) for name, child in model.named_children()]
    problems = []
    for file in initial.weight_files:
        weights = load_file(str(file))
        named = [(where, module, module.state_dict()) for where, module in targets]
        fitting = [(where, module, expected) for where, module, expected in named if set(weights) == set(expected)]
        if not fitting:
            problems.append(f"{file.name} in {file.parent.name}: its tensor names match neither the model nor a part")
        for where, module, expected in fitting:
            shapes = [f"{k}: {tuple(weights[k].shape)} there, {tuple(v.shape)} here" for k, v in expected.items()
                      if weights[k].shape != v.shape]
            if shapes:
                problems.append(f"{file}: shapes differ ({'; '.join(shapes[:3])})")
                continue
            with torch.no_grad():
                module.load_state_dict(weights, strict=True)
            return f"{file} -> {where}"
    raise ValueError(f"--init_from {initial.path}: no weights there fit this script's model (another architecture "
                     f"or other options?): " + "; ".join(problems))


def source_log_lines(initial: InitialWeights) -> list[str]:
    """The source run's records as the first lines of the fine-tuning log, marked as the source phase."""
    return [json.dumps(record | {"phase": SOURCE_PHASE}) + "\n" for record in initial.records]
