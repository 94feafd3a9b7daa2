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
                   generator: torch.Generator | None = None, null_means: torch.Tensor | None = None,
                   null_log_scales: torch.Tensor | None = None, guidance_scale: float = 1.0) -> torch.Tensor:
    """One sample ``(..., C)`` per mixture. ``temperature`` scales every component's standard deviation (1 samples
    the mixture itself, 0 returns the mean of a component drawn by its weight); the component weights are kept.

    With the unconditional mixture's ``null_means`` and ``null_log_scales`` and ``guidance_scale`` ``s`` != 1: GIVT's
    distribution-based classifier-free guidance (Tschannen et al. 2024, Sec. 3.4). A component ``k`` is drawn by the
    conditional weights, and the token from the density proportional to ``N_c,k(x)^s / N_u,k(x)^(s-1)`` per dimension:
    a Gaussian of precision ``s / sc^2 - (s-1) / su^2`` and mean ``(s mc / sc^2 - (s-1) mu / su^2) / precision``,
    drawn exactly (GIVT draws it by rejection sampling). Where that precision is not positive the density cannot be
    normalised and the conditional component is drawn, as GIVT's sampler falls back to it when it rejects."""
    if not math.isfinite(temperature) or temperature < 0:
        raise ValueError(f"temperature must be a finite number >= 0, got {temperature}")
    probabilities = torch.softmax(logits.float(), dim=-1)
    flat = probabilities.reshape(-1, probabilities.shape[-1])
    component = torch.multinomial(flat.cpu(), 1, generator=generator).to(logits.device).view(*logits.shape[:-1], 1)
    index = component.unsqueeze(-1).expand(*means.shape[:-2], 1, means.shape[-1])
    mean = means.float().gather(-2, index).squeeze(-2)
    scale = torch.exp(log_scales.float().clamp(min=MIN_LOG_SCALE).gather(-2, index).squeeze(-2))
    if null_means is not None and null_log_scales is not None and guidance_scale != 1.0:
        null_mean = null_means.float().gather(-2, index).squeeze(-2)
        null_scale = torch.exp(null_log_scales.float().clamp(min=MIN_LOG_SCALE).gather(-2, index).squeeze(-2))
        precision = guidance_scale / scale.square() - (guidance_scale - 1.0) / null_scale.square()
        proper = precision > 0
        safe = torch.where(proper, precision, torch.ones_like(precision))
        guided_mean = (guidance_scale * mean / scale.square()
                       - (guidance_scale - 1.0) * null_mean / null_scale.square()) / safe
        mean = torch.where(proper, guided_mean, mean)
        scale = torch.where(proper, safe.rsqrt(), scale)
    noise = torch.randn(mean.shape, generator=generator, device="cpu").to(mean.device)
    return mean + temperature * scale * noise
