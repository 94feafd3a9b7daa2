"""Training task for the diffusion transformer by flow matching (rectified flow, as diffusers trains Stable Diffusion 3)
over a frozen tokenizer's standardized latents: the DiT's continuous rung with DDPM's objective replaced.

For clean latents ``x0`` and noise ``n``, a noise level ``sigma`` is drawn per example, the model sees ``x_sigma =
(1 - sigma) x0 + sigma n`` (``FlowMatchEulerDiscreteScheduler.scale_noise``) at timestep ``sigma *
num_train_timesteps`` and regresses the velocity ``n - x0`` (mean squared error, unweighted). As diffusers' SD3
training script does, ``sigma`` is one of the scheduler's training sigmas (``num_train_timesteps`` of them, shifted by
its ``shift``), indexed by a draw ``u`` in [0, 1): ``uniform`` (rectified flow's, Liu et al. 2023, and the DDPM DiT's
uniform timestep: the default, so that the rung changes the objective and nothing else) or ``logit_normal``
(``sigmoid(N(logit_mean, logit_std))``, SD3's default ``weighting_scheme``, which trains most at intermediate noise).
Here ``u`` indexes the sigmas in increasing order, so a larger ``logit_mean`` trains more at high noise, as in the SD3
paper (Esser et al. 2024, Sec. 3.1).

Clips (:class:`FlowDiTVideoTask`, a transformer of ``num_frames > 1``) train the same way on their frames' latents
``(C, T, g, g)`` (each frame encoded alone by the frozen frame tokenizer), one noise level per clip.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from diffusers import AutoencoderKL, FlowMatchEulerDiscreteScheduler, VQModel

from ...models.tuple_dit import TupleConditionedDiT
from ..acceleration import compiled_for_sampling, to_device
from .base import TaskOptions, TrainingTask, check_at_least_one, sample_in_batches
from .latent_tokenizer import LatentTokenizerMixin, standardized_training_latents

WEIGHTING_SCHEMES = ("uniform", "logit_normal")
"""How the training noise level is drawn (the names of diffusers' ``compute_density_for_timestep_sampling``)."""


@dataclass(frozen=True)
class FlowMatchingOptions(TaskOptions):
    """The flow-matching task's own options: how the training noise level is drawn, and how the evaluation samples."""

    weighting_scheme: str = "uniform"
    """``"uniform"`` or ``"logit_normal"`` (:data:`WEIGHTING_SCHEMES`)."""
    logit_mean: float = 0.0
    logit_std: float = 1.0
    """The logit-normal draw's mean and standard deviation (``logit_normal`` only)."""
    eval_inference_steps: int = 20
    """Euler steps of the evaluation's samples."""
    eval_batch_size: int = 400
    eval_guidance_scale: float = 1.0
    """Classifier-free guidance of the evaluation's samples (1: none)."""

    def check(self) -> None:
        if self.weighting_scheme not in WEIGHTING_SCHEMES:
            raise ValueError(f"unsupported weighting_scheme {self.weighting_scheme!r}; use one of {WEIGHTING_SCHEMES}")
        if not math.isfinite(self.logit_mean) or not math.isfinite(self.logit_std) or self.logit_std <= 0:
            raise ValueError(f"logit_mean must be a finite number and logit_std a finite number > 0, got "
                             f"{self.logit_mean} and {self.logit_std}")
        check_at_least_one(eval_inference_steps=self.eval_inference_steps, eval_batch_size=self.eval_batch_size)
        if not math.isfinite(self.eval_guidance_scale) or self.eval_guidance_scale < 0:
            raise ValueError(f"eval_guidance_scale must be a finite number >= 0, got {self.eval_guidance_scale}")


class FlowMatchingDiTTask(LatentTokenizerMixin, TrainingTask):
    """Flow matching on the tokenizer's standardized latents; samples integrate the flow with Euler steps
    (:class:`~compgen.pipelines.flow_dit.TupleConditionedFlowDiTPipeline`) and decode through the tokenizer.

    Args:
        transformer: The DiT (its config holds the latent statistics); it predicts the velocity.
        tokenizer: The frozen tokenizer, a ``VQModel`` or an ``AutoencoderKL``.
        scheduler: A ``FlowMatchEulerDiscreteScheduler``: the training sigmas and timesteps, and the sampler.
        train_latents: ``(N, C, g, g)`` latents of the training images (row ``i`` for ``batch["index"] == i``; the
            transformer's ``latent_shape`` per row).
        tokenizer_report: The tokenizer's reconstruction report, for the model card's reconstruction table.
        options: The task's :class:`FlowMatchingOptions` (or the same as keywords: ``weighting_scheme=...``).
    """

    Options = FlowMatchingOptions
    samples_clips = False
    """Whether the task trains a clip model (a transformer of ``num_frames > 1``: :class:`FlowDiTVideoTask`)."""

    def __init__(
        self,
        transformer: TupleConditionedDiT,
        tokenizer: VQModel | AutoencoderKL,
        scheduler: FlowMatchEulerDiscreteScheduler,
        train_latents: torch.Tensor,
        options: FlowMatchingOptions | None = None,
        use_full_conditioning: bool | None = None,
        tokenizer_report: dict[str, Any] | None = None,
        **option_values: Any,
    ) -> None:
        from ...pipelines.flow_dit import check_flow_scheduler
        from ...pipelines.video_output import check_frames

        self.options = options if options is not None else self.Options(**option_values)
        if not isinstance(scheduler, FlowMatchEulerDiscreteScheduler):
            raise ValueError(f"the flow-matching task trains on a FlowMatchEulerDiscreteScheduler's sigmas, got "
                             f"{type(scheduler).__name__}")
        check_flow_scheduler(scheduler)
        check_frames(type(self).__name__, transformer, self.samples_clips,
                     "FlowMatchingDiTTask" if self.samples_clips else "FlowDiTVideoTask")
        self.model = transformer
        self.scheduler = scheduler
        self.tokenizer = tokenizer.eval().requires_grad_(False)
        self.train_latents = standardized_training_latents(transformer, train_latents)
        self.use_full_conditioning = self.full_conditioning(transformer, use_full_conditioning)
        self.tokenizer_report = tokenizer_report
        # The scheduler's training table (before any set_timesteps), increasing: sigma_i, and timestep_i = sigma_i *
        # num_train_timesteps. Held by the task, they move to the device with it.
        table = FlowMatchEulerDiscreteScheduler.from_config(scheduler.config)
        self.train_sigmas = table.sigmas.flip(0).float()
        self.train_timesteps = table.timesteps.flip(0).float()

    def draw_noise_levels(self, batch_size: int, generator: torch.Generator) -> torch.LongTensor:
        """Indices ``(B,)`` into the training sigmas (increasing), drawn on the CPU from ``generator``."""
        if self.weighting_scheme == "logit_normal":
            u = torch.sigmoid(self.logit_mean + self.logit_std * torch.randn(batch_size, generator=generator))
        else:
            u = torch.rand(batch_size, generator=generator)
        count = len(self.train_sigmas)
        return (u * count).long().clamp(max=count - 1)

    def compute_loss(self, model, batch, generator, step):
        latents = self.train_latents[batch["index"]]
        device = latents.device
        noise = to_device(torch.randn(latents.shape, generator=generator), device).to(latents.dtype)
        indices = to_device(self.draw_noise_levels(len(latents), generator), device)
        shape = (len(latents),) + (1,) * (latents.ndim - 1)
        sigma = self.train_sigmas[indices].to(latents.dtype).reshape(shape)
        noisy = (1 - sigma) * latents + sigma * noise  # scheduler.scale_noise
        conditioning = self.training_conditioning(self.model, batch, generator)
        prediction = model(noisy, self.train_timesteps[indices], conditioning.pop("concepts"), **conditioning).sample
        return F.mse_loss(prediction.float(), (noise - latents).float()), {}

    @staticmethod
    def pipeline_class() -> type:
        """The pipeline the task samples with and exports."""
        from ...pipelines.flow_dit import TupleConditionedFlowDiTPipeline

        return TupleConditionedFlowDiTPipeline

    def pipeline(self, transformer, scheduler=None):
        return self.pipeline_class()(transformer=transformer, scheduler=scheduler or self.scheduler,
                                     **self.tokenizer_components())

    def eval_sampling(self) -> dict[str, Any]:
        guided = {"guidance_scale": self.eval_guidance_scale} if self.eval_guidance_scale != 1.0 else {}
        return super().eval_sampling() | guided

    @torch.no_grad()
    def generate(self, model, concepts, seed):
        # A fresh scheduler per evaluation (set_timesteps changes a scheduler's tables); with --torch_compile the
        # transformer is compiled once for sampling and every step replays it.
        denoiser = compiled_for_sampling(model, self.sampling_compile_mode)
        pipe = self.pipeline(denoiser, FlowMatchEulerDiscreteScheduler.from_config(self.scheduler.config))
        return sample_in_batches(pipe, model, concepts, seed, self.eval_batch_size, **self.eval_sampling())

    def save_pretrained(self, model, output_dir: Path) -> None:
        self.pipeline(model).save_pretrained(output_dir, safe_serialization=True)

    def model_card_details(self) -> dict[str, Any]:
        draw = ("uniform" if self.weighting_scheme == "uniform"
                else f"logit-normal (mean {self.logit_mean}, std {self.logit_std})")
        objective = "flow matching (rectified flow: velocity noise - x0, MSE) over the tokenizer's continuous latents"
        return {
            "model_name": "TupleConditionedDiT (flow matching over tokenizer latents)",
            "pipeline_class": self.pipeline_class().__name__,
            "tags": ["dit", "flow-matching", "rectified-flow", self.tokenizer_kind],
            "hyperparameters": self.dit_card_hyperparameters(objective) | {
                "shift": self.scheduler.config.shift,
                "noise_level_draw": draw,
                "eval_sampler": f"Euler (FlowMatchEulerDiscreteScheduler), {self.eval_inference_steps} steps, "
                                f"{self.decoding_description()}",
            },
            "sections": self.tokenizer_sections(),
        }


class FlowDiTVideoTask(FlowMatchingDiTTask):
    """Flow matching on the standardized latents ``(C, T, g, g)`` of clips, each frame encoded alone by the frozen
    frame tokenizer (Paper B's continuous video model); samples integrate the flow over every frame at once
    (:class:`~compgen.pipelines.flow_dit_video.FlowDiTVideoPipeline`), and :meth:`generate` returns uint8 clips
    ``(N, T, H, W, 3)``.

    Args: as :class:`FlowMatchingDiTTask`, with a transformer of ``num_frames > 1`` and ``train_latents`` ``(N, C, T,
    g, g)`` (:func:`~compgen.training.tasks.latent_tokenizer.precompute_latents` of uint8 clips ``(N, T, H, W, 3)``).
    """

    samples_clips = True

    @staticmethod
    def pipeline_class() -> type:
        from ...pipelines.flow_dit_video import FlowDiTVideoPipeline

        return FlowDiTVideoPipeline

    def model_card_details(self) -> dict[str, Any]:
        details = super().model_card_details()
        frames = self.model.config.num_frames
        return details | {
            "model_name": f"TupleConditionedDiT (flow matching over a frame tokenizer's latents, {frames}-frame clips)",
            "tags": [*details["tags"], "video"],
        }
