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

import inspect
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file
from torch import nn

from ..evaluation.tracker import SOURCE_PHASE, read_log
from ..models.transformer_block import convert_legacy_block_weights
from .checkpoint import CHECKPOINTS_DIR, MODEL_CONFIG_NAME, MODEL_NAME, list_checkpoints
from .run_directory import EXPORT_STATE_NAME

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
    ``--vqvae_path`` or ``tokenizer/``), if any."""

    def check_model_class(self, model_class: type) -> None:
        """Refuse, before any work, weights of another architecture than ``model_class`` (as far as recorded)."""
        if self.model_configs and model_class.__name__ not in self.model_configs:
            raise ValueError(f"--init_from {self.path}: holds {', '.join(sorted(self.model_configs))}, not the "
                             f"{model_class.__name__} this script trains")

    def config_of(self, model_class: type) -> dict[str, Any] | None:
        """The source's configuration of ``model_class`` (``None`` where not recorded)."""
        return self.model_configs.get(model_class.__name__)


def _latest_checkpoint(run_dir: Path) -> tuple[int, Path] | None:
    found = [(step, path) for step, path in list_checkpoints(run_dir / CHECKPOINTS_DIR)
             if (path / MODEL_NAME).is_file()]
    return found[-1] if found else None


def _tokenizer_in(directory: Path) -> Path | None:
    found = [directory / name for name in ("vqvae", "vae") if (directory / name / "config.json").is_file()]
    return found[0] if found else None


def _export_configs(export: Path) -> dict[str, dict[str, Any]]:
    configs = [json.loads(path.read_text()) for path in (export / "config.json", *export.glob("*/config.json"))
               if path.is_file()]
    return {config["_class_name"]: config for config in configs if "_class_name" in config}


def resolve_initial_weights(path: str | Path) -> InitialWeights:
    """Check ``--init_from PATH`` before any work: which weight files it holds, at which step, its source log, its
    models' configurations and the tokenizer its model read. Raises ``ValueError`` naming what is missing."""
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
        state = source / EXPORT_STATE_NAME
        if state.is_file():  # the export's own step: a run resumed past its export logs later records
            step = int(json.loads(state.read_text())["step"])
            records = [r for r in records if r["step"] <= step]
        else:  # an export from before compgen recorded its step
            latest = _latest_checkpoint(source)
            step = records[-1]["step"] if records else latest[0] if latest else 0
        return InitialWeights(source, files, step, tuple(records), _export_configs(source), _tokenizer_in(source))
    latest = _latest_checkpoint(source)
    checkpoint = source if (source / MODEL_NAME).is_file() else latest[1] if latest else None
    if checkpoint is None:
        raise ValueError(f"--init_from {path}: holds no export (model_index.json), no checkpoint ({MODEL_NAME}) and "
                         "no checkpoints/checkpoint-N directory")
    state = checkpoint / "trainer_state.json"
    if not state.is_file():
        raise ValueError(f"--init_from {path}: {checkpoint} has no trainer_state.json")
    trainer_state = json.loads(state.read_text())
    step = int(trainer_state["step"])
    run_dir = checkpoint.parents[1]
    log = run_dir / "learning_dynamics.jsonl"
    records = [r for r in read_log(log) if r["step"] <= step] if log.is_file() else []
    configs = checkpoint / MODEL_CONFIG_NAME
    vqvae_path = trainer_state.get("config", {}).get("extra", {}).get("vqvae_path")
    tokenizer = (Path(vqvae_path) if vqvae_path and (Path(vqvae_path) / "config.json").is_file()
                 else run_dir / "tokenizer" if (run_dir / "tokenizer" / "config.json").is_file()
                 else _tokenizer_in(run_dir))
    return InitialWeights(checkpoint, (checkpoint / MODEL_NAME,), step, tuple(records),
                          json.loads(configs.read_text()) if configs.is_file() else {}, tokenizer)


def check_init_from(init_from: str | Path, output_dir: str | Path, model_class: type | None = None
                    ) -> InitialWeights:
    """``--init_from`` checked before any work: weights there (:func:`resolve_initial_weights`), outside
    ``--output_dir`` (the run writes there, and ``--overwrite_output_dir`` would delete the weights it starts from
    before loading them), of ``model_class`` where the source records its classes, with the configuration a latent
    model's statistics come from."""
    source, output = Path(init_from).expanduser().resolve(), Path(output_dir).expanduser().resolve()
    if source == output or output in source.parents:
        raise ValueError(f"--init_from {init_from} lies inside --output_dir {output_dir}, which this run writes (and "
                         "--overwrite_output_dir empties first); copy the source elsewhere or choose another "
                         "--output_dir")
    initial = resolve_initial_weights(init_from)
    if model_class is not None:
        initial.check_model_class(model_class)
        if "latent_mean" in inspect.signature(model_class.__init__).parameters and initial.config_of(
                model_class) is None:
            raise ValueError(f"--init_from {init_from}: no record of its {model_class.__name__}'s configuration (its "
                             "latent statistics; a checkpoint from before compgen wrote model_config.json): give "
                             "the source's export")
    return initial


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
