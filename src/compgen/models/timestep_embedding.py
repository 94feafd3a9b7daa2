"""The diffusion step as the models take it: a number or a tensor broadcast to the batch, and its sinusoidal embedding
(the U-Net, the DiT and MAR's diffusion head)."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn


def broadcast_timesteps(timestep: torch.Tensor | float | int, batch_size: int, device: torch.device) -> torch.Tensor:
    """A diffusion step given as a number, a scalar tensor or a ``(B,)`` tensor, as a ``(B,)`` tensor on ``device``."""
    timesteps = torch.as_tensor(timestep, device=device)
    return timesteps.expand(batch_size) if timesteps.ndim == 0 else timesteps


class SinusoidalTimesteps(nn.Module):
    """diffusers' ``Timesteps`` embedding (sinusoids of ``t``, ``max_period`` 10000) with its frequency table computed
    once instead of at every call: the same values, without an ``arange`` and an ``exp`` per step."""

    def __init__(self, num_channels: int, flip_sin_to_cos: bool = True, downscale_freq_shift: float = 0.0,
                 max_period: int = 10000) -> None:
        super().__init__()
        half = num_channels // 2
        exponent = -math.log(max_period) * torch.arange(0, half, dtype=torch.float32) / (half - downscale_freq_shift)
        self.register_buffer("frequencies", torch.exp(exponent), persistent=False)
        self.num_channels = num_channels
        self.flip_sin_to_cos = flip_sin_to_cos

    def forward(self, timesteps: torch.Tensor) -> torch.Tensor:
        angles = timesteps[:, None].float() * self.frequencies.float()[None, :]
        sin, cos = torch.sin(angles), torch.cos(angles)
        embedding = torch.cat((cos, sin) if self.flip_sin_to_cos else (sin, cos), dim=-1)
        return F.pad(embedding, (0, 1, 0, 0)) if self.num_channels % 2 else embedding
