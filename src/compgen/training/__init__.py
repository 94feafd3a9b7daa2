"""compgen.training: the one training loop (:class:`Trainer`), the tasks that plug into it, and the study runner.

A script builds a model, wraps it in a task (:class:`DDPMTask`, :class:`MaskGITTask`, :class:`DiTTask`,
:class:`VQTask`) and runs it with :func:`compgen.training.run_setup.prepare_run` / ``TrainingRun.train``; see
``examples/`` and ``ARCHITECTURE.md``.
"""

from .config import TrainingConfig
from .ddpm_task import DDPMTask
from .dit_task import DiTTask
from .maskgit_task import MaskGITTask
from .task import TrainingTask
from .trainer import Trainer
from .vq_task import VQTask

__all__ = ["DDPMTask", "DiTTask", "MaskGITTask", "Trainer", "TrainingConfig", "TrainingTask", "VQTask"]
