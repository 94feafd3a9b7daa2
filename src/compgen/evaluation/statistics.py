"""The statistics every results folder uses, stated once: how far a share of seeds can be trusted (Wilson),
whether two shares differ (Fisher's exact test), what a folder's family of such tests leaves (Holm), and when a value
is too near its threshold to read a verdict from it (on the bar).

Ten seeds cannot tell 3 from 5 (:func:`share_interval`); a folder that makes eleven comparisons and reports the one
with p 0.02 has found about 0.22 after Holm's correction (:func:`holm_adjusted`); a fidelity 0.004 over its bar on a
machine whose kernels move it by 0.005 holds on one machine and fails on the other (:func:`bar_verdict`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np


def fisher_exact_p(a: int, n: int, b: int, m: int) -> float:
    """Two-sided Fisher exact p-value of ``a`` of ``n`` against ``b`` of ``m`` (the tables no more likely than the one
    seen), rounded to 4 digits: whether two shares of seeds can be told apart (3 of 10 against 1 of 10: 0.582)."""
    total, held = n + m, a + b

    def probability(k: int) -> float:
        return math.comb(n, k) * math.comb(m, held - k) / math.comb(total, held)

    seen = probability(a)
    ks = range(max(0, held - m), min(n, held) + 1)
    return round(min(1.0, sum(probability(k) for k in ks if probability(k) <= seen * (1 + 1e-9))), 4)


def share_interval(held: int, total: int, confidence: float = 0.95) -> tuple[float, float]:
    """The Wilson score interval of a share ``held / total`` (e.g. seeds that hold a result): with ten seeds, 3 of 10
    is (0.11, 0.60), which is why ten seeds cannot tell 3 from 5."""
    if isinstance(total, bool) or not isinstance(total, int) or total < 1:
        raise ValueError(f"total must be a positive int, got {total!r}")
    if isinstance(held, bool) or not isinstance(held, int) or not 0 <= held <= total:
        raise ValueError(f"held must be an int in [0, {total}], got {held!r}")
    z = {0.9: 1.6448536269514722, 0.95: 1.959963984540054, 0.99: 2.5758293035489004}.get(confidence)
    if z is None:
        raise ValueError(f"confidence must be 0.9, 0.95 or 0.99, got {confidence!r}")
    share = held / total
    centre = (share + z * z / (2 * total)) / (1 + z * z / total)
    half = z * np.sqrt(share * (1 - share) / total + z * z / (4 * total * total)) / (1 + z * z / total)
    return round(float(max(0.0, centre - half)), 4), round(float(min(1.0, centre + half)), 4)


def holm_adjusted(p_values: Mapping[str, float] | Sequence[float]) -> dict[str, float] | list[float]:
    """Holm's step-down adjustment of a family of p-values (every comparison a folder makes, not the ones it
    reports): the ``k``-th smallest is multiplied by ``m - k + 1``, made monotone, capped at 1, rounded to 4 digits.
    A dict keeps its keys; a sequence its order."""
    keys = list(p_values) if isinstance(p_values, Mapping) else list(range(len(p_values)))
    values = [float(p_values[k]) for k in keys]
    if any(not (0.0 <= v <= 1.0) for v in values):  # nan fails too
        raise ValueError(f"p-values must lie in [0, 1], got {values}")
    order = sorted(range(len(values)), key=lambda i: values[i])
    adjusted, running = [0.0] * len(values), 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (len(values) - rank) * values[i]))
        adjusted[i] = round(running, 4)
    if isinstance(p_values, Mapping):
        return dict(zip(keys, adjusted, strict=True))
    return adjusted


BAR_VERDICTS = ("holds", "fails", "on the bar")
"""What :func:`bar_verdict` says of a value against its threshold."""


def bar_verdict(value: float, threshold: float, spread: float, above: bool = True) -> str:
    """``"holds"`` or ``"fails"`` where ``value`` is further than ``spread`` from ``threshold`` (on the side ``above``
    asks for, or below it), else ``"on the bar"``: a verdict another machine's rounding or one more seed could turn.
    ``spread`` is a measured one (two machines' difference on the same run, or the spread over seeds), stated beside
    the verdict."""
    if not all(math.isfinite(x) for x in (value, threshold, spread)) or spread < 0:
        raise ValueError(f"value, threshold and a spread >= 0 must be finite numbers, got {value}, {threshold}, "
                         f"{spread}")
    margin = value - threshold if above else threshold - value
    if abs(margin) <= spread:
        return "on the bar"
    return "holds" if margin > 0 else "fails"
