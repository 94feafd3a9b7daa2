"""Running a study: its tokenizers first, then its cells (fine-tuning cells after those they start from), skipping
finished cells, resuming unfinished ones, and writing the summary of whatever finished."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ..training.run_directory import claim_run_directory
from .launchers import Launcher, LocalLauncher
from .records import cell_finished, check_unchanged, record_run
from .runner import CommandResult, run_in_process
from .study import Study
from .summary import write_summary

FINISHED = ("ok", "finished before")


def _run_cell(command: tuple[str, ...], threads: int | None) -> CommandResult:
    if threads:
        import torch

        torch.set_num_threads(threads)
    return run_in_process(list(command))


def run_study(study: Study, output_dir: str | os.PathLike, parallel: int = 1, threads_per_worker: int | None = None,
              progress: bool = True, launcher: Launcher | None = None) -> dict[str, Any]:
    """Run (or resume) every unfinished cell, then summarize; returns the summary (also written to disk).

    First the study is checked against what its directory holds (:class:`~compgen.studies.records.
    StudyChangedError` lists the runs whose definition changed). Tokenizers train first (one per dataset), then the
    cells, one after another in this process (``parallel=1``: the right choice on one GPU) or over ``parallel``
    worker processes with ``threads_per_worker`` threads each (a multi-core CPU). A failing cell is reported and the
    others go on. An interrupt (``KeyboardInterrupt``) stops the running cells, cancels the queued ones and writes
    the summary of what finished before it propagates. The study claims ``output_dir`` (one study per directory:
    :class:`~compgen.training.run_directory.RunDirectoryInUseError`). A ``launcher``
    (:class:`~compgen.studies.launchers.SubmititLauncher`) runs the tokenizers, then the cells, as cluster
    jobs instead, with the same skipping, resuming and summary; a failed job's status names its log.
    """
    output_dir = Path(output_dir).expanduser()
    with claim_run_directory(output_dir):  # one study per directory
        return _run_study(study, output_dir, parallel, threads_per_worker, progress, launcher)


def _run_study(study: Study, output_dir: Path, parallel: int, threads_per_worker: int | None, progress: bool,
               launcher: Launcher | None) -> dict[str, Any]:
    from tqdm.auto import tqdm

    launcher = launcher or LocalLauncher(parallel)
    tokenizers, cells = study.tokenizer_runs(output_dir), study.cells(output_dir)
    check_unchanged([*tokenizers, *cells], {cell.name: cell.steps for cell in cells}, "the study file")
    study.prepare_datasets(output_dir)
    statuses: dict[str, dict[str, Any]] = {}
    todo = [cell for cell in cells if not cell_finished(cell, cell.steps)]
    for cell in cells:
        if cell not in todo:
            statuses[cell.name] = {"status": "finished before", "seconds": 0.0}
    bar = tqdm(total=len(cells), initial=len(cells) - len(todo), desc=f"study {study.name}", disable=not progress)
    try:
        pending = [run for run in tokenizers if not (run.output_dir / "config.json").is_file()]
        for run in pending:
            record_run(run, None)
        launcher.run(_run_cell, [run.command for run in pending], threads_per_worker, [run.name for run in pending],
                     statuses)
        for run in pending:
            if statuses[run.name]["status"] != "ok":
                raise RuntimeError(f"the study's tokenizer failed ({statuses[run.name].get('error')}); its cells "
                                   "cannot run")
        for wave in ([c for c in todo if c.source is None], [c for c in todo if c.source is not None]):
            for cell in [c for c in wave if statuses.get(c.source, {"status": "ok"})["status"] not in FINISHED]:
                statuses[cell.name] = {"status": "failed", "seconds": 0.0,
                                       "error": f"the cell it starts from, {cell.source}, did not finish"}
            wave = [cell for cell in wave if cell.name not in statuses]
            for cell in wave:
                record_run(cell, cell.steps)
            launcher.run(_run_cell, [cell.command for cell in wave], threads_per_worker,
                         [cell.name for cell in wave], statuses, on_done=lambda: bar.update(1))
    except KeyboardInterrupt:
        for cell in todo:
            statuses.setdefault(cell.name, {"status": "cancelled", "seconds": 0.0})
        write_summary(study, output_dir, cells, statuses)
        raise
    finally:
        bar.close()
    return write_summary(study, output_dir, cells, statuses)
