"""What each model family adds to the loop, one task per module: the contract (``base.py``), the pixel U-Net's DDPM
(``ddpm.py``), MaskGIT (``maskgit.py``), the latent models (``dit.py``, ``flow_matching.py``, the same DiT by flow
matching, and ``masked_latent.py`` with ``givt.py`` and ``mar.py``) sharing ``latent_tokenizer.py`` (a frozen
tokenizer's latents and statistics), and the tokenizers (``vq_tokenizer.py``, ``kl_tokenizer.py``). Each family's
task is exported by its row of ``compgen.families.FAMILIES``, imported when first used."""

import importlib
from typing import Any

from ...families import FAMILIES, ModelFamily
from .base import TrainingTask as TrainingTask

_TASKS = dict(ModelFamily.split(family.task)[::-1] for family in FAMILIES) | {
    "VQTask": f"{__name__}.vq_tokenizer", "KLTask": f"{__name__}.kl_tokenizer"}
"""``{task class: module}``: every family's task (from the family table) and the tokenizers'."""

__all__ = sorted([*_TASKS, "TrainingTask"])


def __getattr__(name: str) -> Any:
    """A task class, imported on first use (the families' tasks come from ``compgen.families.FAMILIES``)."""
    if name not in _TASKS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(_TASKS[name]), name)
    globals()[name] = value
    return value
