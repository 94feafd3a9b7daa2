"""The seconds-scale version of any study (``examples/run_study.py --study FILE --smoke``): the same grid of models,
conditioning modes and tokenizers, on tiny data with tiny token models, two steps each and the first seed only. It
checks that a study file runs end to end before hours go into it; its numbers mean nothing."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from .study import Study

SMOKE_DATA: dict[str, int] = {"images_per_class": 16, "test_images_per_class": 2, "tokenizer_images_per_class": 16}
"""Image counts of every dataset of a smoke study."""
SMOKE_FLAGS: dict[str, Any] = {"train_batch_size": 8, "eval_steps": 2, "eval_images_per_class": 2,
                               "checkpointing_steps": 2, "logging_steps": 1}
"""Flags of every cell."""
SMOKE_TOKEN_MODEL_FLAGS: dict[str, Any] = {"hidden_size": 16, "num_layers": 2, "num_heads": 2,
                                           "eval_inference_steps": 2}
"""Flags of every token model's cells (they replace the model's own)."""
SMOKE_TOKENIZER_FLAGS: dict[str, Any] = {"tokenizer_block_out_channels": "8,8,8", "tokenizer_embed_dim": 4,
                                         "codebook_size": 32,
                                         "max_train_steps": 2, "train_batch_size": 8}
"""Flags of every tokenizer."""
SMOKE_STEP_FLAGS: dict[str, int] = {"cross_entropy_delay_steps": 1, "cross_entropy_warmup_steps": 1}
"""Step counts a cell's flags may set that must fit the smoke run's two steps (set to these where a model sets them)."""


def smoke_study(study: Study) -> Study:
    """``study`` at seconds scale: tiny copies of its datasets (a concept-graph config name or definition; a directory
    or Hub id stays as it is), tiny token models and tokenizers, 2 steps, the first seed."""
    models = {}
    for name, model in study.models.items():
        flags = dict(model.get("flags", {}))
        flags |= {key: value for key, value in SMOKE_STEP_FLAGS.items() if key in flags}
        if study.model_tokenizer(model) is not None:
            flags |= SMOKE_TOKEN_MODEL_FLAGS | ({"jepa_layers": "auto"} if "jepa_layers" in flags else {})
        models[name] = model | {"flags": flags}
        if "steps" in model:
            models[name]["steps"] = 2
        if "datasets" in model:  # a name of a dataset the study defines elsewhere names its smoke copy
            defined = {entry["name"] for entry in study.defined_datasets()}
            models[name]["datasets"] = [f"smoke-{entry}" if isinstance(entry, str) and entry in defined
                                        else _smoke_dataset(entry)
                                        for entry in model["datasets"]]
    tokenizers = {name: _smoke_tokenizer(spec) for name, spec in (study.tokenizers or {}).items()}
    return dataclasses.replace(
        study, name=f"{study.name}-smoke", seeds=study.seeds[:1], steps=2,
        datasets=[_smoke_dataset(entry) for entry in study.datasets], flags=study.flags | SMOKE_FLAGS, models=models,
        tokenizer=_smoke_tokenizer(study.tokenizer) if study.tokenizer is not None else None,
        tokenizers=tokenizers or None)


def _smoke_tokenizer(spec: dict[str, Any]) -> dict[str, Any]:
    smoke = spec | {"flags": spec.get("flags", {}) | SMOKE_TOKENIZER_FLAGS}
    if "dataset" in spec:
        smoke["dataset"] = _smoke_dataset(spec["dataset"])
    return smoke


def _smoke_dataset(entry: str | dict[str, Any]) -> str | dict[str, Any]:
    """A tiny definition of a dataset: a builder config's or a study's definition with :data:`SMOKE_DATA`."""
    from ..data.concept_graph_builder import ConceptGraphShapes, ConceptGraphShapesConfig

    if isinstance(entry, dict):
        return entry | SMOKE_DATA | {"name": f"smoke-{entry['name']}"}
    if entry not in ConceptGraphShapes.builder_configs or Path(entry).is_dir():
        return entry  # an export directory or a Hub id: used as it is
    config, default = ConceptGraphShapes.builder_configs[entry], ConceptGraphShapesConfig(name=entry)
    own = [name for name in ConceptGraphShapesConfig.__annotations__ if name not in ("name", "description")]
    fields = {name: getattr(config, name) for name in own if getattr(config, name) != getattr(default, name)}
    fields = {k: list(v) if isinstance(v, tuple) else v for k, v in fields.items()}
    return fields | SMOKE_DATA | {"name": f"smoke-{entry}"}
