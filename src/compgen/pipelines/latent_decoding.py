"""What the pipelines over a tokenizer's standardized latents (the DiT's, GIVT's, MAR's) share: the check of their
one tokenizer, decoding their latents through it, and the refusal of a scheduler that clips them."""

from __future__ import annotations

import torch
from diffusers import AutoencoderKL, VQModel
from diffusers.schedulers.scheduling_utils import SchedulerMixin


def check_unclipped_scheduler(scheduler: SchedulerMixin) -> None:
    """Refuse a scheduler that clips (``clip_sample``) or thresholds (``thresholding``, dynamic thresholding) its
    clean-sample estimates: the DiT's standardized latents range beyond [-1, 1], and bounding them at every step gives
    wrong images without an error."""
    for option in ("clip_sample", "thresholding"):
        if getattr(scheduler.config, option, False):
            raise ValueError(
                f"{type(scheduler).__name__} has {option}=True, but the DiT diffuses standardized latents that are "
                f"not bounded by [-1, 1]; bounding them corrupts every sample. Pass a scheduler with {option}=False, "
                f"e.g. scheduler=DDPMScheduler.from_pretrained(path, subfolder='scheduler', {option}=False)."
            )


def check_tokenizer(vqvae: VQModel | None, vae: AutoencoderKL | None, transformer) -> None:
    """Exactly one tokenizer, whose latents have the transformer's channel count (the DiT's and GIVT's pipelines)."""
    if (vqvae is None) == (vae is None):
        raise ValueError("the pipeline needs exactly one tokenizer to decode its latents: vqvae (a VQModel) or vae (an "
                         f"AutoencoderKL), got {'both' if vae is not None else 'neither'} (set pipe.vqvae or pipe.vae, "
                         "or load the pipeline with its tokenizer)")
    tokenizer = vqvae if vqvae is not None else vae
    latent_channels = getattr(tokenizer.config, "vq_embed_dim", None) or tokenizer.config.latent_channels
    if latent_channels != transformer.config.latent_channels:
        raise ValueError(f"the tokenizer's latents have {latent_channels} channels but the transformer expects "
                         f"{transformer.config.latent_channels}")


def decode_standardized_latents(transformer, vqvae: VQModel | None, vae: AutoencoderKL | None, latents: torch.Tensor,
                                quantize: bool = True) -> torch.Tensor:
    """Images in [-1, 1] from a transformer's standardized latents: de-standardized by ``transformer``, then decoded by
    the KL tokenizer ``vae`` as they are, or by the VQ tokenizer ``vqvae`` after snapping them to its codebook
    (``quantize=True``, the decoder's training input)."""
    if vae is not None:
        return vae.decode(transformer.denormalize_latents(latents).to(vae.dtype)).sample
    latents = transformer.denormalize_latents(latents).to(vqvae.dtype)
    if quantize:
        latents = snap_to_codebook(vqvae, latents)
    spatial = latents if vqvae.config.norm_type == "spatial" else None  # as VQModel.decode
    return vqvae.decoder(vqvae.post_quant_conv(latents), spatial)


def snap_to_codebook(vqvae: VQModel, latents: torch.Tensor) -> torch.Tensor:
    """The nearest codebook vectors of ``latents`` ``(B, C, H, W)``, as ``vqvae.quantize`` picks them, with the
    distances measured in fp32 whatever the tokenizer computes in: ``torch.cdist`` has no bf16 kernel on a CPU, and
    under diffusers' layerwise casting (``enable_layerwise_casting``) the tokenizer computes in bf16."""
    codebook = vqvae.quantize.embedding.weight
    batch, channels, height, width = latents.shape
    flat = latents.permute(0, 2, 3, 1).reshape(-1, channels).float()
    indices = torch.cdist(flat, codebook.float()).argmin(dim=1)
    snapped = codebook[indices].to(latents.dtype).reshape(batch, height, width, channels)
    return snapped.permute(0, 3, 1, 2).contiguous()
