"""The decoding loop of the masked models over continuous tokens (GIVT, MAR): every token starts masked, and at each
step the tokens MaskGIT's schedule reveals are drawn from the model's distribution for them. Continuous tokens carry no
confidence to rank them by, so the tokens to reveal are picked in a random order (MAR's choice, Li et al. 2024)."""

from __future__ import annotations

from collections.abc import Callable, Iterable

import torch
from diffusers.image_processor import VaeImageProcessor
from diffusers.pipelines.pipeline_utils import DiffusionPipeline, ImagePipelineOutput

from ..schedulers.scheduling_maskgit import MaskGITScheduler
from .concept_inputs import ConceptPrompts, prepare_concept_inputs
from .denoising import check_sampling_options
from .tuple_dit import check_tokenizer, decode_standardized_latents


def unmask_latents(
    transformer,
    scheduler: MaskGITScheduler,
    model_kwargs: dict,
    batch_size: int,
    num_inference_steps: int,
    sample_tokens: Callable[[object, torch.BoolTensor], torch.Tensor],
    generator: torch.Generator | None = None,
    progress: Callable[[Iterable], Iterable] = iter,
) -> torch.Tensor:
    """Standardized latents ``(B, C, g, g)`` decoded in ``num_inference_steps`` steps.

    ``sample_tokens(output, reveal)`` gets the transformer's output for the current grid and the ``(B, L)`` bool mask
    of the tokens to reveal now, and returns their latents ``(R, C)`` in ``reveal``'s row-major order."""
    config = transformer.config
    device = transformer.device
    length = config.grid_size**2
    tokens = torch.zeros(batch_size, length, config.latent_channels, device=device, dtype=transformer.dtype)
    masked = torch.ones(batch_size, length, dtype=torch.bool, device=device)
    scheduler.set_timesteps(num_inference_steps, device=device)
    num_masked = length
    for step in progress(range(num_inference_steps)):
        latents = tokens.transpose(1, 2).reshape(batch_size, config.latent_channels, config.grid_size, -1)
        output = transformer(latents, masked, **model_kwargs)
        remaining = scheduler.num_masked_after(step, length, num_masked)
        scores = torch.rand(batch_size, length, generator=generator).to(device).masked_fill(~masked, -1.0)
        reveal = torch.zeros_like(masked).scatter_(1, scores.topk(num_masked - remaining, dim=1).indices, True)
        tokens[reveal] = sample_tokens(output, reveal).to(tokens.dtype)
        masked &= ~reveal
        num_masked = remaining
    return tokens.transpose(1, 2).reshape(batch_size, config.latent_channels, config.grid_size, config.grid_size)


class MaskedLatentPipeline(DiffusionPipeline):
    """What GIVT's and MAR's pipelines share around their token sampler: the checks, the concept inputs, the unmasking
    loop, the decoding through the tokenizer (``vqvae`` or ``vae``) and the output. Subclasses register their modules
    and call :meth:`sample` from ``__call__``."""

    def _register_latent_modules(self, vqvae, transformer, scheduler, vae, **more) -> None:
        """Check the tokenizer against the transformer, register the modules, and set up the image post-processing."""
        check_tokenizer(vqvae, vae, transformer)
        self.register_modules(vqvae=vqvae, transformer=transformer, scheduler=scheduler, **more, vae=vae)
        self.image_processor = VaeImageProcessor(do_resize=False)

    def sample(
        self,
        sampler: Callable[[torch.device], Callable[[object, torch.BoolTensor], torch.Tensor]],
        concepts: ConceptPrompts,
        num_images_per_prompt: int,
        num_inference_steps: int,
        temperature: float,
        guidance_scale: float,
        generator: torch.Generator | None,
        output_type: str,
        return_dict: bool,
        concept_values: torch.Tensor | None,
        quantize: bool,
    ) -> ImagePipelineOutput | tuple:
        """Images of ``concepts``; ``sampler(device)`` gives the ``sample_tokens`` function of
        :func:`unmask_latents`."""
        check_sampling_options(output_type, num_inference_steps)
        if num_inference_steps is None:
            raise ValueError("num_inference_steps must be a positive integer (masked decoding has no training steps)")
        if temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {temperature}")
        device = self._execution_device
        inputs = prepare_concept_inputs(self.transformer, concepts, num_images_per_prompt, guidance_scale,
                                        concept_values, device=device)
        if inputs.do_classifier_free_guidance:
            raise ValueError(f"guidance_scale {guidance_scale}: classifier-free guidance of {type(self).__name__}'s "
                             "token distributions is not built; sample with guidance_scale=1")
        latents = unmask_latents(self.transformer, self.scheduler, inputs.model_kwargs, inputs.batch_size,
                                 num_inference_steps, sampler(device), generator, self.progress_bar)
        image = decode_standardized_latents(self.transformer, self.vqvae, self.vae, latents, quantize)
        image = self.image_processor.postprocess(image.float(), output_type=output_type)
        self.maybe_free_model_hooks()
        if not return_dict:
            return (image,)
        return ImagePipelineOutput(images=image)
