"""Training task for the tuple-conditioned U-Net: DDPM epsilon prediction (Paper A, Eq. 1)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from diffusers import DDIMScheduler, DDPMScheduler
from torch import nn

from .trainer import TrainingTask


class DDPMTask(TrainingTask):
    """MSE between the true and the predicted noise at a uniformly drawn timestep, conditioned on the tuple
    (or, per the scheduler's ``prediction_type``, the velocity ``v`` or the clean sample).

    Evaluation samples with DDIM (``eval_inference_steps`` steps) from the same trained noise schedule: it
    scores like full DDPM sampling on this data at a fraction of the cost (REFERENCE.md, measured).
    """

    def __init__(
        self,
        unet: nn.Module,
        scheduler: DDPMScheduler,
        eval_inference_steps: int = 20,
        eval_batch_size: int = 256,
        use_full_conditioning: bool | None = None,
    ) -> None:
        self.model = unet
        self.scheduler = scheduler
        self.eval_inference_steps = eval_inference_steps
        self.eval_batch_size = eval_batch_size
        self.use_full_conditioning = (
            unet.config.conditioning == "full" if use_full_conditioning is None else use_full_conditioning
        )
        self._alphas_cumprod = scheduler.alphas_cumprod.float()

    def compute_loss(self, model, batch, generator, step):
        images = batch["images"]
        noise = torch.randn(images.shape, generator=generator)
        timesteps = torch.randint(0, self.scheduler.config.num_train_timesteps, (len(images),), generator=generator)
        alpha_bar = self._alphas_cumprod[timesteps].view(-1, 1, 1, 1)
        noisy = alpha_bar.sqrt() * images + (1.0 - alpha_bar).sqrt() * noise
        drop_mask = None
        dropout = float(getattr(self.model.config, "concept_dropout", 0.0))
        if dropout > 0:
            drop_mask = torch.rand(batch["concepts"].shape, generator=generator) < dropout
        values = batch.get("concept_values") if self.use_full_conditioning else None
        prediction = model(noisy, timesteps, batch["concepts"], concept_values=values, drop_mask=drop_mask).sample
        prediction_type = self.scheduler.config.prediction_type
        if prediction_type == "epsilon":
            target = noise
        elif prediction_type == "v_prediction":
            target = alpha_bar.sqrt() * noise - (1.0 - alpha_bar).sqrt() * images
        elif prediction_type == "sample":
            target = images
        else:
            raise ValueError(f"unsupported prediction_type {prediction_type!r}; use epsilon, v_prediction or sample")
        return F.mse_loss(prediction.float(), target), {}

    def pipeline(self, unet: nn.Module, scheduler=None):
        from ..pipelines.tuple_ddpm import TupleConditionedDDPMPipeline

        return TupleConditionedDDPMPipeline(unet=unet, scheduler=scheduler or self.scheduler)

    @torch.no_grad()
    def generate(self, model, concepts, seed):
        pipe = self.pipeline(model, DDIMScheduler.from_config(self.scheduler.config))
        pipe.set_progress_bar_config(disable=True)
        generator = torch.Generator().manual_seed(seed)
        chunks = []
        for start in range(0, len(concepts), self.eval_batch_size):
            out = pipe(
                concepts[start : start + self.eval_batch_size],
                num_inference_steps=self.eval_inference_steps,
                generator=generator,
                output_type="np",
            ).images
            chunks.append(out)
        images = np.concatenate(chunks)
        return np.clip(np.rint(images * 255.0), 0, 255).astype(np.uint8)

    def save_pretrained(self, model, output_dir: Path) -> None:
        self.pipeline(model).save_pretrained(output_dir, safe_serialization=True)

    def model_card_details(self) -> dict[str, Any]:
        config = self.model.config
        return {
            "model_name": "TupleConditionedUNet2DModel (DDPM)",
            "pipeline_class": "TupleConditionedDDPMPipeline",
            "tags": ["ddpm", "unet"],
            "hyperparameters": {
                "block_out_channels": list(config.block_out_channels),
                "conditioning": config.conditioning,
                "concept_dropout": config.concept_dropout,
                "num_train_timesteps": self.scheduler.config.num_train_timesteps,
                "beta_schedule": self.scheduler.config.beta_schedule,
                "prediction_type": self.scheduler.config.prediction_type,
                "eval_sampler": f"DDIM, {self.eval_inference_steps} steps",
            },
        }
