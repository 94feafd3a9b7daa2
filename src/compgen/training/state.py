"""What the loop carries from step to step (:class:`TrainState`), and how a checkpoint saves and restores it: the
model, optimizer, learning-rate schedule, EMA shadow and the task's extra modules, with the step, images seen and run
id, so that a resumed run replays exactly the steps an uninterrupted run would have taken."""

from __future__ import annotations

import logging
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from accelerate import Accelerator
from torch import nn

from .acceleration import fused_optimizer_supported
from .checkpoint import CheckpointError, load_checkpoint, read_trainer_state, save_checkpoint
from .config import TrainingConfig
from .ema import ExponentialMovingAverage
from .run_directory import RunDirectory
from .tasks.base import TrainingTask

logger = logging.getLogger(__name__)


@dataclass
class TrainState:
    """What the loop carries from step to step."""

    model: nn.Module
    optimizer: torch.optim.Optimizer
    lr_scheduler: Any
    ema: ExponentialMovingAverage | None
    step: int = 0
    images_seen: int = 0
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    first_nonfinite_step: torch.Tensor | None = None
    """Device scalar: the first step whose loss was not finite since the last check (``inf`` when none)."""
    clock_origin: float = field(default_factory=time.perf_counter)
    """The ``time.perf_counter()`` at which the run's wall clock reads 0: a resumed run's lies back by the time its
    earlier parts took to reach the checkpoint, so that a run trained in parts logs its whole wall-clock."""

    def wall_clock_s(self) -> float:
        """Seconds the run has trained so far, its earlier parts (up to the checkpoint it resumed from) included."""
        return time.perf_counter() - self.clock_origin


def _checkpoint_modules(state: TrainState, task: TrainingTask) -> dict[str, nn.Module]:
    modules = dict(task.extra_state())
    if state.ema is not None:
        modules["ema"] = state.ema.shadow
    return modules


def _trainer_state(state: TrainState, config: TrainingConfig, accelerator: Accelerator) -> dict[str, Any]:
    return {"step": state.step, "images_seen": state.images_seen, "run_id": state.run_id,
            "fingerprint": config.fingerprint(), "num_processes": accelerator.num_processes,
            "wall_clock_s": round(state.wall_clock_s(), 3), "config": config.to_json_dict()}


def save_state(run_directory: RunDirectory, accelerator: Accelerator, state: TrainState, config: TrainingConfig,
               task: TrainingTask) -> None:
    """Write ``checkpoint-<step>`` atomically (main process, temporary name, rename) and prune old ones."""
    if accelerator.is_main_process:
        run_directory.write_checkpoint(
            state.step,
            lambda directory: save_checkpoint(directory, accelerator.unwrap_model(state.model), state.optimizer,
                                              state.lr_scheduler, _checkpoint_modules(state, task),
                                              _trainer_state(state, config, accelerator)),
            state.run_id,
            config.checkpoints_total_limit,
        )
    accelerator.wait_for_everyone()


def resume(run_directory: RunDirectory, candidates: list[Path], accelerator: Accelerator, state: TrainState,
           config: TrainingConfig, task: TrainingTask) -> None:
    """Restore the first usable checkpoint of ``candidates`` (with ``latest``: every one, newest first) into
    ``state``."""
    errors = []
    for candidate in candidates:
        try:
            trainer_state = read_trainer_state(candidate)
            run_directory.check_resumable(trainer_state, candidate, config, accelerator.num_processes,
                                          task.schedules_over_length())
            trainer_state = load_checkpoint(candidate, accelerator.unwrap_model(state.model), state.optimizer,
                                            state.lr_scheduler, _checkpoint_modules(state, task))
        except CheckpointError as error:
            errors.append(str(error))
            logger.warning("cannot resume from %s: %s", candidate, error)
            continue
        if errors:
            logger.warning("resuming from the previous intact checkpoint %s", candidate)
        state.step, state.images_seen = int(trainer_state["step"]), int(trainer_state["images_seen"])
        state.run_id = trainer_state.get("run_id", state.run_id)
        # checkpoints written before the wall clock was saved resume their clock at 0
        state.clock_origin = time.perf_counter() - float(trainer_state.get("wall_clock_s", 0.0))
        logger.info("resumed from %s at step %d", candidate, state.step)
        return
    raise CheckpointError(
        "no usable checkpoint to resume from:\n  " + "\n  ".join(errors)
        + "\nremove the broken checkpoint directories, or start over with --overwrite_output_dir"
    )


def make_optimizer(model: nn.Module, config: TrainingConfig, accelerator: Accelerator) -> tuple[Any, Any]:
    """The run's AdamW over the trainable parameters of ``model`` (fused where supported) and its learning-rate
    schedule, both prepared by ``accelerator``."""
    from diffusers.optimization import get_scheduler

    optimizer = torch.optim.AdamW(
        [p for p in model.parameters() if p.requires_grad],
        lr=config.learning_rate,
        betas=(config.adam_beta1, config.adam_beta2),
        weight_decay=config.adam_weight_decay,
        fused=fused_optimizer_supported(accelerator.device),  # one multi-tensor kernel for the whole update
    )
    # Accelerate steps a prepared scheduler once per process per optimizer step.
    lr_scheduler = get_scheduler(
        config.lr_scheduler,
        optimizer=optimizer,
        num_warmup_steps=config.lr_warmup_steps * accelerator.num_processes,
        num_training_steps=config.max_train_steps * accelerator.num_processes,
    )
    return accelerator.prepare(optimizer, lr_scheduler)
