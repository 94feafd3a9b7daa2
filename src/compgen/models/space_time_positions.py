"""The position embedding of a token transformer over a clip's space-time tokens: one learned vector per space-time
position (``joint``), or a frame's grid positions shared by every frame plus one vector per frame (``factorized``, as
ViViT's factorised embeddings and video DiTs such as Latte do).

A joint embedding learns each of the ``T x g x g`` positions from its own gradient, so that each is seen once per
clip; a factorized one learns ``g x g + T`` vectors and tells the model from the start that position (i, j) is the
same place in every frame, which a moving object's path needs. Its frame vectors start as the sine-cosine encoding of
the frame's index (diffusers' ``get_1d_sincos_pos_embed_from_grid``, the scale of a token's embedding) and are learned
from there: started at the grid positions' 0.02, the frames stayed nearly indistinguishable for 10^3 steps and neither
video model drew a typical clip by then (``results/paper-b-video/``). Images (``num_frames = 1``) have only
``joint``.
"""

from __future__ import annotations

import torch
from diffusers.models.embeddings import get_1d_sincos_pos_embed_from_grid
from torch import nn

POSITION_EMBEDDING_TYPES = ("joint", "factorized")
"""``joint``: a learned vector per space-time position; ``factorized``: grid positions plus a learned frame vector."""


def check_position_embedding_type(position_embedding_type: str, num_frames: int | None = None,
                                  hidden_size: int | None = None) -> None:
    """Raise ``ValueError`` naming the option if ``position_embedding_type`` is unknown, factorized for images, or
    factorized at an odd width (its frame vectors start at a sine-cosine encoding, half sines and half cosines).
    ``None``: not known yet (a recipe checks its flags before the clips are loaded)."""
    if position_embedding_type not in POSITION_EMBEDDING_TYPES:
        raise ValueError(f"position_embedding_type must be one of {POSITION_EMBEDDING_TYPES}, got "
                         f"{position_embedding_type!r}")
    if position_embedding_type != "factorized":
        return
    if num_frames is not None and num_frames < 2:
        raise ValueError("position_embedding_type 'factorized' factors space from time: it needs clips "
                         f"(num_frames > 1), got num_frames={num_frames}")
    if hidden_size is not None and hidden_size % 2:
        raise ValueError("position_embedding_type 'factorized' starts its frame vectors at a sine-cosine encoding: "
                         f"it needs an even hidden size, got {hidden_size}")


class SpaceTimePositionsMixin:
    """``position_embedding`` (the prefix tokens' positions, then the grid's: every frame's for ``joint``, one frame's
    for ``factorized``), ``frame_embedding`` (``factorized`` only, ``(1, T, 1, hidden)``) and :meth:`positions`, the
    ``(1, prefix + T g g, hidden)`` tensor added to the inputs. A ``joint`` model's weights are those of the models
    saved before the option existed."""

    def _init_positions(self, num_prefix: int, grid_size: int, num_frames: int, hidden_size: int, std: float,
                        position_embedding_type: str) -> None:
        check_position_embedding_type(position_embedding_type, num_frames, hidden_size)
        factorized = position_embedding_type == "factorized"
        grid_tokens = grid_size * grid_size * (1 if factorized else num_frames)
        self.position_embedding = nn.Parameter(torch.zeros(1, num_prefix + grid_tokens, hidden_size))
        nn.init.trunc_normal_(self.position_embedding, std=std)  # truncated to [-2, 2]
        self.frame_embedding = None
        if factorized:
            frames = get_1d_sincos_pos_embed_from_grid(hidden_size, torch.arange(num_frames), output_type="pt")
            self.frame_embedding = nn.Parameter(frames.float().view(1, num_frames, 1, hidden_size))

    def positions(self) -> torch.Tensor:
        """Every input position's embedding, ``(1, prefix + T g g, hidden)``: the prefix tokens', then frame after
        frame the grid's."""
        if self.frame_embedding is None:
            return self.position_embedding
        grid_tokens = self.config.grid_size**2
        prefix, grid = self.position_embedding[:, :-grid_tokens], self.position_embedding[:, -grid_tokens:]
        return torch.cat([prefix, (grid[:, None] + self.frame_embedding).flatten(1, 2)], dim=1)
