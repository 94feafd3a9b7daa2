"""Training checkpoints as safetensors and JSON only: nothing is pickled, so loading one never runs code.

A checkpoint directory holds everything exact resume needs. The batch and every random draw of step ``s`` are
functions of ``(seed, s)`` (see :mod:`compgen.training.tasks.base`), so no random-number-generator state is stored:

- ``model.safetensors``: the trainable module's weights;
- ``optimizer.safetensors`` + ``optimizer.json``: the optimizer's state tensors and its other state (param groups,
  hyperparameters);
- ``lr_scheduler.json``: the learning-rate scheduler's state;
- ``<name>.safetensors``: further modules (the EMA weights, a JEPA target encoder);
- ``trainer_state.json``: step, images seen, the configuration, the run id and the wall-clock so far;
- ``model_config.json``: the diffusers configurations of the model and its parts, by class name.

Every rank holds the same weights and optimizer state under data parallelism, so the main process alone writes, to a
temporary directory renamed into place (a checkpoint directory is always whole).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file
from torch import nn

from ..models.transformer_block import convert_legacy_block_weights

MODEL_NAME = "model.safetensors"
OPTIMIZER_TENSORS_NAME = "optimizer.safetensors"
OPTIMIZER_STATE_NAME = "optimizer.json"
LR_SCHEDULER_NAME = "lr_scheduler.json"
TRAINER_STATE_NAME = "trainer_state.json"
MODEL_CONFIG_NAME = "model_config.json"
"""The configurations of the checkpointed model and its diffusers parts, by class name: what ``--init_from`` reads to
refuse another architecture before any work and to keep a latent model's statistics (not used by resume)."""
CHECKPOINTS_DIR = "checkpoints"
CHECKPOINT_PATTERN = re.compile(r"^checkpoint-(\d+)$")


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
    (directory / MODEL_CONFIG_NAME).write_text(json.dumps(model_configs(model), indent=2))


def model_configs(model: nn.Module) -> dict[str, dict[str, Any]]:
    """The diffusers configurations (``ConfigMixin``) of ``model`` and its direct children, by class name."""
    from diffusers.configuration_utils import ConfigMixin

    return {type(module).__name__: json.loads(module.to_json_string())
            for module in (model, *model.children()) if isinstance(module, ConfigMixin)}


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
        if convert_legacy_block_weights(tensors):
            raise CheckpointError(
                f"checkpoint file {path} holds transformer blocks of an older compgen (nn.TransformerEncoderLayer): "
                "its weights load, but its optimizer state does not fit the rebuilt blocks, so it cannot be resumed; "
                f"start a new run from its weights with --init_from {directory} (a fresh optimizer)")
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
    _match_parameter_layouts(optimizer)
    lr_scheduler.load_state_dict(_read(directory / LR_SCHEDULER_NAME, lambda p: json.loads(p.read_text())))
    for name, module in modules.items():
        load_into(module, directory / f"{name}.safetensors")
    return state


def _match_parameter_layouts(optimizer: torch.optim.Optimizer) -> None:
    """Give each per-parameter state tensor (Adam's moments) its parameter's memory layout: a file holds them
    contiguous, an uninterrupted run holds them as its weights (channels-last convolutions under
    ``--channels_last``), and the update then rounds differently, so the resumed run would drift from it."""
    for parameter, entries in optimizer.state.items():
        for name, value in entries.items():
            if (isinstance(value, torch.Tensor) and value.shape == parameter.shape
                    and value.stride() != parameter.stride()):
                entries[name] = torch.empty_like(parameter, dtype=value.dtype).copy_(value)


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
