"""The backbone of the models between MaskGIT and the DiT on Paper B's ladder (Farid et al. 2025): GIVT and MAR keep
MaskGIT's masked transformer and concept tokens (:mod:`compgen.models.maskgit_transformer`) but take continuous
tokens, the tokenizer's standardized latents, instead of codebook indices."""

from __future__ import annotations

import torch
from diffusers.configuration_utils import ConfigMixin
from diffusers.models.modeling_utils import ModelMixin
from torch import nn

from .concept_embedding import ConceptConditionedMixin
from .standardized_latents import StandardizedLatentsMixin
from .transformer_block import LegacyBlockWeightsMixin, TokenAttentionMixin, transformer_blocks


class MaskedLatentTransformer(
    LegacyBlockWeightsMixin, StandardizedLatentsMixin, ConceptConditionedMixin,
    TokenAttentionMixin, ModelMixin, ConfigMixin,
):
    """The backbone GIVT and MAR share: MaskGIT's transformer over a grid of continuous latent tokens, where a masked
    token enters as one learned vector and a visible one as a linear map of its standardized latent, after the concept
    tokens. Subclasses register their config and add an output head on :meth:`encode`'s per-token states."""

    _supports_gradient_checkpointing = True

    def _build_backbone(self, space, latent_channels: int, grid_size: int, hidden_size: int, num_layers: int,
                        num_heads: int, mlp_ratio: float, dropout: float, position_embedding_std: float) -> None:
        self.num_tokens = grid_size * grid_size
        self.num_concepts = space.num_variables
        self.input_projection = nn.Linear(latent_channels, hidden_size)
        self.mask_embedding = nn.Parameter(torch.zeros(hidden_size))
        nn.init.trunc_normal_(self.mask_embedding, std=0.02)
        self.position_embedding = nn.Parameter(torch.zeros(1, self.num_concepts + self.num_tokens, hidden_size))
        nn.init.trunc_normal_(self.position_embedding, std=position_embedding_std)
        self.concept_embedding = self._concept_tokens(space, hidden_size)
        self.blocks = transformer_blocks(hidden_size, num_layers, num_heads, mlp_ratio, dropout)
        self.gradient_checkpointing = False  # diffusers' enable_gradient_checkpointing() sets it
        self.norm_out = nn.LayerNorm(hidden_size)

    def encode(self, latents: torch.Tensor, mask: torch.BoolTensor, concepts: torch.LongTensor,
               concept_values: torch.Tensor | None = None, drop_mask: torch.BoolTensor | None = None) -> torch.Tensor:
        """The final states ``(B, L, hidden)`` of the image tokens (normalized), checked inputs as :meth:`forward`'s."""
        batch, channels, grid = latents.shape[0], self.config.latent_channels, self.config.grid_size
        if latents.shape[1:] != (channels, grid, grid):
            raise ValueError(f"latents must be (B, {channels}, {grid}, {grid}), got {tuple(latents.shape)}")
        mask = mask.reshape(batch, -1) if mask.shape[:1] == (batch,) else mask
        if mask.shape != (batch, self.num_tokens) or mask.dtype != torch.bool:
            raise ValueError(f"mask must be a bool tensor (B, {self.num_tokens}) or (B, {grid}, {grid}) for B = "
                             f"{batch}, got {mask.dtype} {tuple(mask.shape)}")
        if concepts.shape[:1] != (batch,):
            raise ValueError(f"concepts has batch size {concepts.shape[0]} but latents has {batch}")
        drop_mask = self.training_drop_mask(concepts, drop_mask)
        concept_tokens = self.concept_embedding(concepts, concept_values, drop_mask)
        tokens = self.input_projection(latents.flatten(2).transpose(1, 2))
        tokens = torch.where(mask.unsqueeze(-1), self.mask_embedding.to(tokens.dtype), tokens)
        hidden = torch.cat([concept_tokens.to(tokens.dtype), tokens], dim=1) + self.position_embedding
        for block in self.blocks:
            if torch.is_grad_enabled() and self.gradient_checkpointing:
                hidden = self._gradient_checkpointing_func(block, hidden)
            else:
                hidden = block(hidden)
        return self.norm_out(hidden[:, self.num_concepts :])
