"""Where a study's runs execute: on this machine (:class:`LocalLauncher`: in this process, or a pool of worker
processes) or as jobs of a cluster scheduler (:class:`SubmititLauncher`).

``examples/run_study.py --launcher submitit`` hands every tokenizer and cell to `submitit
<https://github.com/facebookincubator/submitit>`_: one SLURM job per run, submitted as a job array (at most
``array_parallelism`` running at once), each with its own time limit, GPUs and CPUs. The study itself (what is finished,
what resumes, what changed, the summary) stays with the study runner, so a cluster run skips, resumes and summarizes
exactly as a local one. ``cluster="local"`` runs the same jobs as local processes through submitit's local executor
(what the tests use); ``cluster="debug"`` runs them in this process.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Protocol

SUBMITIT_CLUSTERS = ("slurm", "local", "debug")

RunFunction = Callable[[tuple[str, ...], int | None], Any]
"""``function(command, threads) -> CommandResult``: runs one training command (the study's ``_run_cell``)."""


class Launcher(Protocol):
    """Runs a batch of commands and records how each ended in ``statuses`` as it goes (an interrupt leaves it holding
    what finished, and the runs it stopped as ``"interrupted"``)."""

    def run(self, function: RunFunction, commands: Sequence[tuple[str, ...]], threads: int | None,
            names: Sequence[str], statuses: dict[str, dict[str, Any]], on_done: Callable[[], None] | None = None
            ) -> None: ...


@dataclass(frozen=True)
class LocalLauncher:
    """The runs on this machine: one after another in this process (``parallel=1``: the right choice on one GPU) or
    over ``parallel`` spawned worker processes that die with this one (a multi-core CPU)."""

    parallel: int = 1

    def run(self, function: RunFunction, commands: Sequence[tuple[str, ...]], threads: int | None,
            names: Sequence[str], statuses: dict[str, dict[str, Any]], on_done: Callable[[], None] | None = None
            ) -> None:
        from concurrent.futures import FIRST_COMPLETED, wait
        from concurrent.futures.process import BrokenProcessPool

        from .runner import worker_pool

        done_callback = on_done or (lambda: None)
        if self.parallel <= 1:
            for name, command in zip(names, commands, strict=True):
                statuses[name] = {"status": "interrupted", "seconds": 0.0}  # until it returns
                statuses[name] = asdict(function(command, threads))
                done_callback()
            return
        # Spawned, not forked, workers: this process may already have run torch (a tokenizer). A run is handed to a
        # worker only when one is free, so an interrupt knows which runs ran and which were still queued.
        queued, running = list(zip(names, commands, strict=True)), {}
        with worker_pool(self.parallel) as pool:
            try:
                while queued or running:
                    while queued and len(running) < self.parallel:
                        name, command = queued.pop(0)
                        try:
                            running[pool.submit(function, command, threads or 1)] = name
                        except BrokenProcessPool as error:  # a worker died: the pool takes no more work
                            statuses[name] = {"status": "failed", "seconds": 0.0, "error": repr(error)}
                            done_callback()
                    finished, _ = wait(running, return_when=FIRST_COMPLETED)
                    for future in finished:
                        name = running.pop(future)
                        try:
                            statuses[name] = asdict(future.result())
                        except Exception as error:  # its worker died
                            statuses[name] = {"status": "failed", "seconds": 0.0, "error": repr(error)}
                        done_callback()
            except KeyboardInterrupt:
                for name in running.values():
                    statuses[name] = {"status": "interrupted", "seconds": 0.0}
                raise


@dataclass(frozen=True)
class SubmititLauncher:
    """How to submit a study's runs through submitit.

    Args:
        folder: Where submitit keeps each job's pickles and logs (``%j``: the job id).
        cluster: ``"slurm"``, ``"local"`` (local processes, for tests and workstations) or ``"debug"`` (in process).
        partition: The SLURM partition (``None``: the cluster's default).
        timeout_min: Time limit of each job, in minutes.
        gpus_per_job: GPUs per job (one run per GPU: a study cell is a single-GPU run).
        cpus_per_job: CPU cores per job (the run's torch threads).
        array_parallelism: How many jobs of the array run at once.
    """

    folder: Path
    cluster: str = "slurm"
    partition: str | None = None
    timeout_min: int = 60
    gpus_per_job: int = 0
    cpus_per_job: int = 1
    array_parallelism: int = 16

    def __post_init__(self) -> None:
        if self.cluster not in SUBMITIT_CLUSTERS:
            raise ValueError(f"cluster must be one of {SUBMITIT_CLUSTERS}, got {self.cluster!r}")
        for name in ("timeout_min", "cpus_per_job", "array_parallelism"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 1:
                raise ValueError(f"{name} must be a positive integer, got {getattr(self, name)!r}")
        if not isinstance(self.gpus_per_job, int) or self.gpus_per_job < 0:
            raise ValueError(f"gpus_per_job must be a non-negative integer, got {self.gpus_per_job!r}")
        existing = next(p for p in (Path(self.folder), *Path(self.folder).parents) if p.exists())
        if not existing.is_dir():
            raise ValueError(f"--submitit_dir {self.folder}: {existing} is a file, so the job logs cannot go there")

    def executor(self):
        """A configured ``submitit.AutoExecutor`` (raises a ``ValueError`` naming the fix when submitit is absent)."""
        try:
            import submitit
        except ImportError:
            raise ValueError("--launcher submitit needs the submitit package: pip install submitit") from None
        try:
            executor = submitit.AutoExecutor(folder=str(self.folder / "%j"), cluster=self.cluster)
        except RuntimeError as error:  # e.g. no srun: not on a SLURM cluster
            raise ValueError(f"--submitit_cluster {self.cluster}: {error} (run the study on a SLURM login node, or "
                             "use --submitit_cluster local to run its jobs on this machine)") from None
        parameters: dict[str, Any] = {"timeout_min": self.timeout_min, "cpus_per_task": self.cpus_per_job,
                                      "slurm_array_parallelism": self.array_parallelism, "name": "compgen-study"}
        if self.gpus_per_job:
            parameters["gpus_per_node"] = self.gpus_per_job
        if self.partition:
            parameters["slurm_partition"] = self.partition
        executor.update_parameters(**parameters)
        return executor

    def run(self, function: RunFunction, commands: Sequence[tuple[str, ...]], threads: int | None,
            names: Sequence[str], statuses: dict[str, dict[str, Any]], on_done: Callable[[], None] | None = None
            ) -> None:
        """Submit ``function(command, threads)`` for every command as one job array and wait for all of them.

        Each status holds the run's :class:`~compgen.studies.runner.CommandResult` fields, its job id and its ``log``
        (stdout) path; a job that died (a time limit, a node failure, an exception outside the run) is ``"failed"``
        with the scheduler's error and both log paths. An interrupt cancels every unfinished job.
        """
        if not commands:
            return
        executor = self.executor()
        with executor.batch():
            if self.cluster == "local":  # the jobs are grandchildren of this process: they must die with it
                jobs = [executor.submit(run_watched, function, command, threads or self.cpus_per_job, os.getpid())
                        for command in commands]
            else:
                jobs = [executor.submit(function, command, threads or self.cpus_per_job) for command in commands]
        try:
            for name, job in zip(names, jobs, strict=True):
                log = {"log": str(job.paths.stdout), "job_id": str(job.job_id)}
                try:
                    statuses[name] = {**asdict(job.result()), **log}
                except Exception as error:  # the job died outside the run (scheduler, time limit, node)
                    statuses[name] = {"status": "failed", "seconds": 0.0, **log,
                                      "error": f"{type(error).__name__}: {str(error).strip()[-2000:]} "
                                               f"(logs: {job.paths.stdout}, {job.paths.stderr})"}
                if on_done is not None:
                    on_done()
        except KeyboardInterrupt:
            for name, job in zip(names, jobs, strict=True):
                if not job.done():
                    job.cancel(check=False)
                    statuses[name] = {"status": "interrupted", "seconds": 0.0, "job_id": str(job.job_id)}
            raise
        finally:
            with contextlib.suppress(OSError):  # submitit leaves an empty folder named by its "%j" template
                (self.folder / "%j").rmdir()


def run_watched(function: RunFunction, command: tuple[str, ...], threads: int | None, runner_pid: int,
                poll_s: float = 2.0):
    """Run ``function(command, threads)`` in a local submitit job, ending the job when the study runner
    ``runner_pid`` is gone (killed, even by SIGKILL): submitit's local jobs run under a controller process that
    outlives the runner, and an orphan would go on training into a cell directory that a rerun then finds in use."""
    import signal
    import threading

    def watch() -> None:
        while True:
            time.sleep(poll_s)
            try:
                os.kill(runner_pid, 0)
            except (ProcessLookupError, PermissionError):  # gone (or the pid is now another user's process)
                # SIGKILL: submitit's job environment bypasses SIGTERM (so that SLURM preemption can requeue), and
                # a kill loses nothing a rerun needs: the run resumes from its last (atomically written) checkpoint.
                os.kill(os.getpid(), signal.SIGKILL)
                return

    threading.Thread(target=watch, name="study-runner-watch", daemon=True).start()
    return function(command, threads)
