"""GIVT with MaskGIT's masking: the MaskGIT transformer with continuous tokens in and a Gaussian mixture out.

Paper B (Farid et al. 2025) places GIVT (Tschannen et al. 2024) between MaskGIT and the DiT: the same masked
transformer and unmasking schedule, but each token is the tokenizer's continuous latent vector instead of a VQ index,
and the output per token is a ``K``-component diagonal Gaussian mixture over that vector
(:mod:`compgen.models.gaussian_mixture`) instead of a categorical distribution over the codebook. Everything else is
MaskGIT's (:mod:`compgen.models.maskgit_transformer`): the pre-norm blocks, the concept tokens prepended to the image
tokens, the ``full`` / ``quantized`` / dropout semantics. A masked token enters as one learned vector; a visible one as
a linear map of its (standardized) latent.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from diffusers.configuration_utils import register_to_config
from diffusers.models.modeling_utils import ModelMixin  # noqa: F401 (diffusers' loader looks for it in this module)
from diffusers.utils import BaseOutput
from torch import nn

from .config_bounds import check_config_bounds
from .gaussian_mixture import mixture_log_prob
from .masked_latent_transformer import MaskedLatentTransformer
from .standardized_latents import check_latent_statistics


@dataclass
class GIVTTransformerOutput(BaseOutput):
    """Per image token, the mixture: ``logits`` ``(B, L, K)``, ``means`` and ``log_scales`` ``(B, L, K, C)`` (in the
    standardized latent space, see :meth:`GIVTTransformer.normalize_latents`). The later fields have defaults only so
    that Accelerate can rebuild the output from a dict (its fp32 conversion under mixed precision does)."""

    logits: torch.Tensor
    means: torch.Tensor | None = None
    log_scales: torch.Tensor | None = None


class GIVTTransformer(MaskedLatentTransformer):
    r"""Predicts a Gaussian mixture over every image token's latent from a partially masked latent grid and a concept
    tuple.

    Args:
        concept_space: ``{variable: [value names]}`` or ``[[variable, values], ...]`` (stored as the ordered list).
        latent_channels: Channels ``C`` of the latents (a VQ tokenizer's ``vq_embed_dim`` before quantization, a KL
            tokenizer's ``latent_channels``).
        grid_size: Side ``g`` of the latent grid (7 for 28 px images with downsampling 4).
        num_mixtures: Mixture components ``K`` per token (GIVT uses 16 for its VAE latents).
        hidden_size, num_layers, num_heads, mlp_ratio, dropout: The transformer, as MaskGIT's.
        conditioning: ``"quantized"`` or ``"full"`` (as every compgen model).
        continuous_concepts: Canonical value table per continuous variable (``full`` mode).
        concept_dropout: Training probability of replacing a concept by its learned null token.
        latent_mean: Per-channel mean of the training latents (subtracted before modelling).
        latent_std: Per-channel standard deviation of the training latents (divided by).
        position_embedding_std: Standard deviation of the learned position embedding at initialisation; with every
            token masked the positions are all that tell the tokens apart (see
            :class:`~compgen.models.tuple_dit.TupleConditionedDiT` on the choice of scale).
    """

    @register_to_config
    def __init__(
        self,
        concept_space: dict[str, list[str]] | list[tuple[str, list[str]]],
        latent_channels: int = 16,
        grid_size: int = 7,
        num_mixtures: int = 8,
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
                           position_embedding_std=position_embedding_std, num_mixtures=num_mixtures)
        check_latent_statistics(latent_channels, latent_mean, latent_std)

        self._build_backbone(space, latent_channels, grid_size, hidden_size, num_layers, num_heads, mlp_ratio, dropout,
                             position_embedding_std)
        # Per token: K weights, K means and K log scales over C channels.
        self.head = nn.Linear(hidden_size, num_mixtures * (1 + 2 * latent_channels))
        nn.init.zeros_(self.head.weight)  # start as K equal unit Gaussians at the origin (the latents' statistics)
        nn.init.zeros_(self.head.bias)

    @classmethod
    def check_options(cls, **options: Any) -> None:
        """The shared options (:meth:`ConceptConditionedMixin.check_options`) and GIVT's own: ``num_mixtures`` at least
        1. ``__init__`` and the ``givt`` recipe both call this."""
        super().check_options(**{k: v for k, v in options.items() if k != "num_mixtures"})
        if "num_mixtures" in options and options["num_mixtures"] < 1:
            raise ValueError(f"num_mixtures must be at least 1, got {options['num_mixtures']}")

    def forward(
        self,
        latents: torch.Tensor,
        mask: torch.BoolTensor,
        concepts: torch.LongTensor,
        concept_values: torch.Tensor | None = None,
        drop_mask: torch.BoolTensor | None = None,
        return_dict: bool = True,
    ) -> GIVTTransformerOutput | tuple:
        r"""The mixture over every image token.

        Args:
            latents: ``(B, C, g, g)`` standardized latents; the values at masked tokens are ignored.
            mask: ``(B, L)`` or ``(B, g, g)`` bool, ``True`` where a token is masked (to be predicted).
            concepts: ``(B, V)`` class index per concept variable.
            concept_values: ``full`` mode: per-image continuous values ``(B, D)``; ``None`` uses the class values.
            drop_mask: ``(B, V)`` bool, ``True`` replaces a concept by its null token (see MaskGIT's).
            return_dict: Return a :class:`GIVTTransformerOutput` rather than a tuple.
        """
        hidden = self.encode(latents, mask, concepts, concept_values, drop_mask)
        out = self.head(hidden)
        batch, channels, k = latents.shape[0], self.config.latent_channels, self.config.num_mixtures
        logits, means, log_scales = out.split([k, k * channels, k * channels], dim=-1)
        means = means.reshape(batch, self.num_tokens, k, channels)
        log_scales = log_scales.reshape(batch, self.num_tokens, k, channels)
        if not return_dict:
            return logits, means, log_scales
        return GIVTTransformerOutput(logits=logits, means=means, log_scales=log_scales)

    def masked_nll(self, output: GIVTTransformerOutput, latents: torch.Tensor, mask: torch.BoolTensor) -> torch.Tensor:
        """GIVT's training loss: the mean negative log-likelihood per masked token and channel (nats) of the
        standardized ``latents`` ``(B, C, g, g)`` under ``output``."""
        targets = latents.flatten(2).transpose(1, 2)
        log_prob = mixture_log_prob(output.logits, output.means, output.log_scales, targets)
        mask = mask.reshape(log_prob.shape)
        # The check reads the mask (a host synchronisation on an accelerator): eager CPU inputs only; the sums below
        # keep the device busy where boolean indexing would wait for the host.
        if mask.device.type == "cpu" and not torch.compiler.is_compiling() and not mask.any():
            raise ValueError("masked_nll needs at least one masked token")
        masked = mask.to(log_prob.dtype)
        return -(log_prob * masked).sum() / masked.sum().clamp(min=1) / self.config.latent_channels
