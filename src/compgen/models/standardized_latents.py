"""Models over a tokenizer's continuous latents (the DiT, GIVT) work on standardized latents: each channel's training
mean subtracted and its standard deviation divided out, with the statistics kept in the model's config so that a
saved model decodes through its tokenizer by itself."""

from __future__ import annotations

import torch


def check_latent_statistics(latent_channels: int, latent_mean: list[float] | None,
                            latent_std: list[float] | None) -> None:
    """Refuse statistics that do not give one positive value per channel."""
    for name, values in (("latent_mean", latent_mean), ("latent_std", latent_std)):
        if values is not None and len(values) != latent_channels:
            raise ValueError(f"{name} must hold {latent_channels} values (one per channel), got {len(values)}")
    if latent_std is not None and min(latent_std) <= 0:
        raise ValueError("latent_std must be positive")


class StandardizedLatentsMixin:
    """For a model whose config holds ``latent_channels``, ``latent_mean`` and ``latent_std``."""

    def normalize_latents(self, latents: torch.Tensor) -> torch.Tensor:
        """Tokenizer latents ``(B, C, g, g)`` -> the standardized latents the model works on."""
        mean, std = self._latent_statistics(latents)
        return (latents - mean) / std

    def denormalize_latents(self, latents: torch.Tensor) -> torch.Tensor:
        """The inverse of :meth:`normalize_latents` (what a pipeline hands to the tokenizer's decoder)."""
        mean, std = self._latent_statistics(latents)
        return latents * std + mean

    def _latent_statistics(self, latents: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        channels = self.config.latent_channels
        mean = torch.tensor(self.config.latent_mean or [0.0] * channels, device=latents.device, dtype=latents.dtype)
        std = torch.tensor(self.config.latent_std or [1.0] * channels, device=latents.device, dtype=latents.dtype)
        return mean.view(1, -1, 1, 1), std.view(1, -1, 1, 1)
