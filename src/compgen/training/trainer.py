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

The pieces around the loop live beside it: the options in :mod:`~compgen.training.config`, the task contract and the
seeded batches in :mod:`~compgen.training.task`, the output directory, its checkpoints and resume in
:class:`~compgen.training.run_directory.RunDirectory`, the checkpoint files in :mod:`~compgen.training.checkpoint`.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import math
import shutil
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from accelerate import Accelerator
from accelerate.utils import ProjectConfiguration, broadcast_object_list
from torch import nn
from tqdm.auto import tqdm

from ..atomic_io import atomic_write_text
from ..concepts import ConceptGraph
from ..data.loading import ConceptImageData
from ..evaluation.sampling_precision import sampling_precision
from ..evaluation.tracker import (
    LearningDynamicsTracker,
    append_training_log,
    format_record,
    levels_held,
    own_records,
    read_log,
)
from .acceleration import (
    attention_kernel,
    compile_mode,
    dynamo_plugin,
    enable_gradient_checkpointing,
    fused_optimizer_supported,
)
from .checkpoint import CheckpointError, load_checkpoint, read_trainer_state, save_checkpoint
from .config import TrainingConfig, multi_cpu_launch, resolve_mixed_precision
from .ema import ExponentialMovingAverage, MomentumSchedule
from .export import export_run
from .fine_tuning import FINE_TUNE_PHASE, load_initial_weights, resolve_initial_weights, source_log_lines
from .profile import RunProfile
from .run_directory import RunDirectory, RunStart
from .task import TrainingTask, batch_indices, check_batch_fits, make_batch, mix_seed

logger = logging.getLogger(__name__)


class NonFiniteLossError(RuntimeError):
    """Training diverged: a loss was NaN or infinite. Nothing is exported; the last good checkpoint stays."""


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
        profile: RunProfile | None = None,
        phase_prefix: str = "",
        start: RunStart | None = None,  # output_dir, claimed and checked by the script (prepare_run), else by train()
    ) -> None:
        # ``auto`` precision is resolved once, so checkpoints, logs and the card record what actually ran.
        precision = resolve_mixed_precision(config.mixed_precision)
        eval_precision = resolve_mixed_precision(config.eval_mixed_precision or precision)
        self.config = dataclasses.replace(config, mixed_precision=precision, eval_mixed_precision=eval_precision)
        self.task = task
        self.train_data = train_data
        self.graph = graph
        self.probes = probes
        self.dataset_name = dataset_name
        self.profile = profile if profile is not None else RunProfile(start=time.time())  # where the time goes
        self.phase_prefix = phase_prefix
        self.start = start
        self.output_dir = Path(config.output_dir)
        self.run_directory = RunDirectory(self.output_dir)
        self.checkpoint_dir = self.run_directory.checkpoint_dir
        self.log_path = self.run_directory.log_path
        self.initial = resolve_initial_weights(config.init_from) if config.init_from else None
        self.step_offset = self.initial.step if self.initial else 0  # logged step: the source's + this run's

    # --- setup -----------------------------------------------------------------------------------------------

    def make_accelerator(self) -> Accelerator:
        """The Accelerator for this run (see :func:`multi_cpu_launch` for ``torchrun`` on CPUs)."""
        return Accelerator(
            cpu=multi_cpu_launch(),
            mixed_precision=self.config.mixed_precision,  # resolved once, in __init__
            dynamo_plugin=dynamo_plugin(self.config.torch_compile),
            gradient_accumulation_steps=self.config.gradient_accumulation_steps,
            log_with=self.config.trackers or None,
            project_config=ProjectConfiguration(project_dir=str(self.output_dir)),
        )

    def prepare(self, accelerator: Accelerator) -> TrainState:
        """Optimizer, LR schedule, device placement (model, task, data), EMA, and the resumed state if asked."""
        config = self.config
        for path in self.start.replaced if self.start else []:  # the main process's (see train)
            logger.warning("--overwrite_output_dir: removing %s, the previous run's", path)
            shutil.rmtree(path) if path.is_dir() else path.unlink()
        accelerator.wait_for_everyone()
        if config.gradient_checkpointing:
            logger.info("gradient checkpointing: %s", ", ".join(enable_gradient_checkpointing(self.task.model)))
        if config.channels_last:
            self.task.model.to(memory_format=torch.channels_last)  # the 4-d (convolution) weights only
        # The model goes to its device (and into DDP) before the optimizer sees its parameters.
        model = accelerator.prepare(self.task.model)
        if self.initial is not None:  # before the EMA copies the weights; a resumed run then loads its checkpoint
            logger.info("--init_from: %s", load_initial_weights(accelerator.unwrap_model(model), self.initial))
        self.task.to(accelerator.device)
        self.task.sampling_compile_mode = compile_mode(config.torch_compile)
        self.task.logging_steps = config.logging_steps  # when a task measures its costlier diagnostics
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
        if candidates := self.run_directory.resume_candidates(config.resume_from_checkpoint):
            self._load_checkpoint(accelerator, state, candidates)
        elif config.resume_from_checkpoint:
            logger.info("no checkpoint in %s: starting from scratch", self.checkpoint_dir)
        if accelerator.is_main_process:
            if self.initial is not None and state.step == 0:  # a fresh fine-tuning run: the source phase first
                atomic_write_text(self.log_path, "".join(source_log_lines(self.initial)))
            self._truncate_log(state.step + self.step_offset)
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
                "config": self.config.to_json_dict()}

    def save_checkpoint(self, accelerator: Accelerator, state: TrainState) -> None:
        """Write ``checkpoint-<step>`` atomically (main process, temporary name, rename) and prune old ones."""
        if accelerator.is_main_process:
            self.run_directory.write_checkpoint(
                state.step,
                lambda directory: save_checkpoint(directory, accelerator.unwrap_model(state.model), state.optimizer,
                                                  state.lr_scheduler, self._checkpoint_modules(state),
                                                  self._trainer_state(state, accelerator)),
                state.run_id,
                self.config.checkpoints_total_limit,
            )
        accelerator.wait_for_everyone()

    def _load_checkpoint(self, accelerator: Accelerator, state: TrainState, candidates: list[Path]) -> None:
        """Restore the first usable checkpoint of ``candidates`` (with ``latest``: every one, newest first)."""
        errors = []
        for candidate in candidates:
            try:
                trainer_state = read_trainer_state(candidate)
                self.run_directory.check_resumable(trainer_state, candidate, self.config,
                                                   accelerator.num_processes, self.task.schedules_over_length())
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
        """Drop the records of both logs (evaluations, training scalars) written after the checkpoint we resume from
        (and a torn last line a kill left), so the logs match the weights."""
        for path in (self.log_path, self.run_directory.training_log_path):
            if path.is_file():
                kept = [json.dumps(r) for r in read_log(path) if r["step"] <= step]
                atomic_write_text(path, "".join(line + "\n" for line in kept))

    def _make_tracker(self) -> LearningDynamicsTracker | None:
        """The tracker, holding the records a resumed run logged before (the log is truncated to the checkpoint)."""
        if self.probes is None:
            return None
        tracker = LearningDynamicsTracker(
            self.graph,
            self.probes,
            num_images_per_class=self.config.eval_images_per_class,
            log_path=self.log_path,
            seed=self.config.seed,
            sample_dir=self.run_directory.sample_dir,
        )
        tracker.records = read_log(self.log_path) if self.log_path.is_file() else []
        if self.initial is not None:
            tracker.record_fields = {"phase": FINE_TUNE_PHASE, "phase_start_step": self.step_offset}
        return tracker

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
            indices = batch_indices(len(self.train_data), global_batch, micro_step, config.seeds[0])
            batch = make_batch(self.train_data, indices[rank::world], config.channels_last)
            generator = torch.Generator().manual_seed(mix_seed(config.seeds[1], micro_step, rank))
            with accelerator.accumulate(model), accelerator.autocast(), attention_kernel(config.attention_kernel):
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
        sampling = self.task.eval_sampling()
        precision = self.config.eval_mixed_precision
        if precision != "no":
            sampling["mixed_precision"] = precision
        generate, step = functools.partial(self.task.generate, eval_model), state.step + self.step_offset
        with sampling_precision(eval_model, precision, accelerator.device.type):
            return tracker.evaluate(generate, step, state.images_seen, accelerator=accelerator, sampling=sampling)

    def _levels_held(self, accelerator: Accelerator, tracker: LearningDynamicsTracker | None) -> bool:
        """Whether the levels hold (``--eval_steps_held``): the main process decides from its tracker's records, every
        process learns it."""
        if not self.config.eval_steps_held:
            return False
        held = [tracker is not None and levels_held(own_records(tracker.records))]  # not a source run's
        return bool(broadcast_object_list(held)[0]) if accelerator.num_processes > 1 else held[0]

    def train(self) -> list[dict[str, Any]]:
        """Train to ``max_train_steps`` (resuming if asked), export, write the model card; returns the eval log."""
        own = self.start is None  # prepare_run claimed and checked the directory; a Trainer used alone does so here
        with self._phase("setup (placement, optimizer, resume)"):
            accelerator = self.make_accelerator()
        if own:
            self.config.check_environment()
            check_batch_fits(len(self.train_data), self.config.train_batch_size, accelerator.num_processes)
            self.start = self.run_directory.start(self.config, accelerator.num_processes) \
                if accelerator.is_main_process else None
        try:
            return self._train(accelerator)
        finally:
            if own and self.start is not None:  # its own claim, given back; a later train() claims anew
                self.start.claim.release()
                self.start = None

    def _phase(self, name: str):
        return self.profile.phase(self.phase_prefix + name)

    def _train(self, accelerator: Accelerator) -> list[dict[str, Any]]:
        config = self.config
        with self._phase("setup (placement, optimizer, resume)"):
            state = self.prepare(accelerator)
            if accelerator.is_main_process and config.trackers:
                accelerator.init_trackers("compgen", config=config.tracker_config())
        # Every process takes the same branches (evaluations and checkpoints end with a barrier); only the main
        # process evaluates and writes.
        evaluating = self.probes is not None
        with self._phase("setup: evaluation scorers"):
            tracker = self._make_tracker() if accelerator.is_main_process else None
        if evaluating and self.initial is not None and state.step == 0:  # the loaded weights on the new graph
            if tracker is not None:
                logger.info("before fine-tuning: %s", format_record(self.evaluate(accelerator, state, tracker)))
            accelerator.wait_for_everyone()
        held = self._levels_held(accelerator, tracker)

        progress = tqdm(total=config.max_train_steps, initial=state.step, desc="training",
                        disable=not accelerator.is_local_main_process)
        running: dict[str, torch.Tensor] = {}
        counts: dict[str, int] = {}
        start_time, start_images = time.perf_counter(), state.images_seen
        first = True
        while state.step < config.max_train_steps:
            with self._phase("first training step (compilation, warm-up)" if first else "training steps"):
                scalars = self.training_step(accelerator, state)
            first = False
            for key, value in scalars.items():  # a diagnostic a task measures on some steps is averaged over those
                running[key] = running.get(key, 0.0) + value
                counts[key] = counts.get(key, 0) + 1
            progress.update(1)
            last = state.step == config.max_train_steps
            checkpoint_due = state.step % config.checkpointing_steps == 0 or last
            eval_due = evaluating and (last or config.evaluation_due(state.step, held))
            if state.step % config.logging_steps == 0 or last or checkpoint_due:
                self._check_finite(accelerator, state)
            if state.step % config.logging_steps == 0 or last:
                logs = {k: float(accelerator.reduce(v, reduction="mean")) / counts[k] for k, v in running.items()}
                logs |= {"lr": state.lr_scheduler.get_last_lr()[0], "images_seen": state.images_seen,
                         "images_per_second": (state.images_seen - start_images)
                         / max(time.perf_counter() - start_time, 1e-9)}
                progress.set_postfix(loss=f"{logs['loss']:.4f}")
                accelerator.log(logs, step=state.step + self.step_offset)
                if accelerator.is_main_process:
                    append_training_log(self.run_directory.training_log_path, state.step + self.step_offset, logs)
                running, counts = {}, {}
            # Evaluate before checkpointing: a run killed during the evaluation resumes from the checkpoint before
            # and repeats the evaluation, so no evaluation is ever lost.
            if eval_due:
                begin = time.time()
                if tracker is not None:
                    record = self.evaluate(accelerator, state, tracker)
                    progress.write(format_record(record))
                    self.profile.add(self.phase_prefix + "evaluation: sampling", record["generate_s"])
                accelerator.wait_for_everyone()
                held = self._levels_held(accelerator, tracker)
                self.profile.add(self.phase_prefix + "evaluation: scoring and logging",
                                 time.time() - begin - (record["generate_s"] if tracker is not None else 0.0))
            if checkpoint_due:
                with self._phase("checkpoints"):
                    self.save_checkpoint(accelerator, state)
        progress.close()

        records: list[dict[str, Any]] = []
        with self._phase("export, model card, Hub push"):
            if accelerator.is_main_process:
                final_model = state.ema.shadow if state.ema is not None else accelerator.unwrap_model(state.model)
                records = read_log(self.log_path) if self.log_path.is_file() else []
                self.export(final_model, records, state.step)
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

    def export(self, model: nn.Module, records: list[dict[str, Any]], steps_trained: int) -> None:
        """``save_pretrained`` the pipeline and write its model card as one unit (:func:`export_run`)."""
        export_run(self.output_dir, self.task, model, records, self.graph, self.config, self.dataset_name,
                   {"step": steps_trained + self.step_offset, "steps_trained": steps_trained})
