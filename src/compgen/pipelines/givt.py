"""Sampling images of concept classes from a :class:`~compgen.models.givt_transformer.GIVTTransformer` by iterative
unmasking, decoded by its tokenizer (a VQ or a KL tokenizer)."""

from __future__ import annotations

import torch
from diffusers import AutoencoderKL, VQModel
from diffusers.pipelines.pipeline_utils import ImagePipelineOutput

from ..models.gaussian_mixture import mixture_sample
from ..models.givt_transformer import GIVTTransformer
from ..schedulers.scheduling_maskgit import MaskGITScheduler
from .concept_inputs import ConceptPrompts
from .unmasking import MaskedLatentPipeline


class GIVTPipeline(MaskedLatentPipeline):
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
        self._register_latent_modules(vqvae, transformer, scheduler, vae)

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
        def sampler(device: torch.device):
            def sample_tokens(output, reveal: torch.BoolTensor) -> torch.Tensor:
                return mixture_sample(output.logits[reveal], output.means[reveal], output.log_scales[reveal],
                                      temperature, generator)

            return sample_tokens

        return self.sample(sampler, concepts, num_images_per_prompt, num_inference_steps, temperature, guidance_scale,
                           generator, output_type, return_dict, concept_values, quantize)
