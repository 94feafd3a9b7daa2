"""Figure helpers shared by every compgen plot: Paper A's level colours, white-background subplots, atomic PNGs."""

from __future__ import annotations

import io
import os
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from ..atomic_io import atomic_write_bytes  # noqa: E402

LEVEL_COLORS = {0: "#56C1FF", 1: "#FF95CA", 2: "#ED220D", 3: "#8E44AD"}
"""Paper A's level colors (levels 0-2); level 3 (4-cube) in purple."""


def level_color(level: int) -> str:
    return LEVEL_COLORS.get(int(level), "#555555")


def subplots(*args: Any, **kwargs: Any):
    """``plt.subplots`` with a white background (Agg backend)."""
    kwargs.setdefault("constrained_layout", True)
    return plt.subplots(*args, **kwargs)


def save_figure(fig: plt.Figure, path: str | os.PathLike, dpi: int = 120) -> None:
    """Write a PNG atomically and close the figure."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi, facecolor="white")
    plt.close(fig)
    atomic_write_bytes(path, buffer.getvalue())


