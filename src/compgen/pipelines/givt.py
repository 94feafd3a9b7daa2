"""Sampling images of concept classes from a :class:`~compgen.models.givt_transformer.GIVTTransformer` by iterative
unmasking, decoded by its tokenizer (a VQ or a KL tokenizer)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from diffusers import AutoencoderKL, VQModel
from diffusers.image_processor import VaeImageProcessor
from diffusers.pipelines.pipeline_utils import DiffusionPipeline, ImagePipelineOutput

from ..models.gaussian_mixture import mixture_sample
from ..models.givt_transformer import GIVTTransformer
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
from .latent_decoding import check_tokenizer, decode_standardized_latents
from .masked_latents import masked_token_latents, token_step_callback, uniform_scores


class GIVTPipeline(DiffusionPipeline, GuidedSamplingMixin):
    r"""Generate images of concept classes (``"111"``, ``(1, 1, 1)``) with GIVT's masked decoding.

    Every token starts masked. At each of ``num_inference_steps`` steps the transformer predicts a Gaussian mixture
    for every token; the tokens to reveal (as many as MaskGIT's schedule, ``scheduler``'s ``num_masked_after``, says)
    are drawn in a random order, as continuous tokens carry no confidence to rank them by, and their latents are
    sampled from their mixtures. The final latents decode through the tokenizer: snapped to a VQ tokenizer's codebook
    (``quantize=True``) or decoded as they are by a KL tokenizer (``vae``).

    Args:
        vqvae: The frozen VQ tokenizer whose pre-quantization latents the transformer models, or ``None`` with ``vae``.
        transformer: The GIVT transformer.
        scheduler: A :class:`~compgen.schedulers.MaskGITScheduler` for the unmasking schedule (its
            ``mask_token_id`` is unused: tokens are continuous).
        vae: The frozen KL tokenizer instead of ``vqvae``; exactly one of the two is given.
    """

    model_cpu_offload_seq = "transformer->vqvae->vae"
    _optional_components = ["vqvae", "vae"]
    _callback_tensor_inputs = ["latents"]

    def __init__(self, vqvae: VQModel | None, transformer: GIVTTransformer, scheduler: MaskGITScheduler,
                 vae: AutoencoderKL | None = None) -> None:
        super().__init__()
        if not isinstance(transformer, GIVTTransformer):  # a MAR export loaded with this pipeline, say
            hint = ": load a MAR export with MARPipeline" if type(transformer).__name__ == "MARTransformer" else ""
            raise ValueError(f"GIVTPipeline needs a GIVTTransformer, got {type(transformer).__name__}{hint}")
        check_tokenizer(vqvae, vae, transformer)
        self.register_modules(vqvae=vqvae, transformer=transformer, scheduler=scheduler, vae=vae)
        self.image_processor = VaeImageProcessor(do_resize=False)

    def check_inputs(self, output_type: str, num_inference_steps: int | None, temperature: float) -> None:
        """Refuse an unknown output type, a missing or non-positive step count and a negative temperature."""
        check_unmasking_options(output_type, num_inference_steps)
        check_temperature(temperature)

    @torch.no_grad()
    def __call__(
        self,
        concepts: ConceptPrompts,
        num_images_per_prompt: int = 1,
        num_inference_steps: int = 12,
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
            num_inference_steps: Unmasking steps (MaskGIT's 8-12).
            temperature: Scale of every mixture component's standard deviation when a token is sampled (1: the
                mixture itself; 0: the mean of a component drawn by its weight).
            guidance_scale: GIVT's distribution-based classifier-free guidance (Tschannen et al. 2024, Sec. 3.4): a
                token is drawn from ``p_cond^s / p_null^(s-1)`` of its drawn mixture component
                (:func:`~compgen.models.gaussian_mixture.mixture_sample`); 1: no guidance. Needs a transformer
                trained with concept dropout (``--concept_dropout``), refused otherwise.
            generator: A CPU ``torch.Generator``, or a list with one per image, for the reveal order and the token
                samples (reproducibility; a batch with a list reproduces single-image calls image for image).
            output_type: ``"pil"``, ``"np"`` (``(B, H, W, 3)`` floats in [0, 1]), ``"pt"`` (``(B, 3, H, W)``) or
                ``"latent"`` (the standardized latent grid, undecoded).
            return_dict: Return an :class:`ImagePipelineOutput` rather than a tuple.
            concept_values: ``full``-conditioning transformers only: continuous values ``(num_prompts, D)`` or
                ``(num_prompts * num_images_per_prompt, D)``; ``None`` uses the canonical class values.
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
        self.check_inputs(output_type, num_inference_steps, temperature)
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
            # predict a Gaussian mixture for every token from the revealed ones
            latents = tokens.transpose(1, 2).reshape(batch_size, channels, config.grid_size, -1)
            if do_classifier_free_guidance:  # conditional half first, then the null half
                both = self.transformer(torch.cat([latents] * 2), torch.cat([masked] * 2), **inputs.model_kwargs)
                logits, means, log_scales = (x.chunk(2)[0] for x in (both.logits, both.means, both.log_scales))
                null = {"null_means": both.means.chunk(2)[1], "null_log_scales": both.log_scales.chunk(2)[1]}
            else:
                output = self.transformer(latents, masked, **inputs.model_kwargs)
                logits, means, log_scales, null = output.logits, output.means, output.log_scales, {}

            # pick as many masked tokens as the schedule reveals now, in a random order
            remaining = self.scheduler.num_masked_after(step, num_tokens, num_masked)
            scores = uniform_scores(generator, batch_size, num_tokens).to(device).masked_fill(~masked, -1.0)
            reveal = torch.zeros_like(masked).scatter_(1, scores.topk(num_masked - remaining, dim=1).indices, True)

            # draw their latents from their mixtures
            # (guided: GIVT's distribution-based guidance of the drawn component, mixture_sample)
            if isinstance(generator, list):  # each image from its own generator, as a call for it alone draws it
                sampled = torch.cat([mixture_sample(
                    logits[i][reveal[i]], means[i][reveal[i]], log_scales[i][reveal[i]], temperature, g,
                    guidance_scale=self._guidance_scale, **{k: v[i][reveal[i]] for k, v in null.items()})
                    for i, g in enumerate(generator)])
            else:
                sampled = mixture_sample(logits[reveal], means[reveal], log_scales[reveal], temperature, generator,
                                         guidance_scale=self._guidance_scale, **{k: v[reveal] for k, v in null.items()})
            tokens[reveal] = sampled.to(tokens.dtype)
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
