"""Many small runs, one after another in one process: the queue for seeds x conditions x models.

    python -m compgen.studies.runner --runs RUNS.txt [--parallel K] [--summary queue.json]

``RUNS.txt`` holds one training command per line, a recipe (``python -m compgen.train --help`` lists them) or a
script path, followed by its flags (``#`` starts a comment)::

    tuple-unet --preset paper --seed 0 --output_dir runs/unet-seed0
    examples/train_tuple_unet.py --preset paper --seed 1 --output_dir runs/unet-seed1

Each command runs inside this process (the recipe's ``main(argv)``), so a GPU holds one CUDA context and one run at a
time: training processes that share a GPU each run far slower than alone (``docs/training.md``). A
failing run is reported and the queue goes on. ``--parallel K`` splits the queue over ``K`` worker processes, each
running its share in order: useful on a multi-core CPU (one thread per worker), not on one GPU. The summary lists
every run's status and wall-clock. ``examples/run_study.py`` builds on this for whole study grids.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
import json
import logging
import multiprocessing
import os
import shlex
import sys
import time
import traceback
from collections.abc import Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from types import ModuleType
from typing import TextIO

from ..cli import ArgumentParser
from ..families import recipes
from ..launch.directory_claim import claims_held, release_claims
from ..recipes import load_recipe

logger = logging.getLogger(__name__)


@dataclass
class CommandResult:
    """How one queued run ended."""

    command: str
    status: str
    """``"ok"`` or ``"failed"``."""
    seconds: float
    error: str | None = None


def load_script(path: str | Path) -> ModuleType:
    """The module a command starts with: a recipe by name (``tuple-unet``, :func:`compgen.families.recipes`), or a
    script file (e.g. ``examples/train_tuple_unet.py``) executed as a fresh module."""
    if isinstance(path, str) and path in recipes():
        return load_recipe(path)
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no script at {path}")
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def parse_runs(text: str) -> list[list[str]]:
    """Commands from a runs file: one per non-empty line, ``#`` comments dropped, shell-style quoting, and a word that
    starts with ``~`` expanded to the home directory as a shell would."""
    commands = []
    for number, line in enumerate(text.splitlines(), start=1):
        try:
            words = split_command(line)
        except ValueError as error:
            raise ValueError(f"runs file line {number}: {error} in {line.strip()!r}") from None
        if not words:
            continue
        if not words[0].endswith(".py") and words[0] not in recipes():
            raise ValueError(f"runs file line {number}: a command starts with a recipe ({', '.join(recipes())}) or "
                             f"a script path (*.py), got {words[0]!r}")
        commands.append(words)
    return commands


def split_command(text: str) -> list[str]:
    """One command line split as a shell splits it (quotes, ``#`` comments, ``~`` at the start of a word)."""
    return [os.path.expanduser(word) for word in shlex.split(text, comments=True)]


class _TeeLastLine(io.TextIOBase):
    """Writes through to ``stream`` and keeps the last non-empty line (argparse's error message on exit status 2)."""

    def __init__(self, stream: TextIO):
        self.stream = stream
        self.last_line = ""

    def write(self, text: str) -> int:
        lines = [line for line in text.splitlines() if line.strip()]
        if lines:
            self.last_line = lines[-1].strip()
        return self.stream.write(text)

    def flush(self) -> None:
        self.stream.flush()


def run_in_process(command: Sequence[str]) -> CommandResult:
    """Run one command (``[script.py, *flags]``) in this process through the script's ``main(argv)``."""
    from accelerate.state import AcceleratorState, GradientState

    text = shlex.join(command)
    start = time.perf_counter()
    # A fresh Accelerator per run (mixed precision and accumulation differ between runs); the process group, if
    # any, stays: every run of the queue shares it.
    AcceleratorState._reset_state(reset_partial_state=False)
    GradientState._reset_state()
    stderr = _TeeLastLine(sys.stderr)
    held = claims_held()
    try:
        with contextlib.redirect_stderr(stderr):
            load_script(command[0]).main(list(command[1:]))
    except Exception as error:  # a failing run is reported; the queue goes on
        logger.error("run failed: %s\n%s", text, traceback.format_exc())
        return CommandResult(text, "failed", round(time.perf_counter() - start, 3), f"{type(error).__name__}: {error}")
    except SystemExit as exit_:  # argparse errors
        if exit_.code not in (0, None):
            error = f"exit status {exit_.code}: {stderr.last_line}"
            return CommandResult(text, "failed", round(time.perf_counter() - start, 3), error)
    finally:
        release_claims(keep=held)  # whatever the script left claimed
    return CommandResult(text, "ok", round(time.perf_counter() - start, 3))


def die_with_parent(parent_pid: int) -> None:
    """Worker initializer: stop this worker when ``parent_pid``, the process that started it, dies (Linux
    ``PR_SET_PDEATHSIG``), so a killed runner leaves no orphan that goes on training into a run directory a rerun
    will use. The death signal only covers a parent alive when it is set: a worker whose parent died while it
    started (it is then someone else's child) exits at once. A no-op elsewhere than Linux."""
    if sys.platform.startswith("linux"):
        import ctypes
        import signal

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # 1 = PR_SET_PDEATHSIG
        if os.getppid() != parent_pid:
            os._exit(1)


@contextlib.contextmanager
def worker_pool(workers: int) -> Iterator[ProcessPoolExecutor]:
    """``workers`` spawned worker processes that die with this process (:func:`die_with_parent`). If the block
    ends with an exception (an interrupt), queued work is cancelled and running workers are stopped, as a kill would
    stop them (a run resumes from its last checkpoint), instead of waiting for the queue to run out."""
    pool = ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn"),
                               initializer=die_with_parent, initargs=(os.getpid(),))
    try:
        yield pool
    except BaseException:
        processes = list((pool._processes or {}).values())  # the executor has no public way to stop its workers
        pool.shutdown(wait=False, cancel_futures=True)
        for process in processes:
            process.terminate()
        for process in processes:
            process.join(timeout=10)
        raise
    pool.shutdown(wait=True)


def _run_share(commands: list[list[str]], threads: int | None) -> list[CommandResult]:
    if threads:
        import torch

        torch.set_num_threads(threads)
    return [run_in_process(command) for command in commands]


def run_queue(commands: Sequence[Sequence[str]], parallel: int = 1, threads_per_worker: int | None = None
              ) -> list[CommandResult]:
    """Run ``commands`` one after another in this process, or over ``parallel`` worker processes (each running an
    interleaved share in order); results come back in queue order."""
    commands = [list(c) for c in commands]
    if parallel < 1:
        raise ValueError(f"parallel must be at least 1, got {parallel}")
    if parallel == 1 or len(commands) <= 1:
        return _run_share(commands, threads_per_worker)
    shares = [commands[worker::parallel] for worker in range(parallel)]
    with worker_pool(parallel) as pool:
        done = list(pool.map(_run_share, shares, [threads_per_worker or 1] * parallel))
    results: list[CommandResult | None] = [None] * len(commands)
    for worker, share_results in enumerate(done):
        for position, result in enumerate(share_results):
            results[worker + position * parallel] = result
    return [r for r in results if r is not None]


def main(argv: Sequence[str] | None = None) -> list[CommandResult]:
    parser = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", help="file with one command per line (a recipe or script path, then its flags)")
    parser.add_argument("--run", action="append", default=[], help="one command (repeatable), e.g. "
                        "'tuple-unet --seed 0 --output_dir runs/a'")
    parser.add_argument("--parallel", type=int, default=1, help="worker processes (CPUs only; 1 on a GPU)")
    parser.add_argument("--threads_per_worker", type=int, default=None, help="torch threads per worker")
    parser.add_argument("--summary", default=None, help="write every run's status and wall-clock here (JSON)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    if args.parallel < 1:
        parser.error(f"--parallel must be at least 1, got {args.parallel}")
    try:
        commands = parse_runs(Path(args.runs).read_text()) if args.runs else []
        commands += [split_command(text) for text in args.run]
    except (OSError, ValueError) as error:
        parser.error(f"{args.runs}: {error}" if args.runs else str(error))
    if not commands:
        parser.error("no runs: give --runs FILE or --run COMMAND")
    for command in commands:
        if command[0] not in recipes() and not Path(command[0]).is_file():
            parser.error(f"no recipe {command[0]!r} and no script at {command[0]}")
    start = time.perf_counter()
    results = run_queue(commands, args.parallel, args.threads_per_worker)
    total = time.perf_counter() - start
    for result in results:
        print(f"{result.status:6s} {result.seconds:9.1f}s  {result.command}" + (f"  ({result.error})"
                                                                              if result.error else ""))
    print(f"{len(results)} runs, {sum(r.status == 'ok' for r in results)} ok, {total:.1f}s in all")
    if args.summary:
        Path(args.summary).write_text(json.dumps({"seconds": round(total, 3), "parallel": args.parallel,
                                                  "runs": [asdict(r) for r in results]}, indent=2) + "\n")
    if any(r.status != "ok" for r in results):
        sys.exit(1)
    return results


if __name__ == "__main__":
    main()
