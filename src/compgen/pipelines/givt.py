"""Sampling images of concept classes from a :class:`~compgen.models.givt_transformer.GIVTTransformer` by iterative
unmasking, decoded by its tokenizer (a VQ or a KL tokenizer)."""

from __future__ import annotations

import torch
from diffusers import AutoencoderKL, VQModel
from diffusers.image_processor import VaeImageProcessor
from diffusers.pipelines.pipeline_utils import DiffusionPipeline, ImagePipelineOutput

from ..models.gaussian_mixture import mixture_sample
from ..models.givt_transformer import GIVTTransformer
from ..schedulers.scheduling_maskgit import MaskGITScheduler
from .concept_inputs import ConceptPrompts, check_sampling_options, prepare_concept_inputs
from .tuple_dit import check_tokenizer, decode_standardized_latents


class GIVTPipeline(DiffusionPipeline):
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

    def __init__(self, vqvae: VQModel | None, transformer: GIVTTransformer, scheduler: MaskGITScheduler,
                 vae: AutoencoderKL | None = None) -> None:
        super().__init__()
        check_tokenizer(vqvae, vae, transformer)
        self.register_modules(vqvae=vqvae, transformer=transformer, scheduler=scheduler, vae=vae)
        self.image_processor = VaeImageProcessor(do_resize=False)

    def check_inputs(self, output_type: str, num_inference_steps: int | None, temperature: float) -> None:
        """Refuse an unknown output type, a missing or non-positive step count and a negative temperature."""
        check_sampling_options(output_type, num_inference_steps)
        if num_inference_steps is None:
            raise ValueError("num_inference_steps must be a positive integer (masked decoding has no training steps)")
        if temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {temperature}")

    @torch.no_grad()
    def __call__(
        self,
        concepts: ConceptPrompts,
        num_images_per_prompt: int = 1,
        num_inference_steps: int = 12,
        temperature: float = 1.0,
        guidance_scale: float = 1.0,
        generator: torch.Generator | None = None,
        output_type: str = "pil",
        return_dict: bool = True,
        concept_values: torch.Tensor | None = None,
        quantize: bool = True,
    ) -> ImagePipelineOutput | tuple:
        r"""Sample ``num_images_per_prompt`` images of each concept class.

        Args:
            concepts: ``"111"``, ``(1, 1, 1)``, ``{"shape": "triangle", ...}`` or a list of those.
            num_images_per_prompt: Images per class; each class's images are listed together, in order.
            num_inference_steps: Unmasking steps (MaskGIT's 8-12).
            temperature: Scale of every mixture component's standard deviation when a token is sampled (1: the
                mixture itself; 0: the mean of a component drawn by its weight).
            guidance_scale: Only 1 (no guidance): classifier-free guidance of a mixture (GIVT's distribution-based
                guidance) is not built; other values are refused.
            generator: A CPU ``torch.Generator`` for the reveal order and the token samples (reproducibility).
            output_type: ``"pil"``, ``"np"`` (``(B, H, W, 3)`` floats in [0, 1]) or ``"pt"`` (``(B, 3, H, W)``).
            return_dict: Return an :class:`ImagePipelineOutput` rather than a tuple.
            concept_values: ``full``-conditioning transformers only: continuous values ``(num_prompts, D)`` or
                ``(num_prompts * num_images_per_prompt, D)``; ``None`` uses the canonical class values.
            quantize: Snap the latents to a VQ tokenizer's codebook before decoding (ignored with a KL tokenizer).
        """
        # 1. Check inputs
        self.check_inputs(output_type, num_inference_steps, temperature)
        device = self._execution_device

        # 2. Encode the concepts
        inputs = prepare_concept_inputs(
            self.transformer, concepts, num_images_per_prompt, guidance_scale, concept_values, device=device
        )
        if inputs.do_classifier_free_guidance:
            raise ValueError(f"guidance_scale {guidance_scale}: classifier-free guidance of {type(self).__name__}'s "
                             "token distributions is not built; sample with guidance_scale=1")

        # 3. Prepare the tokens: a (B, L, C) sequence of latents, every one masked
        config = self.transformer.config
        batch_size, num_tokens, channels = inputs.batch_size, config.grid_size**2, config.latent_channels
        tokens = torch.zeros(batch_size, num_tokens, channels, device=device, dtype=self.transformer.dtype)
        masked = torch.ones(batch_size, num_tokens, dtype=torch.bool, device=device)

        # 4. Prepare the unmasking schedule
        self.scheduler.set_timesteps(num_inference_steps, device=device)

        # 5. Unmasking loop
        num_masked = num_tokens
        for step in self.progress_bar(range(num_inference_steps)):
            # predict a Gaussian mixture for every token from the revealed ones
            latents = tokens.transpose(1, 2).reshape(batch_size, channels, config.grid_size, -1)
            output = self.transformer(latents, masked, **inputs.model_kwargs)

            # pick as many masked tokens as the schedule reveals now, in a random order
            remaining = self.scheduler.num_masked_after(step, num_tokens, num_masked)
            scores = torch.rand(batch_size, num_tokens, generator=generator).to(device).masked_fill(~masked, -1.0)
            reveal = torch.zeros_like(masked).scatter_(1, scores.topk(num_masked - remaining, dim=1).indices, True)

            # draw their latents from their mixtures
            sampled = mixture_sample(output.logits[reveal], output.means[reveal], output.log_scales[reveal],
                                     temperature, generator)
            tokens[reveal] = sampled.to(tokens.dtype)
            masked &= ~reveal
            num_masked = remaining

        # 6. Decode: the token sequence as a standardized latent grid, through the tokenizer
        latents = tokens.transpose(1, 2).reshape(batch_size, channels, config.grid_size, config.grid_size)
        image = decode_standardized_latents(self.transformer, self.vqvae, self.vae, latents, quantize)

        # 7. Post-process: [-1, 1] -> output_type
        image = self.image_processor.postprocess(image.float(), output_type=output_type)

        # Offload all models
        self.maybe_free_model_hooks()

        if not return_dict:
            return (image,)
        return ImagePipelineOutput(images=image)
