"""What the training tasks of the masked models over continuous tokens (GIVT, MAR) share: a frozen tokenizer's
standardized latents of the training images, MaskGIT's training masks and the concept conditioning of a step, the
export of the pipeline, and sampling for the evaluation."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from diffusers import AutoencoderKL, VQModel

from ...schedulers.scheduling_maskgit import MaskGITScheduler
from ..acceleration import to_device
from .base import TaskOptions, TrainingTask, check_at_least_one, sample_in_batches
from .latent_tokenizer import LatentTokenizerMixin


@dataclass(frozen=True)
class MaskedLatentOptions(TaskOptions):
    """GIVT's task options (and the start of MAR's): how the evaluation samples."""

    eval_inference_steps: int = 12
    """Unmasking steps of the evaluation's samples."""
    eval_temperature: float = 1.0
    """The evaluation's sampling temperature (the pipeline's ``temperature``)."""
    eval_batch_size: int = 400

    def check(self) -> None:
        check_at_least_one(eval_inference_steps=self.eval_inference_steps, eval_batch_size=self.eval_batch_size)
        if not math.isfinite(self.eval_temperature) or self.eval_temperature < 0:
            raise ValueError(f"eval_temperature must be a finite number >= 0, got {self.eval_temperature}")


class MaskedLatentTask(LatentTokenizerMixin, TrainingTask):
    """The shared part of :class:`~compgen.training.tasks.givt.GIVTTask` and
    :class:`~compgen.training.tasks.mar.MARTask`.

    Args:
        transformer: The model (its config holds the latent statistics).
        tokenizer: The frozen tokenizer, a ``VQModel`` or an ``AutoencoderKL``.
        scheduler: MaskGIT's schedule, for the training masks and the unmasking steps.
        train_latents: ``(N, C, g, g)`` latents of the training images (row ``i`` for ``batch["index"] == i``).
        options: The task's :class:`MaskedLatentOptions` (or the same as keywords: ``eval_inference_steps=...``).
    """

    Options = MaskedLatentOptions

    def __init__(
        self,
        transformer,
        tokenizer: VQModel | AutoencoderKL,
        scheduler: MaskGITScheduler,
        train_latents: torch.Tensor,
        options: MaskedLatentOptions | None = None,
        use_full_conditioning: bool | None = None,
        tokenizer_report: dict[str, Any] | None = None,
        **option_values: Any,
    ) -> None:
        expected = (transformer.config.latent_channels, transformer.config.grid_size, transformer.config.grid_size)
        if train_latents.ndim != 4 or tuple(train_latents.shape[1:]) != expected:
            raise ValueError(f"train_latents must be (N, {', '.join(map(str, expected))}), "
                             f"got {tuple(train_latents.shape)}")
        self.options = options if options is not None else self.Options(**option_values)
        self.model = transformer
        self.tokenizer = tokenizer.eval().requires_grad_(False)
        self.scheduler = scheduler
        self.train_latents = transformer.normalize_latents(train_latents.float())
        self.use_full_conditioning = self.full_conditioning(transformer, use_full_conditioning)
        self.tokenizer_report = tokenizer_report

    def masked_batch(self, batch: dict[str, Any], generator: torch.Generator
                     ) -> tuple[torch.Tensor, torch.BoolTensor, torch.LongTensor, dict[str, Any]]:
        """A step's standardized latents ``(B, C, g, g)``, its MaskGIT mask ``(B, L)``, the masked tokens' flat
        indices into ``B * L`` (row-major; found on the CPU where the mask is drawn, so that gathering them on an
        accelerator waits for no host) and its conditioning."""
        latents = self.train_latents[batch["index"]]
        grid = self.model.config.grid_size
        mask = self.scheduler.sample_mask(len(latents), (grid, grid), generator, "random")  # drawn on the CPU
        conditioning = self.training_conditioning(self.model, batch, generator)
        positions = to_device(mask.flatten().nonzero().squeeze(1), latents.device)
        return latents, to_device(mask, latents.device), positions, conditioning

    def eval_sampling(self) -> dict[str, Any]:
        return {"num_inference_steps": self.eval_inference_steps, "temperature": self.eval_temperature}

    def generate(self, model, concepts, seed):
        return sample_in_batches(self.pipeline(self.model), model, concepts, seed, self.eval_batch_size,
                                 **self.eval_sampling())

    def backbone_hyperparameters(self) -> dict[str, Any]:
        """How the shared transformer is conditioned and masked, for the model card of GIVT and MAR alike (its own
        options follow from its config.json)."""
        return {"conditioning": "as concept tokens", "masking_schedule": self.scheduler.config.masking_schedule}

    def save_pretrained(self, model, output_dir: Path) -> None:
        self.pipeline(self.model).save_pretrained(output_dir, safe_serialization=True)
