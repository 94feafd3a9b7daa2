"""The one training loop every compgen example uses: when to step, log, evaluate, checkpoint and export.

It owns what is common to all models: Accelerate (devices, data parallelism, mixed precision, gradient accumulation,
trackers), deterministic batches, checkpoints written atomically and pruned to a limit, exact resume, EMA weights and
the learning-dynamics evaluation callback; at the end it hands the final weights to
:func:`~compgen.training.export.finish_run` (the pipeline, the model card, the Hub push). A script supplies only what
differs, as a :class:`~compgen.training.tasks.base.TrainingTask`: the loss, how to sample images, and how to export
the pipeline.

Exact resume without pickled state: the batch of step ``s`` and every random draw of the loss at step ``s`` are
functions of ``(seed, s)`` alone (a fresh CPU ``torch.Generator`` per step; tasks move what they draw to the
batch's device), so a run resumed from a checkpoint replays precisely the steps an uninterrupted run would have
taken, on any device. Under data parallelism with ``N`` processes every rank computes the same global batch indices
and takes its ``1/N`` share; evaluation, logging, checkpoints and the export happen once, on the main process.

The pieces around the loop live beside it: the options in :mod:`~compgen.training.config`, the seeded batches in
:mod:`~compgen.training.batches`, the task contract in :mod:`~compgen.training.tasks.base`, the checkpoints and resume
in :class:`~compgen.training.run_directory.RunDirectory`, the checkpoint files in :mod:`~compgen.training.checkpoint`.
The loop runs in an output directory its caller claimed and checked (:func:`compgen.launch.directory_claim.start_run`)
and starts from the weights its caller resolved (``initial``, :func:`compgen.launch.init_from.check_init_from`).
"""

from __future__ import annotations

import functools
import logging
import math
import shutil
import time
from collections.abc import Sequence
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
from ..evaluation.lenient import LenientScorer
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
)
from .batches import batch_indices, check_batch_fits, make_batch, mix_seed
from .config import TrainingConfig, multi_cpu_launch
from .ema import ExponentialMovingAverage, MomentumSchedule
from .export import finish_run
from .fine_tuning import FINE_TUNE_PHASE, InitialWeights, load_initial_weights, source_log_lines
from .process_group import end_process_group_at_exit
from .profile import RunProfile
from .run_directory import RunDirectory
from .state import TrainState, make_optimizer, resume, save_state
from .tasks.base import TrainingTask

logger = logging.getLogger(__name__)

GLOBAL_GENERATOR_STREAM = 1
"""The counter that tells the seed of torch's global generators in a step from the seed of the step's generator."""


class NonFiniteLossError(RuntimeError):
    """Training diverged: a loss was NaN or infinite. Nothing is exported; the last good checkpoint stays."""


class Trainer:
    """Runs a :class:`TrainingTask` on a :class:`ConceptImageData` split with the options of a TrainingConfig.

    ``replaced``: the files of an earlier run in ``config.output_dir`` that ``--overwrite_output_dir`` replaces, which
    the loop removes once training begins (:class:`~compgen.launch.directory_claim.RunStart`). ``initial``: the weights
    ``config.init_from`` names, already resolved (required with it). ``lenient``: Paper B's protocol, logged beside the
    other scores (:mod:`compgen.evaluation.lenient`). The caller claims and checks the output directory and resolves
    ``--init_from`` once (:func:`compgen.launch.run_setup.prepare_run`); ``options_checked``: it checked the
    environment and that the split holds a batch before any work, so the loop does not check them again.
    """

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
        replaced: Sequence[Path] = (),
        initial: InitialWeights | None = None,
        options_checked: bool = False,
        lenient: LenientScorer | None = None,
    ) -> None:
        if config.init_from and initial is None:
            raise ValueError(f"init_from {config.init_from}: pass the weights it names, resolved once before any work "
                             "(compgen.launch.init_from.check_init_from), as initial")
        # ``auto`` precision is resolved once, so checkpoints, logs and the card record what actually ran.
        self.config = config.resolved()
        self.task = task
        self.options_checked = options_checked
        self.train_data = train_data
        self.graph = graph
        self.probes, self.lenient = probes, lenient
        self.dataset_name = dataset_name
        self.profile = profile if profile is not None else RunProfile(start=time.time())  # where the time goes
        self.phase_prefix = phase_prefix
        self.replaced = list(replaced)
        self.output_dir = Path(config.output_dir)
        self.run_directory = RunDirectory(self.output_dir)
        self.checkpoint_dir = self.run_directory.checkpoint_dir
        self.log_path = self.run_directory.log_path
        self.initial = initial if config.init_from else None
        self.step_offset = self.initial.step if self.initial else 0  # logged step: the source's + this run's

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
        if accelerator.is_main_process:
            for path in self.replaced:
                logger.warning("--overwrite_output_dir: removing %s, the previous run's", path)
                shutil.rmtree(path) if path.is_dir() else path.unlink()
            self.output_dir.mkdir(parents=True, exist_ok=True)  # made by the claim, unless the caller claimed none
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
        optimizer, lr_scheduler = make_optimizer(model, config, accelerator)  # prepared by the accelerator
        self.train_data = self.train_data.to(accelerator.device)
        ema = None
        if config.use_ema:
            ema = ExponentialMovingAverage(accelerator.unwrap_model(model),
                                           MomentumSchedule(config.ema_decay, kind=config.ema_schedule))
        state = TrainState(model, optimizer, lr_scheduler, ema)
        state.first_nonfinite_step = torch.full((), math.inf, device=accelerator.device)
        if candidates := self.run_directory.resume_candidates(config.resume_from_checkpoint):
            resume(self.run_directory, candidates, accelerator, state, self.config, self.task)
        elif config.resume_from_checkpoint:
            logger.info("no checkpoint in %s: starting from scratch", self.checkpoint_dir)
        if accelerator.is_main_process:
            if self.initial is not None and state.step == 0:  # a fresh fine-tuning run: the source phase first
                atomic_write_text(self.log_path, "".join(source_log_lines(self.initial)))
            self.run_directory.truncate_logs(state.step + self.step_offset)
        return state

    def _make_tracker(self, state: TrainState) -> LearningDynamicsTracker | None:
        """The tracker, holding the records a resumed run logged before (the log is truncated to the checkpoint) and
        the run's clock (its wall-clock counts the earlier parts)."""
        if self.probes is None:
            return None
        from ..evaluation.clip_evaluation import ClipTracker
        from ..evaluation.clip_probes import ClipProbes

        # clip probes judge a video generator's clips; concept probes an image generator's images
        tracker_class = ClipTracker if isinstance(self.probes, ClipProbes) else LearningDynamicsTracker
        tracker = tracker_class(
            self.graph,
            self.probes,
            num_images_per_class=self.config.eval_images_per_class,
            log_path=self.log_path,
            seed=self.config.seed,
            sample_dir=self.run_directory.sample_dir,
            **({"lenient": self.lenient} if self.lenient is not None else {}),  # images only
        )
        tracker.records = read_log(self.log_path) if self.log_path.is_file() else []
        tracker.clock_origin = state.clock_origin
        if self.initial is not None:
            tracker.record_fields = {"phase": FINE_TUNE_PHASE, "phase_start_step": self.step_offset}
        return tracker

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
            # What draws from torch's global generators (a model's dropout) is seeded by the step too, so that a
            # resumed run takes the steps an uninterrupted one took.
            torch.manual_seed(mix_seed(config.seeds[1], micro_step, rank, GLOBAL_GENERATOR_STREAM))
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
        with self._phase("setup (placement, optimizer, resume)"):
            accelerator = self.make_accelerator()
        if not self.options_checked:  # else checked before any work, by compgen.launch.run_setup.prepare_run
            self.config.check_environment()
            # Once per run, before the first step (not by every step's draw of its batch).
            check_batch_fits(len(self.train_data), self.config.train_batch_size, accelerator.num_processes)
        records = self._train(accelerator)
        end_process_group_at_exit()  # a finished run's processes then exit cleanly (see the module)
        return records

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
            tracker = self._make_tracker(state) if accelerator.is_main_process else None
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
                    save_state(self.run_directory, accelerator, state, self.config, self.task)
        progress.close()

        records: list[dict[str, Any]] = []
        with self._phase("export, model card, Hub push"):
            if accelerator.is_main_process:
                final_model = state.ema.shadow if state.ema is not None else accelerator.unwrap_model(state.model)
                records = read_log(self.log_path) if self.log_path.is_file() else []
                finish_run(self.output_dir, self.task, final_model, records, self.graph, config, self.dataset_name,
                           {"step": state.step + self.step_offset, "steps_trained": state.step})
            accelerator.wait_for_everyone()
            # Finish the trackers but keep the process group: a script may train again in this process (a tokenizer,
            # then its generator; a queue of runs). ``accelerator.end_training()`` would destroy it.
            for tracker in accelerator.trackers:
                tracker.finish()
        return records
