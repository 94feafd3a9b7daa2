"""What a run writes in its output directory (:class:`RunDirectory`): the logs, samples and export it leaves there, and
the checkpoints it writes and may resume from.

:meth:`RunDirectory.resume_candidates` and :meth:`RunDirectory.check_resumable` decide which checkpoint a resumed run
continues from; :meth:`RunDirectory.write_checkpoint` writes one atomically and prunes the old ones. Claiming the
directory and deciding whether a run may start there is the command-line layer's
(:mod:`compgen.launch.directory_claim`): the loop runs in a directory claimed for it.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from safetensors import SafetensorError

from ..atomic_io import atomic_write_text
from ..evaluation.tracker import read_log
from ..option_names import renamed_options
from .checkpoint import CHECKPOINTS_DIR, CheckpointError, list_checkpoints, read_trainer_state
from .config import LENGTH_FREE_LR_SCHEDULES, RUN_OPTIONS, TrainingConfig, jsonable

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


def effective_seeds(options: dict[str, Any]) -> dict[str, Any]:
    """``options`` with ``data_seed`` and ``noise_seed`` as the run uses them: ``None`` is ``seed``. A resume that
    gives ``--data_seed 0`` explicitly continues a run that took it from ``--seed 0``."""
    return options | {key: options.get("seed") for key in ("data_seed", "noise_seed")
                      if key in options and options[key] is None}


class RunDirectory:
    """One run's output directory: what a run left there, and the checkpoints it writes and resumes from."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)
        self.checkpoint_dir = self.path / CHECKPOINTS_DIR
        self.log_path = self.path / LOG_NAME
        self.training_log_path = self.path / TRAINING_LOG_NAME
        self.sample_dir = self.path / SAMPLES_DIR

    def checkpoints(self) -> list[tuple[int, Path]]:
        """The complete checkpoints in this directory, by step."""
        return list_checkpoints(self.checkpoint_dir)

    def run_files(self) -> list[Path]:
        """What a run leaves here (checkpoints, log, samples, export, card), as far as present."""
        return [self.path / name for name in (CHECKPOINTS_DIR, LOG_NAME, TRAINING_LOG_NAME, SAMPLES_DIR,
                                                              *EXPORT_MARKERS, EXPORT_STATE_NAME)
                if (self.path / name).exists()]

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
        config = config.resolved()  # a checkpoint records the precision ``auto`` trained in, not ``auto``
        if isinstance(saved.get("extra"), dict):  # a checkpoint written before an option's rename: its old name
            saved = saved | {"extra": renamed_options(saved["extra"])}
        fingerprint = trainer_state.get("fingerprint")
        if fingerprint is not None and fingerprint != config.fingerprint():
            ours = effective_seeds(config.to_json_dict())
            saved = effective_seeds(saved)
            # An option added to compgen after the checkpoint was written matches when this run keeps its default:
            # a training option's, or a script option's (``extra``) as the script declares it.
            defaults = type(config)().to_json_dict()
            if isinstance(saved.get("extra"), dict):
                added = {k: v for k, v in jsonable(config.extra_defaults).items() if k not in saved["extra"]}
                saved = saved | {"extra": added | saved["extra"]}
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

    def truncate_logs(self, step: int) -> None:
        """Drop the records of both logs (evaluations, training scalars) written after the checkpoint a run resumes
        from (and a torn last line a kill left), so the logs match the weights."""
        for path in (self.log_path, self.training_log_path):
            if path.is_file():
                kept = [json.dumps(r) for r in read_log(path) if r["step"] <= step]
                atomic_write_text(path, "".join(line + "\n" for line in kept))

    def write_checkpoint(self, step: int, write: Callable[[Path], None], run_id: str, limit: int | None) -> None:
        """Write ``checkpoint-<step>`` atomically (``write`` fills a temporary directory, renamed into place), then
        keep only the newest ``limit`` checkpoints of the run ``run_id`` (another run's are never pruned)."""
        final = self.checkpoint_dir / f"checkpoint-{step}"
        tmp = self.checkpoint_dir / f".tmp-checkpoint-{step}"
        shutil.rmtree(tmp, ignore_errors=True)
        try:
            tmp.mkdir(parents=True)
            write(tmp)
        except (OSError, SafetensorError) as error:  # a full disk, a quota (safetensors' own write error is not an
            # OSError): no half-written folder stays, the earlier checkpoints do
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
