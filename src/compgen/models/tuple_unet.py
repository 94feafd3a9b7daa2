"""The tuple-conditioned U-Net of Okawa et al. 2023 ("Compositional Abilities Emerge Multiplicatively") as a
diffusers model.

Conv blocks (Conv3x3 + norm + GELU) go down ``28 -> 14 -> 7`` (one halving per entry of ``block_out_channels``), the
bottleneck is average-pooled to ``1x1`` and projected back up. Each concept variable has its own embedding; the
embeddings are *summed* and *multiply* the decoder features of every stage (a FiLM-like scale), and the time
embedding is *added*: ``h = h * sum_v concept_embedding_v + time_embedding``. With ``modulate_full_resolution`` the
last decoder stage's full-resolution output is modulated too, where Paper A's decoder leaves it unconditioned.

Two layouts share this frame (``block_type``): ``"residual"``, compgen's (every block residual, ``layers_per_block``
blocks per stage, one sinusoidal time embedding and one concept embedding split across the stages), and ``"paper"``,
the official ``ContextUnet`` of Paper A's code layer for layer (BatchNorm blocks with a residual only in the input
block, one block per down stage, a transposed conv and two blocks per up stage, MLP embeddings of ``t / T`` and of
each concept per decoder stage).
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from diffusers.configuration_utils import ConfigMixin, register_to_config
from diffusers.models.embeddings import TimestepEmbedding
from diffusers.models.modeling_utils import ModelMixin
from diffusers.models.unets.unet_2d import UNet2DOutput
from torch import nn

from .concept_embedding import ConceptConditionedMixin, ConceptEmbedding
from .config_bounds import check_config_bounds
from .timestep_embedding import SinusoidalTimesteps, broadcast_timesteps

CONCEPT_MODULATIONS = ("multiply", "film", "add", "scale_shift")
CONCEPT_EMBEDDING_INITS = ("normal", "zero")
BLOCK_TYPES = ("residual", "paper")
NORM_TYPES = ("group", "batch")


def make_norm(norm_type: str, channels: int, norm_num_groups: int) -> nn.Module:
    """``GroupNorm(norm_num_groups)`` (compgen's blocks) or ``BatchNorm2d`` (the official code's) over ``channels``."""
    return nn.GroupNorm(norm_num_groups, channels) if norm_type == "group" else nn.BatchNorm2d(channels)


class ResidualConvBlock(nn.Module):
    """Two Conv3x3 + norm + GELU layers with a residual connection scaled by 1/sqrt(2) (compgen's block).

    When the channel count changes, the first layer's output is the residual (no 1x1 projection needed).
    """

    def __init__(self, in_channels: int, out_channels: int, norm_num_groups: int, norm_type: str = "group") -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, out_channels, 3, padding=1)
        self.norm1 = make_norm(norm_type, out_channels, norm_num_groups)
        self.conv2 = nn.Conv2d(out_channels, out_channels, 3, padding=1)
        self.norm2 = make_norm(norm_type, out_channels, norm_num_groups)
        self.same_channels = in_channels == out_channels

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.gelu(self.norm1(self.conv1(x)))
        out = F.gelu(self.norm2(self.conv2(h)))
        return (x if self.same_channels else h).add(out).mul_(1.0 / math.sqrt(2.0))


class PaperConvBlock(nn.Module):
    """Paper A's official block: two (Conv3x3, norm, GELU) layers; with ``is_res`` (the input block only) the input
    is added to the output (the first layer's output when the channels change), without rescaling."""

    def __init__(self, in_channels: int, out_channels: int, norm_num_groups: int, norm_type: str = "batch",
                 is_res: bool = False) -> None:
        super().__init__()
        self.conv1 = nn.Sequential(nn.Conv2d(in_channels, out_channels, 3, padding=1),
                                   make_norm(norm_type, out_channels, norm_num_groups), nn.GELU())
        self.conv2 = nn.Sequential(nn.Conv2d(out_channels, out_channels, 3, padding=1),
                                   make_norm(norm_type, out_channels, norm_num_groups), nn.GELU())
        self.is_res = is_res
        self.same_channels = in_channels == out_channels

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.conv1(x)
        out = self.conv2(h)
        if not self.is_res:
            return out
        return (x if self.same_channels else h) + out


def conv_blocks(block_type: str, in_channels: int, out_channels: int, count: int, norm_num_groups: int,
                norm_type: str) -> nn.Sequential:
    """``count`` blocks of ``block_type``, the first from ``in_channels`` to ``out_channels``."""
    block = ResidualConvBlock if block_type == "residual" else PaperConvBlock
    return nn.Sequential(*(block(in_channels if i == 0 else out_channels, out_channels, norm_num_groups, norm_type)
                           for i in range(count)))


class DownStage(nn.Module):
    """``num_blocks`` conv blocks, then a 2x2 max-pool."""

    def __init__(self, in_channels: int, out_channels: int, num_blocks: int, norm_num_groups: int,
                 block_type: str = "residual", norm_type: str = "group") -> None:
        super().__init__()
        self.blocks = conv_blocks(block_type, in_channels, out_channels, num_blocks, norm_num_groups, norm_type)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.max_pool2d(self.blocks(x), 2)


class UpStage(nn.Module):
    """Concatenate the skip, upsample 2x with a transposed conv, then ``num_blocks`` conv blocks."""

    def __init__(self, in_channels: int, out_channels: int, num_blocks: int, norm_num_groups: int,
                 block_type: str = "residual", norm_type: str = "group") -> None:
        super().__init__()
        self.upsample = nn.ConvTranspose2d(in_channels, out_channels, 2, stride=2)
        self.blocks = conv_blocks(block_type, out_channels, out_channels, num_blocks, norm_num_groups, norm_type)

    def forward(self, x: torch.Tensor, skip: torch.Tensor) -> torch.Tensor:
        return self.blocks(self.upsample(torch.cat([x, skip], dim=1)))


class TupleConditionedUNet2DModel(ConceptConditionedMixin, ModelMixin, ConfigMixin):
    r"""A U-Net denoiser conditioned on a concept tuple (Okawa et al. 2023).

    Args:
        concept_space: ``{variable: [value names]}`` in tuple order (``ConceptSpace.to_dict()``) or a list of
            ``[variable, [value names]]`` pairs. The config stores the pair list, the only form whose order survives
            diffusers' sorted-key JSON; read it back with ``ConceptSpace.from_dict`` or :attr:`concept_space`.
        sample_size: Image height and width; must be divisible by ``2 ** len(block_out_channels)``.
        in_channels: Image channels (the output has the same number: the predicted noise).
        block_out_channels: Channels of each down stage, e.g. Paper A's ``(256, 512)`` or a CPU ``(32, 64)``.
        layers_per_block: Conv blocks per stage (Paper A: 2; the ``paper`` layout has one per down stage, as the
            official code, and two per up stage).
        norm_num_groups: GroupNorm groups; every entry of ``block_out_channels`` must be divisible by it.
        conditioning: ``"quantized"`` (class index per variable) or ``"full"`` (per-image continuous values for
            the variables in ``continuous_concepts``, class indices for the rest).
        continuous_concepts: Canonical value per class of each continuous variable (for the shapes data
            :func:`compgen.shapes.shapes_continuous_concepts`); required in ``full`` mode, ignored in ``quantized``.
        concept_dropout: Probability of replacing each concept's embedding by its learned null during training.
            When > 0 the model has null embeddings, which enables classifier-free guidance.
        concept_modulation: How the summed concept embedding ``e`` enters each decoder stage with the time embedding
            ``t``: ``"multiply"`` (Paper A: ``h * e + t``), ``"film"`` (``h * (1 + e) + t``, identity at ``e = 0``,
            so no embedding can switch the features off), ``"add"`` (``h + e + t``) or ``"scale_shift"`` (FiLM with a
            concept shift too, ``h * (1 + e_scale) + e_shift + t``: each concept embeds to a scale and a shift, as
            diffusers' ``time_embedding_norm="scale_shift"`` does for the time, so a concept can add its colour to
            the features as well as scale them).
        concept_embedding_init: ``"normal"`` (PyTorch's initialisation of the embedders: a table from N(0, 1), MLPs
            as ``nn.Linear``) or ``"zero"`` (every embedder's output layer at zero, so each concept embeds to 0 at
            initialisation and the decoder starts unconditioned, DiT's adaLN-Zero; with every modulation but
            ``"multiply"``, which are the identity at 0, where ``"multiply"`` would switch every feature off).
        block_type: ``"residual"`` (compgen's layout) or ``"paper"`` (the official ``ContextUnet`` of Paper A's code:
            the same layers, widths and parameter count; one block per down stage and two per up stage, so
            ``layers_per_block`` must be 2; categorical concepts through an MLP on their one-hot vector).
        norm_type: Normalisation in the conv blocks: ``"group"`` (GroupNorm, compgen's) or ``"batch"`` (BatchNorm,
            the official code's). The bottleneck and output layers use GroupNorm in both layouts, as the official code.
        num_train_timesteps: The noise schedule's length ``T``; the ``paper`` layout embeds ``t / T``.
        modulate_full_resolution: Also modulate the last decoder stage's full-resolution output (before the output
            convolution) by the concepts and the time, so the concepts reach the pixels a small object is drawn
            with; Paper A modulates only the decoder stages' inputs (``False``, at ``sample_size / 4`` and
            ``sample_size / 2`` with two stages).
    """

    _supports_gradient_checkpointing = True
    # diffusers' layerwise casting leaves the concept embedding in the compute dtype: Paper A's one-hot embedders read
    # their first layer's weight directly (a gather), which the casting hook of that layer never sees. It is tiny.
    _skip_layerwise_casting_patterns = ["concept_embedding"]

    def enable_gradient_checkpointing(self, gradient_checkpointing_func=None) -> None:
        """diffusers' gradient checkpointing of the down and up stages; refused with BatchNorm (``norm_type="batch"``),
        whose running statistics the recomputed forward pass would update a second time."""
        if self.config.norm_type == "batch":
            raise ValueError("gradient checkpointing recomputes the forward pass, which would update the BatchNorm "
                             "running statistics twice: use norm_type='group', or train without checkpointing")
        super().enable_gradient_checkpointing(gradient_checkpointing_func)

    @register_to_config
    def __init__(
        self,
        concept_space: dict[str, list[str]] | list[tuple[str, list[str]]],
        sample_size: int = 28,
        in_channels: int = 3,
        block_out_channels: tuple[int, ...] = (32, 64),
        layers_per_block: int = 2,
        norm_num_groups: int = 8,
        conditioning: str = "quantized",
        continuous_concepts: dict[str, list[list[float]]] | None = None,
        concept_dropout: float = 0.0,
        concept_modulation: str = "multiply",
        concept_embedding_init: str = "normal",
        block_type: str = "residual",
        norm_type: str = "group",
        num_train_timesteps: int = 500,
        modulate_full_resolution: bool = False,
    ) -> None:
        check_config_bounds(type(self).__name__, locals())
        super().__init__()
        space = self._register_concepts(concept_space, conditioning, continuous_concepts, concept_dropout)
        self.check_options(concept_modulation=concept_modulation, concept_embedding_init=concept_embedding_init,
                           block_type=block_type, norm_type=norm_type, layers_per_block=layers_per_block)
        paper = block_type == "paper"
        if not block_out_channels:
            raise ValueError("block_out_channels must be non-empty")
        if any(channels % norm_num_groups for channels in block_out_channels):
            raise ValueError(f"every block_out_channels entry {block_out_channels} must divide by {norm_num_groups}")
        downscale = 2 ** len(block_out_channels)
        if sample_size % downscale:
            raise ValueError(
                f"sample_size {sample_size} must be divisible by 2 ** len(block_out_channels) = {downscale}"
            )

        channels = list(block_out_channels)
        self.bottleneck_size = sample_size // downscale
        # Decoder stage i is modulated on its input, which has channels[i] channels: one scale/shift per stage, and
        # one more on the last stage's output (channels[0]) with modulate_full_resolution.
        self.modulation_channels = channels[::-1] + (channels[:1] if modulate_full_resolution else [])
        modulation_dim = sum(self.modulation_channels)
        # scale_shift: the concepts embed to a scale per modulated channel, then a shift per modulated channel.
        concept_channels = self.modulation_channels * (2 if concept_modulation == "scale_shift" else 1)

        down_blocks = 1 if paper else layers_per_block
        if paper:
            self.conv_in = PaperConvBlock(in_channels, channels[0], norm_num_groups, norm_type, is_res=True)
        else:
            self.conv_in = ResidualConvBlock(in_channels, channels[0], norm_num_groups, norm_type)
        self.down_stages = nn.ModuleList(
            DownStage(channels[max(i - 1, 0)], channels[i], down_blocks, norm_num_groups, block_type, norm_type)
            for i in range(len(channels))
        )
        # Paper A's 1x1 -> bottleneck ConvTranspose2d(k, stride=k); on a 1x1 input the residual layout's linear map is
        # the same function with a bias per position.
        if paper:
            self.bottleneck_up = nn.ConvTranspose2d(channels[-1], channels[-1], self.bottleneck_size,
                                                    self.bottleneck_size)
        else:
            self.bottleneck_up = nn.Linear(channels[-1], channels[-1] * self.bottleneck_size**2)
        self.bottleneck_norm = nn.GroupNorm(norm_num_groups, channels[-1])
        self.gradient_checkpointing = False  # diffusers' enable_gradient_checkpointing() sets it
        self.up_stages = nn.ModuleList(
            UpStage(2 * channels[i], channels[max(i - 1, 0)], layers_per_block, norm_num_groups, block_type, norm_type)
            for i in reversed(range(len(channels)))
        )
        self.conv_out = nn.Sequential(
            nn.Conv2d(2 * channels[0], channels[0], 3, padding=1),
            nn.GroupNorm(norm_num_groups, channels[0]),
            nn.ReLU() if paper else nn.GELU(),
            nn.Conv2d(channels[0], in_channels, 3, padding=1),
        )

        if paper:  # one MLP of t / T per decoder stage (the official timeembed1, timeembed2)
            self.time_embedding = nn.ModuleList(
                nn.Sequential(nn.Linear(1, width), nn.GELU(), nn.Linear(width, width))
                for width in self.modulation_channels
            )
        else:
            self.time_proj = SinusoidalTimesteps(channels[0], flip_sin_to_cos=True, downscale_freq_shift=0)
            self.time_embedding = TimestepEmbedding(channels[0], modulation_dim, act_fn="gelu")
        self.concept_embedding = ConceptEmbedding(
            space,
            sum(concept_channels),
            continuous_concepts=continuous_concepts if conditioning == "full" else None,
            use_null=concept_dropout > 0,
            categorical="one_hot_mlp" if paper else "table",
            split_dims=concept_channels if paper else None,
        )
        if concept_embedding_init == "zero":
            self.concept_embedding.zero_output_layers_()

    def embed_time(self, timesteps: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """The time embedding of ``(B,)`` timesteps: one ``(B, C_i)`` shift per decoder stage."""
        if self.config.block_type == "paper":
            scaled = (timesteps.to(self.dtype) / self.config.num_train_timesteps)[:, None]
            return tuple(mlp(scaled) for mlp in self.time_embedding)
        return self.time_embedding(self.time_proj(timesteps).to(self.dtype)).split(self.modulation_channels, dim=1)

    @classmethod
    def check_options(cls, **options: Any) -> None:
        """The shared options (:meth:`ConceptConditionedMixin.check_options`) and the U-Net's own: the choices of
        ``concept_modulation``, ``concept_embedding_init`` (``"zero"`` not with ``"multiply"``), ``block_type`` and
        ``norm_type``; ``layers_per_block`` at least 1, and 2 with the
        paper's blocks. ``__init__`` and ``examples/train_tuple_unet.py`` both call this."""
        super().check_options(**options)
        for name, choices in (("concept_modulation", CONCEPT_MODULATIONS), ("block_type", BLOCK_TYPES),
                              ("norm_type", NORM_TYPES), ("concept_embedding_init", CONCEPT_EMBEDDING_INITS)):
            if name in options and options[name] not in choices:
                raise ValueError(f"{name} must be one of {choices}, got {options[name]!r}")
        modulation = options.get("concept_modulation", "multiply")
        if options.get("concept_embedding_init") == "zero" and modulation == "multiply":
            raise ValueError("concept_embedding_init='zero' embeds every concept to 0 at initialisation, which the "
                             "'multiply' modulation (h * e + t) turns into all-zero features: use concept_modulation "
                             "'film', 'add' or 'scale_shift'")
        layers = options.get("layers_per_block", 2)
        if layers < 1:
            raise ValueError(f"layers_per_block must be at least 1, got {layers}")
        if options.get("block_type") == "paper" and layers != 2:
            raise ValueError("block_type='paper' is the official layout (one block per down stage, two per up stage): "
                             f"layers_per_block must be 2, got {layers}")

    def modulate(self, h: torch.Tensor, scale: torch.Tensor, shift: torch.Tensor) -> torch.Tensor:
        """Features ``h`` ``(B, C, H, W)`` modulated by one stage's concept scale and time shift ``(B, C)``, as
        ``concept_modulation`` says."""
        modulation = self.config.concept_modulation
        if modulation == "multiply":
            return torch.addcmul(shift[:, :, None, None], h, scale[:, :, None, None])
        if modulation in ("film", "scale_shift"):  # scale_shift's shift holds the concept shift too
            return torch.addcmul(h + shift[:, :, None, None], h, scale[:, :, None, None])
        return h + (scale + shift)[:, :, None, None]

    def split_concept_embedding(self, embedding: torch.Tensor) -> tuple[tuple[torch.Tensor, ...], tuple | None]:
        """The summed concept embedding ``(B, D)`` as one ``(B, C_i)`` scale per modulated stage, and with
        ``concept_modulation="scale_shift"`` one concept shift per stage (``None`` otherwise)."""
        if self.config.concept_modulation != "scale_shift":
            return embedding.split(self.modulation_channels, dim=1), None
        scales, shifts = embedding.chunk(2, dim=1)
        return scales.split(self.modulation_channels, dim=1), shifts.split(self.modulation_channels, dim=1)

    def forward(
        self,
        sample: torch.Tensor,
        timestep: torch.Tensor | float | int,
        concepts: torch.Tensor,
        concept_values: torch.Tensor | None = None,
        drop_mask: torch.Tensor | None = None,
        return_dict: bool = True,
    ) -> UNet2DOutput | tuple[torch.Tensor]:
        r"""Predict the noise in ``sample``.

        Args:
            sample: Noisy images ``(B, C, H, W)``.
            timestep: Diffusion step, a number or a ``(B,)`` / scalar tensor.
            concepts: Class index per variable, ``(B, V)`` long.
            concept_values: ``full`` mode only: per-image values of the continuous variables ``(B, D)`` in variable
                order (shapes: RGB then size); ``None`` uses the canonical class values.
            drop_mask: ``(B, V)`` bool; ``True`` replaces that concept by its null embedding. In training mode with
                ``concept_dropout > 0`` and no mask, one is drawn with probability ``concept_dropout``.
            return_dict: Return a :class:`UNet2DOutput` rather than a tuple.
        """
        batch_size = sample.shape[0]
        if concepts.shape[:1] != (batch_size,):
            raise ValueError(f"concepts has batch size {concepts.shape[0]} but sample has {batch_size}")
        drop_mask = self.training_drop_mask(concepts, drop_mask)

        time_shifts = self.embed_time(broadcast_timesteps(timestep, batch_size, sample.device))
        concept_scales, concept_shifts = self.split_concept_embedding(
            self.concept_embedding(concepts, concept_values, drop_mask).sum(dim=1))
        if concept_shifts is not None:
            time_shifts = tuple(t + c for t, c in zip(time_shifts, concept_shifts, strict=True))

        x_in = self.conv_in(sample)
        skips = []
        h = x_in
        checkpointing = torch.is_grad_enabled() and self.gradient_checkpointing
        for stage in self.down_stages:
            h = self._gradient_checkpointing_func(stage, h) if checkpointing else stage(h)
            skips.append(h)

        pooled = F.gelu(h.mean(dim=(2, 3)))
        if self.config.block_type == "paper":
            h = F.relu(self.bottleneck_norm(self.bottleneck_up(pooled[:, :, None, None])))
        else:
            h = self.bottleneck_up(pooled).reshape(batch_size, -1, self.bottleneck_size, self.bottleneck_size)
            h = F.gelu(self.bottleneck_norm(h))
        stages = len(self.up_stages)
        for stage, skip, scale, shift in zip(self.up_stages, reversed(skips), concept_scales[:stages],
                                             time_shifts[:stages], strict=True):
            h = self.modulate(h, scale, shift)
            h = self._gradient_checkpointing_func(stage, h, skip) if checkpointing else stage(h, skip)
        if self.config.modulate_full_resolution:
            h = self.modulate(h, concept_scales[-1], time_shifts[-1])
        out = self.conv_out(torch.cat([h, x_in], dim=1))

        if not return_dict:
            return (out,)
        return UNet2DOutput(sample=out)
