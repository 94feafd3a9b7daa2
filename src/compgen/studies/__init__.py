"""compgen.studies: controlled studies (a grid of models x conditioning x seeds x datasets) as one command.

A study file (:class:`Study`, ``studies/*.yaml``) names the grid; :func:`run_study` trains its tokenizers, then its
cells, through the example training scripts, skips finished cells, resumes unfinished ones and writes the summary.
``examples/run_study.py`` is its command line. The layers: :mod:`~compgen.studies.study` (the file, checked, and its
cells), :mod:`~compgen.studies.cells` (one cell: its command and identity), :mod:`~compgen.studies.records` (what a
cell's directory records, so a changed definition is refused), :mod:`~compgen.studies.runner` (commands run in
process, or over worker processes), :mod:`~compgen.studies.launchers` (local or SLURM), :mod:`~compgen.studies.
orchestration` (the order: tokenizers, cells, fine-tuning cells) and :mod:`~compgen.studies.summary` (the tables and
plots). Nothing in :mod:`compgen.training` or :mod:`compgen.launch` imports this package.
"""

from .cells import Cell
from .orchestration import run_study
from .records import StudyChangedError
from .study import CONDITIONING_MODES, Study

__all__ = ["CONDITIONING_MODES", "Cell", "Study", "StudyChangedError", "run_study"]
