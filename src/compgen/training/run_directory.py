"""A run's output directory (:class:`RunDirectory`): one run at a time, a rerun never replaces a finished run, and
the checkpoints a run writes and may resume from.

A training run claims its ``--output_dir`` with an OS lock (``fcntl.flock`` on ``OUTPUT/.compgen.lock``) for as long
as it works there; another process that asks for the same directory fails at once, with the holder's pid. The kernel
drops the lock when its holder dies, so a killed run leaves nothing stale behind. Within one process a claim is
re-entrant: a script claims its directory before it builds any data, and the training loop it then starts claims it
again.

:meth:`RunDirectory.check_start` decides, under the claim, whether starting here would replace another run's files;
:meth:`RunDirectory.resume_candidates` and :meth:`RunDirectory.check_resumable` which checkpoint a resumed run
continues from; :meth:`RunDirectory.write_checkpoint` writes one atomically and prunes the old ones.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .checkpoint import CHECKPOINTS_DIR, CheckpointError, list_checkpoints, read_trainer_state
from .config import LENGTH_FREE_LR_SCHEDULES, RUN_OPTIONS, TrainingConfig

try:
    import fcntl
except ImportError:  # not POSIX: claims only count within the process
    fcntl = None

LOCK_NAME = ".compgen.lock"
LOG_NAME = "learning_dynamics.jsonl"
TRAINING_LOG_NAME = "training_log.jsonl"
"""The training scalars (losses, a task's diagnostics, the learning rate) at every logging interval, a JSON line
each."""
SAMPLES_DIR = "samples"
EXPORT_MARKERS = ("model_index.json", "config.json", "README.md")
"""Files that only a finished run (an export and its model card) leaves in its output directory."""
EXPORT_STATE_NAME = "export_state.json"
"""Written with an export: the (logged) ``step`` its weights were taken at and the ``steps_trained`` by this run (less
than ``step`` for a fine-tuning run), so that ``--init_from`` on a run directory that trained on past its export (a
resumed run) labels the export's weights with their own step, and a study knows how far a cell without a log got."""


class RunDirectoryInUseError(RuntimeError):
    """Another process is running in this output directory."""


@dataclass
class _Held:
    fd: int | None
    created: bool
    count: int = 1


_HELD: dict[Path, _Held] = {}
"""The directories this process has claimed, by resolved path."""


class RunDirectoryClaim:
    """This process's claim on a run directory; :meth:`release` (or leaving the ``with`` block) gives it back."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._released = False

    def release(self) -> None:
        """Give the claim back; the last release removes the lock file, and the directory if the claim created it
        and nothing was written there."""
        if self._released:
            return
        self._released = True
        held = _HELD[self.directory]
        held.count -= 1
        if held.count:
            return
        del _HELD[self.directory]
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.directory / LOCK_NAME)  # still locked: nobody else can take the file we remove
        if held.fd is not None:
            os.close(held.fd)
        if held.created:
            with contextlib.suppress(OSError):
                self.directory.rmdir()  # only if empty

    def __enter__(self) -> RunDirectoryClaim:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def claim_run_directory(directory: str | os.PathLike) -> RunDirectoryClaim:
    """Claim ``directory`` (created if missing) for this process's run.

    Raises :class:`RunDirectoryInUseError` naming the directory and the holder's pid if another process holds it, and
    ``ValueError`` if it is a file or lies under one.
    """
    directory = Path(directory)
    check_not_a_file(directory)
    key = directory.resolve()
    if key in _HELD:
        _HELD[key].count += 1
        return RunDirectoryClaim(key)
    created = not key.exists()
    key.mkdir(parents=True, exist_ok=True)
    _HELD[key] = _Held(_lock(key) if fcntl is not None else None, created)
    return RunDirectoryClaim(key)


def _lock(directory: Path) -> int:
    path = directory / LOCK_NAME
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder_pid(fd)
            os.close(fd)
            raise RunDirectoryInUseError(
                f"--output_dir {directory} is in use by another run (pid {holder}): two runs in one directory would "
                "mix their logs, checkpoints and exports; wait for it to finish, or choose another --output_dir"
            ) from None
        # The previous holder removes the lock file on release: hold the file that is there now, not a removed one.
        with contextlib.suppress(FileNotFoundError):
            if os.stat(path).st_ino == os.fstat(fd).st_ino:
                os.ftruncate(fd, 0)
                os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
                return fd
        os.close(fd)


def _holder_pid(fd: int, attempts: int = 50) -> str:
    """The pid the holder of the lock on ``fd`` wrote into it. A holder writes its pid just after it takes the lock, so
    a claim refused in between waits for it (up to ``attempts`` x 10 ms) instead of naming no one."""
    for _ in range(attempts):
        holder = os.pread(fd, 32, 0).decode(errors="replace").strip()
        if holder:
            return holder
        time.sleep(0.01)
    return "unknown"


def claims_held() -> frozenset[Path]:
    """The directories this process holds claims on."""
    return frozenset(_HELD)


def release_claims(keep: frozenset[Path] = frozenset()) -> None:
    """Give back every claim this process holds but those on ``keep`` (after a script ended, whatever happened in
    it: a script that failed between claiming its directory and training there left its claim)."""
    for directory in set(_HELD) - keep:
        _HELD[directory].count = 1
        RunDirectoryClaim(directory).release()


def check_not_a_file(directory: Path) -> None:
    """Raise ``ValueError`` if ``directory`` is a file or lies under a file (it could never be created)."""
    for path in (directory, *directory.parents):
        if path.exists() and not path.is_dir():
            where = "is a file" if path == directory else f"lies under the file {path}"
            raise ValueError(f"--output_dir {directory} {where}: choose a directory")


@dataclass
class RunStart:
    """A run's output directory, claimed and checked (:meth:`RunDirectory.start`): the claim, and the files of an
    earlier run that ``--overwrite_output_dir`` replaces once training begins."""

    claim: RunDirectoryClaim
    replaced: list[Path]


class RunDirectory:
    """One run's output directory: its claim, what a run left there, and the checkpoints it writes and resumes from."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)
        self.checkpoint_dir = self.path / CHECKPOINTS_DIR
        self.log_path = self.path / LOG_NAME
        self.training_log_path = self.path / TRAINING_LOG_NAME
        self.sample_dir = self.path / SAMPLES_DIR

    def claim(self) -> RunDirectoryClaim:
        """Claim this directory for this process's run (see :func:`claim_run_directory`)."""
        return claim_run_directory(self.path)

    def checkpoints(self) -> list[tuple[int, Path]]:
        """The complete checkpoints in this directory, by step."""
        return list_checkpoints(self.checkpoint_dir)

    def run_files(self) -> list[Path]:
        """What a run leaves here (checkpoints, log, samples, export, card), as far as present."""
        return [self.path / name for name in (CHECKPOINTS_DIR, LOG_NAME, TRAINING_LOG_NAME, SAMPLES_DIR,
                                                              *EXPORT_MARKERS, EXPORT_STATE_NAME)
                if (self.path / name).exists()]

    def start(self, config: TrainingConfig, num_processes: int) -> RunStart:
        """Claim this directory for a run of ``config`` and check, before any work, that it may start here
        (:meth:`check_start`, :meth:`check_resume`); on a refusal the claim is given back and the error raised."""
        claim = self.claim()
        try:
            replaced = self.check_start(config.resume_from_checkpoint, config.overwrite_output_dir)
            self.check_resume(config, num_processes)
        except BaseException:
            claim.release()
            raise
        return RunStart(claim, replaced)

    def check_start(self, resume_from_checkpoint: str | None, overwrite: bool) -> list[Path]:
        """Raise if a run starting here would replace another run's files; returns the files
        ``--overwrite_output_dir`` removes (empty otherwise).

        - Without ``resume_from_checkpoint``, a directory holding a run (checkpoints, log, samples, export, card) is
          refused (``FileExistsError``) unless ``overwrite``.
        - With ``latest`` and no checkpoint, a directory holding a finished run's export or card is refused: starting
          over would replace that run. A run killed before its first checkpoint (a log, no export) starts over.
        - A checkpoint named explicitly must exist (:meth:`resume_candidates`).
        """
        directory = self.path
        check_not_a_file(directory)
        if resume_from_checkpoint == "latest":
            finished = [name for name in EXPORT_MARKERS if (directory / name).is_file()]
            if not self.checkpoints() and finished:
                raise FileExistsError(
                    f"--output_dir {directory} holds a finished run ({', '.join(finished)}) but no checkpoint to "
                    "resume from: --resume_from_checkpoint latest would start over and replace it; pass "
                    "--overwrite_output_dir (instead of --resume_from_checkpoint) to start over, or choose another "
                    "--output_dir"
                )
            return []
        if resume_from_checkpoint:
            self.resume_candidates(resume_from_checkpoint)
            return []
        previous = self.run_files()
        if previous and not overwrite:
            raise FileExistsError(
                f"--output_dir {directory} holds another run ({', '.join(p.name for p in previous)}); continue it "
                "with --resume_from_checkpoint latest, start over with --overwrite_output_dir, or choose another "
                "--output_dir"
            )
        return previous

    def resume_candidates(self, resume_from_checkpoint: str | None) -> list[Path]:
        """The checkpoints to try, in order, for ``--resume_from_checkpoint``: with ``latest`` every complete one,
        newest first (a broken one falls back to the one before); a name or a path gives that one; none gives none."""
        if not resume_from_checkpoint:
            return []
        if resume_from_checkpoint == "latest":
            return [path for _, path in reversed(self.checkpoints())]
        path = Path(resume_from_checkpoint)
        if not path.is_dir():
            path = self.checkpoint_dir / resume_from_checkpoint
        if not path.is_dir():
            found = ", ".join(p.name for _, p in self.checkpoints()) or "none"
            raise ValueError(f"--resume_from_checkpoint {resume_from_checkpoint!r}: no complete checkpoint at {path} "
                             f"(there: {found})")
        return [path]

    def check_resume(self, config: TrainingConfig, num_processes: int) -> None:
        """Before any work (data, probes, a tokenizer): raise ``ValueError`` (a :class:`CheckpointError` for a
        checkpoint of other options) if the checkpoint a resume would continue
        from (the newest readable one) was written with other training options or processes, or is past
        ``--max_train_steps`` (the export would then hold that later step's weights under a card of fewer steps)."""
        for path in self.resume_candidates(config.resume_from_checkpoint):
            try:
                state = read_trainer_state(path)
            except CheckpointError:
                continue  # a broken checkpoint: the resume falls back past it
            if int(state.get("step", 0)) > config.max_train_steps:
                raise ValueError(f"{path} is at step {state['step']}, past --max_train_steps {config.max_train_steps}: "
                                 "the run already trained further; resume with --max_train_steps "
                                 f"{state['step']} or more, or train a new run in another --output_dir")
            try:
                self.check_resumable(state, path, config, num_processes, [])
            except CheckpointError as error:
                raise CheckpointError(f"{error}. Nothing was changed and its checkpoints are intact: resume with the "
                                      "options it was started with, or train a new run in another --output_dir"
                                      ) from None
            return

    @staticmethod
    def check_resumable(trainer_state: dict[str, Any], path: Path, config: TrainingConfig, num_processes: int,
                        task_schedules: list[str]) -> None:
        """Raise :class:`CheckpointError` unless the run of ``config`` on ``num_processes`` may go on from the
        checkpoint at ``path``: the same training options (all but :data:`RUN_OPTIONS`), the same number of
        processes, and the same length if anything runs over it (the learning rate or one of ``task_schedules``)."""
        saved = trainer_state.get("config", {})
        fingerprint = trainer_state.get("fingerprint")
        if fingerprint is not None and fingerprint != config.fingerprint():
            ours = config.to_json_dict()
            # An option added to compgen after the checkpoint was written matches when this run keeps its default.
            defaults = type(config)().to_json_dict()
            differences = sorted(k for k in set(saved) | set(ours)
                                 if k not in RUN_OPTIONS and saved.get(k, defaults.get(k)) != ours.get(k))
            if differences or not saved:
                changed = [_changed(k, saved.get(k, defaults.get(k)), ours.get(k)) for k in differences]
                raise CheckpointError(f"checkpoint {path} was written by a run with other training options "
                                      f"({'; '.join(changed) or 'unknown'}); resuming it would mix two runs")
        length = saved.get("max_train_steps")
        tied = ([] if config.lr_scheduler in LENGTH_FREE_LR_SCHEDULES else [f"--lr_scheduler {config.lr_scheduler}"])
        tied += task_schedules
        if length is not None and length != config.max_train_steps and tied:
            raise CheckpointError(f"checkpoint {path} belongs to a run of {length} steps, and {' and '.join(tied)} run "
                                  f"over the whole length: resuming it with --max_train_steps {config.max_train_steps} "
                                  "would change them midway (a decayed learning rate would rise again); resume with "
                                  f"--max_train_steps {length}, or start a new run")
        processes = trainer_state.get("num_processes", num_processes)
        if processes != num_processes:
            raise CheckpointError(f"checkpoint {path} was written with {processes} processes, this run has "
                                  f"{num_processes}: the data order would differ; resume with the same number of "
                                  "processes")

    def write_checkpoint(self, step: int, write: Callable[[Path], None], run_id: str, limit: int | None) -> None:
        """Write ``checkpoint-<step>`` atomically (``write`` fills a temporary directory, renamed into place), then
        keep only the newest ``limit`` checkpoints of the run ``run_id`` (another run's are never pruned)."""
        final = self.checkpoint_dir / f"checkpoint-{step}"
        tmp = self.checkpoint_dir / f".tmp-checkpoint-{step}"
        shutil.rmtree(tmp, ignore_errors=True)
        try:
            tmp.mkdir(parents=True)
            write(tmp)
        except OSError as error:  # a full disk, a quota: no half-written folder stays, the earlier checkpoints do
            shutil.rmtree(tmp, ignore_errors=True)
            kept = ", ".join(path.name for _, path in self.checkpoints()) or "none"
            raise CheckpointError(f"could not write checkpoint-{step} in {self.checkpoint_dir}: {error}; the "
                                  f"checkpoints there are intact ({kept}): free space, then resume with "
                                  "--resume_from_checkpoint latest") from error
        shutil.rmtree(final, ignore_errors=True)
        os.replace(tmp, final)
        if limit is not None:
            ours = [(number, path) for number, path in self.checkpoints() if _checkpoint_run_id(path) == run_id]
            for _, old in ours[:-limit]:
                shutil.rmtree(old, ignore_errors=True)


def _checkpoint_run_id(path: Path) -> str | None:
    """The run id a checkpoint records (``None`` if it cannot be read)."""
    try:
        return read_trainer_state(path).get("run_id")
    except CheckpointError:
        return None


def _changed(name: str, there: Any, now: Any) -> str:
    """``--name A there vs B now`` for one changed option (each changed script option for ``extra``)."""
    if name == "extra" and isinstance(there, dict) and isinstance(now, dict):
        return "; ".join(_changed(key, there.get(key), now.get(key)) for key in sorted(set(there) | set(now))
                         if there.get(key) != now.get(key))
    return f"--{name} {there!r} there vs {now!r} now"
