"""Sampling images of concept classes from a :class:`~compgen.models.mar_transformer.MARTransformer`: iterative
unmasking, each revealed token drawn by the diffusion head under a diffusers scheduler, decoded by the tokenizer."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from diffusers import AutoencoderKL, VQModel
from diffusers.image_processor import VaeImageProcessor
from diffusers.pipelines.pipeline_utils import DiffusionPipeline, ImagePipelineOutput
from diffusers.schedulers.scheduling_utils import SchedulerMixin

from ..models.mar_transformer import MARTransformer
from ..schedulers.scheduling_maskgit import MaskGITScheduler
from .concept_inputs import (
    ConceptPrompts,
    Generators,
    GuidedSamplingMixin,
    check_generators,
    check_step_callback,
    check_temperature,
    check_unmasking_options,
    prepare_concept_inputs,
)
from .latent_decoding import check_tokenizer, check_unclipped_scheduler, decode_standardized_latents
from .masked_latents import masked_token_latents, token_step_callback, uniform_scores


class MARPipeline(DiffusionPipeline, GuidedSamplingMixin):
    r"""Generate images of concept classes (``"111"``, ``(1, 1, 1)``) with MAR's masked decoding (Li et al. 2024).

    Tokens are revealed as in :class:`~compgen.pipelines.givt.GIVTPipeline` (MaskGIT's schedule, a random order);
    each revealed token's latent is denoised from Gaussian noise by the transformer's diffusion head, conditioned on
    the transformer's state for that token, over ``num_head_steps`` steps of ``head_scheduler`` (any diffusers
    scheduler on the training noise schedule, e.g. ``DDIMScheduler.from_config(pipe.head_scheduler.config)``).

    Args:
        vqvae: The frozen VQ tokenizer, or ``None`` with ``vae``.
        transformer: The MAR transformer.
        scheduler: A :class:`~compgen.schedulers.MaskGITScheduler` for the unmasking schedule.
        head_scheduler: The diffusion head's noise schedule (without clipping: standardized latents exceed [-1, 1]).
        vae: The frozen KL tokenizer instead of ``vqvae``; exactly one of the two is given.
    """

    model_cpu_offload_seq = "transformer->vqvae->vae"
    _optional_components = ["vqvae", "vae"]
    _callback_tensor_inputs = ["latents"]

    def __init__(self, vqvae: VQModel | None, transformer: MARTransformer, scheduler: MaskGITScheduler,
                 head_scheduler: SchedulerMixin, vae: AutoencoderKL | None = None) -> None:
        super().__init__()
        if not isinstance(transformer, MARTransformer):  # a GIVT export loaded with this pipeline, say
            hint = ": load a GIVT export with GIVTPipeline" if type(transformer).__name__ == "GIVTTransformer" else ""
            raise ValueError(f"MARPipeline needs a MARTransformer, got {type(transformer).__name__}{hint}")
        check_unclipped_scheduler(head_scheduler)
        check_tokenizer(vqvae, vae, transformer)
        self.register_modules(vqvae=vqvae, transformer=transformer, scheduler=scheduler,
                              head_scheduler=head_scheduler, vae=vae)
        self.image_processor = VaeImageProcessor(do_resize=False)

    def check_inputs(self, output_type: str, num_inference_steps: int | None, num_head_steps: int,
                     temperature: float) -> None:
        """Refuse a clipping head scheduler, step counts below 1, an unknown output type and a negative temperature."""
        check_unclipped_scheduler(self.head_scheduler)
        if isinstance(num_head_steps, bool) or not isinstance(num_head_steps, int) or num_head_steps < 1:
            raise ValueError(f"num_head_steps must be a positive integer, got {num_head_steps!r}")
        check_unmasking_options(output_type, num_inference_steps)
        check_temperature(temperature)

    def denoise_tokens(self, conditions: torch.Tensor, num_head_steps: int, temperature: float,
                       generator: torch.Generator | None, null_conditions: torch.Tensor | None = None,
                       guidance_scale: float = 1.0) -> torch.Tensor:
        """Token latents ``(N, C)`` denoised from ``temperature``-scaled noise by the diffusion head, conditioned on the
        transformer's state of each token ``(N, hidden)``; with ``null_conditions`` (the states under null concepts),
        the head's noise prediction is guided, ``null + guidance_scale * (cond - null)``, as MAR (Li et al. 2024,
        Sec. 5) guides its head."""
        shape = (len(conditions), self.transformer.config.latent_channels)
        sample = temperature * torch.randn(shape, generator=generator).to(conditions.device, conditions.dtype)
        self.head_scheduler.set_timesteps(num_head_steps, device=conditions.device)
        for t in self.head_scheduler.timesteps:
            if null_conditions is None:
                noise_pred = self.transformer.denoise(sample, t, conditions)
            else:
                pair = self.transformer.denoise(torch.cat([sample] * 2), t, torch.cat([conditions, null_conditions]))
                noise_pred_cond, noise_pred_null = pair.chunk(2)
                noise_pred = noise_pred_null + guidance_scale * (noise_pred_cond - noise_pred_null)
            sample = self.head_scheduler.step(noise_pred, t, sample, generator=generator).prev_sample
        return sample

    @torch.no_grad()
    def __call__(
        self,
        concepts: ConceptPrompts,
        num_images_per_prompt: int = 1,
        num_inference_steps: int = 12,
        num_head_steps: int = 25,
        temperature: float = 1.0,
        guidance_scale: float = 1.0,
        generator: Generators = None,
        output_type: str = "pil",
        return_dict: bool = True,
        concept_values: torch.Tensor | None = None,
        quantize: bool = True,
        latents: torch.Tensor | None = None,
        callback_on_step_end: Callable[..., dict[str, Any]] | None = None,
        callback_on_step_end_tensor_inputs: Sequence[str] = ("latents",),
    ) -> ImagePipelineOutput | tuple:
        r"""Sample ``num_images_per_prompt`` images of each concept class.

        Args:
            concepts: ``"111"``, ``(1, 1, 1)``, ``{"shape": "triangle", ...}`` or a list of those.
            num_images_per_prompt: Images per class; each class's images are listed together, in order.
            num_inference_steps: Unmasking steps.
            num_head_steps: Denoising steps of the diffusion head per revealed token.
            temperature: Scale of the head's initial noise (1: the learned distribution).
            guidance_scale: Classifier-free guidance of the diffusion head (MAR's): its noise prediction becomes
                ``null + w * (cond - null)``, ``cond`` and ``null`` from the transformer's token states under the
                prompt's concepts and under the null concepts; 1 disables it. Needs a transformer trained with
                ``concept_dropout > 0`` (``--concept_dropout``).
            generator: A CPU ``torch.Generator``, or a list with one per image, for the reveal order and the head's
                noise (reproducibility; a batch with a list reproduces single-image calls image for image).
            output_type: ``"pil"``, ``"np"`` (``(B, H, W, 3)`` floats in [0, 1]), ``"pt"`` (``(B, 3, H, W)``) or
                ``"latent"`` (the standardized latent grid, undecoded).
            return_dict: Return an :class:`ImagePipelineOutput` rather than a tuple.
            concept_values: ``full``-conditioning transformers only: continuous values per prompt or per image.
            quantize: Snap the latents to a VQ tokenizer's codebook before decoding (ignored with a KL tokenizer).
            latents: Standardized token latents to start from, ``(B, C, H, W)`` over the token grid (``B``: every
                image), ``NaN`` in the tokens to generate (the same number in every image; known tokens are kept:
                inpainting); ``None``: every token generated.
            callback_on_step_end: ``callback(pipe, step_index, timestep, callback_kwargs)`` called after every
                unmasking step with the tensors named in ``callback_on_step_end_tensor_inputs`` (``"latents"``: the
                token latents as above, ``NaN`` where still masked); the revealed tokens of a ``"latents"`` entry of
                the dict it returns replace the loop's (which tokens are masked stays the loop's).
            callback_on_step_end_tensor_inputs: The tensors handed to ``callback_on_step_end``.
        """
        # 1. Check inputs
        check_step_callback(callback_on_step_end, callback_on_step_end_tensor_inputs, self._callback_tensor_inputs)
        check_tokenizer(self.vqvae, self.vae, self.transformer)  # also a tokenizer removed or swapped since
        self.check_inputs(output_type, num_inference_steps, num_head_steps, temperature)
        device = self._execution_device

        # 2. Encode the concepts
        inputs = prepare_concept_inputs(
            self.transformer, concepts, num_images_per_prompt, guidance_scale, concept_values, device=device
        )
        do_classifier_free_guidance = inputs.do_classifier_free_guidance
        self._guidance_scale = guidance_scale  # read at every step: a step callback may change it

        # 3. Prepare the tokens: a (B, L, C) sequence of latents, every one masked unless given
        config = self.transformer.config
        batch_size, num_tokens, channels = inputs.batch_size, config.grid_size**2, config.latent_channels
        check_generators(generator, batch_size)
        tokens, masked = masked_token_latents(latents, batch_size, channels, config.grid_size, device,
                                              self.transformer.dtype)

        # 4. Prepare the unmasking schedule
        self.scheduler.set_timesteps(num_inference_steps, device=device)
        self._num_timesteps = num_inference_steps

        # 5. Unmasking loop
        num_masked = int(masked[0].sum())
        for step in self.progress_bar(range(num_inference_steps)):
            # the transformer's state for every token, from the revealed ones
            latents = tokens.transpose(1, 2).reshape(batch_size, channels, config.grid_size, -1)
            if do_classifier_free_guidance:  # conditional half first, then the null half
                output = self.transformer(torch.cat([latents] * 2), torch.cat([masked] * 2), **inputs.model_kwargs)
                conditions, null_conditions = output.conditions.chunk(2)
            else:
                conditions = self.transformer(latents, masked, **inputs.model_kwargs).conditions
                null_conditions = None

            # pick as many masked tokens as the schedule reveals now, in a random order
            remaining = self.scheduler.num_masked_after(step, num_tokens, num_masked)
            scores = uniform_scores(generator, batch_size, num_tokens).to(device).masked_fill(~masked, -1.0)
            reveal = torch.zeros_like(masked).scatter_(1, scores.topk(num_masked - remaining, dim=1).indices, True)

            # denoise their latents from noise with the diffusion head, conditioned on each token's state (each image
            # from its own generator when given a list, as a call for it alone draws it)
            if isinstance(generator, list):
                sample = torch.cat([self.denoise_tokens(
                    conditions[i][reveal[i]], num_head_steps, temperature, g,
                    None if null_conditions is None else null_conditions[i][reveal[i]], self._guidance_scale)
                    for i, g in enumerate(generator)])
            else:
                sample = self.denoise_tokens(conditions[reveal], num_head_steps, temperature, generator,
                                             None if null_conditions is None else null_conditions[reveal],
                                             self._guidance_scale)
            tokens[reveal] = sample.to(tokens.dtype)
            masked &= ~reveal
            num_masked = remaining

            if callback_on_step_end is not None:
                tokens = token_step_callback(self, step, callback_on_step_end, callback_on_step_end_tensor_inputs,
                                             tokens, masked, config.grid_size)

        # 6. Decode: the token sequence as a standardized latent grid, through the tokenizer
        latents = tokens.transpose(1, 2).reshape(batch_size, channels, config.grid_size, config.grid_size)
        if output_type == "latent":  # the standardized latent grid, undecoded
            image = latents
        else:
            image = decode_standardized_latents(self.transformer, self.vqvae, self.vae, latents, quantize)

            # 7. Post-process: [-1, 1] -> output_type
            image = self.image_processor.postprocess(image.float(), output_type=output_type)

        # Offload all models
        self.maybe_free_model_hooks()

        if not return_dict:
            return (image,)
        return ImagePipelineOutput(images=image)
