"""Sampling images of concept classes from a :class:`~compgen.models.mar_transformer.MARTransformer`: iterative
unmasking, each revealed token drawn by the diffusion head under a diffusers scheduler, decoded by the tokenizer."""

from __future__ import annotations

import torch
from diffusers import AutoencoderKL, VQModel
from diffusers.pipelines.pipeline_utils import ImagePipelineOutput
from diffusers.schedulers.scheduling_utils import SchedulerMixin

from ..models.mar_transformer import MARTransformer
from ..schedulers.scheduling_maskgit import MaskGITScheduler
from .concept_inputs import ConceptPrompts
from .tuple_dit import check_unclipped_scheduler
from .unmasking import MaskedLatentPipeline


class MARPipeline(MaskedLatentPipeline):
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

    def __init__(self, vqvae: VQModel | None, transformer: MARTransformer, scheduler: MaskGITScheduler,
                 head_scheduler: SchedulerMixin, vae: AutoencoderKL | None = None) -> None:
        super().__init__()
        check_unclipped_scheduler(head_scheduler)
        self._register_latent_modules(vqvae, transformer, scheduler, vae, head_scheduler=head_scheduler)

    @torch.no_grad()
    def __call__(
        self,
        concepts: ConceptPrompts,
        num_images_per_prompt: int = 1,
        num_inference_steps: int = 12,
        num_head_steps: int = 25,
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
            num_inference_steps: Unmasking steps.
            num_head_steps: Denoising steps of the diffusion head per revealed token.
            temperature: Scale of the head's initial noise (1: the learned distribution).
            guidance_scale: Only 1: classifier-free guidance of the head is not built; other values are refused.
            generator: A CPU ``torch.Generator`` for the reveal order and the head's noise (reproducibility).
            output_type: ``"pil"``, ``"np"`` (``(B, H, W, 3)`` floats in [0, 1]) or ``"pt"`` (``(B, 3, H, W)``).
            return_dict: Return an :class:`ImagePipelineOutput` rather than a tuple.
            concept_values: ``full``-conditioning transformers only: continuous values per prompt or per image.
            quantize: Snap the latents to a VQ tokenizer's codebook before decoding (ignored with a KL tokenizer).
        """
        check_unclipped_scheduler(self.head_scheduler)  # also a scheduler swapped in after construction
        if num_head_steps < 1:
            raise ValueError(f"num_head_steps must be a positive integer, got {num_head_steps}")

        def sampler(device: torch.device):
            def sample_tokens(output, reveal: torch.BoolTensor) -> torch.Tensor:
                conditions = output.conditions[reveal]
                shape = (len(conditions), self.transformer.config.latent_channels)
                sample = temperature * torch.randn(shape, generator=generator).to(device, conditions.dtype)
                self.head_scheduler.set_timesteps(num_head_steps, device=device)
                for t in self.head_scheduler.timesteps:
                    prediction = self.transformer.denoise(sample, t, conditions)
                    sample = self.head_scheduler.step(prediction, t, sample, generator=generator).prev_sample
                return sample

            return sample_tokens

        return self.sample(sampler, concepts, num_images_per_prompt, num_inference_steps, temperature, guidance_scale,
                           generator, output_type, return_dict, concept_values, quantize)
