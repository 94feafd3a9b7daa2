"""Sampling images of concept classes from a :class:`TupleConditionedDiT` trained by flow matching (rectified flow, as
diffusers' Stable Diffusion 3 pipelines train and sample it), through its tokenizer's decoder (a VQ or a KL
tokenizer)."""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Sequence
from typing import Any

import torch
from diffusers import AutoencoderKL, FlowMatchEulerDiscreteScheduler, FlowMatchHeunDiscreteScheduler, VQModel
from diffusers.image_processor import VaeImageProcessor
from diffusers.pipelines.pipeline_utils import DiffusionPipeline, ImagePipelineOutput
from diffusers.schedulers.scheduling_utils import SchedulerMixin
from diffusers.utils.torch_utils import randn_tensor

from ..models.tuple_dit import TupleConditionedDiT
from .concept_inputs import (
    ConceptPrompts,
    Generators,
    GuidedSamplingMixin,
    callback_latents,
    check_generators,
    check_sampling_options,
    check_starting_noise,
    check_step_callback,
    check_transformer,
    prepare_concept_inputs,
)
from .latent_decoding import check_tokenizer, decode_standardized_latents
from .video_output import check_frames

FLOW_SCHEDULERS = (FlowMatchEulerDiscreteScheduler, FlowMatchHeunDiscreteScheduler)
"""The diffusers schedulers that integrate a flow-matching velocity (the pipeline's ``scheduler``)."""


def check_flow_scheduler_options(num_train_timesteps: int, shift: float) -> None:
    """The flow-matching schedule's options: at least one training timestep and a finite ``shift`` > 0 (1: no
    shift; SD3 uses 3, which spends more of the training and the sampling steps at high noise)."""
    if num_train_timesteps < 1:
        raise ValueError(f"num_train_timesteps must be at least 1, got {num_train_timesteps}")
    if not math.isfinite(shift) or shift <= 0:
        raise ValueError(f"shift must be a finite number > 0, got {shift}")


def flow_matching_scheduler(num_train_timesteps: int = 1000, shift: float = 1.0) -> FlowMatchEulerDiscreteScheduler:
    """The flow DiT's schedule: diffusers' ``FlowMatchEulerDiscreteScheduler`` (sigma from 1, pure noise, to 0, timestep
    ``sigma * num_train_timesteps``), with a fixed ``shift`` (no resolution-dependent shifting)."""
    check_flow_scheduler_options(num_train_timesteps, shift)
    return FlowMatchEulerDiscreteScheduler(num_train_timesteps=num_train_timesteps, shift=shift)


def check_flow_scheduler(scheduler: SchedulerMixin) -> None:
    """Refuse a scheduler that does not integrate a flow-matching velocity (a DDPM or DDIM scheduler would read the
    velocity as noise and give wrong images without an error), and resolution-dependent shifting, which needs a
    ``mu`` this pipeline does not compute."""
    if not isinstance(scheduler, FLOW_SCHEDULERS):
        raise ValueError(
            f"{type(scheduler).__name__} is not a flow-matching scheduler: the flow DiT predicts the velocity noise - "
            f"x0, which only {' or '.join(cls.__name__ for cls in FLOW_SCHEDULERS)} integrates (e.g. "
            "FlowMatchEulerDiscreteScheduler.from_config(pipe.scheduler.config))")
    if getattr(scheduler.config, "use_dynamic_shifting", False):
        raise ValueError(f"{type(scheduler).__name__} has use_dynamic_shifting=True, which needs a resolution-"
                         "dependent mu; the flow DiT's latent grid is fixed: use a fixed shift "
                         "(use_dynamic_shifting=False)")
    if getattr(scheduler.config, "invert_sigmas", False):
        raise ValueError(f"{type(scheduler).__name__} has invert_sigmas=True, which runs the flow from data to noise; "
                         "the flow DiT samples from noise to data (invert_sigmas=False)")


class TupleConditionedFlowDiTPipeline(DiffusionPipeline, GuidedSamplingMixin):
    r"""Generate images of concept classes (``"111"``, ``(1, 1, 1)``) by integrating a flow over tokenizer latents.

    The transformer predicts the velocity ``noise - x0`` of the straight path ``x_sigma = (1 - sigma) x0 + sigma
    noise`` between a standardized latent grid ``(C, g, g)`` and Gaussian noise (rectified flow, Stable Diffusion 3's
    objective); the scheduler integrates it from pure noise (sigma 1) to sigma 0 with Euler steps, as diffusers'
    ``StableDiffusion3Pipeline`` does. The final latents are de-standardized and decoded by the tokenizer: a VQ
    tokenizer (``vqvae``) snaps them to its codebook first (``quantize=True``); a KL tokenizer (``vae``) decodes them as
    they are.
    ``FlowMatchHeunDiscreteScheduler.from_config(pipe.scheduler.config)`` swaps in a second-order sampler.

    Args:
        vqvae: The frozen VQ tokenizer whose latents the transformer models, or ``None`` with ``vae``.
        transformer: The velocity model; its config holds the concept space prompts are validated against.
        scheduler: A flow-matching scheduler (``FlowMatchEulerDiscreteScheduler``).
        vae: The frozen KL tokenizer instead of ``vqvae`` (pass ``vqvae=None``); exactly one of the two is given.
    """

    model_cpu_offload_seq = "transformer->vqvae->vae"
    _optional_components = ["vqvae", "vae"]
    _callback_tensor_inputs = ["latents"]
    _samples_clips = False
    """Whether the pipeline samples clips (a transformer of ``num_frames > 1``: :class:`FlowDiTVideoPipeline`)."""

    def __init__(
        self,
        vqvae: VQModel | None,
        transformer: TupleConditionedDiT,
        scheduler: FlowMatchEulerDiscreteScheduler,
        vae: AutoencoderKL | None = None,
    ) -> None:
        super().__init__()
        check_transformer(type(self).__name__, transformer, TupleConditionedDiT)
        check_tokenizer(vqvae, vae, transformer)
        check_flow_scheduler(scheduler)
        check_frames(type(self).__name__, transformer, self._samples_clips,
                     "TupleConditionedFlowDiTPipeline" if self._samples_clips else "FlowDiTVideoPipeline")
        self.register_modules(vqvae=vqvae, transformer=transformer, scheduler=scheduler, vae=vae)
        self.image_processor = VaeImageProcessor(do_resize=False)

    def prepare_latents(self, batch_size: int, latent_shape: tuple[int, ...], dtype: torch.dtype,
                        device: torch.device, generator: Generators, latents: torch.Tensor | None = None
                        ) -> torch.Tensor:
        """The starting noise ``(batch_size, *latent_shape)`` (the transformer's ``latent_shape``: ``(C, g, g)``, or
        ``(C, T, g, g)`` for clips): drawn (one generator, or one per sample), or the given ``latents``; unscaled, as
        the flow starts at sigma 1, where the sample is the noise itself
        (``StableDiffusion3Pipeline.prepare_latents``)."""
        shape = (batch_size, *latent_shape)
        layout = "channels, frames, height, width" if len(latent_shape) == 4 else "channels, height, width"
        check_starting_noise(latents, shape, f"batch, {layout}")
        if latents is None:
            return randn_tensor(shape, generator=generator, device=device, dtype=dtype)
        return latents.to(device=device, dtype=dtype)

    # Copied from compgen.pipelines.tuple_ddpm.TupleConditionedDDPMPipeline.prepare_extra_step_kwargs
    def prepare_extra_step_kwargs(self, generator: torch.Generator | list[torch.Generator] | None) -> dict:
        """The keyword arguments of ``scheduler.step`` that not every scheduler takes (DDIM's and DDPM's generator)."""
        accepts_generator = "generator" in inspect.signature(self.scheduler.step).parameters
        return {"generator": generator} if accepts_generator else {}

    # Copied from compgen.pipelines.tuple_dit.TupleConditionedDiTPipeline.decode_latents
    @torch.no_grad()
    def decode_latents(self, latents: torch.Tensor, quantize: bool = True, output_type: str = "pt"):
        """Standardized latents ``(B, C, g, g)`` (what the transformer diffuses) -> images: de-standardized, snapped
        to the codebook (``quantize=True``, a VQ tokenizer only; a KL tokenizer has no codebook and ignores it) and
        decoded, as the tokenizer decodes its own latents."""
        image = decode_standardized_latents(self.transformer, self.vqvae, self.vae, latents, quantize)
        return self.image_processor.postprocess(image.float(), output_type=output_type)

    @torch.no_grad()
    def __call__(
        self,
        concepts: ConceptPrompts,
        num_images_per_prompt: int = 1,
        num_inference_steps: int | None = 28,
        guidance_scale: float = 1.0,
        generator: Generators = None,
        output_type: str = "pil",
        return_dict: bool = True,
        concept_values: torch.Tensor | None = None,
        latents: torch.Tensor | None = None,
        callback_on_step_end: Callable[..., dict[str, Any]] | None = None,
        callback_on_step_end_tensor_inputs: Sequence[str] = ("latents",),
        quantize: bool = True,
    ) -> ImagePipelineOutput | tuple:
        r"""Sample ``num_images_per_prompt`` images of each concept class.

        Args:
            concepts: ``"111"``, ``(1, 1, 1)``, ``{"shape": "triangle", ...}`` or a list of those.
            num_images_per_prompt: Images per class; the output lists each class's images together, in order.
            num_inference_steps: Integration steps from sigma 1 to 0 (``None``: every training timestep; the default
                28 is ``StableDiffusion3Pipeline``'s).
            guidance_scale: Classifier-free guidance weight ``w`` in ``null + w * (cond - null)`` on the velocity; 1
                disables it. Needs a transformer trained with ``concept_dropout > 0``.
            generator: A ``torch.Generator``, or a list with one per image, for the initial noise (and a stochastic
                scheduler's steps); a batch with a list reproduces single-image calls image for image.
            output_type: ``"pil"``, ``"np"`` (``(B, H, W, 3)`` floats in [0, 1]), ``"pt"`` (``(B, 3, H, W)``) or
                ``"latent"`` (the standardized latents, undecoded).
            return_dict: Return an :class:`ImagePipelineOutput` rather than a tuple.
            concept_values: ``full``-conditioning transformers only: continuous values ``(num_prompts, D)`` or
                ``(num_prompts * num_images_per_prompt, D)``; ``None`` uses the canonical class values.
            latents: The starting noise ``(B, C, g, g)`` (``B``: every image; the transformer's ``latent_shape``);
                ``None`` draws it from ``generator``.
            callback_on_step_end: ``callback(pipe, step_index, timestep, callback_kwargs)`` called after every
                integration step with the tensors named in ``callback_on_step_end_tensor_inputs`` (``"latents"``); a
                ``"latents"`` entry of the dict it returns replaces the sample the loop continues from.
            callback_on_step_end_tensor_inputs: The tensors handed to ``callback_on_step_end``.
            quantize: Snap the generated latents to the codebook before decoding (the decoder's training input); a
                VQ tokenizer only, ignored with a KL tokenizer (``vae``), which decodes continuous latents.
        """
        # 1. Check inputs
        check_sampling_options(output_type, num_inference_steps)
        check_step_callback(callback_on_step_end, callback_on_step_end_tensor_inputs, self._callback_tensor_inputs)
        check_flow_scheduler(self.scheduler)  # also a scheduler swapped in after construction
        check_tokenizer(self.vqvae, self.vae, self.transformer)  # also a tokenizer removed or swapped since
        device = self._execution_device

        # 2. Encode the concepts (with the null half for classifier-free guidance)
        inputs = prepare_concept_inputs(
            self.transformer, concepts, num_images_per_prompt, guidance_scale, concept_values, device=device
        )
        do_classifier_free_guidance = inputs.do_classifier_free_guidance
        self._guidance_scale = guidance_scale  # read at every step: a step callback may change it

        # 3. Prepare timesteps: sigma * num_train_timesteps, from sigma 1 down
        self.scheduler.set_timesteps(num_inference_steps or self.scheduler.config.num_train_timesteps, device=device)
        timesteps = self.scheduler.timesteps
        self._num_timesteps = len(timesteps)

        # 4. Prepare the initial noise over the standardized latent grid
        check_generators(generator, inputs.batch_size)
        latents = self.prepare_latents(inputs.batch_size, self.transformer.latent_shape, self.transformer.dtype,
                                       device, generator, latents)

        # 5. Prepare extra step kwargs
        extra_step_kwargs = self.prepare_extra_step_kwargs(generator)

        # 6. Integration loop
        for i, t in enumerate(self.progress_bar(timesteps)):
            # expand the latents for classifier-free guidance: conditional half first, then the null half
            latent_model_input = torch.cat([latents] * 2) if do_classifier_free_guidance else latents
            # broadcast to batch dimension in a way that's compatible with ONNX/Core ML
            timestep = t.expand(latent_model_input.shape[0])

            # predict the velocity
            velocity = self.transformer(latent_model_input, timestep, **inputs.model_kwargs).sample

            # perform guidance
            if do_classifier_free_guidance:
                velocity_cond, velocity_null = velocity.chunk(2)
                velocity = velocity_null + self._guidance_scale * (velocity_cond - velocity_null)

            # compute the previous noisy sample x_t -> x_t-1 (an Euler step from sigma to the next sigma)
            latents = self.scheduler.step(velocity, t, latents, **extra_step_kwargs).prev_sample

            if callback_on_step_end is not None:
                callback_kwargs = {name: {"latents": latents}[name] for name in callback_on_step_end_tensor_inputs}
                callback_outputs = callback_on_step_end(self, i, t, callback_kwargs)
                latents = callback_latents(callback_outputs, latents, self._callback_tensor_inputs)

        # 7. Decode: de-standardize, snap to the codebook (VQ, quantize=True), decode by the tokenizer, post-process
        image = latents if output_type == "latent" else self.decode_latents(latents, quantize, output_type)

        # Offload all models
        self.maybe_free_model_hooks()

        if not return_dict:
            return (image,)
        return ImagePipelineOutput(images=image)
