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

This module is the loop's side: what it is handed (:class:`InitialWeights`), loading them and the source phase of the
log. Resolving ``--init_from`` into :class:`InitialWeights`, once per run before any work, is the command line's
(:func:`compgen.launch.init_from.check_init_from`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file
from torch import nn

from ..evaluation.tracker import SOURCE_PHASE
from ..models.transformer_block import convert_legacy_block_weights

FINE_TUNE_PHASE = "fine-tune"


@dataclass(frozen=True)
class InitialWeights:
    """Where a fine-tuning run's weights come from: the weight files that may fit its model, the step they were
    taken at and the source run's records up to it."""

    path: Path
    weight_files: tuple[Path, ...]
    step: int
    records: tuple[dict[str, Any], ...]
    model_configs: dict[str, dict[str, Any]] = field(default_factory=dict)
    """The configurations of the models there, by class name (an export's components, a checkpoint's
    ``model_config.json``; empty for a checkpoint written before compgen recorded them)."""
    tokenizer: Path | None = None
    """The tokenizer the source's model read (an export's ``vqvae/`` or ``vae/``; for a checkpoint, its run's
    ``--tokenizer_path`` or ``tokenizer/``), if any."""
    objective: str | None = None
    """What the source's DiT learned, where recorded: ``"ddpm"`` (noise, v or sample prediction) or ``"flow"`` (a
    velocity field); the same class computes either, so the class check alone cannot tell them apart."""

    def check_objective(self, objective: str) -> None:
        """Refuse, before any work, weights trained for the other objective of the same architecture."""
        if self.objective is not None and self.objective != objective:
            names = {"ddpm": "a DDPM model (noise, v or sample prediction)", "flow": "a flow-matching velocity field"}
            raise ValueError(f"--init_from {self.path}: holds {names[self.objective]}, but this script trains "
                             f"{names[objective]}; its weights would be read as the other quantity")

    def check_model_class(self, model_class: type) -> None:
        """Refuse, before any work, weights of another architecture than ``model_class`` (as far as recorded)."""
        if self.model_configs and model_class.__name__ not in self.model_configs:
            raise ValueError(f"--init_from {self.path}: holds {', '.join(sorted(self.model_configs))}, not the "
                             f"{model_class.__name__} this script trains")

    def config_of(self, model_class: type) -> dict[str, Any] | None:
        """The source's configuration of ``model_class`` (``None`` where not recorded)."""
        return self.model_configs.get(model_class.__name__)


def load_initial_weights(model: nn.Module, initial: InitialWeights) -> str:
    """Load into ``model`` (or the one child module it fits, e.g. MaskGIT's transformer inside its JEPA wrapper) the
    first weight file of ``initial`` whose tensor names match exactly; returns what was loaded where. Raises
    ``ValueError`` when no file fits, naming the nearest mismatch."""
    targets = [("model", model)] + [(f"model.{name}", child) for name, child in model.named_children()]
    problems = []
    for file in initial.weight_files:
        weights = load_file(str(file))
        convert_legacy_block_weights(weights)  # blocks saved by an older compgen (nn.TransformerEncoderLayer)
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
