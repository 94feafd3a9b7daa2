"""MAR: MaskGIT's masked transformer over continuous tokens, whose per-token output conditions a small diffusion head.

Paper B's ladder (Farid et al. 2025) puts MAR (Li et al. 2024, "Autoregressive Image Generation without Vector
Quantization") between GIVT and the DiT: the transformer and masking are MaskGIT's and GIVT's
(:class:`~compgen.models.masked_latent_transformer.MaskedLatentTransformer`), but a token's distribution is no longer
a closed-form mixture: a small MLP (:class:`DiffusionHead`) denoises the token's latent conditioned on the
transformer's state for it, trained with the diffusion loss per masked token and sampled with a diffusers scheduler.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from diffusers.configuration_utils import register_to_config
from diffusers.models.embeddings import TimestepEmbedding
from diffusers.models.modeling_utils import ModelMixin  # noqa: F401 (diffusers' loader looks for it in this module)
from diffusers.utils import BaseOutput
from torch import nn

from .config_bounds import check_config_bounds
from .masked_latent_transformer import MaskedLatentTransformer
from .standardized_latents import check_latent_statistics
from .timestep_embedding import SinusoidalTimesteps, broadcast_timesteps


class _AdaLNBlock(nn.Module):
    """A residual MLP block whose normalisation is shifted, scaled and gated by the condition (adaLN-Zero)."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(width, elementwise_affine=False)
        self.mlp = nn.Sequential(nn.Linear(width, width), nn.SiLU(), nn.Linear(width, width))
        self.modulation = nn.Linear(width, 3 * width)
        nn.init.zeros_(self.modulation.weight)  # every block starts as the identity
        nn.init.zeros_(self.modulation.bias)

    def forward(self, hidden: torch.Tensor, condition: torch.Tensor) -> torch.Tensor:
        shift, scale, gate = self.modulation(F.silu(condition)).chunk(3, dim=-1)
        return hidden + gate * self.mlp(self.norm(hidden) * (1 + scale) + shift)


class DiffusionHead(nn.Module):
    """MAR's per-token denoiser (Li et al. 2024, Sec. 3.3): the noisy latent ``(N, C)`` in, its noise (or whatever the
    scheduler's prediction type says) out, conditioned on a diffusion step and a condition vector ``(N, D)`` through
    adaptive layer norms; the output layer starts at zero.

    Args:
        latent_channels: ``C``.
        condition_size: ``D``, the transformer's width.
        width: The MLP's width.
        depth: Residual blocks.
    """

    def __init__(self, latent_channels: int, condition_size: int, width: int = 256, depth: int = 3) -> None:
        super().__init__()
        self.time_proj = SinusoidalTimesteps(width, flip_sin_to_cos=True, downscale_freq_shift=0)
        self.time_embedding = TimestepEmbedding(width, width, act_fn="silu")
        self.condition_projection = nn.Linear(condition_size, width)
        self.input_projection = nn.Linear(latent_channels, width)
        self.blocks = nn.ModuleList(_AdaLNBlock(width) for _ in range(depth))
        self.gradient_checkpointing = False  # diffusers' enable_gradient_checkpointing() sets it
        self.norm_out = nn.LayerNorm(width, elementwise_affine=False)
        self.modulation_out = nn.Linear(width, 2 * width)
        self.output_projection = nn.Linear(width, latent_channels)
        for layer in (self.modulation_out, self.output_projection):
            nn.init.zeros_(layer.weight)
            nn.init.zeros_(layer.bias)

    def forward(self, sample: torch.Tensor, timestep: torch.Tensor | float | int,
                condition: torch.Tensor) -> torch.Tensor:
        if sample.ndim != 2 or condition.ndim != 2 or sample.shape[0] != condition.shape[0]:
            raise ValueError(f"the diffusion head takes samples (N, C) and conditions (N, D) for the same N, got "
                             f"{tuple(sample.shape)} and {tuple(condition.shape)}")
        timesteps = broadcast_timesteps(timestep, sample.shape[0], sample.device)
        embedded = self.time_embedding(self.time_proj(timesteps).to(sample.dtype))
        condition = embedded + self.condition_projection(condition.to(sample.dtype))
        hidden = self.input_projection(sample)
        for block in self.blocks:
            if torch.is_grad_enabled() and self.gradient_checkpointing:
                hidden = self._gradient_checkpointing_func(block, hidden, condition)
            else:
                hidden = block(hidden, condition)
        shift, scale = self.modulation_out(F.silu(condition)).chunk(2, dim=-1)
        return self.output_projection(self.norm_out(hidden) * (1 + scale) + shift)


@dataclass
class MARTransformerOutput(BaseOutput):
    """``conditions`` ``(B, L, hidden_size)``: the transformer's state for every image token, what the diffusion head
    is conditioned on; ``prediction`` ``(N, C)``: the head's output for the noisy tokens a training step passed in
    (``None`` otherwise)."""

    conditions: torch.Tensor
    prediction: torch.Tensor | None = None


class MARTransformer(MaskedLatentTransformer):
    r"""MaskGIT's transformer over standardized continuous latents with a per-token diffusion head.

    Args:
        concept_space: ``{variable: [value names]}`` or ``[[variable, values], ...]`` (stored as the ordered list).
        latent_channels: Channels ``C`` of the latents (a VQ tokenizer's before quantization, a KL tokenizer's).
        grid_size: Side ``g`` of the latent grid.
        head_width, head_depth: The diffusion head's MLP (MAR uses 3 blocks).
        hidden_size, num_layers, num_heads, mlp_ratio, dropout: The transformer, as MaskGIT's.
        conditioning, continuous_concepts, concept_dropout: As every compgen model.
        latent_mean, latent_std: Per-channel statistics of the training latents (standardization).
        position_embedding_std: Initial scale of the position embedding (see GIVT's).
    """

    @register_to_config
    def __init__(
        self,
        concept_space: dict[str, list[str]] | list[tuple[str, list[str]]],
        latent_channels: int = 16,
        grid_size: int = 7,
        head_width: int = 256,
        head_depth: int = 3,
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
    ) -> None:
        check_config_bounds(type(self).__name__, locals())
        super().__init__()
        space = self._register_concepts(concept_space, conditioning, continuous_concepts, concept_dropout)
        if min(latent_channels, grid_size) < 1:
            raise ValueError("latent_channels and grid_size must be at least 1")
        self.check_options(hidden_size=hidden_size, num_heads=num_heads, num_layers=num_layers, dropout=dropout,
                           position_embedding_std=position_embedding_std, head_width=head_width, head_depth=head_depth)
        check_latent_statistics(latent_channels, latent_mean, latent_std)
        self._build_backbone(space, latent_channels, grid_size, hidden_size, num_layers, num_heads, mlp_ratio, dropout,
                             position_embedding_std)
        self.head = DiffusionHead(latent_channels, hidden_size, head_width, head_depth)

    @classmethod
    def check_options(cls, **options: Any) -> None:
        """The shared options (:meth:`ConceptConditionedMixin.check_options`) and MAR's own: the diffusion head's
        ``head_width`` and ``head_depth`` at least 1. ``__init__`` and the ``mar`` recipe both call this."""
        own = ("head_width", "head_depth")
        super().check_options(**{k: v for k, v in options.items() if k not in own})
        for name in own:
            if name in options and options[name] < 1:
                raise ValueError(f"{name} must be at least 1, got {options[name]}")

    def forward(
        self,
        latents: torch.Tensor,
        mask: torch.BoolTensor,
        concepts: torch.LongTensor,
        concept_values: torch.Tensor | None = None,
        drop_mask: torch.BoolTensor | None = None,
        noisy_tokens: torch.Tensor | None = None,
        timesteps: torch.Tensor | None = None,
        masked_positions: torch.LongTensor | None = None,
        return_dict: bool = True,
    ) -> MARTransformerOutput | tuple:
        r"""The condition of every image token for the diffusion head (arguments as
        :meth:`~compgen.models.givt_transformer.GIVTTransformer.forward`); with ``noisy_tokens`` ``(k * M, C)`` and
        their ``timesteps`` ``(k * M,)``, also the head's prediction for them, conditioned on the ``M`` masked tokens
        (row-major, ``mask`` order) repeated ``k`` times (MAR trains the head on several noise draws per token). A
        training step passes them here, so that one forward call holds the whole graph (as data-parallel training
        needs), with ``masked_positions``, the masked tokens' flat indices into ``B * L`` (an index gather, where the
        boolean mask would make an accelerator wait for the host to count them)."""
        conditions = self.encode(latents, mask, concepts, concept_values, drop_mask)
        prediction = None
        if noisy_tokens is not None:
            selected = (conditions[mask.reshape(conditions.shape[:2])] if masked_positions is None
                        else conditions.flatten(0, 1)[masked_positions])
            if timesteps is None or len(noisy_tokens) % max(len(selected), 1) or len(timesteps) != len(noisy_tokens):
                raise ValueError(f"noisy_tokens must hold k rows per masked token ({len(selected)}) with one timestep "
                                 f"each, got {len(noisy_tokens)} rows and "
                                 f"{None if timesteps is None else len(timesteps)} timesteps")
            repeats = len(noisy_tokens) // len(selected)
            prediction = self.head(noisy_tokens, timesteps, selected.repeat(repeats, 1))
        if not return_dict:
            return (conditions,) if prediction is None else (conditions, prediction)
        return MARTransformerOutput(conditions=conditions, prediction=prediction)

    def denoise(self, sample: torch.Tensor, timestep: torch.Tensor | float | int,
                conditions: torch.Tensor) -> torch.Tensor:
        """The diffusion head's prediction for noisy token latents ``(N, C)`` at ``timestep``, given their
        conditions ``(N, hidden_size)``."""
        return self.head(sample, timestep, conditions)
