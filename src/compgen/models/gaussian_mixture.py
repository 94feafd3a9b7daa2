"""Diagonal Gaussian mixtures per token: GIVT's output distribution (Tschannen et al. 2024, "GIVT: Generative
Infinite-Vocabulary Transformers", Sec. 3), the rung of Paper B's ladder between MaskGIT's categorical output and a
diffusion head (Farid et al. 2025).

A mixture of ``K`` components over ``C`` dimensions is given by ``logits`` ``(..., K)`` (unnormalised component
weights), ``means`` ``(..., K, C)`` and ``log_scales`` ``(..., K, C)`` (log standard deviations).
"""

from __future__ import annotations

import math

import torch

MIN_LOG_SCALE = -7.0
"""Log standard deviations are clamped from below (a component may not collapse onto one training point)."""


def mixture_log_prob(logits: torch.Tensor, means: torch.Tensor, log_scales: torch.Tensor,
                     targets: torch.Tensor) -> torch.Tensor:
    """Log density ``(...)`` of ``targets`` ``(..., C)`` under the mixture, computed in float32."""
    if means.shape != log_scales.shape or means.shape[:-1] != logits.shape or targets.shape[-1] != means.shape[-1]:
        raise ValueError(f"a mixture needs logits (..., K), means and log_scales (..., K, C) and targets (..., C); got "
                         f"{tuple(logits.shape)}, {tuple(means.shape)}, {tuple(log_scales.shape)}, "
                         f"{tuple(targets.shape)}")
    logits, means, targets = logits.float(), means.float(), targets.float()
    log_scales = log_scales.float().clamp(min=MIN_LOG_SCALE)
    z = (targets.unsqueeze(-2) - means) * torch.exp(-log_scales)
    per_component = (-0.5 * z.square() - log_scales - 0.5 * math.log(2 * math.pi)).sum(dim=-1)
    return torch.logsumexp(torch.log_softmax(logits, dim=-1) + per_component, dim=-1)


def mixture_sample(logits: torch.Tensor, means: torch.Tensor, log_scales: torch.Tensor, temperature: float = 1.0,
                   generator: torch.Generator | None = None) -> torch.Tensor:
    """One sample ``(..., C)`` per mixture. ``temperature`` scales every component's standard deviation (1 samples
    the mixture itself, 0 returns the mean of a component drawn by its weight); the component weights are kept."""
    if not math.isfinite(temperature) or temperature < 0:
        raise ValueError(f"temperature must be a finite number >= 0, got {temperature}")
    probabilities = torch.softmax(logits.float(), dim=-1)
    flat = probabilities.reshape(-1, probabilities.shape[-1])
    component = torch.multinomial(flat.cpu(), 1, generator=generator).to(logits.device).view(*logits.shape[:-1], 1)
    index = component.unsqueeze(-1).expand(*means.shape[:-2], 1, means.shape[-1])
    mean = means.float().gather(-2, index).squeeze(-2)
    scale = torch.exp(log_scales.float().clamp(min=MIN_LOG_SCALE).gather(-2, index).squeeze(-2))
    noise = torch.randn(mean.shape, generator=generator, device="cpu").to(mean.device)
    return mean + temperature * scale * noise
