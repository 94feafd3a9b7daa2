"""The one training loop every compgen example uses.

It owns what is common to all models: Accelerate (devices, data parallelism, mixed precision, gradient accumulation,
trackers), deterministic batches, checkpoints written atomically and pruned to a limit, exact resume, EMA weights, the
learning-dynamics evaluation callback, the final ``save_pretrained``, the model card and the Hub push. A script
supplies only what differs, as a :class:`TrainingTask`: the loss, how to sample images, and how to export the
pipeline.

Exact resume without pickled state: the batch of step ``s`` and every random draw of the loss at step ``s`` are
functions of ``(seed, s)`` alone (a fresh CPU ``torch.Generator`` per step; tasks move what they draw to the
batch's device), so a run resumed from a checkpoint replays precisely the steps an uninterrupted run would have
taken, on any device. Under data parallelism with ``N`` processes every rank computes the same global batch indices
and takes its ``1/N`` share; evaluation, logging, checkpoints and the export happen once, on the main process.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import json
import logging
import math
import os
import shutil
import time
import uuid
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np
import torch
from accelerate import Accelerator
from accelerate.utils import ProjectConfiguration
from torch import nn
from tqdm.auto import tqdm

from ..atomic_io import atomic_write_text
from ..concepts import ConceptGraph
from ..data.loading import ConceptImageData
from ..evaluation.tracker import LearningDynamicsTracker, read_log
from ..images import uint8_to_signed
from .acceleration import compile_mode, dynamo_plugin, fused_optimizer_supported, parse_compile_mode, to_device
from .checkpoint import (
    CHECKPOINTS_DIR,
    RUN_OPTIONS,
    CheckpointError,
    check_resumable,
    list_checkpoints,
    load_checkpoint,
    read_trainer_state,
    save_checkpoint,
)
from .ema import ExponentialMovingAverage, MomentumSchedule
from .run_directory import LOG_NAME, SAMPLES_DIR, check_output_dir, claim_run_directory, resume_candidates

logger = logging.getLogger(__name__)


class NonFiniteLossError(RuntimeError):
    """Training diverged: a loss was NaN or infinite. Nothing is exported; the last good checkpoint stays."""


@dataclass
class TrainingConfig:
    """Options shared by every training script (each becomes a ``--flag``)."""

    output_dir: str = "outputs/model"
    seed: int = 0
    train_batch_size: int = 64
    """Examples per process per optimizer step (the global batch is this times the number of processes)."""
    max_train_steps: int = 1000
    learning_rate: float = 1e-4
    lr_scheduler: str = "constant"
    lr_warmup_steps: int = 0
    adam_beta1: float = 0.9
    adam_beta2: float = 0.999
    adam_weight_decay: float = 0.0
    max_grad_norm: float = 1.0
    gradient_accumulation_steps: int = 1
    mixed_precision: str = "no"
    """``no``, ``fp16`` (CUDA only), ``bf16``, or ``auto``: bf16 where the hardware computes it natively (CUDA GPUs
    with bf16, CPUs with AVX-512 BF16 or AMX), fp32 elsewhere (on an AVX2 CPU bf16 autocast ran 14x slower)."""
    torch_compile: bool | str = False
    """Compile the model with ``torch.compile`` (Accelerate's inductor backend) and sample the evaluations with it:
    ``--torch_compile`` alone for inductor's default mode, or ``--torch_compile MODE`` (``reduce-overhead``: CUDA
    graphs; ``max-autotune``; see :data:`~compgen.training.acceleration.COMPILE_MODES`). Off by default: on a CPU it
    compiles for minutes before the first step."""
    checkpointing_steps: int = 500
    checkpoints_total_limit: int | None = 2
    resume_from_checkpoint: str | None = None
    overwrite_output_dir: bool = False
    use_ema: bool = True
    ema_decay: float = 0.999
    eval_steps: int = 500
    eval_images_per_class: int = 50
    logging_steps: int = 50
    report_to: str | None = None
    push_to_hub: bool = False
    hub_model_id: str | None = None
    hub_token: str | None = None
    hub_private: bool = False
    extra: dict[str, Any] = field(default_factory=dict)
    """Script-specific hyperparameters, recorded in the trackers and the model card."""

    def __post_init__(self) -> None:
        self.torch_compile = parse_compile_mode(self.torch_compile)
        if self.mixed_precision not in ("no", "fp16", "bf16", "auto"):
            raise ValueError(f"mixed_precision must be no, fp16, bf16 or auto, got {self.mixed_precision!r}")
        for name in ("train_batch_size", "max_train_steps", "gradient_accumulation_steps", "checkpointing_steps",
                     "eval_steps", "logging_steps", "eval_images_per_class"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")
        for name in ("lr_warmup_steps", "adam_weight_decay", "max_grad_norm"):
            if not getattr(self, name) >= 0:
                raise ValueError(f"{name} must be non-negative, got {getattr(self, name)}")
        if not (math.isfinite(self.learning_rate) and self.learning_rate > 0):
            raise ValueError(f"learning_rate must be a positive number, got {self.learning_rate}")
        if not (0 <= self.adam_beta1 < 1 and 0 <= self.adam_beta2 < 1):
            raise ValueError(f"adam betas must lie in [0, 1), got {self.adam_beta1}, {self.adam_beta2}")
        if not 0 <= self.ema_decay <= 1:
            raise ValueError(f"ema_decay must lie in [0, 1], got {self.ema_decay}")
        if self.checkpoints_total_limit is not None and self.checkpoints_total_limit < 1:
            raise ValueError(f"checkpoints_total_limit must be at least 1 or none, got {self.checkpoints_total_limit}")
        from diffusers.optimization import SchedulerType

        schedules = [s.value for s in SchedulerType]
        if self.lr_scheduler not in schedules:
            raise ValueError(f"lr_scheduler must be one of {schedules}, got {self.lr_scheduler!r}")
        if self.push_to_hub and not self.hub_model_id:
            raise ValueError("--push_to_hub needs --hub_model_id ORG/NAME")
        if self.resume_from_checkpoint and self.overwrite_output_dir:
            raise ValueError("--resume_from_checkpoint continues the run in --output_dir; --overwrite_output_dir "
                             "discards it: give one of them")

    @property
    def trackers(self) -> list[str]:
        """The trackers of ``--report_to`` (comma-separated; ``none`` or empty: none)."""
        names = [name.strip() for name in (self.report_to or "").split(",")]
        return [name for name in names if name and name != "none"]

    def check_environment(self) -> None:
        """Raise ``ValueError`` if this machine cannot do what the options ask, before any work rather than after
        the training: a ``--report_to`` tracker that is unknown or not installed, ``--push_to_hub`` without Hub
        access (see :func:`compgen.hub.check_hub_access`)."""
        if self.trackers:
            from accelerate.tracking import LOGGER_TYPE_TO_CLASS, get_available_trackers

            installed = [tracker.value for tracker in get_available_trackers()]
            for name in self.trackers:
                if name != "all" and name not in LOGGER_TYPE_TO_CLASS:
                    raise ValueError(f"--report_to {name}: unknown tracker; choose from all, none, "
                                     f"{', '.join(sorted(LOGGER_TYPE_TO_CLASS))}")
                if name not in installed and (name != "all" or not installed):
                    what = "no tracker is installed" if name == "all" else f"{name} is not installed"
                    raise ValueError(f"--report_to {name}: {what}, so nothing would be tracked (installed: "
                                     f"{', '.join(installed) or 'none'})")
        if self.push_to_hub:
            from ..hub import check_hub_access

            check_hub_access(self.hub_token)

    def fingerprint(self) -> str:
        """A hash of every option that changes the training trajectory (all but :data:`RUN_OPTIONS`)."""
        values = {k: v for k, v in asdict(self).items() if k not in RUN_OPTIONS}
        return hashlib.sha256(json.dumps(_jsonable(values), sort_keys=True).encode()).hexdigest()[:16]


class TrainingTask:
    """What one model's training adds to the shared loop. Subclasses override the methods below.

    Every module and tensor a task holds as an attribute (the model, a frozen tokenizer, precomputed tokens, a JEPA
    target encoder, noise-schedule tables) moves with :meth:`to` to the training device; random draws in
    :meth:`compute_loss` use the CPU ``generator`` and are moved to the batch's device.
    """

    model: nn.Module
    """The trainable module (it may hold several parts, e.g. a transformer and a JEPA predictor)."""

    def compute_loss(
        self, model: nn.Module, batch: dict[str, torch.Tensor], generator: torch.Generator, step: int
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The loss of one batch; every random draw must use ``generator``. Returns (loss, detached scalar tensors
        to log); the loop reads the scalars only at logging steps, so the step never waits for the device."""
        raise NotImplementedError

    def generate(self, model: nn.Module, concepts: list[str], seed: int) -> np.ndarray:
        """Sample one uint8 (H, W, 3) image per entry of ``concepts`` with the (EMA) weights ``model``."""
        raise NotImplementedError

    def save_pretrained(self, model: nn.Module, output_dir: Path) -> None:
        """Write the inference pipeline built from ``model`` into ``output_dir``."""
        raise NotImplementedError

    def after_optimizer_step(self, model: nn.Module, step: int) -> dict[str, Any]:
        """Hook after each optimizer step (e.g. the JEPA target encoder's EMA update)."""
        return {}

    def extra_state(self) -> dict[str, nn.Module]:
        """Modules outside ``model`` whose weights a checkpoint must hold for exact resume."""
        return {}

    def schedules_over_length(self) -> list[str]:
        """What this task schedules over ``max_train_steps`` (a momentum ramp, a fraction of the training): a
        resumed run may not change its length then."""
        return []

    def model_card_details(self) -> dict[str, Any]:
        """Name, tags and a description for the model card."""
        return {}

    sampling_compile_mode: str | None = None
    """The ``torch.compile`` mode :meth:`generate` samples with (``None``: eager); the loop sets it from
    ``--torch_compile``."""

    def eval_sampling(self) -> dict[str, Any]:
        """The sampler options :meth:`generate` uses (kept with every evaluation record, for re-scoring): the
        ``eval_inference_steps`` of a task that samples in steps."""
        steps = getattr(self, "eval_inference_steps", None)
        return {} if steps is None else {"num_inference_steps": steps}

    def to(self, device: torch.device | str) -> TrainingTask:
        """Move every module and tensor this task holds to ``device`` (the model's own placement is Accelerate's)."""
        for name, value in list(vars(self).items()):
            if isinstance(value, nn.Module | torch.Tensor):
                setattr(self, name, value.to(device))
        return self


def check_batch_fits(num_examples: int, batch_size: int, num_processes: int = 1) -> None:
    """Raise ``ValueError`` unless the training split holds one global batch (``batch_size`` x ``num_processes``)."""
    if num_examples < batch_size * num_processes:
        per = f" ({num_processes} processes x {batch_size})" if num_processes > 1 else ""
        raise ValueError(f"--train_batch_size {batch_size}: the training split has {num_examples} examples, fewer "
                         f"than one batch of {batch_size * num_processes}{per}; lower --train_batch_size")


def batch_indices(num_examples: int, batch_size: int, step: int, seed: int) -> torch.Tensor:
    """Indices of the batch at ``step``: a fresh seeded permutation per epoch, incomplete last batch dropped."""
    check_batch_fits(num_examples, batch_size)
    steps_per_epoch = num_examples // batch_size
    epoch, position = divmod(step, steps_per_epoch)
    generator = torch.Generator().manual_seed(mix_seed(seed, epoch))
    permutation = torch.randperm(num_examples, generator=generator)
    return permutation[position * batch_size : (position + 1) * batch_size]


def mix_seed(seed: int, *parts: int) -> int:
    """One 63-bit seed from a run seed and counters (an epoch, a step, a rank), distinct for distinct inputs."""
    digest = hashlib.blake2b(repr((int(seed), *map(int, parts))).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") & (2**63 - 1)


def make_batch(data: ConceptImageData, indices: torch.Tensor) -> dict[str, torch.Tensor]:
    """Images as float NCHW in [-1, 1], the conditioning of each image, and its row ``index`` in ``data``
    (so a task can look up per-example features it precomputed, e.g. VQ token indices). The tensors are on the
    device ``data`` is on."""
    indices = to_device(indices, data.images.device)
    batch = {"images": uint8_to_signed(data.images[indices]), "concepts": data.concepts[indices], "index": indices}
    if data.concept_values is not None:
        batch["concept_values"] = data.concept_values[indices]
    return batch


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


class Trainer:
    """Runs a :class:`TrainingTask` on a :class:`ConceptImageData` split with the options of a TrainingConfig."""

    def __init__(
        self,
        config: TrainingConfig,
        task: TrainingTask,
        train_data: ConceptImageData,
        graph: ConceptGraph,
        probes: nn.Module | None = None,
        dataset_name: str | None = None,
    ) -> None:
        # ``auto`` precision is resolved once, so checkpoints, logs and the card record what actually ran.
        self.config = dataclasses.replace(config, mixed_precision=resolve_mixed_precision(config.mixed_precision))
        self.task = task
        self.train_data = train_data
        self.graph = graph
        self.probes = probes
        self.dataset_name = dataset_name
        self.output_dir = Path(config.output_dir)
        self.checkpoint_dir = self.output_dir / CHECKPOINTS_DIR
        self.log_path = self.output_dir / LOG_NAME

    # --- setup -----------------------------------------------------------------------------------------------

    def make_accelerator(self) -> Accelerator:
        """The Accelerator for this run (see :func:`multi_cpu_launch` for ``torchrun`` on CPUs)."""
        config = self.config
        if config.mixed_precision == "fp16" and not torch.cuda.is_available():
            raise ValueError("--mixed_precision fp16 needs a CUDA GPU (CPU autocast has no fp16); use bf16 or no")
        return Accelerator(
            cpu=multi_cpu_launch(),
            mixed_precision=resolve_mixed_precision(config.mixed_precision),
            dynamo_plugin=dynamo_plugin(config.torch_compile),
            gradient_accumulation_steps=config.gradient_accumulation_steps,
            log_with=config.trackers or None,
            project_config=ProjectConfiguration(project_dir=str(self.output_dir)),
        )

    def prepare(self, accelerator: Accelerator) -> TrainState:
        """Optimizer, LR schedule, device placement (model, task, data), EMA, and the resumed state if asked."""
        config = self.config
        if accelerator.is_main_process:
            previous = check_output_dir(self.output_dir, config.resume_from_checkpoint, config.overwrite_output_dir)
            if previous:
                logger.warning("--overwrite_output_dir: removing the previous run's files in %s", self.output_dir)
            for path in previous:
                shutil.rmtree(path) if path.is_dir() else path.unlink()
        accelerator.wait_for_everyone()
        # The model goes to its device (and into DDP) before the optimizer sees its parameters.
        model = accelerator.prepare(self.task.model)
        self.task.to(accelerator.device)
        self.task.sampling_compile_mode = compile_mode(config.torch_compile)
        optimizer = torch.optim.AdamW(
            [p for p in model.parameters() if p.requires_grad],
            lr=config.learning_rate,
            betas=(config.adam_beta1, config.adam_beta2),
            weight_decay=config.adam_weight_decay,
            fused=fused_optimizer_supported(accelerator.device),  # one multi-tensor kernel for the whole update
        )
        from diffusers.optimization import get_scheduler

        # Accelerate steps a prepared scheduler once per process per optimizer step.
        lr_scheduler = get_scheduler(
            config.lr_scheduler,
            optimizer=optimizer,
            num_warmup_steps=config.lr_warmup_steps * accelerator.num_processes,
            num_training_steps=config.max_train_steps * accelerator.num_processes,
        )
        optimizer, lr_scheduler = accelerator.prepare(optimizer, lr_scheduler)
        self.train_data = self.train_data.to(accelerator.device)
        ema = None
        if config.use_ema:
            ema = ExponentialMovingAverage(accelerator.unwrap_model(model),
                                           MomentumSchedule(config.ema_decay, kind="warmup"))
        state = TrainState(model, optimizer, lr_scheduler, ema)
        state.first_nonfinite_step = torch.full((), math.inf, device=accelerator.device)
        candidates = resume_candidates(self.output_dir, config.resume_from_checkpoint)
        if candidates:
            self._load_checkpoint(accelerator, state, candidates)
        elif config.resume_from_checkpoint:
            logger.info("no checkpoint in %s: starting from scratch", self.checkpoint_dir)
        if accelerator.is_main_process:
            self._truncate_log(state.step)
        return state

    # --- checkpoints -----------------------------------------------------------------------------------------

    def _checkpoint_modules(self, state: TrainState) -> dict[str, nn.Module]:
        modules = dict(self.task.extra_state())
        if state.ema is not None:
            modules["ema"] = state.ema.shadow
        return modules

    def _trainer_state(self, state: TrainState, accelerator: Accelerator) -> dict[str, Any]:
        return {"step": state.step, "images_seen": state.images_seen, "run_id": state.run_id,
                "fingerprint": self.config.fingerprint(), "num_processes": accelerator.num_processes,
                "config": _jsonable(asdict(self.config))}

    def save_checkpoint(self, accelerator: Accelerator, state: TrainState) -> None:
        """Write ``checkpoint-<step>`` atomically (main process, temporary name, rename) and prune old ones."""
        if accelerator.is_main_process:
            final = self.checkpoint_dir / f"checkpoint-{state.step}"
            tmp = self.checkpoint_dir / f".tmp-checkpoint-{state.step}"
            shutil.rmtree(tmp, ignore_errors=True)
            tmp.mkdir(parents=True)
            save_checkpoint(tmp, accelerator.unwrap_model(state.model), state.optimizer, state.lr_scheduler,
                            self._checkpoint_modules(state), self._trainer_state(state, accelerator))
            shutil.rmtree(final, ignore_errors=True)
            os.replace(tmp, final)
            limit = self.config.checkpoints_total_limit
            if limit is not None:
                ours = [(step, path) for step, path in list_checkpoints(self.checkpoint_dir)
                        if _checkpoint_run_id(path) == state.run_id]
                for _, old in ours[:-limit]:
                    shutil.rmtree(old, ignore_errors=True)
        accelerator.wait_for_everyone()

    def _load_checkpoint(self, accelerator: Accelerator, state: TrainState, candidates: list[Path]) -> None:
        """Restore the first usable checkpoint of ``candidates`` (with ``latest``: every one, newest first)."""
        errors = []
        for candidate in candidates:
            try:
                trainer_state = read_trainer_state(candidate)
                check_resumable(trainer_state, candidate, self.config, accelerator.num_processes,
                                self.task.schedules_over_length())
                trainer_state = load_checkpoint(candidate, accelerator.unwrap_model(state.model), state.optimizer,
                                                state.lr_scheduler, self._checkpoint_modules(state))
            except CheckpointError as error:
                errors.append(str(error))
                logger.warning("cannot resume from %s: %s", candidate, error)
                continue
            if errors:
                logger.warning("resuming from the previous intact checkpoint %s", candidate)
            state.step, state.images_seen = int(trainer_state["step"]), int(trainer_state["images_seen"])
            state.run_id = trainer_state.get("run_id", state.run_id)
            logger.info("resumed from %s at step %d", candidate, state.step)
            return
        raise CheckpointError(
            "no usable checkpoint to resume from:\n  " + "\n  ".join(errors)
            + "\nremove the broken checkpoint directories, or start over with --overwrite_output_dir"
        )

    # --- evaluation log -------------------------------------------------------------------------------------

    def _truncate_log(self, step: int) -> None:
        """Drop log records written after the checkpoint we resume from (and a torn last line a kill left), so
        the log matches the weights."""
        if not self.log_path.is_file():
            return
        kept = [json.dumps(r) for r in read_log(self.log_path) if r["step"] <= step]
        atomic_write_text(self.log_path, "".join(line + "\n" for line in kept))

    def _make_tracker(self) -> LearningDynamicsTracker | None:
        if self.probes is None:
            return None
        return LearningDynamicsTracker(
            self.graph,
            self.probes,
            num_images_per_class=self.config.eval_images_per_class,
            log_path=self.log_path,
            seed=self.config.seed,
            sample_dir=self.output_dir / SAMPLES_DIR,
        )

    # --- the loop -------------------------------------------------------------------------------------------

    def training_step(self, accelerator: Accelerator, state: TrainState) -> dict[str, torch.Tensor]:
        """One optimizer step (all its micro-batches), the task's post-step hook and the EMA update. Returns the
        step's scalars as device tensors (no host synchronisation)."""
        config = self.config
        model = state.model
        model.train()
        global_batch = config.train_batch_size * accelerator.num_processes
        rank, world = accelerator.process_index, accelerator.num_processes
        totals: dict[str, torch.Tensor] = {}
        for micro in range(config.gradient_accumulation_steps):
            micro_step = state.step * config.gradient_accumulation_steps + micro
            indices = batch_indices(len(self.train_data), global_batch, micro_step, config.seed)
            batch = make_batch(self.train_data, indices[rank::world])
            generator = torch.Generator().manual_seed(mix_seed(config.seed, micro_step, rank))
            with accelerator.accumulate(model), accelerator.autocast():
                loss, scalars = self.task.compute_loss(model, batch, generator, state.step)
                accelerator.backward(loss)
                if accelerator.sync_gradients and config.max_grad_norm > 0:
                    accelerator.clip_grad_norm_(model.parameters(), config.max_grad_norm)
                state.optimizer.step()
                state.lr_scheduler.step()
                state.optimizer.zero_grad(set_to_none=True)
            for key, value in {"loss": loss.detach(), **scalars}.items():
                value = torch.as_tensor(value, device=accelerator.device).float()
                totals[key] = totals.get(key, 0.0) + value / config.gradient_accumulation_steps
            bad = torch.where(torch.isfinite(loss.detach()), math.inf, float(state.step + 1))
            state.first_nonfinite_step = torch.minimum(state.first_nonfinite_step, bad)
        state.step += 1
        state.images_seen += global_batch * config.gradient_accumulation_steps
        unwrapped = accelerator.unwrap_model(model)
        for key, value in self.task.after_optimizer_step(unwrapped, state.step).items():
            totals[key] = torch.as_tensor(value, device=accelerator.device).float()
        if state.ema is not None:
            state.ema.update(unwrapped, state.step)
        return totals

    def _check_finite(self, accelerator: Accelerator, state: TrainState) -> None:
        """Stop before anything is written if a loss since the last check was not finite on any process (one host
        synchronisation; every process stops together)."""
        first = float(accelerator.gather(state.first_nonfinite_step.reshape(1)).min())
        if math.isfinite(first):
            raise NonFiniteLossError(
                f"the loss became non-finite at step {int(first)}: training diverged (lower --learning_rate, or "
                f"check the data). Nothing was exported; the last good checkpoint in {self.checkpoint_dir} is kept."
            )

    def evaluate(self, accelerator: Accelerator, state: TrainState, tracker: LearningDynamicsTracker
                 ) -> dict[str, Any]:
        """Score the (EMA) model on every class of the graph and log the record (main process only)."""
        eval_model = state.ema.shadow if state.ema is not None else accelerator.unwrap_model(state.model)
        return tracker.evaluate(functools.partial(self.task.generate, eval_model), step=state.step,
                                images_seen=state.images_seen, accelerator=accelerator,
                                sampling=self.task.eval_sampling())

    def train(self) -> list[dict[str, Any]]:
        """Train to ``max_train_steps`` (resuming if asked), export, write the model card; returns the eval log.

        The main process claims ``output_dir`` (:mod:`~compgen.training.run_directory`) until it is done."""
        self.config.check_environment()
        accelerator = self.make_accelerator()
        check_batch_fits(len(self.train_data), self.config.train_batch_size, accelerator.num_processes)
        with claim_run_directory(self.output_dir) if accelerator.is_main_process else contextlib.nullcontext():
            return self._train(accelerator)

    def _train(self, accelerator: Accelerator) -> list[dict[str, Any]]:
        config = self.config
        state = self.prepare(accelerator)
        if accelerator.is_main_process and config.trackers:
            accelerator.init_trackers("compgen", config=_flat_config(config))
        # Every process takes the same branches (evaluations and checkpoints end with a barrier); only the main
        # process evaluates and writes.
        evaluating = self.probes is not None
        tracker = self._make_tracker() if accelerator.is_main_process else None

        progress = tqdm(total=config.max_train_steps, initial=state.step, desc="training",
                        disable=not accelerator.is_local_main_process)
        running: dict[str, torch.Tensor] = {}
        start_time, start_images = time.perf_counter(), state.images_seen
        while state.step < config.max_train_steps:
            scalars = self.training_step(accelerator, state)
            for key, value in scalars.items():
                running[key] = running.get(key, 0.0) + value
            progress.update(1)
            last = state.step == config.max_train_steps
            checkpoint_due = state.step % config.checkpointing_steps == 0 or last
            eval_due = evaluating and (state.step % config.eval_steps == 0 or last)
            if state.step % config.logging_steps == 0 or last or checkpoint_due:
                self._check_finite(accelerator, state)
            if state.step % config.logging_steps == 0 or last:
                count = state.step % config.logging_steps or config.logging_steps
                logs = {k: float(accelerator.reduce(v, reduction="mean")) / count for k, v in running.items()}
                logs |= {"lr": state.lr_scheduler.get_last_lr()[0], "images_seen": state.images_seen,
                         "images_per_second": (state.images_seen - start_images)
                         / max(time.perf_counter() - start_time, 1e-9)}
                progress.set_postfix(loss=f"{logs['loss']:.4f}")
                accelerator.log(logs, step=state.step)
                running = {}
            # Evaluate before checkpointing: a run killed during the evaluation resumes from the checkpoint before
            # and repeats the evaluation, so no evaluation is ever lost.
            if eval_due:
                if tracker is not None:
                    progress.write(_format_record(self.evaluate(accelerator, state, tracker)))
                accelerator.wait_for_everyone()
            if checkpoint_due:
                self.save_checkpoint(accelerator, state)
        progress.close()

        records: list[dict[str, Any]] = []
        if accelerator.is_main_process:
            final_model = state.ema.shadow if state.ema is not None else accelerator.unwrap_model(state.model)
            records = read_log(self.log_path) if self.log_path.is_file() else []
            self.export(final_model, records)
            if config.push_to_hub:
                from ..hub import upload_folder_to_hub

                upload_folder_to_hub(self.output_dir, config.hub_model_id, token=config.hub_token,
                                     private=config.hub_private)
        accelerator.wait_for_everyone()
        # Finish the trackers but keep the process group: a script may train again in this process (a tokenizer,
        # then its generator; a queue of runs). ``accelerator.end_training()`` would destroy it.
        for tracker in accelerator.trackers:
            tracker.finish()
        return records

    def export(self, model: nn.Module, records: list[dict[str, Any]]) -> None:
        """``save_pretrained`` the pipeline and write its model card as one unit.

        Both are written to a temporary directory first. Then the loading marker of the previous export
        (``model_index.json``, or ``config.json`` for a bare model) is removed, the new components and card are
        moved in, and the new marker goes in last: a kill at any point leaves either the old export, or no marker
        (``from_pretrained`` fails), never a loadable mix of old and new parts.
        """
        tmp = self.output_dir / ".tmp-export"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        self.task.save_pretrained(model, tmp)
        self.write_model_card(records, tmp)
        marker = "model_index.json" if (tmp / "model_index.json").exists() else "config.json"
        for name in ("model_index.json", "config.json"):
            if (self.output_dir / name).is_file():
                (self.output_dir / name).unlink()
        for entry in sorted(tmp.iterdir(), key=lambda p: p.name == marker):
            target = self.output_dir / entry.name
            if target.is_dir() and not target.is_symlink():
                shutil.rmtree(target)
            os.replace(entry, target)
        tmp.rmdir()

    def write_model_card(self, records: list[dict[str, Any]], directory: Path | None = None) -> None:
        from .model_card import write_model_card

        write_model_card(
            directory or self.output_dir,
            records=records,
            graph=self.graph,
            config=self.config,
            details=self.task.model_card_details(),
            dataset_name=self.dataset_name,
        )


def resolve_mixed_precision(mixed_precision: str) -> str:
    """``auto`` -> ``bf16`` where bf16 is native (a CUDA GPU that supports it, or a CPU with AVX-512 BF16 or AMX),
    else ``no``; any other value is returned as given."""
    if mixed_precision != "auto":
        return mixed_precision
    if torch.cuda.is_available():
        return "bf16" if torch.cuda.is_bf16_supported() else "no"
    native = getattr(torch.cpu, "_is_avx512_bf16_supported", lambda: False)() or getattr(
        torch.cpu, "_is_amx_tile_supported", lambda: False)()
    return "bf16" if native else "no"


def multi_cpu_launch() -> bool:
    """Whether this process is one of several launched on a machine without CUDA (``torchrun`` on CPUs).

    Accelerate forms a CPU (gloo) process group only when told to use the CPU; without it, each process would
    train alone and write the same files. :class:`Trainer` and :func:`compgen.training.script.prepare_run` ask
    Accelerate for the CPU exactly then.
    """
    return int(os.environ.get("WORLD_SIZE", "1")) > 1 and not torch.cuda.is_available()


def _checkpoint_run_id(path: Path) -> str | None:
    try:
        return read_trainer_state(path).get("run_id")
    except CheckpointError:
        return None


def _format_record(record: dict[str, Any]) -> str:
    levels = record.get("level_accuracy", {})
    text = " ".join(f"L{level}={value:.2f}" for level, value in sorted(levels.items()))
    pixel = record.get("pixel_level_accuracy")
    if pixel:
        text += " | pixel scorer " + " ".join(f"L{level}={value:.2f}" for level, value in sorted(pixel.items()))
    if record.get("scorer_disagreements"):
        text += f" | scorers disagree on {', '.join(record['scorer_disagreements'])}"
    return f"[eval step {record.get('step')}] {text}"


def _jsonable(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))


def _flat_config(config: TrainingConfig) -> dict[str, Any]:
    flat = {k: v for k, v in asdict(config).items() if k not in ("extra", "hub_token")}
    flat.update({f"extra/{k}": v for k, v in config.extra.items()})
    return {k: v if isinstance(v, int | float | str | bool) else str(v) for k, v in flat.items()}


def add_training_arguments(parser, defaults: dict[str, Any] | None = None) -> None:
    """Add one ``--flag`` per :class:`TrainingConfig` field (except ``extra``) to an argparse parser."""
    defaults = defaults or {}
    for f in fields(TrainingConfig):
        if f.name == "extra":
            continue
        default = defaults.get(f.name, f.default)
        if f.type in ("bool", bool):
            parser.add_argument(f"--{f.name}", action="store_true", default=default)
            parser.add_argument(f"--no_{f.name}", dest=f.name, action="store_false")
        elif f.type == "bool | str":  # a switch that may name a mode: --torch_compile [MODE]
            parser.add_argument(f"--{f.name}", nargs="?", const=True, default=default, metavar="MODE")
            parser.add_argument(f"--no_{f.name}", dest=f.name, action="store_false")
        else:
            kind = {"int": int, "float": float}.get(str(f.type), None)
            if str(f.type).startswith("int |"):
                kind = _optional_int
            parser.add_argument(f"--{f.name}", type=kind or str, default=default)


def _optional_int(text: str) -> int | None:
    return None if text.lower() in ("none", "") else int(text)


def config_from_args(args, extra: dict[str, Any] | None = None) -> TrainingConfig:
    names = {f.name for f in fields(TrainingConfig)} - {"extra"}
    return TrainingConfig(**{name: getattr(args, name) for name in names}, extra=extra or {})
