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
from .concept_inputs import ConceptPrompts, prepare_concept_inputs
from .denoising import check_sampling_options
from .tuple_dit import check_tokenizer, decode_standardized_latents
from .unmasking import unmask_latents


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
        check_sampling_options(output_type, num_inference_steps)
        if num_inference_steps is None:
            raise ValueError("num_inference_steps must be a positive integer (GIVT has no training steps to use)")
        if temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {temperature}")
        device = self._execution_device
        inputs = prepare_concept_inputs(self.transformer, concepts, num_images_per_prompt, guidance_scale,
                                        concept_values, device=device)
        if inputs.do_classifier_free_guidance:
            raise ValueError(f"guidance_scale {guidance_scale}: classifier-free guidance of a Gaussian mixture "
                             "(GIVT's distribution-based guidance) is not built; sample with guidance_scale=1")

        def sample_tokens(output, reveal: torch.BoolTensor) -> torch.Tensor:
            return mixture_sample(output.logits[reveal], output.means[reveal], output.log_scales[reveal], temperature,
                                  generator)

        latents = unmask_latents(self.transformer, self.scheduler, inputs.model_kwargs, inputs.batch_size,
                                 num_inference_steps, sample_tokens, generator, self.progress_bar)
        image = decode_standardized_latents(self.transformer, self.vqvae, self.vae, latents, quantize)
        image = self.image_processor.postprocess(image.float(), output_type=output_type)
        self.maybe_free_model_hooks()
        if not return_dict:
            return (image,)
        return ImagePipelineOutput(images=image)
