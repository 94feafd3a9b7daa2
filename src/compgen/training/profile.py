"""Where a run's wall-clock goes: named phases from the training process's start to its export (startup by part,
a tokenizer trained first, training steps, evaluation by part, checkpoints, export), printed at the end of every run
and written to ``profile.json`` in its output directory. The phases and the time in none of them sum to the total."""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..atomic_io import atomic_write_text

PROFILE_NAME = "profile.json"
_IMPORTED_AT = time.time()
_first_profile_in_process = True


def _process_start(pid: int | str) -> tuple[float, int]:
    """When process ``pid`` started (seconds since the epoch, from ``/proc``) and its parent's pid."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    boot = next(int(line.split()[1]) for line in Path("/proc/stat").read_text().splitlines()
                if line.startswith("btime"))
    return boot + int(fields[19]) / os.sysconf("SC_CLK_TCK"), int(fields[1])


LAUNCHERS = ("accelerate", "torchrun", "torch.distributed.run")
"""Commands that start a training process as their child: their own startup is the run's too."""


def process_start_time() -> float:
    """When this run's command started (seconds since the epoch): this process's start from ``/proc`` on Linux, or
    its launcher's (``accelerate launch``, ``torchrun``: the ancestors whose command names one) when it has one; else
    when compgen was imported."""
    try:
        start, parent = _process_start("self")
        if any(name.startswith("ACCELERATE_") for name in os.environ) or "TORCHELASTIC_RUN_ID" in os.environ:
            for _ in range(4):  # accelerate launch -> (torchrun's agent) -> this process
                command = Path(f"/proc/{parent}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                if parent <= 1 or not any(name in command for name in LAUNCHERS):
                    break
                start, parent = _process_start(parent)
        return start
    except (OSError, ValueError, IndexError, StopIteration):
        return _IMPORTED_AT


class RunProfile:
    """Seconds per named phase of one run, from its start (the process's start for the first run of a process, so
    the interpreter and the imports count; the profile's creation for later runs of a queue)."""

    def __init__(self, start: float | None = None) -> None:
        global _first_profile_in_process
        if start is None:
            start = process_start_time() if _first_profile_in_process else time.time()
        _first_profile_in_process = False
        self.start = start
        self.phases: dict[str, float] = {}

    def add(self, name: str, seconds: float) -> None:
        self.phases[name] = self.phases.get(name, 0.0) + max(float(seconds), 0.0)

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Time the block under ``name`` (added up over repeated blocks)."""
        begin = time.time()
        try:
            yield
        finally:
            self.add(name, time.time() - begin)

    def mark_startup(self, name: str = "startup: launcher, interpreter, imports, options") -> None:
        """Everything from the start to now that no phase holds, under ``name`` (called once, early)."""
        self.add(name, time.time() - self.start - sum(self.phases.values()))

    def report(self) -> dict[str, Any]:
        """``{"total_s", "phases": {name: s}, "other_s"}``: the total from the start to now, and the part of it in no
        phase (building the model, precomputing tokens, Python between phases)."""
        total = time.time() - self.start
        return {"total_s": round(total, 3), "phases": {k: round(v, 3) for k, v in self.phases.items()},
                "other_s": round(total - sum(self.phases.values()), 3)}

    def table(self, report: dict[str, Any] | None = None) -> str:
        """The report as aligned lines with each phase's share of the total."""
        report = report or self.report()
        total = max(report["total_s"], 1e-9)
        rows = [*report["phases"].items(), ("other (model building, between phases)", report["other_s"])]
        width = max(len(name) for name, _ in rows)
        lines = [f"{name:<{width}}  {seconds:9.1f} s  {100 * seconds / total:5.1f}%" for name, seconds in rows]
        return "\n".join(["where the time went:", *lines, f"{'total':<{width}}  {report['total_s']:9.1f} s"])

    def write(self, output_dir: str | os.PathLike) -> dict[str, Any]:
        """Write ``profile.json`` into ``output_dir`` and return the report."""
        report = self.report()
        atomic_write_text(Path(output_dir) / PROFILE_NAME, json.dumps(report, indent=2) + "\n")
        return report
