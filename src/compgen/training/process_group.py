"""A multi-process run's process group (``accelerate launch``, ``torchrun``), destroyed before the interpreter ends.

A gloo process group left to the interpreter's finalization can abort a process whose run had finished ("terminate
called without an active exception", SIGABRT: its worker threads outlive the interpreter; pytorch/pytorch#190489),
and the launcher then reports the run failed. The loop cannot destroy the group when a run ends, because a script may
train again in the same process (a tokenizer, then its generator), so a finished run asks for it at exit instead.
"""

from __future__ import annotations

import atexit
import sys

import torch.distributed as dist

_registered = False


def end_process_group_at_exit() -> None:
    """Destroy the default process group when the process exits normally (once, however often it is asked)."""
    global _registered
    if not _registered:
        atexit.register(_destroy_after_clean_exit)
        _registered = True


def _destroy_after_clean_exit() -> None:
    # An uncaught exception (``sys.last_value`` is set before exit handlers run) leaves the group alone: its peers may
    # still wait in a collective that destroying it could hang.
    if getattr(sys, "last_value", None) is None and dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
