"""compgen.training: the one training loop (:class:`Trainer`) and the tasks that plug into it.

A script builds a model, wraps it in a task (:class:`DDPMTask`, :class:`MaskGITTask`, :class:`DiTTask`,
:class:`GIVTTask`, :class:`MARTask`, and the tokenizers' :class:`VQTask` and :class:`KLTask`) and runs it with
:func:`compgen.training.run_setup.prepare_run` / ``TrainingRun.train``; see ``examples/`` and ``ARCHITECTURE.md``.
Studies (grids of such runs) are :mod:`compgen.studies`.
"""

from .config import TrainingConfig
from .ddpm_task import DDPMTask
from .dit_task import DiTTask
from .givt_task import GIVTTask
from .kl_task import KLTask
from .mar_task import MARTask
from .maskgit_task import MaskGITTask
from .task import TrainingTask
from .trainer import Trainer
from .vq_task import VQTask

__all__ = ["DDPMTask", "DiTTask", "GIVTTask", "KLTask", "MARTask", "MaskGITTask", "Trainer", "TrainingConfig",
           "TrainingTask", "VQTask"]
