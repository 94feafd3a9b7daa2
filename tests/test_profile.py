"""Where a run's time goes: the profile's total starts with the command, the launcher's startup included."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from compgen.training.profile import RunProfile

CHILD = ("import json; from compgen.training.profile import _process_start, process_start_time; "
         "print(json.dumps([process_start_time(), _process_start('self')[0]]))")


def _starts(tmp_path, env_extra: dict[str, str]) -> tuple[float, float, float]:
    """(the run's start as the child counts it, the child's own start, its parent's start), the parent being a
    script named like a launcher."""
    launcher = tmp_path / "accelerate_stub.py"
    launcher.write_text(textwrap.dedent(f"""
        import json, subprocess, sys
        from compgen.training.profile import _process_start
        child = subprocess.run([sys.executable, "-c", {CHILD!r}], capture_output=True, text=True, check=True)
        print(json.dumps([*json.loads(child.stdout), _process_start("self")[0]]))
    """))
    env = {k: v for k, v in os.environ.items() if not k.startswith("ACCELERATE_") and k != "TORCHELASTIC_RUN_ID"}
    result = subprocess.run([sys.executable, str(launcher)], env=env | env_extra, capture_output=True, text=True,
                            check=True)
    return tuple(json.loads(result.stdout))


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="process start times come from /proc")
def test_a_launched_run_counts_its_launcher(tmp_path):
    run_start, child_start, parent_start = _starts(tmp_path, {"ACCELERATE_MIXED_PRECISION": "no"})
    assert run_start == parent_start < child_start
    run_start, child_start, parent_start = _starts(tmp_path, {})  # a plain parent (a shell, a queue) is not the run's
    assert run_start == child_start > parent_start


def test_phases_and_other_sum_to_the_total():
    profile = RunProfile(start=0.0)
    profile.add("a", 2.0)
    profile.add("a", 1.0)
    profile.add("b", -1.0)  # clock skew never makes a phase negative
    report = profile.report()
    assert report["phases"] == {"a": 3.0, "b": 0.0}
    assert sum(report["phases"].values()) + report["other_s"] == pytest.approx(report["total_s"], abs=0.01)
    assert "total" in profile.table(report)
