"""What a study's directory remembers, so that a rerun notices what changed in the study file.

Each run of a study (a cell, or a tokenizer) records its identity in ``study_run.json`` before it starts: its script,
its options, the definition of its dataset and of its tokenizer. A dataset the study defines records its definition
beside its export (``data/<name>.definition.json``). On a rerun, a run directory that already holds training
(checkpoints, a log, an export) must carry the identity the study file now gives it; otherwise its results would be
reported under options it never trained with, so the study is refused with the list of changed runs (remove their
directories to train them again). A run that never got to train is simply recorded anew.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

from ..atomic_io import atomic_write_text
from ..families import recipe_of_script
from ..option_names import renamed_options
from ..training.run_directory import EXPORT_STATE_NAME, RunDirectory

RECORD_NAME = "study_run.json"


class StudyChangedError(ValueError):
    """The study file changed for runs that already trained; the message lists them."""


class StudyRun(Protocol):
    """What is recorded of a cell or a tokenizer run."""

    name: str
    output_dir: Path
    identity: str
    """JSON of the run's script, options (all but where it writes and how long it trains) and data."""


def record_run(run: StudyRun, steps: int | None) -> None:
    """Write ``run``'s identity (and the steps the study asks of it) into its directory, before it starts."""
    run.output_dir.mkdir(parents=True, exist_ok=True)
    record = {"identity": json.loads(run.identity), "steps": steps}
    atomic_write_text(run.output_dir / RECORD_NAME, json.dumps(record, indent=2, sort_keys=True) + "\n")


def changes(run: StudyRun, steps: int | None) -> list[str]:
    """How ``run`` as the study file now defines it differs from the run in its directory (empty: nothing trained
    there yet, or nothing changed). Training longer is no change (the run resumes; its trainer refuses it if the
    learning-rate schedule depends on the length); training shorter than recorded is."""
    if not RunDirectory(run.output_dir).run_files():
        return []
    path = run.output_dir / RECORD_NAME
    if not path.is_file():
        return ["no record of the study options it trained with"]
    record = json.loads(path.read_text())
    before, now = _renamed(record["identity"]), _renamed(json.loads(run.identity))
    found = _differences(before, now)
    if steps is not None and record.get("steps") is not None and steps < record["steps"]:
        found.append(f"steps {record['steps']} -> {steps}")
    return found


def check_unchanged(runs: Sequence[StudyRun], steps: dict[str, int | None], source: str,
                    source_steps: dict[str, int] | None = None) -> None:
    """Raise :class:`StudyChangedError` listing every run of ``runs`` that trained under another definition
    (``steps`` maps a run's name to the steps the study asks of it; ``source_steps`` a fine-tuning cell's name to the
    steps its source trains, :func:`stale_fine_tuning`)."""
    source_steps = source_steps or {}
    changed = [(run, found) for run in runs if (found := changes(run, steps.get(run.name)) + (
        stale_fine_tuning(run, source_steps[run.name]) if run.name in source_steps else []))]
    if changed:
        lines = "\n".join(f"  - {run.name} ({run.output_dir}): {'; '.join(found)}" for run, found in changed)
        raise StudyChangedError(
            f"{source} changed for runs that already trained:\n{lines}\nTheir results would be reported under "
            "options they did not train with. To train them again under the new definition, remove their "
            "directories (listed above) and rerun; or run the changed study into another --output_dir."
        )


def _renamed(identity: Any) -> Any:
    """``identity`` with every ``flags`` mapping in it under the options' current names: a run recorded before an
    option's rename (``vq_steps``) is the same run as one the study file now gives the new name
    (``tokenizer_steps``); and one recorded with an example script (``script: ../examples/train_dit.py``) is the same
    as one that names its recipe (``recipe: tuple-dit``)."""
    if isinstance(identity, dict):
        recipe = recipe_of_script(identity["script"]) if isinstance(identity.get("script"), str) else None
        if recipe is not None:
            identity = {("recipe" if key == "script" else key): (recipe.name if key == "script" else value)
                        for key, value in identity.items()}
        return {key: _renamed(renamed_options(value) if key == "flags" and isinstance(value, dict) else value)
                for key, value in identity.items()}
    return identity


def _differences(before: dict[str, Any], now: dict[str, Any]) -> list[str]:
    found = []
    for key in sorted(set(before) | set(now)):
        old, new = before.get(key), now.get(key)
        if old == new:
            continue
        if key == "flags" and isinstance(old, dict) and isinstance(new, dict):
            found += _differences(old, new)
        elif key in ("dataset", "tokenizer"):
            found.append(f"{key} definition {_short(old)} -> {_short(new)}")
        else:
            found.append(f"{key} {_short(old)} -> {_short(new)}")
    return found


def _short(value: Any) -> str:
    text = json.dumps(value, sort_keys=True) if not isinstance(value, str) else value
    return text if len(text) <= 120 else text[:117] + "..."


def definition_path(export_dir: Path) -> Path:
    """Where the definition of the dataset exported to ``export_dir`` is recorded (beside the export)."""
    return export_dir.with_name(f"{export_dir.name}.definition.json")


def export_is_current(export_dir: Path, definition: dict[str, Any]) -> bool:
    """Whether ``export_dir`` holds an export of exactly ``definition`` (an export without a record is not)."""
    record = definition_path(export_dir)
    if not (export_dir / "README.md").is_file() or not record.is_file():
        return False
    return json.loads(record.read_text()) == json.loads(json.dumps(definition))


def record_definition(export_dir: Path, definition: dict[str, Any]) -> None:
    """Record the definition of the dataset just exported to ``export_dir``."""
    atomic_write_text(definition_path(export_dir), json.dumps(definition, indent=2, sort_keys=True) + "\n")


def _export_state(output_dir: Path) -> dict[str, int] | None:
    path = output_dir / EXPORT_STATE_NAME
    return json.loads(path.read_text()) if path.is_file() else None


def steps_done(output_dir: Path) -> tuple[int, int] | None:
    """``(steps this run trained, the logged step it started at)`` of the run in ``output_dir`` (a fine-tuning run
    starts at its source's step, others at 0), from its export's record, else from its log; ``None`` where neither
    tells (no export and no log, or an export of an older compgen without a log)."""
    from ..evaluation.tracker import read_log

    state = _export_state(output_dir)
    if state is not None and "steps_trained" in state:
        return state["steps_trained"], state["step"] - state["steps_trained"]
    log = output_dir / "learning_dynamics.jsonl"
    records = read_log(log) if log.is_file() else []
    if not records:
        return None
    start = records[-1].get("phase_start_step", 0)  # a fine-tuning cell's steps continue its source's
    return records[-1]["step"] - start, start


def cell_finished(cell: Any, steps: int) -> bool:
    """A cell is finished when its export is complete and it trained ``steps`` (by its export's record or its log;
    an export of an older compgen without either counts as finished)."""
    if not ((cell.output_dir / "model_index.json").is_file() or (cell.output_dir / "config.json").is_file()):
        return False
    done = steps_done(cell.output_dir)
    return done is None or done[0] >= steps


def stale_fine_tuning(cell: Any, source_steps: int) -> list[str]:
    """Why a fine-tuning cell's run is no longer what the study asks (empty: nothing to say): it started from another
    step of its source than the one the source now trains to (the study's ``steps`` grew), so its weights come from
    the source's older ones."""
    done = steps_done(cell.output_dir) if RunDirectory(cell.output_dir).run_files() else None
    if done is None or done[1] == source_steps:
        return []
    return [f"fine-tuned from step {done[1]} of {cell.source}, which now trains to {source_steps}"]
