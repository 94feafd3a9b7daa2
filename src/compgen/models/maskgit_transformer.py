"""A bidirectional MaskGIT transformer over a VQ token grid (or a clip's grids, one per frame), conditioned on a
concept tuple.

Conditioning design: **concept tokens**. Each concept variable is embedded by its own table (or, in ``full`` mode,
by an MLP on its continuous value, :class:`ConceptEmbedding`) and the V embeddings are prepended to the image
tokens as V extra sequence positions. We chose tokens over adaLN because (i) it is what the public Shapes2D code of
Paper B's co-author does (Farid et al. 2025), so results stay comparable; (ii) adaLN must first *sum* the concept
embeddings into one modulation vector, whereas tokens keep every concept a separate key that attention can read
on its own, the factorized access a compositional model should be able to use; and (iii) the JEPA target encoder
then sees the conditioning exactly as the online model does, through the same attention layers.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from diffusers.configuration_utils import ConfigMixin, register_to_config
from diffusers.models.modeling_utils import ModelMixin
from diffusers.utils import BaseOutput
from torch import nn

from .concept_embedding import ConceptConditionedMixin
from .config_bounds import check_config_bounds
from .space_time_positions import SpaceTimePositionsMixin
from .transformer_block import LegacyBlockWeightsMixin, TokenAttentionMixin, transformer_blocks


@dataclass
class MaskGITTransformerOutput(BaseOutput):
    """``logits`` ``(B, L, codebook_size)`` over the image tokens (a clip's: every frame's, in order);
    ``hidden_states`` (when asked): a tuple of ``num_layers + 1`` tensors ``(B, L, hidden_size)`` over the image
    tokens: the embeddings, then each block."""

    logits: torch.Tensor
    hidden_states: tuple[torch.Tensor, ...] | None = None


class MaskGITTransformer(LegacyBlockWeightsMixin, ConceptConditionedMixin, SpaceTimePositionsMixin,
                         TokenAttentionMixin, ModelMixin, ConfigMixin):
    r"""Predicts the VQ index of every image token from a partially masked grid and a concept tuple.

    Args:
        concept_space: ``{variable: [value names]}`` or ``[[variable, values], ...]`` (stored as the ordered list).
        codebook_size: VQ codebook size K; the vocabulary has K + 1 entries, the last (id K) being the mask token.
        grid_size: Side of the square token grid (7 for 28 px images with downsampling 4).
        hidden_size: Transformer width.
        num_layers: Transformer blocks.
        num_heads: Attention heads per block.
        mlp_ratio: Feed-forward width as a multiple of ``hidden_size``.
        dropout: Dropout in attention and feed-forward layers.
        conditioning: ``"quantized"`` or ``"full"`` (as in :class:`TupleConditionedUNet2DModel`).
        continuous_concepts: Canonical value table per continuous variable (``full`` mode).
        concept_dropout: Training probability of replacing a concept by its learned null token; > 0 enables
            classifier-free guidance.
        num_frames: Frames of a clip (1: images). A clip's tokens are its frames' grids, frame after frame, each
            frame tokenized alone by the image tokenizer (a frame tokenizer); the position embedding is learned over
            every space-time position, so attention spans space and time alike.
        position_embedding_type: ``"joint"`` (a learned vector per space-time position) or, for clips,
            ``"factorized"`` (a frame's grid positions shared by every frame plus a learned vector per frame;
            :mod:`compgen.models.space_time_positions`).
    """

    _supports_gradient_checkpointing = True

    @register_to_config
    def __init__(
        self,
        concept_space: dict[str, list[str]] | list[tuple[str, list[str]]],
        codebook_size: int = 256,
        grid_size: int = 7,
        hidden_size: int = 128,
        num_layers: int = 4,
        num_heads: int = 4,
        mlp_ratio: float = 4.0,
        dropout: float = 0.0,
        conditioning: str = "quantized",
        continuous_concepts: dict[str, list[list[float]]] | None = None,
        concept_dropout: float = 0.0,
        num_frames: int = 1,
        position_embedding_type: str = "joint",
    ) -> None:
        check_config_bounds(type(self).__name__, locals())
        super().__init__()
        space = self._register_concepts(concept_space, conditioning, continuous_concepts, concept_dropout)
        self.check_options(hidden_size=hidden_size, num_heads=num_heads, num_layers=num_layers, dropout=dropout)
        if codebook_size < 2 or grid_size < 1:
            raise ValueError("codebook_size must be >= 2 and grid_size >= 1")
        if isinstance(num_frames, bool) or not isinstance(num_frames, int) or num_frames < 1:
            raise ValueError(f"num_frames must be an integer of at least 1 (1: images), got {num_frames!r}")

        self.num_tokens = num_frames * grid_size * grid_size
        self.num_concepts = space.num_variables
        self.token_embedding = nn.Embedding(codebook_size + 1, hidden_size)
        self._init_positions(self.num_concepts, grid_size, num_frames, hidden_size, 0.02, position_embedding_type)
        self.concept_embedding = self._concept_tokens(space, hidden_size)
        self.blocks = transformer_blocks(hidden_size, num_layers, num_heads, mlp_ratio, dropout)
        self.norm_out = nn.LayerNorm(hidden_size)
        self.head = nn.Linear(hidden_size, codebook_size)
        self.gradient_checkpointing = False  # diffusers' enable_gradient_checkpointing() sets it

    @property
    def mask_token_id(self) -> int:
        return self.config.codebook_size

    @property
    def token_grid_shape(self) -> tuple[int, ...]:
        """The token layout of one sample: ``(g, g)`` for images, ``(T, g, g)`` for clips."""
        grid = (self.config.grid_size, self.config.grid_size)
        return grid if self.config.num_frames == 1 else (self.config.num_frames, *grid)

    def embed(self, input_ids: torch.LongTensor, concepts: torch.LongTensor, concept_values: torch.Tensor | None = None,
              drop_mask: torch.BoolTensor | None = None, check_values: bool = True) -> torch.Tensor:
        """The checked inputs as the first blocks' input ``(B, V + L, hidden)``: concept tokens, then image tokens,
        plus positions. ``check_values=False`` skips the range checks that read the data (inputs another forward
        already checked)."""
        batch_size = input_ids.shape[0]
        input_ids = input_ids.reshape(batch_size, -1)
        if input_ids.shape[1] != self.num_tokens:
            raise ValueError(f"input_ids must hold {self.num_tokens} tokens per image, got {input_ids.shape[1]}")
        if input_ids.dtype.is_floating_point:
            raise ValueError(f"input_ids must be integer token ids, got dtype {input_ids.dtype}")
        # The range check reads the data (a host synchronisation per step on an accelerator, a graph break under
        # torch.compile): eager CPU inputs only.
        if check_values and input_ids.device.type == "cpu" and not torch.compiler.is_compiling() and (
                input_ids.min() < 0 or input_ids.max() > self.mask_token_id):
            raise ValueError(f"input_ids must be integer token ids in [0, {self.mask_token_id}] (mask = last)")
        if concepts.shape[:1] != (batch_size,):
            raise ValueError(f"concepts has batch size {concepts.shape[0]} but input_ids has {batch_size}")
        drop_mask = self.training_drop_mask(concepts, drop_mask)
        concept_tokens = self.concept_embedding(concepts, concept_values, drop_mask, check_values=check_values)
        hidden = torch.cat([concept_tokens.to(self.position_embedding.dtype), self.token_embedding(input_ids)], 1)
        return hidden + self.positions()

    def hidden_states(self, input_ids: torch.LongTensor, concepts: torch.LongTensor,
                      concept_values: torch.Tensor | None = None, drop_mask: torch.BoolTensor | None = None,
                      num_layers: int | None = None, check_values: bool = True) -> tuple[torch.Tensor, ...]:
        """The image-token hidden states of the embeddings and of the first ``num_layers`` blocks (every block when
        ``None``), as ``forward(..., output_hidden_states=True)`` gives them, without the blocks above and the output
        head: all that the JEPA target encoder is asked for."""
        hidden = self.embed(input_ids, concepts, concept_values, drop_mask, check_values)
        image = slice(self.num_concepts, None)
        states = [hidden[:, image]]
        for block in self.blocks[: len(self.blocks) if num_layers is None else num_layers]:
            if torch.is_grad_enabled() and self.gradient_checkpointing:
                hidden = self._gradient_checkpointing_func(block, hidden)
            else:
                hidden = block(hidden)
            states.append(hidden[:, image])
        return tuple(states)

    def forward(
        self,
        input_ids: torch.LongTensor,
        concepts: torch.LongTensor,
        concept_values: torch.Tensor | None = None,
        drop_mask: torch.BoolTensor | None = None,
        output_hidden_states: bool = False,
        return_dict: bool = True,
    ) -> MaskGITTransformerOutput | tuple:
        r"""Logits over the codebook for every image token.

        Args:
            input_ids: ``(B, L)``, ``(B, H, W)`` or (clips) ``(B, T, H, W)`` token ids in ``[0, codebook_size]``
                (``codebook_size`` = mask).
            concepts: ``(B, V)`` class index per concept variable.
            concept_values: ``full`` mode: per-image continuous values ``(B, D)``; ``None`` uses the class values.
            drop_mask: ``(B, V)`` bool, ``True`` replaces a concept by its null token. In training mode with
                ``concept_dropout > 0`` and no mask, one is drawn (pass a mask drawn from a generator for
                reproducible training).
            output_hidden_states: Also return the image-token hidden states of the embeddings and of every block.
            return_dict: Return a :class:`MaskGITTransformerOutput` rather than a tuple.
        """
        hidden = self.embed(input_ids, concepts, concept_values, drop_mask)
        image = slice(self.num_concepts, None)
        all_hidden = [hidden[:, image]] if output_hidden_states else None
        for block in self.blocks:
            if torch.is_grad_enabled() and self.gradient_checkpointing:
                hidden = self._gradient_checkpointing_func(block, hidden)
            else:
                hidden = block(hidden)
            if output_hidden_states:
                all_hidden.append(hidden[:, image])
        logits = self.head(self.norm_out(hidden[:, image]))
        hidden_states = tuple(all_hidden) if output_hidden_states else None
        if not return_dict:
            return (logits, hidden_states) if output_hidden_states else (logits,)
        return MaskGITTransformerOutput(logits=logits, hidden_states=hidden_states)
