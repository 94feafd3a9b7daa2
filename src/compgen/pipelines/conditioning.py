"""Concept-tuple prompts shared by every compgen pipeline: ``"111"``, ``(1, 1, 1)`` or a list of those."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from ..concepts import ConceptLike
from ..models.concept_embedding import SpaceLike, as_concept_space

ConceptPrompts = ConceptLike | Mapping[str, str | int] | Sequence[ConceptLike] | torch.Tensor | np.ndarray
"""One concept class (``"101"``, ``(1, 0, 1)``, ``{"shape": "triangle", ...}``), a list of them, or a
``(N, V)`` integer array."""


def parse_concept_prompts(
    space: SpaceLike,
    prompts: ConceptPrompts,
    num_images_per_prompt: int = 1,
) -> torch.LongTensor:
    """Validate concept prompts against ``space`` and return their class indices, ``(N * num_images_per_prompt, V)``.

    Each prompt is repeated ``num_images_per_prompt`` times in a row (``["000", "111"], 2`` gives
    ``000, 000, 111, 111``). Raises ``ValueError`` for an empty list, a malformed tuple or an out-of-range value.
    """
    space = as_concept_space(space)
    if isinstance(num_images_per_prompt, bool) or not isinstance(num_images_per_prompt, int):
        raise ValueError(f"num_images_per_prompt must be an int, got {num_images_per_prompt!r}")
    if num_images_per_prompt < 1:
        raise ValueError(f"num_images_per_prompt must be at least 1, got {num_images_per_prompt}")

    prompt_list = _as_prompt_list(prompts)
    if not prompt_list:
        raise ValueError("no concept prompts given: pass a class such as '111' or (1, 1, 1), or a list of them")
    classes = torch.tensor([space.parse(prompt) for prompt in prompt_list], dtype=torch.long)
    return classes.repeat_interleave(num_images_per_prompt, dim=0)


def _as_prompt_list(prompts: Any) -> list[Any]:
    """Split ``prompts`` into single classes: a string, a mapping or a flat sequence of integers is one class."""
    if isinstance(prompts, torch.Tensor | np.ndarray):
        array = prompts.tolist()
        if np.ndim(array) == 1:
            return [array]
        if np.ndim(array) == 2:
            return list(array)
        raise ValueError(f"a concept array must have shape (V,) or (N, V), got shape {tuple(np.shape(prompts))}")
    if isinstance(prompts, str | Mapping):
        return [prompts]
    if not isinstance(prompts, Sequence):
        raise ValueError(f"cannot interpret {prompts!r} as concept prompts; pass '111', (1, 1, 1) or a list of those")
    if prompts and all(_is_index(item) for item in prompts):
        return [prompts]
    return list(prompts)


def _is_index(item: Any) -> bool:
    return isinstance(item, int | np.integer) and not isinstance(item, bool)
