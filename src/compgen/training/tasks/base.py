"""What a model adds to the shared loop: the :class:`TrainingTask` contract every task of this package fulfils, and
:func:`sample_in_batches`, how every evaluation samples.

The seeded batches the loop hands a task are :mod:`compgen.training.batches`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Self

import numpy as np
import torch
from torch import nn

from ...eval_mode import eval_mode
from ...images import unit_to_uint8
from ...models.concept_embedding import ConceptConditionedMixin


@dataclass(frozen=True)
class TaskOptions:
    """A task's own options, its objective's and its evaluation sampler's (its model's are the model's config):
    declared once here with their defaults, checked once, when built (:meth:`check`), and listed on the model card
    (:meth:`card_rows`). A recipe builds them from its parsed flags (:meth:`from_args`) before any work."""

    def __post_init__(self) -> None:
        self.check()

    def check(self) -> None:
        """Raise ``ValueError`` naming an option the task refuses (subclasses extend it)."""

    @classmethod
    def from_args(cls, args: Any, **values: Any) -> Self:
        """The options of parsed ``args`` (each field from the attribute of its name, where ``args`` has it; else
        its default), with ``values`` on top."""
        given = {field.name: getattr(args, field.name) for field in fields(cls) if hasattr(args, field.name)}
        return cls(**(given | values))

    def card_rows(self) -> dict[str, Any]:
        """``{option: value}`` for the model card."""
        return {field.name: getattr(self, field.name) for field in fields(self)}


def check_at_least_one(**counts: int) -> None:
    """Raise ``ValueError`` naming the first of ``counts`` (a step count, a batch size) below 1."""
    for name, value in counts.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be an integer of at least 1, got {value!r}")


class TrainingTask:
    """What one model's training adds to the shared loop. Subclasses override the methods below.

    Every module and tensor a task holds as an attribute (the model, a frozen tokenizer, precomputed tokens, a JEPA
    target encoder, noise-schedule tables) moves with :meth:`to` to the training device; random draws in
    :meth:`compute_loss` use the CPU ``generator`` and are moved to the batch's device.
    """

    model: nn.Module
    """The trainable module (it may hold several parts, e.g. a transformer and a JEPA predictor)."""
    options: TaskOptions | None = None
    """The task's own options; each is also read as an attribute of the task (``task.eval_inference_steps``)."""
    use_full_conditioning: bool = False
    """Whether training feeds the per-image continuous concept values (``full`` conditioning), see
    :meth:`full_conditioning`."""

    def __getattr__(self, name: str) -> Any:
        options = self.__dict__.get("options")
        if options is not None and name in {field.name for field in fields(options)}:
            return getattr(options, name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    @staticmethod
    def full_conditioning(model: nn.Module, use_full_conditioning: bool | None) -> bool:
        """Whether a task trains ``model`` on the per-image continuous values: as asked, else as its conditioning."""
        return model.config.conditioning == "full" if use_full_conditioning is None else use_full_conditioning

    def training_conditioning(self, model: nn.Module, batch: dict[str, Any], generator: torch.Generator
                              ) -> dict[str, Any]:
        """The concept arguments of a training forward of ``model`` (unwrapped, for its config): the batch's concepts,
        their continuous values in ``full`` mode, and concept dropout's mask drawn from ``generator``
        (:meth:`~compgen.models.concept_embedding.ConceptConditionedMixin.draw_drop_mask`, ``None`` without dropout)."""
        rate = float(getattr(model.config, "concept_dropout", 0.0))
        drop_mask = ConceptConditionedMixin.draw_drop_mask(batch["concepts"], rate, generator)
        values = batch.get("concept_values") if self.use_full_conditioning else None
        return dict(concepts=batch["concepts"], concept_values=values, drop_mask=drop_mask)

    def compute_loss(
        self, model: nn.Module, batch: dict[str, torch.Tensor], generator: torch.Generator, step: int
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The loss of one batch; every random draw must use ``generator``. Returns (loss, detached scalar tensors
        to log); the loop reads the scalars only at logging steps, so the step never waits for the device."""
        raise NotImplementedError

    def generate(self, model: nn.Module, concepts: list[str], seed: int) -> np.ndarray:
        """Sample one uint8 (H, W, 3) image (a video task: one (T, H, W, 3) clip) per entry of ``concepts`` with the
        (EMA) weights ``model``."""
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

    logging_steps: int | None = None
    """The loop's logging interval (``--logging_steps``), which it sets: a task measures costly diagnostics only on the
    last step of each interval (:meth:`diagnostic_step`), and the loop averages each scalar over the steps that gave
    it."""

    def diagnostic_step(self, step: int) -> bool:
        """Whether optimizer step ``step`` (0-based, as :meth:`compute_loss` gets it) is the last of a logging
        interval, where a task may measure what is too costly for every step."""
        return self.logging_steps is not None and (step + 1) % self.logging_steps == 0

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


@torch.no_grad()
def sample_in_batches(pipe, model: nn.Module, concepts: list[str], seed: int, batch_size: int,
                      per_batch: Callable[[list[str], int], dict[str, Any]] | None = None,
                      **options: Any) -> np.ndarray:
    """uint8 samples ``(N, H, W, 3)`` (clips: ``(N, T, H, W, 3)``) of ``concepts`` from ``pipe``, ``batch_size``
    prompts per call, one generator seeded ``seed`` for them all, with ``model`` in eval mode: the one way an
    evaluation samples, every task's :meth:`TrainingTask.generate` and re-scoring (``compgen.analysis.rescore``)
    alike. ``per_batch(prompts, start)`` gives a call's options that depend on its prompts (re-scoring's sampled
    concept values)."""
    pipe.set_progress_bar_config(disable=True)
    generator = torch.Generator().manual_seed(seed)
    chunks = []
    with eval_mode(model):
        for start in range(0, len(concepts), batch_size):
            prompts = concepts[start : start + batch_size]
            extra = per_batch(prompts, start) if per_batch is not None else {}
            # images (N, H, W, 3) or, from a video pipeline, clips (N, T, H, W, 3)
            chunks.append(pipe(prompts, generator=generator, output_type="np", return_dict=False, **options,
                               **extra)[0])
    return unit_to_uint8(np.concatenate(chunks))
