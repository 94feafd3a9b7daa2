"""Running a study: its tokenizers first, then its cells (fine-tuning cells after those they start from), skipping
finished cells, resuming unfinished ones, and writing the summary of whatever finished."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ..launch.directory_claim import claim_run_directory
from .cells import Cell
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


def part_cells(study: Study, output_dir: Path, models: list[str] | None = None, seeds: list[int] | None = None
               ) -> list[Cell]:
    """The cells of a part of ``study``'s grid: these models (with the models they fine-tune from, which must finish
    first) and these seeds (``None``: all). A model or seed the study lacks is refused (``ValueError``)."""
    unknown_models = sorted(set(models or []) - set(study.models))
    if unknown_models:
        raise ValueError(f"--models {unknown_models}: not models of the study {sorted(study.models)}")
    unknown_seeds = sorted(set(seeds or []) - set(study.seeds))
    if unknown_seeds:
        raise ValueError(f"--seeds {unknown_seeds}: not seeds of the study {list(study.seeds)}")
    chosen = set(models or study.models)
    chosen |= {study.models[name]["init_from"] for name in chosen if "init_from" in study.models[name]}
    return [cell for cell in study.cells(output_dir) if cell.model in chosen and (not seeds or cell.seed in seeds)]


def run_study(study: Study, output_dir: str | os.PathLike, parallel: int = 1, threads_per_worker: int | None = None,
              progress: bool = True, launcher: Launcher | None = None, models: list[str] | None = None,
              seeds: list[int] | None = None) -> dict[str, Any]:
    """Run (or resume) every unfinished cell, then summarize; returns the summary (also written to disk).

    First the study is checked against what its directory holds (:class:`~compgen.studies.records.
    StudyChangedError` lists the runs whose definition changed). Tokenizers train first (one per dataset, those the
    cells to run decode through), then the cells, one after another in this process (``parallel=1``: the right
    choice on one GPU) or over ``parallel`` worker processes with ``threads_per_worker`` threads each (a multi-core
    CPU). A failing cell is reported and the others go on. An interrupt (``KeyboardInterrupt``) stops the running
    cells, cancels the queued ones and writes the summary of what finished before it propagates. The study claims
    ``output_dir`` (one study per directory: :class:`~compgen.launch.directory_claim.RunDirectoryInUseError`). A
    ``launcher`` (:class:`~compgen.studies.launchers.SubmititLauncher`) runs the tokenizers, then the cells, as
    cluster jobs instead, with the same skipping, resuming and summary; a failed job's status names its log.

    ``models`` and ``seeds`` run a part of the grid (:func:`part_cells`); the summary is still the whole grid's, with
    what earlier parts finished and the cells no part has run yet (``"not run"``), so parts add up.
    """
    output_dir = Path(output_dir).expanduser()
    part = part_cells(study, output_dir, models, seeds)
    with claim_run_directory(output_dir):  # one study per directory
        return _run_study(study, output_dir, parallel, threads_per_worker, progress, launcher, part)


def _run_study(study: Study, output_dir: Path, parallel: int, threads_per_worker: int | None, progress: bool,
               launcher: Launcher | None, part: list[Cell]) -> dict[str, Any]:
    from tqdm.auto import tqdm

    launcher = launcher or LocalLauncher(parallel)
    tokenizers, cells = study.tokenizer_runs(output_dir), study.cells(output_dir)
    steps = {cell.name: cell.steps for cell in cells}
    check_unchanged([*tokenizers, *cells], steps, "the study file",
                    {cell.name: steps[cell.source] for cell in cells if cell.source is not None})
    study.prepare_datasets(output_dir)
    statuses: dict[str, dict[str, Any]] = {}
    finished = {cell.name for cell in cells if cell_finished(cell, cell.steps)}
    todo = [cell for cell in part if cell.name not in finished]
    for cell in cells:
        if cell.name in finished:
            statuses[cell.name] = {"status": "finished before", "seconds": 0.0}
    bar = tqdm(total=len(part), initial=len(part) - len(todo), desc=f"study {study.name}", disable=not progress)
    try:
        pending = [run for run in tokenizers if not (run.output_dir / "config.json").is_file()  # untrained, and
                   and any(str(run.output_dir) in cell.command for cell in todo)]  # a cell to run decodes through it
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
