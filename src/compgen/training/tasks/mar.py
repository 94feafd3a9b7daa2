"""Training task for MAR (Li et al. 2024) with MaskGIT's masking: the rung of Paper B's ladder between GIVT and the
DiT (Farid et al. 2025).

Each step masks tokens as MaskGIT does, runs the transformer on the visible ones, and trains the diffusion head on
every masked token's standardized latent: ``diffusion_batch_multiplier`` noise draws per token (MAR's trick for a
cheaper head than transformer), each at a random step of the head's noise schedule, with the DDPM loss of the
scheduler's prediction type. The latents are the DiT's
(:func:`~compgen.training.tasks.latent_tokenizer.precompute_latents`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from diffusers import AutoencoderKL, DDPMScheduler, VQModel

from ...models.mar_transformer import MARTransformer
from ...schedulers.scheduling_maskgit import MaskGITScheduler
from .base import check_at_least_one
from .masked_latent import MaskedLatentOptions, MaskedLatentTask


@dataclass(frozen=True)
class MAROptions(MaskedLatentOptions):
    """MAR's task options: GIVT's, the head's noise draws per token, and its denoising steps when sampling."""

    eval_temperature: float = 1.0
    """The head's initial noise scale when the evaluation samples."""
    diffusion_batch_multiplier: int = 4
    """Noise draws per masked token and step."""
    eval_head_steps: int = 25
    """The head's denoising steps per revealed token when the evaluation samples."""

    def check(self) -> None:
        super().check()
        check_at_least_one(diffusion_batch_multiplier=self.diffusion_batch_multiplier,
                           eval_head_steps=self.eval_head_steps)


class MARTask(MaskedLatentTask):
    """The diffusion loss of masked tokens' latents; samples decode through the tokenizer.

    Args:
        transformer: The MAR transformer (its config holds the latent statistics).
        tokenizer: The frozen tokenizer, a ``VQModel`` or an ``AutoencoderKL``.
        scheduler: MaskGIT's schedule, for the training masks and the unmasking steps.
        head_scheduler: The diffusion head's noise schedule and prediction type (``clip_sample=False``).
        train_latents: ``(N, C, g, g)`` latents of the training images (row ``i`` for ``batch["index"] == i``).
        options: The task's :class:`MAROptions` (or the same as keywords), and the rest of
            :class:`~compgen.training.tasks.masked_latent.MaskedLatentTask`'s arguments.
    """

    Options = MAROptions

    def __init__(
        self,
        transformer: MARTransformer,
        tokenizer: VQModel | AutoencoderKL,
        scheduler: MaskGITScheduler,
        head_scheduler: DDPMScheduler,
        train_latents: torch.Tensor,
        options: MAROptions | None = None,
        **arguments: Any,
    ) -> None:
        from ...pipelines.latent_decoding import check_unclipped_scheduler

        check_unclipped_scheduler(head_scheduler)
        super().__init__(transformer, tokenizer, scheduler, train_latents, options, **arguments)
        self.head_scheduler = head_scheduler

    def compute_loss(self, model, batch, generator, step):
        latents, mask, positions, conditioning = self.masked_batch(batch, generator)
        device = latents.device
        targets = latents.flatten(2).transpose(1, 2).flatten(0, 1)[positions].repeat(self.diffusion_batch_multiplier, 1)
        noise = torch.randn(targets.shape, generator=generator).to(device)
        timesteps = torch.randint(0, self.head_scheduler.config.num_train_timesteps, (len(targets),),
                                  generator=generator).to(device)
        noisy = self.head_scheduler.add_noise(targets, noise, timesteps)
        output = model(latents, mask, **conditioning, noisy_tokens=noisy, timesteps=timesteps,
                       masked_positions=positions)
        if self.head_scheduler.config.prediction_type == "v_prediction":
            wanted = self.head_scheduler.get_velocity(targets, noise, timesteps)
        elif self.head_scheduler.config.prediction_type == "sample":
            wanted = targets
        else:
            wanted = noise
        loss = F.mse_loss(output.prediction.float(), wanted.float())
        return loss, {"diffusion": loss.detach()}

    def pipeline(self, transformer: MARTransformer):
        from ...pipelines.mar import MARPipeline

        return MARPipeline(transformer=transformer, scheduler=self.scheduler, head_scheduler=self.head_scheduler,
                           **self.tokenizer_components())

    def eval_sampling(self) -> dict[str, Any]:
        return super().eval_sampling() | {"num_head_steps": self.eval_head_steps}

    def model_card_details(self) -> dict[str, Any]:
        return {
            "model_name": "MARTransformer (a diffusion head per token over tokenizer latents, MaskGIT's masking)",
            "pipeline_class": "MARPipeline",
            "tags": ["mar", "masked-generative", "diffusion-head", self.tokenizer_kind],
            "hyperparameters": {
                "objective": "diffusion loss of the masked tokens' latents under a per-token MLP head (MAR)",
                "tokenizer": self.tokenizer_description(),
                "head": "an MLP of head_depth adaLN blocks of head_width (config.json)",
                "num_train_timesteps": self.head_scheduler.config.num_train_timesteps,
                "prediction_type": self.head_scheduler.config.prediction_type,
                **self.backbone_hyperparameters(),
                "eval_sampler": f"{self.eval_inference_steps} steps, random reveal order, the head's "
                                f"{self.eval_head_steps} steps, temperature {self.eval_temperature}",
            },
            "sections": self.tokenizer_sections(),
        }
