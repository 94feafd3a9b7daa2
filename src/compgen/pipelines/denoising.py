"""The denoising loop of compgen's diffusion pipelines (the U-Net over pixels, the DiT over tokenizer latents).

Both run the same loop: at every scheduler step, the denoiser predicts from the current sample (twice with
classifier-free guidance: conditional, then with every concept replaced by its null), the predictions are mixed as
``null + w * (cond - null)``, and the scheduler steps.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable

import torch
from diffusers.schedulers.scheduling_utils import SchedulerMixin

from .concept_inputs import OUTPUT_TYPES, ConceptInputs


def check_sampling_options(output_type: str, num_inference_steps: int | None) -> None:
    """Refuse what would silently give a wrong result: an unknown output type, zero or negative steps."""
    if output_type not in OUTPUT_TYPES:
        raise ValueError(f"output_type must be one of {OUTPUT_TYPES}, got {output_type!r}")
    if num_inference_steps is not None and (
            isinstance(num_inference_steps, bool) or not isinstance(num_inference_steps, int)
            or num_inference_steps < 1):
        raise ValueError(f"num_inference_steps must be a positive integer (or None for every training step), "
                         f"got {num_inference_steps!r}")


def denoise(
    denoiser: torch.nn.Module,
    scheduler: SchedulerMixin,
    sample: torch.Tensor,
    inputs: ConceptInputs,
    guidance_scale: float,
    num_inference_steps: int | None,
    generator: torch.Generator | list[torch.Generator] | None,
    progress_bar: Callable[[Iterable], Iterable],
) -> torch.Tensor:
    """Run ``scheduler`` from the noise ``sample`` to the end with ``denoiser``'s predictions; returns the sample."""
    scheduler.set_timesteps(num_inference_steps or scheduler.config.num_train_timesteps, device=sample.device)
    sample = sample * scheduler.init_noise_sigma
    # Not every scheduler's step takes a generator (DDIM and DDPM do).
    step_kwargs = {"generator": generator} if "generator" in inspect.signature(scheduler.step).parameters else {}
    for t in progress_bar(scheduler.timesteps):
        model_input = torch.cat([sample, sample]) if inputs.do_classifier_free_guidance else sample
        model_input = scheduler.scale_model_input(model_input, t)
        prediction = denoiser(model_input, t, **inputs.model_kwargs).sample
        if inputs.do_classifier_free_guidance:
            cond, null = prediction.chunk(2)
            prediction = null + guidance_scale * (cond - null)
        sample = scheduler.step(prediction, t, sample, **step_kwargs).prev_sample
    return sample
