"""Load the repository's runnable scripts (``examples/``, ``dataset_scripts/``) as modules, to call their ``main``."""

from pathlib import Path
from types import ModuleType

from compgen.studies.runner import load_script

REPO_ROOT = Path(__file__).resolve().parents[1]


def load_repo_script(relative_path: str) -> ModuleType:
    """Execute ``REPO_ROOT / relative_path`` as a fresh module named after the file, and return it."""
    return load_script(REPO_ROOT / relative_path)
