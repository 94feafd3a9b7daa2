"""What the masked-token pipelines over continuous latents (GIVT, MAR) share: their starting tokens and mask, the
step callback's view of the tokens as a grid, and the per-token scores that choose what to reveal."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from .concept_inputs import Generators, callback_latents, check_latents_shape


def masked_token_latents(latents: torch.Tensor | None, batch_size: int, channels: int, grid_size: int,
                         device: torch.device, dtype: torch.dtype) -> tuple[torch.Tensor, torch.BoolTensor]:
    """A masked-token pipeline's (GIVT, MAR) starting tokens ``(B, L, C)`` and mask ``(B, L)``: every token masked, or
    those of ``latents`` ``(B, C, H, W)`` that hold ``NaN`` (the same number in every image, at least one)."""
    num_tokens = grid_size * grid_size
    if latents is None:
        return (torch.zeros(batch_size, num_tokens, channels, device=device, dtype=dtype),
                torch.ones(batch_size, num_tokens, dtype=torch.bool, device=device))
    check_latents_shape(latents, (batch_size, channels, grid_size, grid_size), "batch, latent channels, token grid")
    sequence = latents.flatten(2).transpose(1, 2)
    masked = sequence.isnan().any(dim=-1)
    counts = masked.sum(dim=1)
    if not bool((counts == counts[0]).all()) or int(counts[0]) == 0:
        raise ValueError(f"latents must mark the same number of tokens (at least one) as NaN in every image, got "
                         f"{counts.tolist()}")
    if not bool(torch.isfinite(sequence[~masked]).all()):
        raise ValueError("latents must be finite in the tokens they keep (NaN marks a token to generate; no inf)")
    return torch.nan_to_num(sequence, nan=0.0).to(device=device, dtype=dtype), masked.to(device)


def token_grid(tokens: torch.Tensor, masked: torch.BoolTensor, grid_size: int) -> torch.Tensor:
    """Tokens ``(B, L, C)`` as a latent grid ``(B, C, H, W)`` with ``NaN`` in the masked ones (what a step callback
    of a masked-token pipeline gets)."""
    grid = tokens.masked_fill(masked.unsqueeze(-1), float("nan")).transpose(1, 2)
    return grid.reshape(tokens.shape[0], tokens.shape[2], grid_size, grid_size)


def token_step_callback(pipe: Any, step: int, callback: Callable[..., dict[str, Any]], tensor_inputs: Sequence[str],
                        tokens: torch.Tensor, masked: torch.BoolTensor, grid_size: int) -> torch.Tensor:
    """A masked-token pipeline's (GIVT, MAR) step callback: hands over the tokens as a grid (``NaN`` where masked) and
    returns the tokens with the revealed ones replaced by those of a ``"latents"`` entry it gives back."""
    grid = token_grid(tokens, masked, grid_size)
    outputs = callback(pipe, step, step, {name: {"latents": grid}[name] for name in tensor_inputs})
    returned = callback_latents(outputs, grid, pipe._callback_tensor_inputs, finite=False)
    if returned is grid:
        return tokens
    returned = returned.flatten(2).transpose(1, 2).to(tokens)
    # NaN stays the mark of a masked token; a revealed token must be a number
    if not bool(torch.isfinite(torch.where(masked.unsqueeze(-1), 0.0, returned)).all()):
        raise ValueError("callback_on_step_end returned latents with NaN or inf at revealed tokens (NaN marks only "
                         "the tokens still masked)")
    return torch.where(masked.unsqueeze(-1), tokens, returned)


def uniform_scores(generator: Generators, batch_size: int, num_tokens: int) -> torch.Tensor:
    """``U(0, 1)`` scores ``(batch_size, num_tokens)`` on the CPU: from one generator, or row by row from one per
    image (each row then what a batch of that image alone draws)."""
    if isinstance(generator, list):
        return torch.stack([torch.rand(num_tokens, generator=g) for g in generator])
    return torch.rand(batch_size, num_tokens, generator=generator)
