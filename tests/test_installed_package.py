"""compgen installed as a package, away from any checkout: every recipe runs by name (``python -m compgen.train``)
and finds what it ships with (the default probes)."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_the_recipes_run_from_an_installed_package_without_the_checkout(tmp_path):
    source = tmp_path / "source"
    for name in ("src", "pyproject.toml", "README.md"):
        copy = shutil.copytree if (REPO / name).is_dir() else shutil.copy
        copy(REPO / name, source / name if (REPO / name).is_dir() else source)
    site = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps",
                    "--target", str(site), str(source)], check=True, capture_output=True)
    environment = os.environ | {"PYTHONPATH": str(site)}

    def run(*argv: str) -> str:
        done = subprocess.run([sys.executable, *argv], cwd=tmp_path, env=environment, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        return done.stdout

    assert run("-c", "import compgen; print(compgen.__file__)").startswith(str(site))
    assert "usage: python -m compgen.train tuple-unet" in run("-m", "compgen.train", "tuple-unet", "--help")
    shipped = Path(run("-c", "from compgen.evaluation.probes import SHIPPED_PROBES_DIR as d; print(d)").strip())
    assert shipped.is_relative_to(site) and len(list(shipped.glob("shapes-*/config.json"))) >= 2
