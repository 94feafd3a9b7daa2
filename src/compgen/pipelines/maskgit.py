"""Sampling images of concept classes with a MaskGIT transformer over a VQ tokenizer."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from diffusers import VQModel
from diffusers.image_processor import VaeImageProcessor
from diffusers.pipelines.pipeline_utils import DiffusionPipeline, ImagePipelineOutput

from ..models.maskgit_transformer import MaskGITTransformer
from ..models.vq_tokenizer import decode_indices
from ..schedulers.scheduling_maskgit import MaskGITScheduler
from .concept_inputs import (
    ConceptPrompts,
    Generators,
    GuidedSamplingMixin,
    callback_latents,
    check_generators,
    check_latents_shape,
    check_step_callback,
    check_transformer,
    check_unmasking_options,
    prepare_concept_inputs,
)
from .video_output import check_frames


class MaskGITPipeline(DiffusionPipeline, GuidedSamplingMixin):
    r"""Generate images of concept classes (``"111"``, ``(1, 1, 1)``) by iterative masked-token decoding.

    Every token starts masked; each step samples all masked tokens and re-masks the least confident ones
    (:class:`MaskGITScheduler`); the final token grid is decoded by the VQ tokenizer.

    Args:
        vqvae: The VQ tokenizer whose codebook the transformer predicts.
        transformer: A :class:`MaskGITTransformer`; its config holds the concept space prompts are checked against.
        scheduler: A :class:`MaskGITScheduler` whose ``mask_token_id`` is the transformer's mask token.
    """

    model_cpu_offload_seq = "transformer->vqvae"
    _callback_tensor_inputs = ["latents"]
    _samples_clips = False
    """Whether the pipeline samples clips (a transformer of ``num_frames > 1``: :class:`MaskGITVideoPipeline`)."""

    def __init__(self, vqvae: VQModel, transformer: MaskGITTransformer, scheduler: MaskGITScheduler) -> None:
        super().__init__()
        check_transformer(type(self).__name__, transformer, MaskGITTransformer)
        if scheduler.config.mask_token_id != transformer.mask_token_id:
            raise ValueError(
                f"scheduler mask_token_id {scheduler.config.mask_token_id} differs from the transformer's mask token "
                f"{transformer.mask_token_id} (its codebook_size)"
            )
        if vqvae.config.num_vq_embeddings != transformer.config.codebook_size:
            raise ValueError(
                f"the tokenizer has {vqvae.config.num_vq_embeddings} codes but the transformer predicts "
                f"{transformer.config.codebook_size}"
            )
        check_frames(type(self).__name__, transformer, self._samples_clips,
                     "MaskGITPipeline" if self._samples_clips else "MaskGITVideoPipeline")
        self.register_modules(vqvae=vqvae, transformer=transformer, scheduler=scheduler)
        self.image_processor = VaeImageProcessor(do_resize=False)

    @torch.no_grad()
    def __call__(
        self,
        concepts: ConceptPrompts,
        num_images_per_prompt: int = 1,
        num_inference_steps: int = 12,
        temperature: float | tuple[float, float] = (2.0, 0.0),
        guidance_scale: float = 1.0,
        generator: Generators = None,
        output_type: str = "pil",
        return_dict: bool = True,
        concept_values: torch.Tensor | None = None,
        latents: torch.LongTensor | None = None,
        callback_on_step_end: Callable[..., dict[str, Any]] | None = None,
        callback_on_step_end_tensor_inputs: Sequence[str] = ("latents",),
    ) -> ImagePipelineOutput | tuple:
        r"""Sample ``num_images_per_prompt`` images of each concept class.

        Args:
            concepts: ``"111"``, ``(1, 1, 1)``, ``{"shape": "triangle", ...}`` or a list of those.
            num_images_per_prompt: Images per class; each class's images are listed together, in order.
            num_inference_steps: Decoding steps (MaskGIT uses 8-12).
            temperature: Gumbel temperature of the confidence re-masking, annealed linearly from the first value to
                the second (a float ``t`` means ``(t, 0)``); higher gives more diverse samples.
            guidance_scale: Classifier-free guidance on the logits, ``null + w * (cond - null)``; 1 disables it.
                Needs a transformer trained with ``concept_dropout > 0``.
            generator: A ``torch.Generator``, or a list with one per image, for token sampling and re-masking
                (reproducibility; a batch with a list reproduces single-image calls image for image).
            output_type: ``"pil"``, ``"np"`` (``(B, H, W, 3)`` floats in [0, 1]), ``"pt"`` (``(B, 3, H, W)``) or
                ``"latent"`` (the token ids ``(B, g, g)``, undecoded).
            return_dict: Return an :class:`ImagePipelineOutput` rather than a tuple.
            concept_values: ``full``-conditioning transformers only: continuous values ``(num_prompts, D)`` or
                ``(num_prompts * num_images_per_prompt, D)``; ``None`` uses the canonical class values.
            latents: The starting token ids ``(B, L)`` or ``(B, H, W)`` (``B``: every image), the transformer's mask
                token (``pipe.transformer.mask_token_id``) where a token is to be generated, as diffusers'
                ``AmusedPipeline`` takes them (known tokens are kept: inpainting); ``None``: every token masked.
            callback_on_step_end: ``callback(pipe, step_index, timestep, callback_kwargs)`` called after every
                decoding step with the tensors named in ``callback_on_step_end_tensor_inputs`` (``"latents"``: the
                token ids, masked where still unknown); a ``"latents"`` entry of the dict it returns replaces them.
            callback_on_step_end_tensor_inputs: The tensors handed to ``callback_on_step_end``.
        """
        # 1. Check inputs
        check_unmasking_options(output_type, num_inference_steps)
        check_step_callback(callback_on_step_end, callback_on_step_end_tensor_inputs, self._callback_tensor_inputs)
        if self.vqvae is None:
            raise ValueError("the pipeline needs its VQ tokenizer to decode the tokens: set pipe.vqvae (a VQModel), or "
                             "load the pipeline with it")
        device = self._execution_device

        # 2. Encode the concepts (with the null half for classifier-free guidance)
        inputs = prepare_concept_inputs(
            self.transformer, concepts, num_images_per_prompt, guidance_scale, concept_values, device=device
        )
        do_classifier_free_guidance = inputs.do_classifier_free_guidance
        self._guidance_scale = guidance_scale  # read at every step: a step callback may change it

        # 3. Prepare the token grid: every token starts masked, unless given
        batch_size = inputs.batch_size
        check_generators(generator, batch_size)
        num_tokens, token_grid = self.transformer.num_tokens, self.transformer.token_grid_shape
        if latents is None:
            tokens = torch.full((batch_size, num_tokens), self.transformer.mask_token_id, dtype=torch.long,
                                device=device)
        else:
            tokens = latents.reshape(latents.shape[0], -1) if latents.ndim > 2 else latents
            check_latents_shape(tokens, (batch_size, num_tokens), "batch, tokens: the grid's token ids")
            if tokens.dtype.is_floating_point or tokens.min() < 0 or tokens.max() > self.transformer.mask_token_id:
                raise ValueError(f"latents must be token ids in [0, {self.transformer.mask_token_id}] (the mask token "
                                 "last), as integers")
            if not (tokens == self.transformer.mask_token_id).any(dim=1).all():
                raise ValueError("latents must leave at least one token of every image masked (mask_token_id): "
                                 "there is nothing to generate in an image without one")
            tokens = tokens.to(device=device, dtype=torch.long)

        # 4. Prepare timesteps (and the annealed re-masking temperature)
        self.scheduler.set_timesteps(num_inference_steps, temperature=temperature, device=device)
        timesteps = self.scheduler.timesteps
        self._num_timesteps = len(timesteps)

        # 5. Decoding loop
        for i, t in enumerate(self.progress_bar(timesteps)):
            # expand the tokens for classifier-free guidance: conditional half first, then the null half
            model_input = torch.cat([tokens] * 2) if do_classifier_free_guidance else tokens

            # predict the logits of every token
            logits = self.transformer(model_input, **inputs.model_kwargs).logits

            # perform guidance
            if do_classifier_free_guidance:
                logits_cond, logits_null = logits.chunk(2)
                logits = logits_null + self._guidance_scale * (logits_cond - logits_null)

            # sample the masked tokens and re-mask the least confident ones
            tokens = self.scheduler.step(logits, t, tokens, generator=generator).prev_sample

            if callback_on_step_end is not None:
                callback_kwargs = {name: {"latents": tokens}[name] for name in callback_on_step_end_tensor_inputs}
                callback_outputs = callback_on_step_end(self, i, t, callback_kwargs)
                tokens = callback_latents(callback_outputs, tokens, self._callback_tensor_inputs)

        # 6. Decode the token grid by the VQ tokenizer
        if output_type == "latent":  # the token ids, undecoded
            image = tokens.view(batch_size, *token_grid)
        else:
            image = decode_indices(self.vqvae, tokens.view(batch_size, *token_grid))

            # 7. Post-process: [-1, 1] -> output_type
            image = self.image_processor.postprocess(image.float(), output_type=output_type)

        # Offload all models
        self.maybe_free_model_hooks()

        if not return_dict:
            return (image,)
        return ImagePipelineOutput(images=image)
