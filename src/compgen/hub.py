"""Uploading folders (pipelines with model cards, dataset exports) to the Hugging Face Hub.

The list of files that an upload sends is computed here, by the same rules the upload applies, so that tests
can assert exactly what would be pushed without a network.
"""

from __future__ import annotations

import fnmatch
import functools
import os
from collections.abc import Sequence
from pathlib import Path

DEFAULT_IGNORE_PATTERNS: tuple[str, ...] = ("checkpoints/*", "**/__pycache__/*")
"""Never uploaded: training checkpoints and caches. Hidden files and folders (``.name``) are never uploaded either."""


def files_to_upload(folder: str | os.PathLike, ignore_patterns: Sequence[str] = DEFAULT_IGNORE_PATTERNS) -> list[str]:
    """Sorted POSIX paths, relative to ``folder``, of every file :func:`upload_folder_to_hub` sends."""
    root = Path(folder)
    if not root.is_dir():
        raise ValueError(f"cannot upload {root}: not a directory")
    files = []
    for path in root.rglob("*"):
        relative = path.relative_to(root)
        if not path.is_file() or any(part.startswith(".") for part in relative.parts):
            continue
        name = relative.as_posix()
        if not any(fnmatch.fnmatch(name, pattern) for pattern in ignore_patterns):
            files.append(name)
    return sorted(files)


@functools.lru_cache
def check_hub_access(token: str | None = None) -> str:
    """The Hub user that ``token`` (default: the saved login) uploads as. Raises ``ValueError`` saying why an upload
    would fail (offline mode, no token, a token the Hub refuses, no connection), so a run can check before it trains
    rather than fail after."""
    from huggingface_hub import HfApi, constants, get_token

    if constants.is_offline_mode():
        raise ValueError("--push_to_hub: the Hub is switched off here (HF_HUB_OFFLINE is set); unset it, or train "
                         "without --push_to_hub and upload the folder later")
    token = token or get_token()
    if not token:
        raise ValueError("--push_to_hub needs a Hub token: log in with `hf auth login`, set HF_TOKEN, or pass "
                         "--hub_token")
    try:
        return HfApi(token=token).whoami()["name"]
    except Exception as error:  # any failure here means the upload would fail after the training
        raise ValueError(f"--push_to_hub: cannot reach the Hub with this token ({type(error).__name__}: {error})"
                         ) from error


def upload_folder_to_hub(
    folder: str | os.PathLike,
    repo_id: str,
    repo_type: str = "model",
    token: str | None = None,
    private: bool | None = None,
    commit_message: str = "Upload with compgen",
    ignore_patterns: Sequence[str] = DEFAULT_IGNORE_PATTERNS,
    delete_patterns: Sequence[str] | None = None,
):
    """Create ``repo_id`` if needed and upload exactly :func:`files_to_upload` of ``folder`` in one commit.

    ``delete_patterns`` removes remote files that match and are not re-uploaded (stale data shards).
    Returns the ``CommitInfo``.
    """
    from huggingface_hub import HfApi

    files = files_to_upload(folder, ignore_patterns)
    if not files:
        raise ValueError(f"nothing to upload in {folder}")
    api = HfApi(token=token)
    api.create_repo(repo_id, repo_type=repo_type, private=private, exist_ok=True)
    return api.upload_folder(
        folder_path=str(folder),
        repo_id=repo_id,
        repo_type=repo_type,
        allow_patterns=files,
        delete_patterns=list(delete_patterns) if delete_patterns else None,
        commit_message=commit_message,
    )
