"""Nothing lost under concurrency and interrupts, with real processes: two runs in one directory, a study killed while
its workers start, a study interrupted with SIGINT.

Linux only (``PR_SET_PDEATHSIG``, ``/proc``). Every process a test starts is killed by the test if it outlives it.
"""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from repo_scripts import REPO_ROOT, load_repo_script

from compgen.data.concept_graph_builder import ConceptGraphShapesConfig
from compgen.data.export import export_concept_graph_configs

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux processes (/proc, prctl)")

ENV = dict(os.environ, OMP_NUM_THREADS="1")
TINY_UNET = ["--block_out_channels", "8,16", "--layers_per_block", "1", "--train_batch_size", "8", "--no_eval",
             "--dataset_config", "tiny"]
SLEEPING_CELL = """
import os, sys, time
from pathlib import Path

def main(argv):
    out = Path(argv[argv.index("--output_dir") + 1])
    out.mkdir(parents=True, exist_ok=True)
    (out / "pid").write_text(str(os.getpid()))
    time.sleep(60)
"""


@pytest.fixture(scope="module")
def tiny_dataset(tmp_path_factory):
    root = tmp_path_factory.mktemp("tiny")
    config = ConceptGraphShapesConfig(name="tiny", split_preset="H32-train1", images_per_class=8,
                                      test_images_per_class=1)
    return export_concept_graph_configs([config], root / "export", cache_dir=str(root / "cache"))


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    status = Path(f"/proc/{pid}/status")
    try:
        return "zombie" not in status.read_text()
    except FileNotFoundError:
        return False


def spawned_children(parent: int) -> list[int]:
    """Pids of the multiprocessing workers ``parent`` spawned (not its resource tracker)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
            cmdline = (stat.parent / "cmdline").read_bytes()
        except (OSError, IndexError, ValueError):
            continue
        if ppid == parent and b"spawn_main" in cmdline:
            found.append(int(stat.parent.name))
    return found


def wait_until(condition, seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.02)


def kill_all(pids) -> None:
    for pid in pids:
        if alive(pid):
            os.kill(pid, signal.SIGKILL)


def train_unet(tiny_dataset, out: Path, *argv: str) -> subprocess.Popen:
    command = [sys.executable, str(REPO_ROOT / "examples" / "train_tuple_unet.py"), "--dataset", str(tiny_dataset),
               "--cache_dir", str(out.parent / "cache"), *TINY_UNET, "--output_dir", str(out), *argv]
    return subprocess.Popen(command, env=ENV, cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


# 1. Two runs into one --output_dir.
def test_two_runs_started_at_once_into_one_directory_one_trains_the_other_is_refused(tiny_dataset, tmp_path):
    out = tmp_path / "run"
    runs = {seed: train_unet(tiny_dataset, out, "--seed", str(seed), "--max_train_steps", "2") for seed in (0, 1)}
    try:
        results = {seed: (run.wait(timeout=120), *run.communicate()) for seed, run in runs.items()}
    finally:
        kill_all(run.pid for run in runs.values())
    codes = sorted(code for code, _, _ in results.values())
    assert codes == [0, 2], {seed: (code, err[-600:]) for seed, (code, _, err) in results.items()}
    winner = next(seed for seed, (code, _, _) in results.items() if code == 0)
    loser_err = next(err for code, _, err in results.values() if code == 2)
    # Refused either while the winner held the directory (naming its pid) or, if it had finished, as a used one.
    assert f"in use by another run (pid {runs[winner].pid})" in loser_err or "holds another run" in loser_err
    state = json.loads((out / "checkpoints" / "checkpoint-2" / "trainer_state.json").read_text())
    assert state["config"]["seed"] == winner and (out / "model_index.json").is_file()
    assert not (out / ".compgen.lock").exists()


def test_a_second_run_fails_fast_naming_the_holder_and_a_killed_holder_leaves_no_stale_lock(tiny_dataset, tmp_path):
    out = tmp_path / "run"
    holder = train_unet(tiny_dataset, out, "--max_train_steps", "100000", "--checkpointing_steps", "20",
                        "--checkpoints_total_limit", "1", "--logging_steps", "1000")
    try:
        wait_until(lambda: any((out / "checkpoints").glob("checkpoint-*")) or holder.poll() is not None, 60,
                   "the first run never reached a checkpoint")
        assert holder.poll() is None, holder.communicate()[1][-2000:]
        second = train_unet(tiny_dataset, out, "--seed", "1", "--max_train_steps", "2", "--cache_dir",
                            str(tmp_path / "second-cache"))
        code, (_, err) = second.wait(timeout=60), second.communicate()
        assert code == 2 and f"--output_dir {out} is in use by another run (pid {holder.pid})" in err, err[-2000:]
        assert not (tmp_path / "second-cache").exists()  # refused before any data were built
        holder.kill()  # SIGKILL: no chance to clean up; the kernel drops the lock
        holder.wait()
        last = max(int(path.name.split("-")[1]) for path in (out / "checkpoints").glob("checkpoint-*"))
        resumed = train_unet(tiny_dataset, out, "--max_train_steps", str(last + 2), "--resume_from_checkpoint",
                             "latest")
        code, (_, err) = resumed.wait(timeout=120), resumed.communicate()
        assert code == 0, err[-2000:]
        assert "resumed from" in err and (out / "model_index.json").is_file()
    finally:
        kill_all([holder.pid])


def write_sleeping_study(tmp_path: Path, seeds: int) -> Path:
    study_dir = tmp_path / "study"
    study_dir.mkdir()
    (study_dir / "cell.py").write_text(SLEEPING_CELL)
    (study_dir / "study.yaml").write_text(f"""
name: sleepers
datasets: [okawa-h32-train1]
seeds: {list(range(seeds))}
steps: 1
models: {{sleeper: {{script: {study_dir / "cell.py"}}}}}
""")
    return study_dir / "study.yaml"


def start_study(study: Path, out: Path, parallel: int) -> subprocess.Popen:
    command = [sys.executable, str(REPO_ROOT / "examples" / "run_study.py"), "--study", str(study), "--output_dir",
               str(out), "--parallel", str(parallel)]
    return subprocess.Popen(command, env=ENV, cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


# 3. A study killed while its workers start.
def test_a_study_killed_while_its_workers_start_leaves_no_worker(tmp_path):
    out = tmp_path / "out"
    study = start_study(write_sleeping_study(tmp_path, seeds=4), out, parallel=2)
    workers: set[int] = set()
    try:
        wait_until(lambda: spawned_children(study.pid) or study.poll() is not None, 60, "no worker was started")
        workers.update(spawned_children(study.pid))
        study.kill()  # SIGKILL while the workers are still starting (importing, before their initializer)
        study.wait()
        assert workers, study.communicate()[1][-2000:]
        time.sleep(0.5)
        wait_until(lambda: not any(alive(pid) for pid in workers), 20, "a worker outlived the killed study")
        assert not list(out.glob("cells/*/pid"))  # no orphan went on to train a cell
    finally:
        kill_all(workers | {study.pid})


# SIGINT to the study alone (and a second study into its directory).
def test_sigint_stops_a_study_promptly_cancels_queued_cells_and_writes_the_summary(tmp_path, capsys):
    out = tmp_path / "out"
    study = start_study(write_sleeping_study(tmp_path, seeds=5), out, parallel=2)
    cells: list[int] = []
    try:
        wait_until(lambda: len(list(out.glob("cells/*/pid"))) == 2 or study.poll() is not None, 60,
                   "two cells never started")
        cells = [int(p.read_text()) for p in out.glob("cells/*/pid")]
        # One study per directory: a second one into it stops at once.
        with pytest.raises(SystemExit) as exit_info:
            load_repo_script("examples/run_study.py").main(["--study", str(tmp_path / "study" / "study.yaml"),
                                                            "--output_dir", str(out), "--parallel", "1"])
        assert exit_info.value.code == 2 and f"in use by another run (pid {study.pid})" in capsys.readouterr().err
        start = time.monotonic()
        study.send_signal(signal.SIGINT)
        code = study.wait(timeout=30)
        assert time.monotonic() - start < 20
        assert code == 130, study.communicate()[1][-2000:]
        statuses = [cell["status"] for cell in json.loads((out / "summary.json").read_text())["cells"]]
        assert sorted(statuses) == ["cancelled"] * 3 + ["interrupted"] * 2
        wait_until(lambda: not any(alive(pid) for pid in cells), 10, "a running cell outlived the interrupt")
    finally:
        kill_all([*cells, study.pid])
