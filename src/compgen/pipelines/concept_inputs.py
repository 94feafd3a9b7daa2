"""The inputs of every compgen pipeline: concept prompts (``"111"``, ``(1, 1, 1)`` or a list of those) turned into the
model's conditioning batch, with the null half for classifier-free guidance, and the check of the sampling options."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import torch

from ..concepts import ConceptLike, ConceptSpace, ConceptSpaceLike

OUTPUT_TYPES = ("pil", "np", "pt", "latent")
"""The ``output_type`` values every compgen pipeline accepts."""

ConceptPrompts = ConceptLike | Mapping[str, str | int] | Sequence[ConceptLike] | torch.Tensor | np.ndarray
"""One concept class (``"101"``, ``(1, 0, 1)``, ``{"shape": "triangle", ...}``), a list of them, or a
``(N, V)`` integer array."""


def check_transformer(pipeline: str, transformer: Any, expected: type) -> None:
    """Refuse another family's transformer (a MaskGIT export loaded with a DiT pipeline, or the reverse) when the
    pipeline is built, naming both, instead of an ``AttributeError`` on a config key the other family lacks."""
    model = getattr(transformer, "_orig_mod", transformer)  # a torch.compile'd model is its wrapped module
    if not isinstance(model, expected):
        raise ValueError(f"{pipeline} needs a {expected.__name__}, got {type(model).__name__}: an export of "
                         "another family (DiffusionPipeline.from_pretrained(path) loads the pipeline its "
                         "model_index.json names)")


def check_sampling_options(output_type: str, num_inference_steps: int | None) -> None:
    """Refuse what would silently give a wrong result: an unknown output type, zero or negative steps."""
    if output_type not in OUTPUT_TYPES:
        raise ValueError(f"output_type must be one of {OUTPUT_TYPES}, got {output_type!r}")
    if num_inference_steps is not None and (
            isinstance(num_inference_steps, bool) or not isinstance(num_inference_steps, int)
            or num_inference_steps < 1):
        raise ValueError(f"num_inference_steps must be a positive integer (or None for every training step), "
                         f"got {num_inference_steps!r}")


def check_unmasking_options(output_type: str, num_inference_steps: int | None) -> None:
    """:func:`check_sampling_options` for the masked-token pipelines (MaskGIT, GIVT, MAR): ``num_inference_steps``
    is required, since masked decoding has no training steps to fall back on."""
    check_sampling_options(output_type, num_inference_steps)
    if num_inference_steps is None:
        raise ValueError("num_inference_steps must be a positive integer (masked decoding has no training steps)")


def check_temperature(temperature: float, name: str = "temperature") -> None:
    """A sampling temperature must be a finite number >= 0: NaN or inf would pass a ``< 0`` check and sample NaN
    images (MAR), fail deep inside ``torch.multinomial`` (GIVT) or re-mask at random (MaskGIT)."""
    if isinstance(temperature, bool) or not isinstance(temperature, int | float) or not math.isfinite(temperature) \
            or temperature < 0:
        raise ValueError(f"{name} must be a finite number >= 0, got {temperature!r}")


Generators = torch.Generator | list[torch.Generator] | None
"""A pipeline's ``generator``: one for the whole batch, or a list with one per image (the batch then reproduces the
single-image calls with those generators, image for image), or ``None``."""


def check_generators(generator: Generators, batch_size: int) -> None:
    """Refuse a list of generators whose length is not the number of images, or that holds something else."""
    if isinstance(generator, list):
        if len(generator) != batch_size:
            raise ValueError(f"generator is a list of {len(generator)} generators, but {batch_size} images are "
                             "generated (one generator per image: num_prompts x num_images_per_prompt)")
        if not all(isinstance(g, torch.Generator) for g in generator):
            raise ValueError("generator must be a torch.Generator or a list of torch.Generator, one per image")
    elif generator is not None and not isinstance(generator, torch.Generator):
        raise ValueError(f"generator must be a torch.Generator or a list of them, got {type(generator).__name__}")


def check_step_callback(callback_on_step_end: Any, tensor_inputs: Sequence[str], allowed: Sequence[str]) -> None:
    """diffusers' step-callback contract: ``callback_on_step_end(pipe, step_index, timestep, callback_kwargs)``
    returning a dict, asking only for tensors the pipeline hands over."""
    if callback_on_step_end is not None and not callable(callback_on_step_end):
        raise ValueError(f"callback_on_step_end must be callable, got {type(callback_on_step_end).__name__}")
    unknown = [name for name in tensor_inputs if name not in allowed]
    if unknown:
        raise ValueError(f"callback_on_step_end_tensor_inputs {unknown}: this pipeline hands over only {list(allowed)}")


def callback_latents(outputs: Any, latents: torch.Tensor, allowed: Sequence[str], finite: bool = True
                     ) -> torch.Tensor:
    """What a step callback returned, checked: a dict (``{}`` changes nothing) whose keys the pipeline hands over,
    whose ``"latents"`` has the shape of those handed over (not broadcast over the batch) and, for continuous latents,
    holds no NaN or infinity where it replaces them; the latents to go on with."""
    if not isinstance(outputs, dict):
        raise ValueError(f"callback_on_step_end must return a dict of the tensors it replaces ({{}} for none), got "
                         f"{type(outputs).__name__}")
    unknown = [name for name in outputs if name not in allowed]
    if unknown:
        raise ValueError(f"callback_on_step_end returned {unknown}: this pipeline takes back only {list(allowed)}")
    if "latents" not in outputs:
        return latents
    returned = outputs["latents"]
    if not isinstance(returned, torch.Tensor) or tuple(returned.shape) != tuple(latents.shape):
        shape = tuple(returned.shape) if isinstance(returned, torch.Tensor) else type(returned).__name__
        raise ValueError(f"callback_on_step_end returned latents of shape {shape}, the pipeline's are "
                         f"{tuple(latents.shape)}")
    if finite and returned.is_floating_point() and not bool(torch.isfinite(returned).all()):
        raise ValueError("callback_on_step_end returned latents with NaN or inf")
    return returned


class GuidedSamplingMixin:
    """diffusers' sampling-state conventions for a pipeline: ``guidance_scale``, ``do_classifier_free_guidance`` and
    ``num_timesteps`` read during a call (a ``callback_on_step_end`` may change ``pipe._guidance_scale``, which the
    loop reads at every step, as in diffusers' pipelines)."""

    _guidance_scale: float = 1.0
    _num_timesteps: int = 0

    @property
    def guidance_scale(self) -> float:
        """The classifier-free guidance weight the current (or last) call samples with."""
        return self._guidance_scale

    @property
    def do_classifier_free_guidance(self) -> bool:
        """Whether the current (or last) call guides: its batch carries the null-concept half."""
        return self._guidance_scale != 1.0

    @property
    def num_timesteps(self) -> int:
        """The steps of the current (or last) call's sampling loop."""
        return self._num_timesteps


def check_latents_shape(latents: torch.Tensor | None, shape: tuple[int, ...], what: str) -> None:
    """Refuse ``latents`` of another shape than the batch's: they would be broadcast or fail deep in the loop."""
    if latents is not None and tuple(latents.shape) != tuple(shape):
        raise ValueError(f"latents must have shape {tuple(shape)} ({what}), got {tuple(latents.shape)}")


def check_starting_noise(latents: torch.Tensor | None, shape: tuple[int, ...], what: str) -> None:
    """Refuse starting noise of another shape than the batch's, or with a NaN or infinity: one such value spreads
    through the denoiser's convolutions or attention to every pixel of its image (NaN images, not an error)."""
    check_latents_shape(latents, shape, what)
    if latents is not None and not bool(torch.isfinite(latents).all()):
        bad = int((~torch.isfinite(latents)).sum())
        raise ValueError(f"latents must be finite starting noise: {bad} of {latents.numel()} values are NaN or inf")


class ConceptConditionedModel(Protocol):
    """What the conditioning needs from a denoiser (``TupleConditionedUNet2DModel``, ``MaskGITTransformer``)."""

    concept_space: ConceptSpace
    has_null_embeddings: bool
    dtype: torch.dtype


@dataclass
class ConceptInputs:
    """The concept inputs of one sampling batch, passed to the model at every step as ``**model_kwargs``.

    With classifier-free guidance the tensors hold two halves, conditional first, then unconditional (every
    concept replaced by its null embedding through ``drop_mask``): the model input must be doubled to match, and
    the prediction split with ``.chunk(2)``.
    """

    concepts: torch.LongTensor
    """``(batch_size, V)`` class indices, or ``(2 * batch_size, V)`` with guidance."""
    concept_values: torch.Tensor | None
    """Continuous concept values for ``full`` conditioning (``None``: the model's canonical class values)."""
    drop_mask: torch.BoolTensor | None
    """Where the null concept replaces a variable; ``None`` for a model without null concepts."""
    batch_size: int
    """Number of images generated (``num_prompts * num_images_per_prompt``)."""
    do_classifier_free_guidance: bool

    @property
    def model_kwargs(self) -> dict[str, torch.Tensor | None]:
        """The conditioning arguments of the model's ``forward``."""
        return {"concepts": self.concepts, "concept_values": self.concept_values, "drop_mask": self.drop_mask}


def prepare_concept_inputs(
    model: ConceptConditionedModel,
    prompts: ConceptPrompts,
    num_images_per_prompt: int = 1,
    guidance_scale: float = 1.0,
    concept_values: torch.Tensor | None = None,
    device: torch.device | str | None = None,
) -> ConceptInputs:
    """Validate the prompts against ``model.concept_space`` and build the batch the model is conditioned on.

    ``concept_values`` (``full`` conditioning) may be given per prompt, ``(num_prompts, D)``, or per image,
    ``(num_prompts * num_images_per_prompt, D)``. ``guidance_scale != 1`` appends the unconditional half and needs a
    model trained with ``concept_dropout > 0`` (raises ``ValueError`` otherwise).
    """
    if isinstance(guidance_scale, bool) or not isinstance(guidance_scale, int | float) or not math.isfinite(
            guidance_scale):
        raise ValueError(f"guidance_scale must be a finite number (1 disables guidance), got {guidance_scale!r}")
    do_classifier_free_guidance = guidance_scale != 1.0
    if do_classifier_free_guidance and not model.has_null_embeddings:
        raise ValueError(
            "classifier-free guidance (guidance_scale != 1) needs a model trained with concept_dropout > 0, "
            f"which learns the null concepts; this {type(model).__name__}'s concept_dropout is 0"
        )
    classes = parse_concept_prompts(model.concept_space, prompts, num_images_per_prompt).to(device)
    batch_size = classes.shape[0]
    if concept_values is not None:
        concept_values = torch.as_tensor(concept_values)
        if not torch.isfinite(concept_values).all():
            raise ValueError("concept_values must be finite numbers, got NaN or infinite values (a model "
                             "conditioned on them draws noise)")
        if concept_values.ndim == 2 and concept_values.shape[0] * num_images_per_prompt == batch_size:
            concept_values = concept_values.repeat_interleave(num_images_per_prompt, dim=0)
        concept_values = concept_values.to(device=device, dtype=model.dtype)
    # An explicit mask keeps sampling free of concept dropout even if the model is left in training mode.
    drop_mask = torch.zeros_like(classes, dtype=torch.bool) if model.has_null_embeddings else None
    if do_classifier_free_guidance:
        classes = torch.cat([classes, classes])
        drop_mask = torch.cat([drop_mask, torch.ones_like(drop_mask)])
        if concept_values is not None:
            concept_values = torch.cat([concept_values, concept_values])
    return ConceptInputs(classes, concept_values, drop_mask, batch_size, do_classifier_free_guidance)


def parse_concept_prompts(
    space: ConceptSpaceLike,
    prompts: ConceptPrompts,
    num_images_per_prompt: int = 1,
) -> torch.LongTensor:
    """Validate concept prompts against ``space`` and return their class indices, ``(N * num_images_per_prompt, V)``.

    Each prompt is repeated ``num_images_per_prompt`` times in a row (``["000", "111"], 2`` gives
    ``000, 000, 111, 111``). Raises ``ValueError`` for an empty list, a malformed tuple or an out-of-range value.
    """
    space = ConceptSpace.from_dict(space)
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
