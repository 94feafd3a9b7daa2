"""The decoding loop of the masked models over continuous tokens (GIVT, MAR): every token starts masked, and at each
step the tokens MaskGIT's schedule reveals are drawn from the model's distribution for them. Continuous tokens carry no
confidence to rank them by, so the tokens to reveal are picked in a random order (MAR's choice, Li et al. 2024)."""

from __future__ import annotations

from collections.abc import Callable, Iterable

import torch

from ..schedulers.scheduling_maskgit import MaskGITScheduler


def unmask_latents(
    transformer,
    scheduler: MaskGITScheduler,
    model_kwargs: dict,
    batch_size: int,
    num_inference_steps: int,
    sample_tokens: Callable[[object, torch.BoolTensor], torch.Tensor],
    generator: torch.Generator | None = None,
    progress: Callable[[Iterable], Iterable] = iter,
) -> torch.Tensor:
    """Standardized latents ``(B, C, g, g)`` decoded in ``num_inference_steps`` steps.

    ``sample_tokens(output, reveal)`` gets the transformer's output for the current grid and the ``(B, L)`` bool mask
    of the tokens to reveal now, and returns their latents ``(R, C)`` in ``reveal``'s row-major order."""
    config = transformer.config
    device = transformer.device
    length = config.grid_size**2
    tokens = torch.zeros(batch_size, length, config.latent_channels, device=device, dtype=transformer.dtype)
    masked = torch.ones(batch_size, length, dtype=torch.bool, device=device)
    scheduler.set_timesteps(num_inference_steps, device=device)
    num_masked = length
    for step in progress(range(num_inference_steps)):
        latents = tokens.transpose(1, 2).reshape(batch_size, config.latent_channels, config.grid_size, -1)
        output = transformer(latents, masked, **model_kwargs)
        remaining = scheduler.num_masked_after(step, length, num_masked)
        scores = torch.rand(batch_size, length, generator=generator).to(device).masked_fill(~masked, -1.0)
        reveal = torch.zeros_like(masked).scatter_(1, scores.topk(num_masked - remaining, dim=1).indices, True)
        tokens[reveal] = sample_tokens(output, reveal).to(tokens.dtype)
        masked &= ~reveal
        num_masked = remaining
    return tokens.transpose(1, 2).reshape(batch_size, config.latent_channels, config.grid_size, config.grid_size)
