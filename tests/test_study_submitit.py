"""A study through submitit (``--launcher submitit``): real job processes from submitit's local executor, with the
local runner's skipping, resuming and summary, and a failed job reported with its log."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from repo_scripts import load_repo_script

pytest.importorskip("submitit")

REPO = Path(__file__).resolve().parents[1]

STUDY = """
name: cluster
datasets: [{name: tiny, split_preset: H32-train1, images_per_class: 16, test_images_per_class: 2}]
seeds: [0]
steps: 2
flags: {block_out_channels: "8,16", train_batch_size: 8, no_eval: true}
models:
  unet: {script: ../examples/train_tuple_unet.py}
  unet-bad-lr: {script: ../examples/train_tuple_unet.py, flags: {learning_rate: -1}}
"""


@pytest.mark.slow
def test_a_study_runs_as_submitit_jobs_reports_a_failed_job_with_its_log_and_skips_finished_cells(tmp_path):
    studies = tmp_path / "studies"
    studies.mkdir()
    (tmp_path / "examples").symlink_to(REPO / "examples")
    study_file = studies / "cluster.yaml"
    study_file.write_text(STUDY)
    run_study = load_repo_script("examples/run_study.py")
    out = tmp_path / "out"
    argv = ["--study", str(study_file), "--output_dir", str(out), "--launcher", "submitit", "--submitit_cluster",
            "local", "--slurm_time", "10"]
    with pytest.raises(SystemExit) as exit_info:  # one cell fails: exit status 1, after the summary
        run_study.main(argv)
    assert exit_info.value.code == 1
    summary = json.loads((out / "summary.json").read_text())
    cells = {cell["arm"]: cell for cell in summary["cells"]}
    good, bad = cells["unet (full) on tiny"], cells["unet-bad-lr (full) on tiny"]
    assert good["status"] == "ok" and (Path(good["output_dir"]) / "model_index.json").is_file()
    assert bad["status"] == "failed" and "learning_rate must be a positive number" in bad["error"]
    log = Path(bad["log"])
    assert log.is_file() and log.is_relative_to(out / "submitit") and bad["job_id"]
    assert not (out / "submitit" / "%j").exists()  # submitit's staging folder of the batch is not left behind
    # A rerun skips the finished cell and submits only the failed one again.
    with pytest.raises(SystemExit):
        run_study.main(argv)
    again = {cell["arm"]: cell for cell in json.loads((out / "summary.json").read_text())["cells"]}
    assert again["unet (full) on tiny"]["status"] == "finished before"
    assert again["unet-bad-lr (full) on tiny"]["job_id"] != bad["job_id"]


def test_submitit_options_are_checked_before_any_work(tmp_path, capsys):
    run_study = load_repo_script("examples/run_study.py")
    with pytest.raises(SystemExit) as exit_info:
        run_study.main(["--smoke", "--output_dir", str(tmp_path / "out"), "--launcher", "submitit",
                        "--slurm_time", "0"])
    assert exit_info.value.code == 2 and "timeout_min must be a positive integer" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_a_submitit_dir_under_a_file_and_slurm_without_srun_are_argument_errors(tmp_path, capsys, monkeypatch):
    run_study = load_repo_script("examples/run_study.py")
    (tmp_path / "a-file").write_text("")
    with pytest.raises(SystemExit) as exit_info:
        run_study.main(["--smoke", "--output_dir", str(tmp_path / "out"), "--launcher", "submitit",
                        "--submitit_cluster", "local", "--submitit_dir", str(tmp_path / "a-file" / "logs")])
    assert exit_info.value.code == 2 and "is a file" in capsys.readouterr().err
    monkeypatch.setenv("PATH", str(tmp_path))  # no srun, no sbatch
    with pytest.raises(SystemExit) as exit_info:
        run_study.main(["--smoke", "--output_dir", str(tmp_path / "out"), "--launcher", "submitit",
                        "--submitit_cluster", "slurm"])
    assert exit_info.value.code == 2 and "--submitit_cluster local" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("bypass_sigterm", [False, True])
def test_a_local_job_ends_when_its_study_runner_is_killed(tmp_path, bypass_sigterm):
    """submitit's local jobs run under a controller that outlives a SIGKILLed runner: the job watches the runner's
    pid and ends itself, so no orphan trains on into a cell directory a rerun will find in use; also where SIGTERM is
    bypassed, as submitit's job environment does (issue 42, case 21)."""
    import subprocess
    import sys
    import time

    bypass = "import signal\nsignal.signal(signal.SIGTERM, lambda *_: print('Bypassing signal SIGTERM'))\n"
    runner = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    job = subprocess.Popen([sys.executable, "-c", (
        (bypass if bypass_sigterm else "") + "import time\nfrom compgen.studies.launchers import run_watched\n"
        f"run_watched(lambda command, threads: time.sleep(60), (), None, {runner.pid}, poll_s=0.2)")])
    time.sleep(1.0)
    assert job.poll() is None
    runner.kill()
    runner.wait()
    assert job.wait(timeout=20) != 0  # ended by its watch, long before its 60 s of "training"
