"""Sampling images of concept classes from a :class:`TupleConditionedUNet2DModel` with any diffusers scheduler."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import Any

import torch
from diffusers import DDPMScheduler
from diffusers.image_processor import VaeImageProcessor
from diffusers.pipelines.pipeline_utils import DiffusionPipeline, ImagePipelineOutput
from diffusers.schedulers.scheduling_utils import SchedulerMixin
from diffusers.utils.torch_utils import randn_tensor

from ..models.tuple_unet import TupleConditionedUNet2DModel
from .concept_inputs import (
    ConceptPrompts,
    Generators,
    GuidedSamplingMixin,
    callback_latents,
    check_generators,
    check_sampling_options,
    check_starting_noise,
    check_step_callback,
    prepare_concept_inputs,
)

PREDICTION_TYPES = ("epsilon", "v_prediction", "sample")
"""What a compgen diffusion model predicts (diffusers' ``prediction_type``): the noise, the velocity, or the sample."""


def paper_ddpm_scheduler(num_train_timesteps: int = 500, prediction_type: str = "epsilon",
                         clip_sample: bool = True) -> DDPMScheduler:
    """Paper A's noise schedule: DDPM, T = 500, linear betas 1e-4 .. 0.02; epsilon prediction as the paper (or
    ``v_prediction`` / ``sample``). Every compgen diffusion model (U-Net, DiT) trains on it. ``clip_sample`` clips
    each step's clean-sample estimate to [-1, 1]: right for pixels, wrong for unbounded (standardized) latents."""
    if prediction_type not in PREDICTION_TYPES:
        raise ValueError(f"prediction_type must be one of {PREDICTION_TYPES}, got {prediction_type!r}")
    return DDPMScheduler(
        num_train_timesteps=num_train_timesteps,
        beta_start=1e-4,
        beta_end=0.02,
        beta_schedule="linear",
        prediction_type=prediction_type,
        clip_sample=clip_sample,
    )


class TupleConditionedDDPMPipeline(DiffusionPipeline, GuidedSamplingMixin):
    r"""Generate images of concept classes (``"111"``, ``(1, 1, 1)``) with a tuple-conditioned U-Net.

    Images are modelled in ``[-1, 1]``. Any diffusers scheduler trained on the same noise schedule swaps in with
    ``DDIMScheduler.from_config(pipe.scheduler.config)``.

    Args:
        unet: The denoiser; its config holds the concept space that prompts are validated against.
        scheduler: A diffusers scheduler, e.g. :func:`paper_ddpm_scheduler`.
    """

    model_cpu_offload_seq = "unet"
    _callback_tensor_inputs = ["latents"]

    def __init__(self, unet: TupleConditionedUNet2DModel, scheduler: SchedulerMixin) -> None:
        super().__init__()
        self.register_modules(unet=unet, scheduler=scheduler)
        self.image_processor = VaeImageProcessor(do_resize=False)

    def prepare_latents(self, batch_size: int, num_channels: int, height: int, width: int, dtype: torch.dtype,
                        device: torch.device, generator: Generators, latents: torch.Tensor | None = None
                        ) -> torch.Tensor:
        """The starting noise ``(batch_size, num_channels, height, width)``: drawn (one generator, or one per image),
        or the given ``latents``; scaled by the scheduler's initial sigma, as diffusers' pipelines do."""
        shape = (batch_size, num_channels, height, width)
        check_starting_noise(latents, shape, "batch, channels, height, width")
        if latents is None:
            latents = randn_tensor(shape, generator=generator, device=device, dtype=dtype)
        else:
            latents = latents.to(device=device, dtype=dtype)
        # scale the initial noise by the standard deviation required by the scheduler
        return latents * self.scheduler.init_noise_sigma

    def prepare_extra_step_kwargs(self, generator: torch.Generator | list[torch.Generator] | None) -> dict:
        """The keyword arguments of ``scheduler.step`` that not every scheduler takes (DDIM's and DDPM's generator)."""
        accepts_generator = "generator" in inspect.signature(self.scheduler.step).parameters
        return {"generator": generator} if accepts_generator else {}

    @torch.no_grad()
    def __call__(
        self,
        concepts: ConceptPrompts,
        num_images_per_prompt: int = 1,
        num_inference_steps: int | None = None,
        guidance_scale: float = 1.0,
        generator: Generators = None,
        output_type: str = "pil",
        return_dict: bool = True,
        concept_values: torch.Tensor | None = None,
        latents: torch.Tensor | None = None,
        callback_on_step_end: Callable[..., dict[str, Any]] | None = None,
        callback_on_step_end_tensor_inputs: Sequence[str] = ("latents",),
    ) -> ImagePipelineOutput | tuple:
        r"""Sample ``num_images_per_prompt`` images of each concept class.

        Args:
            concepts: ``"111"``, ``(1, 1, 1)``, ``{"shape": "triangle", ...}`` or a list of those.
            num_images_per_prompt: Images per class; the output lists each class's images together, in order.
            num_inference_steps: Denoising steps; defaults to the scheduler's ``num_train_timesteps``.
            guidance_scale: Classifier-free guidance weight ``w`` in ``eps_null + w * (eps_cond - eps_null)``;
                1 disables guidance. Needs a model trained with ``concept_dropout > 0``.
            generator: A ``torch.Generator``, or a list with one per image, for the initial noise and stochastic
                scheduler steps (reproducibility; a batch with a list reproduces single-image calls image for image).
            output_type: ``"pil"`` (list of images), ``"np"`` (``(B, H, W, C)`` floats in [0, 1]), ``"pt"``
                (``(B, C, H, W)`` tensor in [0, 1]) or ``"latent"`` (the sample in [-1, 1], not post-processed).
            return_dict: Return an :class:`ImagePipelineOutput` rather than a tuple.
            concept_values: ``full``-conditioning models only: continuous values ``(num_prompts, D)`` or
                ``(num_prompts * num_images_per_prompt, D)``; ``None`` uses the canonical class values.
            latents: The starting noise ``(B, C, H, W)`` (``B``: every image), scaled by the scheduler's initial
                sigma as drawn noise is; ``None`` draws it from ``generator``.
            callback_on_step_end: ``callback(pipe, step_index, timestep, callback_kwargs)`` called after every
                denoising step with the tensors named in ``callback_on_step_end_tensor_inputs`` (``"latents"``); a
                ``"latents"`` entry of the dict it returns replaces the sample the loop continues from.
            callback_on_step_end_tensor_inputs: The tensors handed to ``callback_on_step_end``.
        """
        # 1. Check inputs
        check_sampling_options(output_type, num_inference_steps)
        check_step_callback(callback_on_step_end, callback_on_step_end_tensor_inputs, self._callback_tensor_inputs)
        device = self._execution_device

        # 2. Encode the concepts (with the null half for classifier-free guidance)
        inputs = prepare_concept_inputs(
            self.unet, concepts, num_images_per_prompt, guidance_scale, concept_values, device=device
        )
        do_classifier_free_guidance = inputs.do_classifier_free_guidance
        self._guidance_scale = guidance_scale  # read at every step: a step callback may change it

        # 3. Prepare timesteps
        self.scheduler.set_timesteps(num_inference_steps or self.scheduler.config.num_train_timesteps, device=device)
        timesteps = self.scheduler.timesteps
        self._num_timesteps = len(timesteps)

        # 4. Prepare the initial noise
        config = self.unet.config
        check_generators(generator, inputs.batch_size)
        latents = self.prepare_latents(inputs.batch_size, config.in_channels, config.sample_size, config.sample_size,
                                       self.unet.dtype, device, generator, latents)

        # 5. Prepare extra step kwargs
        extra_step_kwargs = self.prepare_extra_step_kwargs(generator)

        # 6. Denoising loop
        for i, t in enumerate(self.progress_bar(timesteps)):
            # expand the sample for classifier-free guidance: conditional half first, then the null half
            model_input = torch.cat([latents] * 2) if do_classifier_free_guidance else latents
            model_input = self.scheduler.scale_model_input(model_input, t)

            # predict the noise residual
            noise_pred = self.unet(model_input, t, **inputs.model_kwargs).sample

            # perform guidance
            if do_classifier_free_guidance:
                noise_pred_cond, noise_pred_null = noise_pred.chunk(2)
                noise_pred = noise_pred_null + self._guidance_scale * (noise_pred_cond - noise_pred_null)

            # compute the previous noisy sample x_t -> x_t-1
            latents = self.scheduler.step(noise_pred, t, latents, **extra_step_kwargs).prev_sample

            if callback_on_step_end is not None:
                callback_kwargs = {name: {"latents": latents}[name] for name in callback_on_step_end_tensor_inputs}
                callback_outputs = callback_on_step_end(self, i, t, callback_kwargs)
                latents = callback_latents(callback_outputs, latents, self._callback_tensor_inputs)

        # 7. Post-process: [-1, 1] -> output_type
        if output_type != "latent":  # "latent": the sample in [-1, 1] as the loop left it
            latents = self.image_processor.postprocess(latents, output_type=output_type)
        image = latents

        # Offload all models
        self.maybe_free_model_hooks()

        if not return_dict:
            return (image,)
        return ImagePipelineOutput(images=image)
