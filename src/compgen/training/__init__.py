"""compgen.training: the one training loop (:class:`Trainer`) and what it needs while it runs.

The loop (``trainer.py``) with its options (``config.py``), seeded batches (``batches.py``), state and checkpoints
(``state.py``, ``checkpoint.py``, ``run_directory.py``), EMA weights, acceleration and time profile, the weights a
fine-tuning run starts from (``fine_tuning.py``), and the end of a run (``export.py``: the pipeline, its model card
(``model_card.py``) and the Hub push). What each model adds to the loop is a task in :mod:`compgen.training.tasks`
(:class:`DDPMTask`, :class:`MaskGITTask`, :class:`DiTTask`, :class:`FlowMatchingDiTTask`, :class:`GIVTTask`,
:class:`MARTask`, and the tokenizers' :class:`VQTask` and :class:`KLTask`). Setting a run up from the command line
(options, output directory, data, probes, ``--init_from``, a token model's tokenizer) is :mod:`compgen.launch`, which
sits above this package.
"""

from typing import Any

from . import tasks
from .config import TrainingConfig as TrainingConfig
from .trainer import Trainer as Trainer

__all__ = sorted([*tasks.__all__, "Trainer", "TrainingConfig"])


def __getattr__(name: str) -> Any:
    """The tasks (:mod:`compgen.training.tasks`), imported on first use."""
    if name in tasks.__all__:
        return getattr(tasks, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
