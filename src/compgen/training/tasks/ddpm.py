"""Training task for the tuple-conditioned U-Net: the DDPM objective of Paper A (Eq. 1), with the prediction target
the scheduler names (epsilon as Paper A, ``v_prediction`` as the cpu-quick preset, or the clean sample)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from diffusers import DDIMScheduler, DDPMScheduler
from torch import nn

from ...pipelines.tuple_ddpm import PREDICTION_TYPES
from ..acceleration import compiled_for_sampling, to_device
from .base import TaskOptions, TrainingTask, check_at_least_one, sample_in_batches


@dataclass(frozen=True)
class DDPMOptions(TaskOptions):
    """The DDPM task's own options: how its evaluation samples (DDIM steps, batch, classifier-free guidance)."""

    eval_inference_steps: int = 20
    eval_batch_size: int = 256
    eval_guidance_scale: float = 1.0
    """Classifier-free guidance of the evaluation's samples (1: none)."""

    def check(self) -> None:
        check_at_least_one(eval_inference_steps=self.eval_inference_steps, eval_batch_size=self.eval_batch_size)
        if not math.isfinite(self.eval_guidance_scale) or self.eval_guidance_scale < 0:
            raise ValueError(f"eval_guidance_scale must be a finite number >= 0, got {self.eval_guidance_scale}")


class DDPMTask(TrainingTask):
    """MSE between the model's prediction and the scheduler's target at a uniformly drawn timestep, conditioned on
    the tuple. Noising and the ``v`` target are diffusers' (``scheduler.add_noise``, ``scheduler.get_velocity``).

    Evaluation samples with DDIM (``eval_inference_steps`` steps) from the same trained noise schedule, at a
    fraction of the cost of full DDPM sampling.
    """

    Options = DDPMOptions

    def __init__(
        self,
        unet: nn.Module,
        scheduler: DDPMScheduler,
        options: DDPMOptions | None = None,
        use_full_conditioning: bool | None = None,
        **option_values: Any,
    ) -> None:
        """``options``, or the same as keywords (``eval_inference_steps=...``): the task's :class:`DDPMOptions`."""
        if scheduler.config.prediction_type not in PREDICTION_TYPES:
            raise ValueError(f"unsupported prediction_type {scheduler.config.prediction_type!r}; use one of "
                             f"{PREDICTION_TYPES}")
        self.options = options if options is not None else self.Options(**option_values)
        self.model = unet
        self.scheduler = scheduler
        self.use_full_conditioning = self.full_conditioning(unet, use_full_conditioning)
        # diffusers' add_noise / get_velocity rebuild these from alphas_cumprod at every call; computed once here
        # with the same operations (the same values), they move to the device with the task.
        alphas_cumprod = scheduler.alphas_cumprod.float()
        self.sqrt_alphas_cumprod = alphas_cumprod**0.5
        self.sqrt_one_minus_alphas_cumprod = (1 - alphas_cumprod) ** 0.5

    def clean_samples(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """What is diffused: the images (a latent-space task returns their latents)."""
        return batch["images"]

    def compute_loss(self, model, batch, generator, step):
        images = self.clean_samples(batch)
        device = images.device
        noise = to_device(torch.randn(images.shape, generator=generator), device).to(images.dtype)
        timesteps = to_device(torch.randint(0, self.scheduler.config.num_train_timesteps, (len(images),),
                                            generator=generator), device)
        shape = (len(images),) + (1,) * (images.ndim - 1)
        sqrt_alpha = self.sqrt_alphas_cumprod[timesteps].to(images.dtype).reshape(shape)
        sqrt_one_minus_alpha = self.sqrt_one_minus_alphas_cumprod[timesteps].to(images.dtype).reshape(shape)
        noisy = sqrt_alpha * images + sqrt_one_minus_alpha * noise  # scheduler.add_noise
        conditioning = self.training_conditioning(self.model, batch, generator)
        prediction = model(noisy, timesteps, conditioning.pop("concepts"), **conditioning).sample
        prediction_type = self.scheduler.config.prediction_type
        if prediction_type == "epsilon":
            target = noise
        elif prediction_type == "v_prediction":
            target = sqrt_alpha * noise - sqrt_one_minus_alpha * images  # scheduler.get_velocity
        else:
            target = images
        return F.mse_loss(prediction.float(), target.float()), {}

    def pipeline(self, unet: nn.Module, scheduler=None):
        from ...pipelines.tuple_ddpm import TupleConditionedDDPMPipeline

        return TupleConditionedDDPMPipeline(unet=unet, scheduler=scheduler or self.scheduler)

    @torch.no_grad()
    def generate(self, model, concepts, seed):
        # With --torch_compile the denoiser is compiled once for sampling (its eval-mode graph; every DDIM step and
        # every later evaluation replays it).
        denoiser = compiled_for_sampling(model, self.sampling_compile_mode)
        pipe = self.pipeline(denoiser, DDIMScheduler.from_config(self.scheduler.config))
        return sample_in_batches(pipe, model, concepts, seed, self.eval_batch_size, **self.eval_sampling())

    def eval_sampling(self) -> dict[str, Any]:
        guided = {"guidance_scale": self.eval_guidance_scale} if self.eval_guidance_scale != 1.0 else {}
        return super().eval_sampling() | guided

    def save_pretrained(self, model, output_dir: Path) -> None:
        self.pipeline(model).save_pretrained(output_dir, safe_serialization=True)

    def model_card_details(self) -> dict[str, Any]:
        return {
            "model_name": "TupleConditionedUNet2DModel (DDPM)",
            "pipeline_class": "TupleConditionedDDPMPipeline",
            "tags": ["ddpm", "unet"],
            "hyperparameters": {  # the U-Net's own options follow from its config.json
                "num_train_timesteps": self.scheduler.config.num_train_timesteps,
                "beta_schedule": self.scheduler.config.beta_schedule,
                "prediction_type": self.scheduler.config.prediction_type,
                "eval_sampler": f"DDIM, {self.eval_inference_steps} steps",
            },
        }
