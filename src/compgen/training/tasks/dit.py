"""Training task for the diffusion transformer over tokenizer latents (Paper B's continuous counterpart of MaskGIT).

The objective is the DDPM loss of :class:`~compgen.training.tasks.ddpm.DDPMTask`, applied to the standardized latents
of a frozen tokenizer instead of pixels: a VQ tokenizer's latents before quantization, or a KL tokenizer's posterior
means (Paper B reports similar compositional generalization with both). The latents of every training image are
computed once (the tokenizer never changes), as MaskGIT's token indices are.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from diffusers import AutoencoderKL, DDPMScheduler, VQModel

from ...models.tuple_dit import TupleConditionedDiT
from .ddpm import DDPMOptions, DDPMTask
from .latent_tokenizer import LatentTokenizerMixin, standardized_training_latents


@dataclass(frozen=True)
class DiTOptions(DDPMOptions):
    """The DiT task's own options: the DDPM task's, with a larger evaluation batch (latents are small)."""

    eval_batch_size: int = 400


class DiTTask(LatentTokenizerMixin, DDPMTask):
    """DDPM on the tokenizer's standardized latents; samples decode through the tokenizer (codebook-snapped for a VQ
    tokenizer, through the KL decoder as they are for a KL one).

    Args:
        transformer: The DiT (its config holds the latent statistics).
        tokenizer: The frozen tokenizer, a ``VQModel`` or an ``AutoencoderKL``.
        scheduler: The noise schedule and prediction type.
        train_latents: ``(N, C, g, g)`` latents of the training images (row ``i`` for ``batch["index"] == i``).
        tokenizer_report: The tokenizer's reconstruction report, for the model card's reconstruction table.
        options: The task's :class:`DiTOptions` (or the same as keywords).
    """

    Options = DiTOptions

    def __init__(
        self,
        transformer: TupleConditionedDiT,
        tokenizer: VQModel | AutoencoderKL,
        scheduler: DDPMScheduler,
        train_latents: torch.Tensor,
        options: DiTOptions | None = None,
        use_full_conditioning: bool | None = None,
        tokenizer_report: dict[str, Any] | None = None,
        **option_values: Any,
    ) -> None:
        from ...pipelines.latent_decoding import check_unclipped_scheduler

        check_unclipped_scheduler(scheduler)
        super().__init__(transformer, scheduler, options, use_full_conditioning, **option_values)
        self.tokenizer = tokenizer.eval().requires_grad_(False)
        self.train_latents = standardized_training_latents(transformer, train_latents)
        self.tokenizer_report = tokenizer_report

    def clean_samples(self, batch):
        return self.train_latents[batch["index"]]

    def pipeline(self, transformer, scheduler=None):
        from ...pipelines.tuple_dit import TupleConditionedDiTPipeline

        return TupleConditionedDiTPipeline(transformer=transformer, scheduler=scheduler or self.scheduler,
                                           **self.tokenizer_components())

    def save_pretrained(self, model, output_dir: Path) -> None:
        self.pipeline(model).save_pretrained(output_dir, safe_serialization=True)

    def model_card_details(self) -> dict[str, Any]:
        objective = "DDPM over the tokenizer's continuous latents (Paper B's continuous counterpart)"
        return {
            "model_name": "TupleConditionedDiT (diffusion over tokenizer latents)",
            "pipeline_class": "TupleConditionedDiTPipeline",
            "tags": ["dit", "latent-diffusion", self.tokenizer_kind],
            "hyperparameters": self.dit_card_hyperparameters(objective) | {
                "beta_schedule": self.scheduler.config.beta_schedule,
                "prediction_type": self.scheduler.config.prediction_type,
                "eval_sampler": f"DDIM, {self.eval_inference_steps} steps, {self.decoding_description()}",
            },
            "sections": self.tokenizer_sections(),
        }
