"""Sampling images of concept classes from a :class:`~compgen.models.mar_transformer.MARTransformer`: iterative
unmasking, each revealed token drawn by the diffusion head under a diffusers scheduler, decoded by the tokenizer."""

from __future__ import annotations

import torch
from diffusers import AutoencoderKL, VQModel
from diffusers.image_processor import VaeImageProcessor
from diffusers.pipelines.pipeline_utils import DiffusionPipeline, ImagePipelineOutput
from diffusers.schedulers.scheduling_utils import SchedulerMixin

from ..models.mar_transformer import MARTransformer
from ..schedulers.scheduling_maskgit import MaskGITScheduler
from .concept_inputs import ConceptPrompts, check_sampling_options, prepare_concept_inputs
from .tuple_dit import check_tokenizer, check_unclipped_scheduler, decode_standardized_latents


class MARPipeline(DiffusionPipeline):
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
        check_tokenizer(vqvae, vae, transformer)
        self.register_modules(vqvae=vqvae, transformer=transformer, scheduler=scheduler,
                              head_scheduler=head_scheduler, vae=vae)
        self.image_processor = VaeImageProcessor(do_resize=False)

    def check_inputs(self, output_type: str, num_inference_steps: int | None, num_head_steps: int,
                     temperature: float) -> None:
        """Refuse a clipping head scheduler, step counts below 1, an unknown output type and a negative temperature."""
        check_unclipped_scheduler(self.head_scheduler)
        if num_head_steps < 1:
            raise ValueError(f"num_head_steps must be a positive integer, got {num_head_steps}")
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
        # 1. Check inputs
        self.check_inputs(output_type, num_inference_steps, num_head_steps, temperature)
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
            # the transformer's state for every token, from the revealed ones
            latents = tokens.transpose(1, 2).reshape(batch_size, channels, config.grid_size, -1)
            output = self.transformer(latents, masked, **inputs.model_kwargs)

            # pick as many masked tokens as the schedule reveals now, in a random order
            remaining = self.scheduler.num_masked_after(step, num_tokens, num_masked)
            scores = torch.rand(batch_size, num_tokens, generator=generator).to(device).masked_fill(~masked, -1.0)
            reveal = torch.zeros_like(masked).scatter_(1, scores.topk(num_masked - remaining, dim=1).indices, True)

            # denoise their latents from noise with the diffusion head, conditioned on each token's state
            conditions = output.conditions[reveal]
            shape = (len(conditions), channels)
            sample = temperature * torch.randn(shape, generator=generator).to(device, conditions.dtype)
            self.head_scheduler.set_timesteps(num_head_steps, device=device)
            for t in self.head_scheduler.timesteps:
                noise_pred = self.transformer.denoise(sample, t, conditions)
                sample = self.head_scheduler.step(noise_pred, t, sample, generator=generator).prev_sample
            tokens[reveal] = sample.to(tokens.dtype)
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
