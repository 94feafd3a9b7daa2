"""Training checkpoints as safetensors and JSON only: nothing is pickled, so loading one never runs code.

A checkpoint directory holds everything exact resume needs. The batch and every random draw of step ``s`` are
functions of ``(seed, s)`` (see :mod:`compgen.training.trainer`), so no random-number-generator state is stored:

- ``model.safetensors``: the trainable module's weights;
- ``optimizer.safetensors`` + ``optimizer.json``: the optimizer's state tensors and its other state (param groups,
  hyperparameters);
- ``lr_scheduler.json``: the learning-rate scheduler's state;
- ``<name>.safetensors``: further modules (the EMA weights, a JEPA target encoder);
- ``trainer_state.json``: step, images seen, the configuration and the run id.

Every rank holds the same weights and optimizer state under data parallelism, so the main process alone writes, to a
temporary directory renamed into place (a checkpoint directory is always whole).
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file
from torch import nn

MODEL_NAME = "model.safetensors"
OPTIMIZER_TENSORS_NAME = "optimizer.safetensors"
OPTIMIZER_STATE_NAME = "optimizer.json"
LR_SCHEDULER_NAME = "lr_scheduler.json"
TRAINER_STATE_NAME = "trainer_state.json"
CHECKPOINTS_DIR = "checkpoints"
CHECKPOINT_PATTERN = re.compile(r"^checkpoint-(\d+)$")


LENGTH_FREE_LR_SCHEDULES = ("constant", "constant_with_warmup", "piecewise_constant")
"""Learning-rate schedules that do not depend on ``max_train_steps``."""

RUN_OPTIONS = ("output_dir", "resume_from_checkpoint", "overwrite_output_dir", "checkpointing_steps",
               "checkpoints_total_limit", "eval_steps", "eval_images_per_class", "logging_steps", "report_to",
               "push_to_hub", "hub_model_id", "hub_token", "hub_private", "max_train_steps")
"""Training options that may differ between a run and its resumption; every other one must match. They do not change
the steps a run takes: where and how often things are written, and how long to train. The length only while nothing
is scheduled over it (a learning rate of :data:`LENGTH_FREE_LR_SCHEDULES`, no task schedule over the length): then a
longer run repeats the shorter one's steps exactly and goes on; otherwise resume refuses another length."""


class CheckpointError(ValueError):
    """A checkpoint file is missing, truncated or does not match the run; the message names the file."""


def _tensor_dict(module: nn.Module) -> dict[str, torch.Tensor]:
    return {name: tensor.detach().contiguous().cpu() for name, tensor in module.state_dict().items()}


def _split_optimizer_state(state_dict: dict[str, Any]) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """Optimizer ``state_dict`` -> (tensors keyed ``"<param>.<name>"``, JSON-able rest)."""
    tensors: dict[str, torch.Tensor] = {}
    scalars: dict[str, dict[str, Any]] = {}
    for param, entries in state_dict["state"].items():
        for name, value in entries.items():
            if isinstance(value, torch.Tensor):
                tensors[f"{param}.{name}"] = value.detach().contiguous().cpu()
            else:
                scalars.setdefault(str(param), {})[name] = value
    return tensors, {"param_groups": state_dict["param_groups"], "scalars": scalars}


def _join_optimizer_state(tensors: dict[str, torch.Tensor], rest: dict[str, Any]) -> dict[str, Any]:
    state: dict[int, dict[str, Any]] = {}
    for key, value in tensors.items():
        param, name = key.split(".", 1)
        state.setdefault(int(param), {})[name] = value
    for param, entries in rest.get("scalars", {}).items():
        state.setdefault(int(param), {}).update(entries)
    return {"state": state, "param_groups": rest["param_groups"]}


def save_checkpoint(
    directory: str | Path,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    lr_scheduler: Any,
    modules: dict[str, nn.Module],
    trainer_state: dict[str, Any],
) -> None:
    """Write a checkpoint into ``directory`` (which must exist and be empty; the caller renames it into place)."""
    directory = Path(directory)
    save_file(_tensor_dict(model), str(directory / MODEL_NAME))
    tensors, rest = _split_optimizer_state(optimizer.state_dict())
    save_file(tensors, str(directory / OPTIMIZER_TENSORS_NAME))
    (directory / OPTIMIZER_STATE_NAME).write_text(json.dumps(rest))
    (directory / LR_SCHEDULER_NAME).write_text(json.dumps(lr_scheduler.state_dict()))
    for name, module in modules.items():
        save_file(_tensor_dict(module), str(directory / f"{name}.safetensors"))
    (directory / TRAINER_STATE_NAME).write_text(json.dumps(trainer_state, indent=2))


def _read(path: Path, reader):
    if not path.is_file():
        raise CheckpointError(f"checkpoint file {path} is missing")
    try:
        return reader(path)
    except (SafetensorError, OSError, json.JSONDecodeError, UnicodeDecodeError, ValueError, KeyError) as error:
        raise CheckpointError(f"checkpoint file {path} is unreadable ({type(error).__name__}: {error})") from error


def read_trainer_state(directory: str | Path) -> dict[str, Any]:
    """The ``trainer_state.json`` of a checkpoint (raises :class:`CheckpointError` naming the file)."""
    return _read(Path(directory) / TRAINER_STATE_NAME, lambda p: json.loads(p.read_text()))


def load_checkpoint(
    directory: str | Path,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    lr_scheduler: Any,
    modules: dict[str, nn.Module],
) -> dict[str, Any]:
    """Restore a checkpoint written by :func:`save_checkpoint` in place; returns its trainer state.

    Tensors load onto the devices of the modules they go into. Every failure is a :class:`CheckpointError` that
    names the file.
    """
    directory = Path(directory)
    state = read_trainer_state(directory)

    def load_into(module: nn.Module, path: Path) -> None:
        tensors = _read(path, lambda p: load_file(str(p)))
        try:
            module.load_state_dict(tensors)
        except RuntimeError as error:
            raise CheckpointError(f"checkpoint file {path} does not fit this model: {error}") from error

    load_into(model, directory / MODEL_NAME)
    tensors = _read(directory / OPTIMIZER_TENSORS_NAME, lambda p: load_file(str(p)))
    rest = _read(directory / OPTIMIZER_STATE_NAME, lambda p: json.loads(p.read_text()))
    try:
        optimizer.load_state_dict(_join_optimizer_state(tensors, rest))
    except (ValueError, KeyError, RuntimeError) as error:
        raise CheckpointError(f"checkpoint file {directory / OPTIMIZER_STATE_NAME} does not fit this optimizer: "
                              f"{error}") from error
    lr_scheduler.load_state_dict(_read(directory / LR_SCHEDULER_NAME, lambda p: json.loads(p.read_text())))
    for name, module in modules.items():
        load_into(module, directory / f"{name}.safetensors")
    return state


def list_checkpoints(checkpoint_dir: Path) -> list[tuple[int, Path]]:
    """Complete checkpoints (written atomically, so every ``checkpoint-N`` directory is whole), by step."""
    if not checkpoint_dir.is_dir():
        return []
    found = []
    for path in checkpoint_dir.iterdir():
        match = CHECKPOINT_PATTERN.match(path.name)
        if match and path.is_dir():
            found.append((int(match.group(1)), path))
    return sorted(found)


def check_resumable(trainer_state: dict[str, Any], path: Path, config: Any, num_processes: int,
                    task_schedules: list[str]) -> None:
    """Raise :class:`CheckpointError` unless the run of ``config`` (a ``TrainingConfig``) on ``num_processes`` may go
    on from the checkpoint at ``path``: the same training options (all but :data:`RUN_OPTIONS`), the same number of
    processes, and the same length if anything runs over it (the learning rate or one of ``task_schedules``)."""
    saved = trainer_state.get("config", {})
    fingerprint = trainer_state.get("fingerprint")
    if fingerprint is not None and fingerprint != config.fingerprint():
        ours = _jsonable(asdict(config))
        # An option added to compgen after the checkpoint was written matches when this run keeps its default.
        defaults = _jsonable(asdict(type(config)()))
        differences = sorted(k for k in set(saved) | set(ours)
                             if k not in RUN_OPTIONS and saved.get(k, defaults.get(k)) != ours.get(k))
        if differences or not saved:
            raise CheckpointError(f"checkpoint {path} was written by a run with other training options "
                                  f"({', '.join(differences) or 'unknown'}); resuming it would mix two runs")
    length = saved.get("max_train_steps")
    tied = ([] if config.lr_scheduler in LENGTH_FREE_LR_SCHEDULES else [f"--lr_scheduler {config.lr_scheduler}"])
    tied += task_schedules
    if length is not None and length != config.max_train_steps and tied:
        raise CheckpointError(f"checkpoint {path} belongs to a run of {length} steps, and {' and '.join(tied)} run "
                              f"over the whole length: resuming it with --max_train_steps {config.max_train_steps} "
                              "would change them midway (a decayed learning rate would rise again); resume with "
                              f"--max_train_steps {length}, or start a new run")
    processes = trainer_state.get("num_processes", num_processes)
    if processes != num_processes:
        raise CheckpointError(f"checkpoint {path} was written with {processes} processes, this run has "
                              f"{num_processes}: the data order would differ; resume with the same number of "
                              "processes")


def _jsonable(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))
