"""A diffusers :class:`~diffusers.AutoencoderKL` sized for the 28x28 / 32x32 shapes images: the continuous tokenizer.

Paper B (Farid et al. 2025) trains its DiT on a VQ or a KL tokenizer and reports similar compositional generalization
with both (more abrupt with VQ). This KL tokenizer mirrors :func:`~compgen.models.vq_tokenizer.build_vq_tokenizer`
(downsampling 4: a 7x7 grid for 28 px, 8x8 for 32 px) with a diagonal-Gaussian posterior instead of a codebook.
"""

from __future__ import annotations

import torch
from diffusers import AutoencoderKL

from .vq_tokenizer import tokenizer_architecture


def build_kl_tokenizer(
    sample_size: int = 28,
    block_out_channels: tuple[int, ...] = (32, 64, 64),
    latent_channels: int = 16,
    layers_per_block: int = 1,
    norm_num_groups: int = 8,
    mid_block_add_attention: bool = False,
) -> AutoencoderKL:
    """An ``AutoencoderKL`` that downsamples by ``2 ** (len(block_out_channels) - 1)`` (4 by default).

    The encoder outputs ``2 * latent_channels`` maps (mean and log-variance, diffusers' ``double_z``); the latents a
    DiT diffuses are the ``latent_channels`` posterior means (:func:`encode_kl_latents`). ``scaling_factor`` is 1:
    the DiT standardizes the latents per channel itself. The mid-block attention is off by default, as for the VQ
    tokenizer (global context hurts reconstructing compositions the tokenizer never saw).
    """
    architecture = tokenizer_architecture(sample_size, block_out_channels, layers_per_block, norm_num_groups,
                                          mid_block_add_attention)
    if latent_channels < 1:
        raise ValueError(f"latent_channels must be at least 1, got {latent_channels}")
    return AutoencoderKL(**architecture, latent_channels=latent_channels, scaling_factor=1.0, force_upcast=False)


@torch.no_grad()
def encode_kl_latents(vae: AutoencoderKL, images: torch.Tensor) -> torch.Tensor:
    """Posterior means ``(B, C, h, w)`` of images ``(B, 3, H, W)`` in [-1, 1]: deterministic, no sampling."""
    return vae.encode(images.to(device=vae.device, dtype=vae.dtype)).latent_dist.mode()


def decode_kl_latents(vae: AutoencoderKL, latents: torch.Tensor) -> torch.Tensor:
    """Images ``(B, 3, H, W)`` in about [-1, 1] from latents ``(B, C, h, w)``."""
    return vae.decode(latents.to(vae.dtype)).sample
