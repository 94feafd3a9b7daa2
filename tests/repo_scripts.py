"""Load the repository's runnable scripts (``examples/``, ``dataset_scripts/``) as modules, to call their ``main``."""

import importlib.util
from pathlib import Path
from types import ModuleType

REPO_ROOT = Path(__file__).resolve().parents[1]


def load_repo_script(relative_path: str) -> ModuleType:
    """Execute ``REPO_ROOT / relative_path`` as a fresh module named after the file, and return it."""
    path = REPO_ROOT / relative_path
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
