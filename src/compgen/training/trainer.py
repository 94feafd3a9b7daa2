"""The one training loop every compgen example uses.

It owns what is common to all models: Accelerate (mixed precision, gradient accumulation, trackers),
deterministic batches, atomic checkpoints pruned to a limit, exact resume, EMA weights, the learning-dynamics
evaluation callback, the final ``save_pretrained``, the model card and the Hub push. A script supplies only
what differs, as a :class:`TrainingTask`: the loss, how to sample images, and how to export the pipeline.

Exact resume without pickled RNG state: the batch of step ``s`` and every random draw of the loss at step ``s``
are functions of ``(seed, s)`` alone (a fresh ``torch.Generator`` per step), so a run resumed from a checkpoint
replays precisely the steps an uninterrupted run would have taken.
"""

from __future__ import annotations

import functools
import json
import logging
import math
import os
import re
import shutil
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np
import torch
from accelerate import Accelerator
from accelerate.utils import ProjectConfiguration
from safetensors.torch import load_file, save_file
from torch import nn
from tqdm.auto import tqdm

from ..concepts import ConceptGraph
from ..data.loading import ConceptImageData
from ..evaluation.tracker import LearningDynamicsTracker, read_log
from ..io import atomic_write_text
from .ema import ExponentialMovingAverage, MomentumSchedule

logger = logging.getLogger(__name__)

CHECKPOINT_PATTERN = re.compile(r"^checkpoint-(\d+)$")
TRAINER_STATE_NAME = "trainer_state.json"
LOG_NAME = "learning_dynamics.jsonl"


@dataclass
class TrainingConfig:
    """Options shared by every training script (each becomes a ``--flag``)."""

    output_dir: str = "outputs/model"
    seed: int = 0
    train_batch_size: int = 64
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
    checkpointing_steps: int = 500
    checkpoints_total_limit: int | None = 2
    resume_from_checkpoint: str | None = None
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
        if self.mixed_precision not in ("no", "fp16", "bf16"):
            raise ValueError(f"mixed_precision must be no, fp16 or bf16, got {self.mixed_precision!r}")
        for name in ("train_batch_size", "max_train_steps", "gradient_accumulation_steps", "checkpointing_steps",
                     "eval_steps", "logging_steps"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")
        if self.push_to_hub and not self.hub_model_id:
            raise ValueError("--push_to_hub needs --hub_model_id ORG/NAME")


class TrainingTask:
    """What one model's training adds to the shared loop. Subclasses override the four methods below."""

    model: nn.Module
    """The trainable module (it may hold several parts, e.g. a transformer and a JEPA predictor)."""

    def compute_loss(
        self, model: nn.Module, batch: dict[str, torch.Tensor], generator: torch.Generator, step: int
    ) -> tuple[torch.Tensor, dict[str, float]]:
        """The loss of one batch; every random draw must use ``generator``. Returns (loss, scalars to log)."""
        raise NotImplementedError

    def generate(self, model: nn.Module, concepts: list[str], seed: int) -> np.ndarray:
        """Sample one uint8 (H, W, 3) image per entry of ``concepts`` with the (EMA) weights ``model``."""
        raise NotImplementedError

    def save_pretrained(self, model: nn.Module, output_dir: Path) -> None:
        """Write the inference pipeline built from ``model`` into ``output_dir``."""
        raise NotImplementedError

    def after_optimizer_step(self, model: nn.Module, step: int) -> dict[str, float]:
        """Hook after each optimizer step (e.g. the JEPA target encoder's EMA update)."""
        return {}

    def extra_state(self) -> dict[str, nn.Module]:
        """Modules outside ``model`` whose weights a checkpoint must hold for exact resume."""
        return {}

    def model_card_details(self) -> dict[str, Any]:
        """Name, tags and a description for the model card."""
        return {}


def batch_indices(num_examples: int, batch_size: int, step: int, seed: int) -> torch.Tensor:
    """Indices of the batch at ``step``: a fresh seeded permutation per epoch, incomplete last batch dropped."""
    if num_examples < batch_size:
        raise ValueError(f"the training split has {num_examples} examples, fewer than one batch of {batch_size}")
    steps_per_epoch = num_examples // batch_size
    epoch, position = divmod(step, steps_per_epoch)
    generator = torch.Generator().manual_seed(seed * 1_000_003 + epoch)
    permutation = torch.randperm(num_examples, generator=generator)
    return permutation[position * batch_size : (position + 1) * batch_size]


def make_batch(data: ConceptImageData, indices: torch.Tensor) -> dict[str, torch.Tensor]:
    """Images as float NCHW in [-1, 1], the conditioning of each image, and its row ``index`` in ``data``
    (so a task can look up per-example features it precomputed, e.g. VQ token indices)."""
    images = data.images[indices].permute(0, 3, 1, 2).float().div(127.5).sub(1.0)
    batch = {"images": images.contiguous(), "concepts": data.concepts[indices], "index": indices}
    if data.concept_values is not None:
        batch["concept_values"] = data.concept_values[indices]
    return batch


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
        self.config = config
        self.task = task
        self.train_data = train_data
        self.graph = graph
        self.probes = probes
        self.dataset_name = dataset_name
        self.output_dir = Path(config.output_dir)
        self.checkpoint_dir = self.output_dir / "checkpoints"
        self.log_path = self.output_dir / LOG_NAME

    # --- checkpoints -------------------------------------------------------------------------------------

    def _save_checkpoint(self, accelerator: Accelerator, step: int, images_seen: int,
                         ema: ExponentialMovingAverage | None) -> None:
        """Write ``checkpoint-<step>`` atomically (to a temporary name, then rename) and prune old ones."""
        final = self.checkpoint_dir / f"checkpoint-{step}"
        tmp = self.checkpoint_dir / f".tmp-checkpoint-{step}"
        if accelerator.is_main_process:
            shutil.rmtree(tmp, ignore_errors=True)
        accelerator.wait_for_everyone()
        accelerator.save_state(str(tmp), safe_serialization=True)
        if accelerator.is_main_process:
            modules = dict(self.task.extra_state())
            if ema is not None:
                modules["ema"] = ema.shadow
            for name, module in modules.items():
                save_file({k: v.contiguous() for k, v in module.state_dict().items()}, str(tmp / f"{name}.safetensors"))
            state = {"step": step, "images_seen": images_seen, "config": _jsonable(asdict(self.config))}
            (tmp / TRAINER_STATE_NAME).write_text(json.dumps(state, indent=2))
            shutil.rmtree(final, ignore_errors=True)
            os.replace(tmp, final)
            limit = self.config.checkpoints_total_limit
            if limit is not None:
                for _, old in list_checkpoints(self.checkpoint_dir)[:-limit]:
                    shutil.rmtree(old, ignore_errors=True)
        accelerator.wait_for_everyone()

    def _resolve_resume(self) -> Path | None:
        value = self.config.resume_from_checkpoint
        if not value:
            return None
        if value == "latest":
            checkpoints = list_checkpoints(self.checkpoint_dir)
            if not checkpoints:
                logger.info("no checkpoint in %s: starting from scratch", self.checkpoint_dir)
                return None
            return checkpoints[-1][1]
        path = Path(value)
        if not path.is_dir():
            path = self.checkpoint_dir / value
        if not (path / TRAINER_STATE_NAME).is_file():
            raise ValueError(f"--resume_from_checkpoint {value!r}: no complete checkpoint at {path}")
        return path

    def _load_checkpoint(self, accelerator: Accelerator, path: Path,
                         ema: ExponentialMovingAverage | None) -> tuple[int, int]:
        accelerator.load_state(str(path))
        modules = dict(self.task.extra_state())
        if ema is not None:
            modules["ema"] = ema.shadow
        for name, module in modules.items():
            file = path / f"{name}.safetensors"
            if not file.is_file():
                raise ValueError(f"checkpoint {path} lacks {file.name}: it was written by a different configuration")
            module.load_state_dict(load_file(str(file)))
        state = json.loads((path / TRAINER_STATE_NAME).read_text())
        return int(state["step"]), int(state["images_seen"])

    # --- evaluation log -------------------------------------------------------------------------------------

    def _truncate_log(self, step: int) -> None:
        """Drop log records written after the checkpoint we resume from, so the log matches the weights."""
        if not self.log_path.is_file():
            return
        kept = [line for line in self.log_path.read_text().splitlines()
                if line.strip() and json.loads(line)["step"] <= step]
        atomic_write_text(self.log_path, "".join(line + "\n" for line in kept))

    def _make_tracker(self):
        if self.probes is None:
            return None

        return LearningDynamicsTracker(
            self.graph,
            self.probes,
            num_images_per_class=self.config.eval_images_per_class,
            log_path=self.log_path,
            seed=self.config.seed,
            sample_dir=self.output_dir / "samples",
        )

    # --- the loop -------------------------------------------------------------------------------------------

    def train(self) -> list[dict[str, Any]]:
        """Train to ``max_train_steps`` (resuming if asked), export, write the model card; returns the eval log."""
        config = self.config
        accelerator = Accelerator(
            mixed_precision=config.mixed_precision,
            gradient_accumulation_steps=config.gradient_accumulation_steps,
            log_with=config.report_to if config.report_to not in (None, "none") else None,
            project_config=ProjectConfiguration(project_dir=str(self.output_dir)),
        )
        if accelerator.is_main_process:
            self.output_dir.mkdir(parents=True, exist_ok=True)
        torch.manual_seed(config.seed)
        model = self.task.model
        optimizer = torch.optim.AdamW(
            [p for p in model.parameters() if p.requires_grad],
            lr=config.learning_rate,
            betas=(config.adam_beta1, config.adam_beta2),
            weight_decay=config.adam_weight_decay,
        )
        from diffusers.optimization import get_scheduler

        lr_scheduler = get_scheduler(
            config.lr_scheduler,
            optimizer=optimizer,
            num_warmup_steps=config.lr_warmup_steps * accelerator.num_processes,
            num_training_steps=config.max_train_steps * accelerator.num_processes,
        )
        model, optimizer, lr_scheduler = accelerator.prepare(model, optimizer, lr_scheduler)
        ema = None
        if config.use_ema:
            ema = ExponentialMovingAverage(accelerator.unwrap_model(model), MomentumSchedule(config.ema_decay,
                                                                                            kind="warmup"))
        start_step, images_seen = 0, 0
        resume_path = self._resolve_resume()
        if resume_path is not None:
            start_step, images_seen = self._load_checkpoint(accelerator, resume_path, ema)
            logger.info("resumed from %s at step %d", resume_path, start_step)
        if accelerator.is_main_process:
            self._truncate_log(start_step)
        if accelerator.is_main_process and config.report_to not in (None, "none"):
            accelerator.init_trackers("compgen", config=_flat_config(config))
        tracker = self._make_tracker() if accelerator.is_main_process else None

        global_batch = config.train_batch_size * accelerator.num_processes
        rank, world = accelerator.process_index, accelerator.num_processes
        progress = tqdm(range(start_step, config.max_train_steps), initial=start_step, total=config.max_train_steps,
                        disable=not accelerator.is_local_main_process, desc="training")
        running: dict[str, float] = {}
        start_time = time.perf_counter()
        for step in range(start_step, config.max_train_steps):
            model.train()
            for micro in range(config.gradient_accumulation_steps):
                micro_step = step * config.gradient_accumulation_steps + micro
                indices = batch_indices(len(self.train_data), global_batch, micro_step, config.seed)
                batch = make_batch(self.train_data, indices[rank::world])
                generator = torch.Generator().manual_seed((config.seed * 1_000_003 + micro_step) * 64 + rank)
                with accelerator.accumulate(model), accelerator.autocast():
                    loss, scalars = self.task.compute_loss(model, batch, generator, step)
                    accelerator.backward(loss)
                    if accelerator.sync_gradients and config.max_grad_norm > 0:
                        accelerator.clip_grad_norm_(model.parameters(), config.max_grad_norm)
                    optimizer.step()
                    lr_scheduler.step()
                    optimizer.zero_grad(set_to_none=True)
                images_seen += global_batch
                for key, value in {"loss": loss.detach().item(), **scalars}.items():
                    running[key] = running.get(key, 0.0) + value / config.gradient_accumulation_steps
            completed = step + 1
            unwrapped = accelerator.unwrap_model(model)
            scalars = self.task.after_optimizer_step(unwrapped, completed)
            if ema is not None:
                ema.update(unwrapped, completed)
            progress.update(1)
            if completed % config.logging_steps == 0 or completed == config.max_train_steps:
                count = completed % config.logging_steps or config.logging_steps
                logs = {k: v / count for k, v in running.items()} | scalars
                logs |= {"lr": lr_scheduler.get_last_lr()[0], "images_seen": images_seen,
                         "images_per_second": images_seen / max(time.perf_counter() - start_time, 1e-9)}
                progress.set_postfix(loss=f"{logs['loss']:.4f}")
                accelerator.log(logs, step=completed)
                running = {}
            if completed % config.checkpointing_steps == 0 or completed == config.max_train_steps:
                self._save_checkpoint(accelerator, completed, images_seen, ema)
            if tracker is not None and (completed % config.eval_steps == 0 or completed == config.max_train_steps):
                eval_model = ema.shadow if ema is not None else unwrapped
                record = tracker.evaluate(
                    functools.partial(self.task.generate, eval_model),
                    step=completed,
                    images_seen=images_seen,
                    accelerator=accelerator,
                )
                progress.write(_format_record(record))
        progress.close()

        records: list[dict[str, Any]] = []
        if accelerator.is_main_process:
            final_model = ema.shadow if ema is not None else accelerator.unwrap_model(model)
            self.export(final_model)
            records = read_log(self.log_path) if self.log_path.is_file() else []
            self.write_model_card(records)
            if config.push_to_hub:
                from ..hub import upload_folder_to_hub

                upload_folder_to_hub(self.output_dir, config.hub_model_id, token=config.hub_token,
                                     private=config.hub_private)
        accelerator.wait_for_everyone()
        accelerator.end_training()
        return records

    def export(self, model: nn.Module) -> None:
        """``save_pretrained`` the pipeline into ``output_dir`` with ``model_index.json`` moved in last."""
        tmp = self.output_dir / ".tmp-export"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        self.task.save_pretrained(model, tmp)
        entries = sorted(tmp.iterdir(), key=lambda p: p.name == "model_index.json")
        for entry in entries:
            target = self.output_dir / entry.name
            if target.is_dir() and not target.is_symlink():
                shutil.rmtree(target)
            os.replace(entry, target)
        tmp.rmdir()

    def write_model_card(self, records: list[dict[str, Any]]) -> None:
        from .model_card import write_model_card

        write_model_card(
            self.output_dir,
            records=records,
            graph=self.graph,
            config=self.config,
            details=self.task.model_card_details(),
            dataset_name=self.dataset_name,
        )


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


def steps_for_epochs(num_examples: int, batch_size: int, epochs: float) -> int:
    """Optimizer steps for ``epochs`` passes over ``num_examples`` (Paper A counts training in epochs)."""
    return max(1, math.ceil(epochs * (num_examples // batch_size)))

