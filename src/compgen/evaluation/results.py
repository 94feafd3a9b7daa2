"""Deprecated name of :mod:`compgen.evaluation.results_folder` (the results-folder command).

    python -m compgen.evaluation.results_folder ...

This alias goes in a later release."""

import warnings

from .results_folder import *  # noqa: F403
from .results_folder import main

warnings.warn("compgen.evaluation.results is now compgen.evaluation.results_folder; the old name goes in a later "
              "release", FutureWarning, stacklevel=2)

if __name__ == "__main__":
    main()
