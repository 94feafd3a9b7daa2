"""Load the repository's runnable scripts (``examples/``, ``dataset_scripts/``) as modules, to call their ``main``,
or run them in two processes."""

import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

from compgen.studies.runner import load_script

REPO_ROOT = Path(__file__).resolve().parents[1]


def load_repo_script(relative_path: str) -> ModuleType:
    """Execute ``REPO_ROOT / relative_path`` as a fresh module named after the file, and return it."""
    return load_script(REPO_ROOT / relative_path)


def torchrun(script: str, *argv: str) -> subprocess.CompletedProcess:
    """Run ``REPO_ROOT / script`` data-parallel in two CPU processes (``torchrun``, gloo), one thread each."""
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
               str(REPO_ROOT / script), *argv]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    result = subprocess.run(command, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-4000:]
    return result


def log_steps(output_dir: Path) -> list[int]:
    """The steps a run's ``learning_dynamics.jsonl`` holds, one per evaluation line."""
    return [json.loads(line)["step"] for line in (output_dir / "learning_dynamics.jsonl").read_text().splitlines()]
