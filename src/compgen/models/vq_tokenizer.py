"""A diffusers :class:`~diffusers.VQModel` sized for the 28x28 / 32x32 shapes images, and token helpers.

Downsampling 4 (three encoder stages, two of them halving) gives a 7x7 grid for 28 px and 8x8 for 32 px, with a
256-entry codebook, the tokenizer of Paper B's Shapes2D setting (Farid et al. 2025).
"""

from __future__ import annotations

import torch
from diffusers import VQModel


def build_vq_tokenizer(
    sample_size: int = 28,
    block_out_channels: tuple[int, ...] = (32, 64, 64),
    num_vq_embeddings: int = 256,
    vq_embed_dim: int = 32,
    layers_per_block: int = 1,
    norm_num_groups: int = 8,
    mid_block_add_attention: bool = False,
) -> VQModel:
    """A ``VQModel`` that downsamples by ``2 ** (len(block_out_channels) - 1)`` (4 by default).

    ``vq_embed_dim`` stays small (32 rather than the fork's 128): nearest-neighbour quantization in a low
    dimension uses more of the codebook when training is short. Indices round-trip through
    :func:`encode_to_indices` / :func:`decode_indices` (``lookup_from_codebook=True``).
    ``mid_block_add_attention`` is off by default: global self-attention lets the codes of a patch depend on the
    whole image, which hurts reconstructing compositions the tokenizer never saw (see :class:`VQTask`).
    """
    return VQModel(
        **tokenizer_architecture(sample_size, block_out_channels, layers_per_block, norm_num_groups,
                                 mid_block_add_attention),
        latent_channels=vq_embed_dim,
        vq_embed_dim=vq_embed_dim,
        num_vq_embeddings=num_vq_embeddings,
        lookup_from_codebook=True,
    )


def tokenizer_architecture(sample_size: int, block_out_channels: tuple[int, ...], layers_per_block: int,
                           norm_num_groups: int, mid_block_add_attention: bool) -> dict:
    """The encoder-decoder of every compgen tokenizer (VQ and KL: diffusers' ``Encoder`` / ``Decoder`` blocks), as
    constructor arguments, after checking that the sizes fit (a ``ValueError`` names the one that does not)."""
    downscale = 2 ** (len(block_out_channels) - 1)
    if sample_size % downscale:
        raise ValueError(f"sample_size {sample_size} must be divisible by the downsampling factor {downscale}")
    if any(channels % norm_num_groups for channels in block_out_channels):
        raise ValueError(f"every block_out_channels entry {block_out_channels} must divide by {norm_num_groups}")
    return dict(in_channels=3, out_channels=3, down_block_types=("DownEncoderBlock2D",) * len(block_out_channels),
                up_block_types=("UpDecoderBlock2D",) * len(block_out_channels),
                block_out_channels=tuple(block_out_channels), layers_per_block=layers_per_block,
                norm_num_groups=norm_num_groups, sample_size=sample_size,
                mid_block_add_attention=mid_block_add_attention)


def token_grid_size(vqvae: VQModel) -> int:
    """Side of the token grid the tokenizer produces for its ``sample_size`` images."""
    return vqvae.config.sample_size // 2 ** (len(vqvae.config.block_out_channels) - 1)


@torch.no_grad()
def encode_to_indices(vqvae: VQModel, images: torch.Tensor) -> torch.LongTensor:
    """Codebook indices ``(B, h, w)`` of images ``(B, 3, H, W)`` in [-1, 1]."""
    latents = vqvae.encode(images.to(vqvae.dtype)).latents
    _, _, (_, _, indices) = vqvae.quantize(latents)
    return indices.reshape(latents.shape[0], latents.shape[2], latents.shape[3])


def decode_indices(vqvae: VQModel, indices: torch.LongTensor) -> torch.Tensor:
    """Images ``(B, 3, H, W)`` in about [-1, 1] from codebook indices ``(B, h, w)``."""
    batch, height, width = indices.shape
    shape = (batch, height, width, vqvae.config.vq_embed_dim or vqvae.config.latent_channels)
    return vqvae.decode(indices.reshape(-1), force_not_quantize=True, shape=shape).sample
