"""``--init_from PATH`` resolved, once per run and before any work, into the
:class:`~compgen.training.fine_tuning.InitialWeights` the run starts from (:func:`check_init_from`, which
:func:`~compgen.launch.run_setup.prepare_run` calls; the script, its tokenizer and the loop take its result from the
:class:`~compgen.launch.run_setup.TrainingRun`). What fine-tuning is: :mod:`compgen.training.fine_tuning`.
"""

from __future__ import annotations

import inspect
import json
from pathlib import Path
from typing import Any

from ..atomic_io import safetensors_problem
from ..evaluation.tracker import read_log
from ..option_names import renamed_options
from ..training.checkpoint import CHECKPOINTS_DIR, MODEL_CONFIG_NAME, MODEL_NAME, list_checkpoints
from ..training.fine_tuning import InitialWeights
from ..training.run_directory import EXPORT_STATE_NAME


def _latest_checkpoint(run_dir: Path) -> tuple[int, Path] | None:
    found = [(step, path) for step, path in list_checkpoints(run_dir / CHECKPOINTS_DIR)
             if (path / MODEL_NAME).is_file()]
    return found[-1] if found else None


def _tokenizer_in(directory: Path) -> Path | None:
    found = [directory / name for name in ("vqvae", "vae") if (directory / name / "config.json").is_file()]
    return found[0] if found else None


def _export_configs(export: Path) -> dict[str, dict[str, Any]]:
    configs = [json.loads(path.read_text()) for path in (export / "config.json", *export.glob("*/config.json"))
               if path.is_file()]
    return {config["_class_name"]: config for config in configs if "_class_name" in config}


FLOW_PIPELINES = ("TupleConditionedFlowDiTPipeline",)
DDPM_DIT_PIPELINES = ("TupleConditionedDiTPipeline",)


def _objective(pipeline_class: str | None, options: dict[str, Any]) -> str | None:
    """``"flow"`` or ``"ddpm"`` for a DiT source, from its export's pipeline or its run's script options."""
    if pipeline_class in FLOW_PIPELINES or "weighting_scheme" in options:
        return "flow"
    if pipeline_class in DDPM_DIT_PIPELINES or (pipeline_class is None and "prediction_type" in options):
        return "ddpm"
    return None


def check_weight_files(path: str | Path, files: tuple[Path, ...]) -> None:
    """Refuse, naming the file, a weight file of ``--init_from path`` that is not a whole safetensors file."""
    for file in files:
        problem = safetensors_problem(file)
        if problem:
            raise ValueError(f"--init_from {path}: {problem}")


def resolve_initial_weights(path: str | Path) -> InitialWeights:
    """Check ``--init_from PATH`` before any work: which weight files it holds, at which step, its source log, its
    models' configurations and the tokenizer its model read. Raises ``ValueError`` naming what is missing."""
    source = Path(path).expanduser()
    if not source.exists():
        raise ValueError(f"--init_from {path}: no such directory")
    if not source.is_dir():
        raise ValueError(f"--init_from {path}: not a directory (give an exported run, a checkpoint directory or a "
                         "run directory)")
    if (source / "model_index.json").is_file() or (source / "config.json").is_file():  # an export
        files = tuple(sorted(source.glob("*/diffusion_pytorch_model.safetensors"))
                      + sorted(source.glob("diffusion_pytorch_model.safetensors")))
        if not files:
            raise ValueError(f"--init_from {path}: an export without safetensors weights")
        log = source / "learning_dynamics.jsonl"
        records = read_log(log) if log.is_file() else []
        state = source / EXPORT_STATE_NAME
        if state.is_file():  # the export's own step: a run resumed past its export logs later records
            step = int(json.loads(state.read_text())["step"])
            records = [r for r in records if r["step"] <= step]
        else:  # an export from before compgen recorded its step
            latest = _latest_checkpoint(source)
            step = records[-1]["step"] if records else latest[0] if latest else 0
        check_weight_files(path, files)
        index = source / "model_index.json"
        pipeline_class = json.loads(index.read_text()).get("_class_name") if index.is_file() else None
        return InitialWeights(source, files, step, tuple(records), _export_configs(source), _tokenizer_in(source),
                              _objective(pipeline_class, {}))
    latest = _latest_checkpoint(source)
    checkpoint = source if (source / MODEL_NAME).is_file() else latest[1] if latest else None
    if checkpoint is None:
        raise ValueError(f"--init_from {path}: holds no export (model_index.json), no checkpoint ({MODEL_NAME}) and "
                         "no checkpoints/checkpoint-N directory")
    state = checkpoint / "trainer_state.json"
    if not state.is_file():
        raise ValueError(f"--init_from {path}: {checkpoint} has no trainer_state.json")
    trainer_state = json.loads(state.read_text())
    step = int(trainer_state["step"])
    run_dir = checkpoint.parents[1]
    log = run_dir / "learning_dynamics.jsonl"
    records = [r for r in read_log(log) if r["step"] <= step] if log.is_file() else []
    configs = checkpoint / MODEL_CONFIG_NAME
    # A checkpoint written before the rename records its tokenizer as vqvae_path.
    recorded = renamed_options(trainer_state.get("config", {}).get("extra", {})).get("tokenizer_path")
    tokenizer = (Path(recorded) if recorded and (Path(recorded) / "config.json").is_file()
                 else run_dir / "tokenizer" if (run_dir / "tokenizer" / "config.json").is_file()
                 else _tokenizer_in(run_dir))
    check_weight_files(path, (checkpoint / MODEL_NAME,))
    return InitialWeights(checkpoint, (checkpoint / MODEL_NAME,), step, tuple(records),
                          json.loads(configs.read_text()) if configs.is_file() else {}, tokenizer,
                          _objective(None, trainer_state.get("config", {}).get("extra", {})))


def check_init_from(init_from: str | Path, output_dir: str | Path, model_class: type | None = None,
                    clips: bool | None = None) -> InitialWeights:
    """``--init_from`` checked before any work: weights there (:func:`resolve_initial_weights`), outside
    ``--output_dir`` (the run writes there, and ``--overwrite_output_dir`` would delete the weights it starts from
    before loading them), of ``model_class`` where the source records its classes, with the configuration a latent
    model's statistics come from, and a model of clips for a recipe of clips (``clips``: a video recipe), of images
    for one of images (one class serves both; the config's ``num_frames`` tells them apart)."""
    source, output = Path(init_from).expanduser().resolve(), Path(output_dir).expanduser().resolve()
    if source == output or output in source.parents:
        raise ValueError(f"--init_from {init_from} lies inside --output_dir {output_dir}, which this run writes (and "
                         "--overwrite_output_dir empties first); copy the source elsewhere or choose another "
                         "--output_dir")
    initial = resolve_initial_weights(init_from)
    if model_class is not None:
        initial.check_model_class(model_class)
        if "latent_mean" in inspect.signature(model_class.__init__).parameters and initial.config_of(
                model_class) is None:
            raise ValueError(f"--init_from {init_from}: no record of its {model_class.__name__}'s configuration (its "
                             "latent statistics; a checkpoint from before compgen wrote model_config.json): give "
                             "the source's export")
        check_same_kind_of_data(init_from, initial.config_of(model_class), clips)
    return initial


def check_same_kind_of_data(init_from: str | Path, config: dict[str, Any] | None, clips: bool | None) -> None:
    """Refuse a source model of images for a recipe of clips, or the reverse (its weights have the other token count
    and positions: the run would fail once data, probes and tokens are built)."""
    if clips is None or config is None:
        return
    num_frames = int(config.get("num_frames", 1))
    if (num_frames > 1) != clips:
        have = f"a model of {num_frames}-frame clips" if num_frames > 1 else "a model of images"
        want = "clips (a video recipe)" if clips else "images"
        other = "a video recipe" if num_frames > 1 else "an image recipe"
        raise ValueError(f"--init_from {init_from} holds {have}, and this recipe trains on {want}: start it from a "
                         f"run of the same kind, or fine-tune that source with {other}")
