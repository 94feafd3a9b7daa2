"""Training recipes, one module per model family plus the tokenizer: each holds its flags, presets, option checks and
how the model and its task are built, and ``main(argv)`` runs it through :func:`compgen.launch.run_setup.prepare_run`
and the shared loop.

Run one by its name in :func:`compgen.families.recipes` (no checkout needed)::

    python -m compgen.train tuple-unet --preset quickstart --output_dir runs/unet
    accelerate launch -m compgen.train maskgit --preset cpu-quick --output_dir runs/maskgit

``examples/train_*.py`` are the same commands as scripts, and study files name recipes (``recipe: tuple-unet``).
"""

from __future__ import annotations

import importlib
from types import ModuleType

from ..families import recipes


def load_recipe(name: str) -> ModuleType:
    """The recipe module called ``name`` (``tuple-unet``, ``maskgit``, ..., ``tokenizer``)."""
    known = recipes()
    if name not in known:
        raise ValueError(f"unknown recipe {name!r}; the recipes are {', '.join(known)}")
    return importlib.import_module(known[name].module)
