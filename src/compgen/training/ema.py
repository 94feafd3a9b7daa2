"""Exponential moving average of a model's weights, with a momentum schedule.

One class serves two roles: the EMA weights exported after training (diffusers-style ``--use_ema``), and the
JEPA target encoder, which I-JEPA defines as an EMA of the online network with momentum rising to 1.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import torch
from torch import nn

MOMENTUM_SCHEDULES = ("constant", "linear", "warmup")
"""The kinds of :class:`MomentumSchedule`."""


@dataclass(frozen=True)
class MomentumSchedule:
    """Momentum at a step: ``constant`` (always ``start``), ``linear`` (start -> end over ``total_steps``), or
    ``warmup`` (``min(start, (1 + step) / (10 + step))``, the usual EMA warm-up)."""

    start: float = 0.999
    end: float = 1.0
    kind: str = "constant"
    total_steps: int = 1

    def __post_init__(self) -> None:
        if self.kind not in MOMENTUM_SCHEDULES:
            raise ValueError(f"unknown momentum schedule {self.kind!r}; use constant, linear or warmup")
        if not (0.0 <= self.start <= 1.0 and 0.0 <= self.end <= 1.0):
            raise ValueError(f"momentum must be in [0, 1], got start={self.start}, end={self.end}")

    def __call__(self, step: int) -> float:
        if self.kind == "constant":
            return self.start
        if self.kind == "warmup":
            return min(self.start, (1.0 + step) / (10.0 + step))
        fraction = min(max(step / max(self.total_steps, 1), 0.0), 1.0)
        return self.start + (self.end - self.start) * fraction


class ExponentialMovingAverage(nn.Module):
    """A frozen copy of ``model`` updated as ``shadow = m * shadow + (1 - m) * online`` after each step.

    The update is two multi-tensor kernels whatever the model's size: one ``lerp`` over every parameter and one copy
    of the buffers that training changes (BatchNorm statistics); buffers outside the state dict are constants (value
    tables) and are not copied.
    """

    def __init__(self, model: nn.Module, schedule: MomentumSchedule | None = None) -> None:
        super().__init__()
        self.schedule = schedule or MomentumSchedule()
        self.shadow = copy.deepcopy(model).eval().requires_grad_(False)

    @torch.no_grad()
    def update(self, model: nn.Module, step: int) -> float:
        """Move the shadow towards ``model`` with the momentum of ``step``; returns that momentum."""
        momentum = self.schedule(step)
        shadow_params = list(self.shadow.parameters())
        online_params = list(model.parameters())
        if len(shadow_params) != len(online_params):
            raise ValueError("EMA update: the online model's parameters do not match the shadow's")
        targets = [p if p.dtype == s.dtype else p.to(s.dtype) for s, p in zip(shadow_params, online_params,
                                                                               strict=True)]
        torch._foreach_lerp_(shadow_params, targets, 1.0 - momentum)
        shadow_buffers, buffers = _state_buffers(self.shadow), _state_buffers(model)
        if len(shadow_buffers) != len(buffers):
            raise ValueError("EMA update: the online model's buffers do not match the shadow's")
        if buffers:
            torch._foreach_copy_(shadow_buffers, buffers)
        return momentum

    def forward(self, *args, **kwargs):
        return self.shadow(*args, **kwargs)


def _state_buffers(model: nn.Module) -> list[torch.Tensor]:
    """The buffers of ``model`` that its state dict holds (the persistent ones), in module order."""
    return [buffer for module in model.modules() for name, buffer in module.named_buffers(recurse=False)
            if name not in module._non_persistent_buffers_set]
