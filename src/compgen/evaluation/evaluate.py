"""Deprecated name of :mod:`compgen.evaluation.rescore` (the re-scoring command).

    python -m compgen.evaluation.rescore ...

This alias goes in a later release."""

import warnings

from .rescore import *  # noqa: F403
from .rescore import main

warnings.warn("compgen.evaluation.evaluate is now compgen.evaluation.rescore; the old name goes in a later "
              "release", FutureWarning, stacklevel=2)

if __name__ == "__main__":
    main()
