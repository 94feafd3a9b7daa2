"""The one reading of a learning curve that every summary shares: the first evaluated step at which a curve reaches a
threshold (model cards, study comparisons, results folders and the toy model all report it)."""

from __future__ import annotations

from collections.abc import Sequence


def first_step_at(steps: Sequence[float], values: Sequence[float], threshold: float) -> float | None:
    """The first of ``steps`` whose value is at least ``threshold`` (``None`` if the curve never reaches it); the step
    is returned as given (an ``int`` for evaluated steps)."""
    if len(steps) != len(values):
        raise ValueError(f"a curve needs one value per step, got {len(steps)} steps and {len(values)} values")
    for step, value in zip(steps, values, strict=True):
        if value >= threshold:
            return step
    return None
