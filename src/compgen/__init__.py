"""compgen: compositional generalization in visual generative models (concept graphs, data, models, evaluation).

Heavy submodules (torch, diffusers, datasets) load lazily on first use of a name, so ``import compgen``
stays fast and the concept-graph core works without them.
"""

from __future__ import annotations

import importlib
from typing import Any

from .concepts import (
    SPLIT_PRESETS,
    ConceptClass,
    ConceptGraph,
    ConceptSpace,
    ConceptVariable,
    SplitPreset,
    concept_distance,
    get_split_preset,
    shapes_space,
)
from .families import family_exports

__version__ = "0.1.0"

# Public name -> module that defines it (imported on first access).
_LAZY_EXPORTS: dict[str, str] = {
    "RenderConfig": "compgen.shapes",
    "ShapesBatch": "compgen.shapes",
    "render_classes": "compgen.shapes",
    "ConceptGraphShapesConfig": "compgen.data.concept_graph_builder",
    "ConceptGraphShapes": "compgen.data.concept_graph_builder",
    "build_concept_graph_dataset": "compgen.data.concept_graph_builder",
    "contact_sheet": "compgen.data.export",
    "CelebAConceptsConfig": "compgen.data.celeba",
    "CelebAConcepts": "compgen.data.celeba",
    "celeba_space": "compgen.data.celeba",
    "ConceptProbes": "compgen.evaluation.probes",
    "LearningDynamicsTracker": "compgen.evaluation.tracker",
    "MaskGITScheduler": "compgen.schedulers.scheduling_maskgit",
    **family_exports(),  # every family's model and pipeline (compgen.families)
}

__all__ = [
    "SPLIT_PRESETS",
    "ConceptClass",
    "ConceptGraph",
    "ConceptSpace",
    "ConceptVariable",
    "SplitPreset",
    "concept_distance",
    "get_split_preset",
    "shapes_space",
    *_LAZY_EXPORTS,
]


def __getattr__(name: str) -> Any:
    module = _LAZY_EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'compgen' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
