"""Sampling images of concept classes with a MaskGIT transformer over a VQ tokenizer."""

from __future__ import annotations

import torch
from diffusers import VQModel
from diffusers.pipelines.pipeline_utils import DiffusionPipeline, ImagePipelineOutput

from ..models.maskgit_transformer import MaskGITTransformer
from ..models.vq_tokenizer import decode_indices
from ..schedulers.scheduling_maskgit import MaskGITScheduler
from .conditioning import ConceptPrompts, parse_concept_prompts

OUTPUT_TYPES = ("pil", "np", "pt")


class MaskGITPipeline(DiffusionPipeline):
    r"""Generate images of concept classes (``"111"``, ``(1, 1, 1)``) by iterative masked-token decoding.

    Every token starts masked; each step samples all masked tokens and re-masks the least confident ones
    (:class:`MaskGITScheduler`); the final token grid is decoded by the VQ tokenizer.

    Args:
        vqvae: The VQ tokenizer whose codebook the transformer predicts.
        transformer: A :class:`MaskGITTransformer`; its config holds the concept space prompts are checked against.
        scheduler: A :class:`MaskGITScheduler` whose ``mask_token_id`` is the transformer's mask token.
    """

    model_cpu_offload_seq = "transformer->vqvae"

    def __init__(self, vqvae: VQModel, transformer: MaskGITTransformer, scheduler: MaskGITScheduler) -> None:
        super().__init__()
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
        self.register_modules(vqvae=vqvae, transformer=transformer, scheduler=scheduler)

    @torch.no_grad()
    def __call__(
        self,
        concepts: ConceptPrompts,
        num_images_per_prompt: int = 1,
        num_inference_steps: int = 12,
        temperature: float | tuple[float, float] = (2.0, 0.0),
        guidance_scale: float = 1.0,
        generator: torch.Generator | None = None,
        output_type: str = "pil",
        return_dict: bool = True,
        concept_values: torch.Tensor | None = None,
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
            generator: A ``torch.Generator`` for token sampling and re-masking (reproducibility).
            output_type: ``"pil"``, ``"np"`` (``(B, H, W, 3)`` floats in [0, 1]) or ``"pt"`` (``(B, 3, H, W)``).
            return_dict: Return an :class:`ImagePipelineOutput` rather than a tuple.
            concept_values: ``full``-conditioning transformers only: continuous values ``(num_prompts, D)`` or
                ``(num_prompts * num_images_per_prompt, D)``; ``None`` uses the canonical class values.
        """
        if output_type not in OUTPUT_TYPES:
            raise ValueError(f"output_type must be one of {OUTPUT_TYPES}, got {output_type!r}")
        do_guidance = guidance_scale != 1.0
        if do_guidance and not self.transformer.has_null_embeddings:
            raise ValueError(
                "classifier-free guidance (guidance_scale != 1) needs a transformer trained with concept_dropout > 0, "
                "which learns the null concepts; this transformer's concept_dropout is 0"
            )
        device = self._execution_device
        classes = parse_concept_prompts(self.transformer.concept_space, concepts, num_images_per_prompt).to(device)
        batch_size = classes.shape[0]
        if concept_values is not None:
            concept_values = torch.as_tensor(concept_values)
            if concept_values.ndim == 2 and concept_values.shape[0] * num_images_per_prompt == batch_size:
                concept_values = concept_values.repeat_interleave(num_images_per_prompt, dim=0)
            concept_values = concept_values.to(device=device, dtype=self.transformer.dtype)
        drop_mask = torch.zeros_like(classes, dtype=torch.bool) if self.transformer.has_null_embeddings else None
        if do_guidance:
            classes = torch.cat([classes, classes])
            drop_mask = torch.cat([drop_mask, torch.ones_like(drop_mask)])
            if concept_values is not None:
                concept_values = torch.cat([concept_values, concept_values])

        grid = self.transformer.config.grid_size
        tokens = torch.full((batch_size, grid * grid), self.transformer.mask_token_id, dtype=torch.long, device=device)
        self.scheduler.set_timesteps(num_inference_steps, temperature=temperature, device=device)
        for t in self.progress_bar(self.scheduler.timesteps):
            model_input = torch.cat([tokens, tokens]) if do_guidance else tokens
            logits = self.transformer(model_input, classes, concept_values=concept_values, drop_mask=drop_mask).logits
            if do_guidance:
                cond, null = logits.chunk(2)
                logits = null + guidance_scale * (cond - null)
            tokens = self.scheduler.step(logits, t, tokens, generator=generator).prev_sample

        image = decode_indices(self.vqvae, tokens.view(batch_size, grid, grid))
        image = (image.float() / 2 + 0.5).clamp(0, 1)
        if output_type != "pt":
            image = image.cpu().permute(0, 2, 3, 1).numpy()
            if output_type == "pil":
                image = self.numpy_to_pil(image)
        self.maybe_free_model_hooks()
        if not return_dict:
            return (image,)
        return ImagePipelineOutput(images=image)
