"""The one owner of a run's output directory: its claim, and whether a run may start there (:func:`start_run`).

A training run claims its ``--output_dir`` with an OS lock (``fcntl.flock`` on ``OUTPUT/.compgen.lock``) for as long
as it works there; another process that asks for the same directory fails at once, with the holder's pid. The kernel
drops the lock when its holder dies, so a killed run leaves nothing stale behind. Within one process a claim is
re-entrant: a study claims a cell's directory and the script it runs in process claims it again.

:func:`check_start` decides, under the claim, whether starting here would replace another run's files. The training
loop never claims: it runs in a directory claimed here (what it writes there, the checkpoints and resume, is
:class:`~compgen.training.run_directory.RunDirectory`).
"""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import dataclass
from pathlib import Path

from ..training.config import TrainingConfig
from ..training.run_directory import EXPORT_MARKERS, RunDirectory

try:
    import fcntl
except ImportError:  # not POSIX: claims only count within the process
    fcntl = None

LOCK_NAME = ".compgen.lock"


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
    """A run's output directory, claimed and checked (:func:`start_run`): the claim, and the files of an earlier run
    that ``--overwrite_output_dir`` replaces once training begins (the loop removes them, see
    :class:`~compgen.training.trainer.Trainer`). Leaving a ``with`` block gives the claim back."""

    claim: RunDirectoryClaim
    replaced: list[Path]

    def __enter__(self) -> RunStart:
        return self

    def __exit__(self, *exc: object) -> None:
        self.claim.release()


def start_run(config: TrainingConfig, num_processes: int) -> RunStart:
    """Claim ``config.output_dir`` for a run of ``config`` and check, before any work, that it may start there
    (:func:`check_start`, :meth:`RunDirectory.check_resume`); on a refusal the claim is given back and the error
    raised. The one place a training run's output directory is claimed: :func:`~compgen.launch.run_setup.prepare_run`
    for a script's run, :meth:`~compgen.launch.run_setup.TrainingRun.train` for a run it trains first (a tokenizer)."""
    run = RunDirectory(config.output_dir)
    claim = claim_run_directory(run.path)
    try:
        replaced = check_start(run, config.resume_from_checkpoint, config.overwrite_output_dir)
        run.check_resume(config, num_processes)
    except BaseException:
        claim.release()
        raise
    return RunStart(claim, replaced)


def check_start(run: RunDirectory, resume_from_checkpoint: str | None, overwrite: bool) -> list[Path]:
    """Raise if a run starting here would replace another run's files; returns the files
    ``--overwrite_output_dir`` removes (empty otherwise).

    - Without ``resume_from_checkpoint``, a directory holding a run (checkpoints, log, samples, export, card) is
      refused (``FileExistsError``) unless ``overwrite``.
    - With ``latest`` and no checkpoint, a directory holding a finished run's export or card is refused: starting
      over would replace that run. A run killed before its first checkpoint (a log, no export) starts over.
    - A checkpoint named explicitly must exist (:meth:`RunDirectory.resume_candidates`).
    """
    directory = run.path
    check_not_a_file(directory)
    if resume_from_checkpoint == "latest":
        finished = [name for name in EXPORT_MARKERS if (directory / name).is_file()]
        if not run.checkpoints() and finished:
            raise FileExistsError(
                f"--output_dir {directory} holds a finished run ({', '.join(finished)}) but no checkpoint to "
                "resume from: --resume_from_checkpoint latest would start over and replace it; pass "
                "--overwrite_output_dir (instead of --resume_from_checkpoint) to start over, or choose another "
                "--output_dir"
            )
        return []
    if resume_from_checkpoint:
        run.resume_candidates(resume_from_checkpoint)
        return []
    previous = run.run_files()
    if previous and not overwrite:
        raise FileExistsError(
            f"--output_dir {directory} holds another run ({', '.join(p.name for p in previous)}); continue it "
            "with --resume_from_checkpoint latest, start over with --overwrite_output_dir, or choose another "
            "--output_dir"
        )
    return previous
