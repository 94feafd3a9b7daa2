"""A diffusion transformer over a tokenizer's continuous latents (an image's grid, or a clip's grids, one per frame),
conditioned on a concept tuple (Paper B's DiT).

Paper B (Farid et al. 2025) compares a categorical objective (MaskGIT: cross-entropy over VQ indices) with a
continuous one (DiT: diffusion over the token vectors) on the same tokens. To make the objective the only difference,
this model *is* the MaskGIT backbone run continuously: the same pre-norm transformer blocks
(:func:`~compgen.models.transformer_block.transformer_blocks`), the same concept tokens prepended to the image tokens
(:class:`~compgen.models.concept_embedding.ConceptEmbedding`, same ``full`` / ``quantized`` / dropout semantics), and
one more prepended token for the diffusion time. Image tokens are the tokenizer's latent vectors before quantization
(a linear map in, a linear map out to the noise or velocity). Time and condition as tokens is U-ViT's design (Bao et
al. 2023), which matches adaLN-Zero DiTs in image quality; here it keeps the conditioning pathway identical to
MaskGIT's, so a difference in compositional generalization cannot come from how concepts enter the network. A clip
(``num_frames > 1``) is modelled as MaskGIT's clips are: its tokens are its frames' latent grids, frame after frame,
each frame encoded alone by the image tokenizer (a frame tokenizer), under one position embedding over space and time.
"""

from __future__ import annotations

import torch
from diffusers.configuration_utils import ConfigMixin, register_to_config
from diffusers.models.embeddings import TimestepEmbedding
from diffusers.models.modeling_utils import ModelMixin
from diffusers.models.unets.unet_2d import UNet2DOutput
from torch import nn

from .concept_embedding import ConceptConditionedMixin
from .config_bounds import check_config_bounds
from .space_time_positions import SpaceTimePositionsMixin
from .standardized_latents import StandardizedLatentsMixin, check_latent_statistics
from .timestep_embedding import SinusoidalTimesteps, broadcast_timesteps
from .transformer_block import LegacyBlockWeightsMixin, TokenAttentionMixin, transformer_blocks


class TupleConditionedDiT(
    LegacyBlockWeightsMixin, StandardizedLatentsMixin, ConceptConditionedMixin, SpaceTimePositionsMixin,
    TokenAttentionMixin, ModelMixin, ConfigMixin,
):
    r"""Predicts the noise (or velocity) in a grid of continuous latents ``(B, C, g, g)`` (a clip's: ``(B, C, T, g,
    g)``, diffusers' video latent layout) given a concept tuple.

    Args:
        concept_space: ``{variable: [value names]}`` or ``[[variable, values], ...]`` (stored as the ordered list).
        latent_channels: Channels ``C`` of the latents (a VQ tokenizer's ``vq_embed_dim``, a KL one's
            ``latent_channels``).
        grid_size: Side ``g`` of the latent grid (7 for 28 px images with downsampling 4).
        hidden_size, num_layers, num_heads, mlp_ratio, dropout: The transformer, as MaskGIT's.
        conditioning: ``"quantized"`` or ``"full"`` (as every compgen model).
        continuous_concepts: Canonical value table per continuous variable (``full`` mode).
        concept_dropout: Training probability of replacing a concept by its learned null token; > 0 enables
            classifier-free guidance.
        latent_mean: Per-channel mean of the training latents; subtracted before diffusion (pipelines add it back).
        latent_std: Per-channel standard deviation of the training latents; latents are divided by it.
        position_embedding_std: Standard deviation of the learned position embedding at initialisation (truncated
            to [-2, 2]). The default 0.02 is ViT's and MaskGIT's; at that scale positions differ by a small fraction
            of an image token's norm, so at high noise the network can hardly tell the tokens apart until the
            embedding grows. 1.0, the image tokens' scale, sets positions apart from the start and speeds up learning
            the training classes (evidence: ``results/dit-diagnosis/NOTES.md``).
        num_frames: Frames ``T`` of a clip (1: images). A clip's tokens are its frames' latent grids, frame after frame,
            each frame encoded alone by the image tokenizer (a frame tokenizer); the position embedding is learned over
            every space-time position, so attention spans space and time alike. The sample is then ``(B, C, T, g,
            g)`` (:attr:`latent_shape`).
        position_embedding_type: ``"joint"`` (a learned vector per space-time position) or, for clips,
            ``"factorized"`` (a frame's grid positions shared by every frame plus a learned vector per frame;
            :mod:`compgen.models.space_time_positions`).
    """

    _supports_gradient_checkpointing = True

    @register_to_config
    def __init__(
        self,
        concept_space: dict[str, list[str]] | list[tuple[str, list[str]]],
        latent_channels: int = 16,
        grid_size: int = 7,
        hidden_size: int = 128,
        num_layers: int = 4,
        num_heads: int = 4,
        mlp_ratio: float = 4.0,
        dropout: float = 0.0,
        conditioning: str = "quantized",
        continuous_concepts: dict[str, list[list[float]]] | None = None,
        concept_dropout: float = 0.0,
        latent_mean: list[float] | None = None,
        latent_std: list[float] | None = None,
        position_embedding_std: float = 0.02,
        num_frames: int = 1,
        position_embedding_type: str = "joint",
    ) -> None:
        check_config_bounds(type(self).__name__, locals())
        super().__init__()
        space = self._register_concepts(concept_space, conditioning, continuous_concepts, concept_dropout)
        if latent_channels < 1 or grid_size < 1:
            raise ValueError("latent_channels and grid_size must be at least 1")
        self.check_options(hidden_size=hidden_size, num_heads=num_heads, num_layers=num_layers, dropout=dropout,
                           position_embedding_std=position_embedding_std)
        check_latent_statistics(latent_channels, latent_mean, latent_std)
        if isinstance(num_frames, bool) or not isinstance(num_frames, int) or num_frames < 1:
            raise ValueError(f"num_frames must be an integer of at least 1 (1: images), got {num_frames!r}")

        self.num_tokens = num_frames * grid_size * grid_size
        self.num_prefix = space.num_variables + 1  # concept tokens, then the time token
        self.input_projection = nn.Linear(latent_channels, hidden_size)
        self._init_positions(self.num_prefix, grid_size, num_frames, hidden_size, position_embedding_std,
                             position_embedding_type)
        self.time_proj = SinusoidalTimesteps(hidden_size, flip_sin_to_cos=True, downscale_freq_shift=0)
        self.time_embedding = TimestepEmbedding(hidden_size, hidden_size, act_fn="gelu")
        self.concept_embedding = self._concept_tokens(space, hidden_size)
        self.blocks = transformer_blocks(hidden_size, num_layers, num_heads, mlp_ratio, dropout)
        self.gradient_checkpointing = False  # diffusers' enable_gradient_checkpointing() sets it
        self.norm_out = nn.LayerNorm(hidden_size)
        self.output_projection = nn.Linear(hidden_size, latent_channels)
        nn.init.zeros_(self.output_projection.weight)  # start by predicting zero (DiT's zero-initialised output)
        nn.init.zeros_(self.output_projection.bias)

    @property
    def latent_shape(self) -> tuple[int, ...]:
        """The latent layout of one sample: ``(C, g, g)`` for images, ``(C, T, g, g)`` for clips."""
        config = self.config
        grid = (config.grid_size, config.grid_size)
        frames = () if config.num_frames == 1 else (config.num_frames,)
        return (config.latent_channels, *frames, *grid)

    def _latent_statistics(self, latents: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The per-channel statistics, broadcast over the frames too for clip latents ``(B, C, T, g, g)``."""
        mean, std = super()._latent_statistics(latents)
        shape = (1, -1) + (1,) * (latents.ndim - 2)
        return mean.view(shape), std.view(shape)

    def forward(
        self,
        sample: torch.Tensor,
        timestep: torch.Tensor | float | int,
        concepts: torch.LongTensor,
        concept_values: torch.Tensor | None = None,
        drop_mask: torch.BoolTensor | None = None,
        return_dict: bool = True,
    ) -> UNet2DOutput | tuple[torch.Tensor]:
        r"""The predicted noise (or velocity, per the scheduler's ``prediction_type``) of ``sample``.

        Args:
            sample: Noisy standardized latents ``(B, C, g, g)``, or for clips ``(B, C, T, g, g)``
                (:attr:`latent_shape`).
            timestep: Diffusion step, a number or a ``(B,)`` / scalar tensor.
            concepts: ``(B, V)`` class index per concept variable.
            concept_values: ``full`` mode: per-image continuous values ``(B, D)``; ``None`` uses the class values.
            drop_mask: ``(B, V)`` bool, ``True`` replaces a concept by its null token (concept dropout, guidance).
            return_dict: Return a :class:`~diffusers.models.unets.unet_2d.UNet2DOutput` rather than a tuple.
        """
        if tuple(sample.shape[1:]) != self.latent_shape:
            raise ValueError(f"sample must be (B, {', '.join(map(str, self.latent_shape))}) latents, got "
                             f"{tuple(sample.shape)}")
        batch_size = sample.shape[0]
        if concepts.shape[:1] != (batch_size,):
            raise ValueError(f"concepts has batch size {concepts.shape[0]} but sample has {batch_size}")
        drop_mask = self.training_drop_mask(concepts, drop_mask)

        timesteps = broadcast_timesteps(timestep, batch_size, sample.device)
        dtype = self.position_embedding.dtype  # the compute dtype, also under layerwise casting (fp8 storage)
        time_token = self.time_embedding(self.time_proj(timesteps).to(dtype))[:, None]
        concept_tokens = self.concept_embedding(concepts, concept_values, drop_mask).to(dtype)
        image_tokens = self.input_projection(sample.flatten(2).transpose(1, 2).to(dtype))
        hidden = torch.cat([concept_tokens, time_token, image_tokens], dim=1) + self.positions()
        for block in self.blocks:
            if torch.is_grad_enabled() and self.gradient_checkpointing:
                hidden = self._gradient_checkpointing_func(block, hidden)
            else:
                hidden = block(hidden)
        out = self.output_projection(self.norm_out(hidden[:, self.num_prefix :]))
        out = out.transpose(1, 2).reshape(sample.shape)
        return UNet2DOutput(sample=out) if return_dict else (out,)
