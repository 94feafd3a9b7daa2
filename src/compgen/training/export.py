"""A finished run's end: the export (the pipeline, ``task.save_pretrained``, and its model card, moved in as one unit)
and the Hub push (:func:`finish_run`).

Kept out of the loop (:mod:`~compgen.training.trainer`): the loop decides *when* a run ends, this module what then
happens.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

from safetensors import SafetensorError
from torch import nn

from ..concepts import ConceptGraph
from .config import TrainingConfig
from .run_directory import EXPORT_STATE_NAME
from .tasks.base import TrainingTask


def card_details(task: TrainingTask) -> dict[str, Any]:
    """The task's model-card details, its own options (:class:`~compgen.training.tasks.base.TaskOptions`) listed
    first under the model's hyperparameters (a row the task resolves itself, as MaskGIT's ``jepa_layers``, wins)."""
    details = dict(task.model_card_details())
    if task.options is not None:
        details["hyperparameters"] = {**task.options.card_rows(), **details.get("hyperparameters", {})}
    return details


def export_run(output_dir: Path, task: TrainingTask, model: nn.Module, records: list[dict[str, Any]],
               graph: ConceptGraph, config: TrainingConfig, dataset_name: str | None = None,
               state: dict[str, int] | None = None) -> None:
    """``save_pretrained`` the pipeline of ``model`` into ``output_dir`` and write its model card (and, given its
    ``state``, :data:`EXPORT_STATE_NAME`: the logged step and the steps this run trained), as one unit.

    Both are written to a temporary directory first. Then the loading marker of the previous export
    (``model_index.json``, or ``config.json`` for a bare model) is removed, the new components and card are
    moved in, and the new marker goes in last: a kill at any point leaves either the old export, or no marker
    (``from_pretrained`` fails), never a loadable mix of old and new parts.
    """
    from .model_card import write_model_card

    output_dir = Path(output_dir)
    tmp = output_dir / ".tmp-export"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        tmp.mkdir(parents=True)
        task.save_pretrained(model, tmp)
        write_model_card(tmp, records=records, graph=graph, config=config, details=card_details(task),
                         dataset_name=dataset_name)
        if state is not None:
            (tmp / EXPORT_STATE_NAME).write_text(json.dumps(state) + "\n")
    except (OSError, SafetensorError) as error:  # a full disk: no half-written export stays, the previous one does
        shutil.rmtree(tmp, ignore_errors=True)
        raise OSError(f"could not write the export in {output_dir}: {error}; any earlier export there is intact and "
                      "the checkpoints are kept: free space, then resume with --resume_from_checkpoint latest"
                      ) from error
    marker = "model_index.json" if (tmp / "model_index.json").exists() else "config.json"
    for name in ("model_index.json", "config.json"):
        if (output_dir / name).is_file():
            (output_dir / name).unlink()
    for entry in sorted(tmp.iterdir(), key=lambda p: p.name == marker):
        target = output_dir / entry.name
        if target.is_dir() and not target.is_symlink():
            shutil.rmtree(target)
        os.replace(entry, target)
    tmp.rmdir()


def finish_run(output_dir: Path, task: TrainingTask, model: nn.Module, records: list[dict[str, Any]],
               graph: ConceptGraph, config: TrainingConfig, dataset_name: str | None, state: dict[str, int]) -> None:
    """What the loop does with a finished run's final (EMA) weights ``model``, on the main process: export it with its
    card (:func:`export_run`), then push the folder to the Hub with ``--push_to_hub``."""
    export_run(output_dir, task, model, records, graph, config, dataset_name, state)
    if config.push_to_hub:
        from ..hub import upload_folder_to_hub

        upload_folder_to_hub(output_dir, config.hub_model_id, token=config.hub_token, private=config.hub_private)
