"""Sampling images of concept classes from a :class:`TupleConditionedDiT` through its tokenizer's decoder (a VQ or a
KL tokenizer)."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import Any

import torch
from diffusers import AutoencoderKL, VQModel
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
from .latent_decoding import check_tokenizer, check_unclipped_scheduler, decode_standardized_latents


def check_not_flow_scheduler(scheduler: SchedulerMixin) -> None:
    """Refuse a flow-matching scheduler: its export is a velocity field, which this DDPM pipeline would read as noise
    predictions (an AttributeError deep in sampling, or wrong images)."""
    if type(scheduler).__name__.startswith("FlowMatch"):
        raise ValueError(f"{type(scheduler).__name__} is a flow-matching scheduler: this is a flow-matching DiT, load "
                         "it with TupleConditionedFlowDiTPipeline")


class TupleConditionedDiTPipeline(DiffusionPipeline, GuidedSamplingMixin):
    r"""Generate images of concept classes (``"111"``, ``(1, 1, 1)``) by diffusing tokenizer latents.

    The transformer denoises a ``(C, g, g)`` grid of standardized latents; the final latents are de-standardized and
    decoded by the tokenizer: a VQ tokenizer (``vqvae``) snaps them to its codebook first (``quantize=True``, the
    decoder's training input, as MaskGIT's tokens are); a KL tokenizer (``vae``, Paper B's continuous tokenizer)
    decodes them as they are. Any diffusers scheduler trained on the same noise schedule swaps in
    (``DDIMScheduler.from_config(pipe.scheduler.config)``).

    Args:
        vqvae: The frozen VQ tokenizer whose latents the transformer diffuses, or ``None`` with ``vae``.
        transformer: The denoiser; its config holds the concept space prompts are validated against.
        scheduler: A diffusers scheduler (e.g. ``DDPMScheduler``).
        vae: The frozen KL tokenizer instead of ``vqvae`` (pass ``vqvae=None``); exactly one of the two is given.
    """

    model_cpu_offload_seq = "transformer->vqvae->vae"
    _optional_components = ["vqvae", "vae"]
    _callback_tensor_inputs = ["latents"]

    def __init__(
        self,
        vqvae: VQModel | None,
        transformer: TupleConditionedDiT,
        scheduler: SchedulerMixin,
        vae: AutoencoderKL | None = None,
    ) -> None:
        super().__init__()
        check_transformer(type(self).__name__, transformer, TupleConditionedDiT)
        check_tokenizer(vqvae, vae, transformer)
        check_unclipped_scheduler(scheduler)
        check_not_flow_scheduler(scheduler)
        if transformer.config.num_frames > 1:
            raise ValueError(f"TupleConditionedDiTPipeline samples images but the transformer has num_frames "
                             f"{transformer.config.num_frames}: clips are sampled by flow matching, "
                             "FlowDiTVideoPipeline")
        self.register_modules(vqvae=vqvae, transformer=transformer, scheduler=scheduler, vae=vae)
        self.image_processor = VaeImageProcessor(do_resize=False)

    # Copied from compgen.pipelines.tuple_ddpm.TupleConditionedDDPMPipeline.prepare_latents
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

    # Copied from compgen.pipelines.tuple_ddpm.TupleConditionedDDPMPipeline.prepare_extra_step_kwargs
    def prepare_extra_step_kwargs(self, generator: torch.Generator | list[torch.Generator] | None) -> dict:
        """The keyword arguments of ``scheduler.step`` that not every scheduler takes (DDIM's and DDPM's generator)."""
        accepts_generator = "generator" in inspect.signature(self.scheduler.step).parameters
        return {"generator": generator} if accepts_generator else {}

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
        num_inference_steps: int | None = 50,
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
            num_inference_steps: Denoising steps (``None``: every training step).
            guidance_scale: Classifier-free guidance weight ``w`` in ``null + w * (cond - null)``; 1 disables it.
                Needs a transformer trained with ``concept_dropout > 0``.
            generator: A ``torch.Generator``, or a list with one per image, for the initial noise and stochastic
                scheduler steps (reproducibility; a batch with a list reproduces single-image calls image for image).
            output_type: ``"pil"``, ``"np"`` (``(B, H, W, 3)`` floats in [0, 1]), ``"pt"`` (``(B, 3, H, W)``) or
                ``"latent"`` (the standardized latents, undecoded).
            return_dict: Return an :class:`ImagePipelineOutput` rather than a tuple.
            concept_values: ``full``-conditioning transformers only: continuous values ``(num_prompts, D)`` or
                ``(num_prompts * num_images_per_prompt, D)``; ``None`` uses the canonical class values.
            quantize: Snap the generated latents to the codebook before decoding (the decoder's training input); a
                VQ tokenizer only, ignored with a KL tokenizer (``vae``), which decodes continuous latents.
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
        check_unclipped_scheduler(self.scheduler)  # also a scheduler swapped in after construction
        check_not_flow_scheduler(self.scheduler)
        check_tokenizer(self.vqvae, self.vae, self.transformer)  # also a tokenizer removed or swapped since
        device = self._execution_device

        # 2. Encode the concepts (with the null half for classifier-free guidance)
        inputs = prepare_concept_inputs(
            self.transformer, concepts, num_images_per_prompt, guidance_scale, concept_values, device=device
        )
        do_classifier_free_guidance = inputs.do_classifier_free_guidance
        self._guidance_scale = guidance_scale  # read at every step: a step callback may change it

        # 3. Prepare timesteps
        self.scheduler.set_timesteps(num_inference_steps or self.scheduler.config.num_train_timesteps, device=device)
        timesteps = self.scheduler.timesteps
        self._num_timesteps = len(timesteps)

        # 4. Prepare the initial noise over the standardized latent grid
        config = self.transformer.config
        check_generators(generator, inputs.batch_size)
        latents = self.prepare_latents(inputs.batch_size, config.latent_channels, config.grid_size, config.grid_size,
                                       self.transformer.dtype, device, generator, latents)

        # 5. Prepare extra step kwargs
        extra_step_kwargs = self.prepare_extra_step_kwargs(generator)

        # 6. Denoising loop
        for i, t in enumerate(self.progress_bar(timesteps)):
            # expand the latents for classifier-free guidance: conditional half first, then the null half
            latent_model_input = torch.cat([latents] * 2) if do_classifier_free_guidance else latents
            latent_model_input = self.scheduler.scale_model_input(latent_model_input, t)

            # predict the noise residual
            noise_pred = self.transformer(latent_model_input, t, **inputs.model_kwargs).sample

            # perform guidance
            if do_classifier_free_guidance:
                noise_pred_cond, noise_pred_null = noise_pred.chunk(2)
                noise_pred = noise_pred_null + self._guidance_scale * (noise_pred_cond - noise_pred_null)

            # compute the previous noisy latents x_t -> x_t-1
            latents = self.scheduler.step(noise_pred, t, latents, **extra_step_kwargs).prev_sample

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
