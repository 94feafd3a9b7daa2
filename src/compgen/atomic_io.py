"""Atomic file and directory writes: a killed process never leaves a half-written checkpoint or export."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@contextlib.contextmanager
def atomic_directory(path: str | os.PathLike, overwrite: bool = False) -> Iterator[Path]:
    """Yield a temporary sibling directory; on success it becomes ``path`` in one rename.

    ``path`` must not exist or be an empty directory, so a write never eats files that were there before; with
    ``overwrite=True`` a previous directory at ``path`` is replaced (the caller asked for it). A file at ``path`` is
    always refused. The checks run before any work is done.
    """
    target = Path(path)
    check_writable_directory(target, overwrite)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-", dir=target.parent))
    try:
        yield tmp
        os.chmod(tmp, 0o777 & ~_umask())
        check_writable_directory(target, overwrite)  # something may have appeared meanwhile
        if target.exists():
            old = target.with_name(f".{target.name}.old-{os.getpid()}")
            os.replace(target, old)
            os.replace(tmp, target)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def check_writable_directory(target: Path, overwrite: bool = False) -> None:
    """Raise ``FileExistsError`` unless ``target`` is absent, an empty directory, or (``overwrite``) a directory."""
    if target.is_file() or (target.exists() and not target.is_dir()):
        raise FileExistsError(f"{target} is a file, not a directory: choose another output directory")
    if target.is_dir() and not overwrite and any(target.iterdir()):
        raise FileExistsError(f"{target} already holds files: choose a new or empty directory, or pass the "
                              "overwrite option to replace it")


def safetensors_problem(file: str | os.PathLike) -> str | None:
    """Why ``file`` is not a whole safetensors file (missing, truncated by a full disk, damaged), read from its header
    alone: the header must parse and the tensors it lists must lie within the file; ``None`` when it is whole."""
    import json

    path = Path(file)
    try:
        with open(path, "rb") as handle:
            size = int.from_bytes(handle.read(8), "little")
            if size < 2 or 8 + size > path.stat().st_size:
                raise ValueError("its header runs past the end of the file")
            header = json.loads(handle.read(size))
        end = max((entry["data_offsets"][1] for name, entry in header.items() if name != "__metadata__"), default=0)
        if 8 + size + end > path.stat().st_size:
            raise ValueError(f"its tensors need {8 + size + end} bytes, the file has {path.stat().st_size}")
    except (OSError, ValueError, KeyError, TypeError, IndexError, UnicodeDecodeError, AttributeError) as error:
        return f"{path} is not a whole safetensors file (truncated or damaged: {error})"
    return None


def output_file_problem(path: str | os.PathLike) -> str | None:
    """Why a result could not be written to the file ``path`` (checked before the work that makes it): a directory
    there, no directory to hold it, or one that cannot be written; ``None`` when it can."""
    target = Path(path).resolve()
    if target.is_dir():
        return f"{target} is a directory: name a file to write to"
    if not target.parent.is_dir():
        return f"no directory {target.parent} to write it to"
    if not os.access(target.parent, os.W_OK):
        return f"the directory {target.parent} cannot be written"
    return None


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file and ``os.replace``."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.tmp-", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))
