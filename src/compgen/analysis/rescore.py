"""Score a trained pipeline (or one of its checkpoints) with compgen's evaluation, under chosen sampling options.

    python -m compgen.analysis.rescore RUN_DIR [--num_inference_steps 50] [--guidance_scale 1]
        [--concept_values canonical|sampled] [--checkpoint checkpoint-2000 --weights online|ema]
        [--images_per_class 50] [--seed 0] [--mixed_precision no|bf16] [--output FILE.json]

``RUN_DIR`` is a training run's output directory: its pipeline (U-Net, MaskGIT or DiT), its learning-dynamics log (for
the concept graph) and its checkpoints. The samples are scored as during training (one-object check, concept probes,
pixel-statistics scorer) and the record is printed per level and class. What it answers:

- Is a result the sampler's? More DDIM steps, or classifier-free guidance for a model trained with concept dropout.
- Is it the test-time conditioning's? ``full`` models are conditioned at test time on each class's canonical values
  (Paper A's protocol); ``--concept_values sampled`` draws each sample's values as the training data does, over the
  class's whole colour and size range.
- Is it the EMA's? ``--checkpoint NAME --weights online`` scores the raw weights of a checkpoint instead.
- Is it the evaluation's? ``--num_inference_steps`` and ``--mixed_precision`` (the sampler under bf16 autocast) score
  one checkpoint under the settings of two evaluations (``benchmarks/eval_agreement.py`` does it for every checkpoint).
"""

from __future__ import annotations

import argparse
import inspect
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import load_file

from ..atomic_io import atomic_write_text, output_file_problem, safetensors_problem
from ..cli import ArgumentParser
from ..concepts import ConceptGraph
from ..evaluation.sampling_precision import sampling_precision
from ..families import pipelines
from ..models.transformer_block import convert_legacy_block_weights
from ..pipelines.concept_inputs import check_temperature
from ..training.tasks.base import sample_in_batches

PIPELINES = pipelines()
"""Every family's pipeline (``compgen.families``): its module and the component holding the model."""


def check_pipeline_kind(run_dir: str | Path) -> str:
    """The class name of the pipeline ``run_dir`` exported; ``ValueError`` where it holds none compgen re-scores."""
    index = Path(run_dir) / "model_index.json"
    if not index.is_file():
        raise ValueError(f"{run_dir} holds no exported pipeline (no model_index.json)")
    name = json.loads(index.read_text()).get("_class_name")
    if name not in PIPELINES:
        raise ValueError(f"{run_dir}: unknown pipeline {name}; known: {sorted(PIPELINES)}")
    return name


def check_export(run_dir: str | Path, guidance_scale: float | None = None) -> None:
    """Before any loading or sampling: every component the export's ``model_index.json`` lists is there with its
    config and whole weights (a missing ``unet/`` is named, not a loader error about the run folder), and the guidance
    is finite and, other than 1, asked of a model trained with concept dropout."""
    name = check_pipeline_kind(run_dir)
    index = json.loads((Path(run_dir) / "model_index.json").read_text())
    for component, spec in index.items():
        if component.startswith("_") or not isinstance(spec, list) or None in spec:
            continue
        folder = Path(run_dir) / component
        if not folder.is_dir() or not any(folder.glob("*config.json")):
            raise ValueError(f"{run_dir}: the export lists {component}/ ({spec[1]}), but {folder} holds no config")
        for weights in folder.glob("*.safetensors"):
            problem = safetensors_problem(weights)
            if problem:
                raise ValueError(problem)
    if guidance_scale is None:  # the training evaluation's, which its run was checked for
        return
    if not math.isfinite(guidance_scale):
        raise ValueError(f"--guidance_scale must be a finite number (1 disables guidance), got {guidance_scale}")
    if guidance_scale != 1.0:
        denoiser = json.loads((Path(run_dir) / PIPELINES[name][1] / "config.json").read_text())
        if not denoiser.get("concept_dropout"):
            raise ValueError(f"--guidance_scale {guidance_scale} needs a model trained with concept dropout (it learns "
                             f"the null concepts); this one's concept_dropout is {denoiser.get('concept_dropout')}")


def load_run_pipeline(run_dir: str | Path):
    """The pipeline a training run exported, whichever compgen model it is; returns (pipeline, denoiser name)."""
    import importlib

    from ..models.config_bounds import check_model_directory

    name = check_pipeline_kind(run_dir)
    check_model_directory(run_dir)  # a crafted config is refused before from_pretrained allocates anything
    module, denoiser = PIPELINES[name]
    pipeline = getattr(importlib.import_module(module), name).from_pretrained(run_dir)
    pipeline.set_progress_bar_config(disable=True)
    return pipeline, denoiser


def load_checkpoint_weights(pipeline, denoiser: str, checkpoint: Path, weights: str) -> None:
    """Put a checkpoint's online (``model.safetensors``) or EMA (``ema.safetensors``) weights into the pipeline."""
    path = checkpoint_weights_path(checkpoint, weights)
    state = load_file(str(path))
    convert_legacy_block_weights(state)  # blocks saved by an older compgen (nn.TransformerEncoderLayer)
    if any(key.startswith("transformer.") for key in state):  # MaskGIT trains the transformer with its predictor
        state = {key[len("transformer."):]: value for key, value in state.items() if key.startswith("transformer.")}
    try:
        getattr(pipeline, denoiser).load_state_dict(state)
    except RuntimeError as error:
        raise ValueError(f"{path} does not fit the exported {denoiser} (its config.json): {error}") from error


def checkpoint_weights_path(checkpoint: Path, weights: str) -> Path:
    """The file of a checkpoint's ``online`` or ``ema`` weights (``ValueError`` saying why it is missing)."""
    if not checkpoint.is_dir():
        found = sorted(p.name for p in checkpoint.parent.glob("checkpoint-*")) if checkpoint.parent.is_dir() else []
        raise ValueError(f"{checkpoint}: no such checkpoint (the run has: {', '.join(found) or 'none'})")
    path = checkpoint / ("model.safetensors" if weights == "online" else "ema.safetensors")
    if not path.is_file():
        reason = "the run was trained without EMA (--no_use_ema): use --weights online" if weights == "ema" else \
            "the checkpoint is incomplete"
        raise ValueError(f"{path} not found: {reason}")
    return path


def resolve_run(run_dir: str | Path, checkpoint: str | None = None, weights: str = "ema"
                ) -> tuple[dict[str, Any], Path | None, int]:
    """Check that ``run_dir`` is a scorable run (and ``checkpoint`` one of its checkpoints, with ``weights``) before
    any work; returns its last evaluation record, the checkpoint directory (or ``None``) and the step it scores (the
    checkpoint's, else the export's). Raises ``ValueError`` saying what is missing."""
    from ..evaluation.tracker import read_log

    run_dir = Path(run_dir)
    if not (run_dir / "model_index.json").is_file():
        raise ValueError(f"{run_dir} is not a trained run: it holds no exported pipeline (model_index.json)")
    log = run_dir / "learning_dynamics.jsonl"
    records = read_log(log) if log.is_file() else []
    if not records:
        raise ValueError(f"{run_dir} has no evaluation log ({log.name}), which names the concept graph to score "
                         "against: was it trained with --no_eval?")
    if checkpoint is None:
        return records[-1], None, int(records[-1]["step"])
    path = Path(checkpoint) if Path(checkpoint).is_dir() else run_dir / "checkpoints" / checkpoint
    state = path / "trainer_state.json"
    if not state.is_file():
        found = sorted((p.name for p in (run_dir / "checkpoints").glob("checkpoint-*") if p.is_dir()),
                       key=lambda name: int(name.rsplit("-", 1)[-1]) if name.rsplit("-", 1)[-1].isdigit() else -1)
        raise ValueError(f"no checkpoint {checkpoint!r} in {run_dir / 'checkpoints'}; there: "
                         f"{', '.join(found) or 'none (pruned or never written)'}")
    checkpoint_weights_path(path, weights)
    # A fine-tuning run's checkpoints count its own steps; its log's steps continue its source's.
    offset = int(records[-1].get("phase_start_step", 0))
    return records[-1], path, int(json.loads(state.read_text())["step"]) + offset


def sampled_concept_values(graph: ConceptGraph, concepts: list[str], seed: int) -> torch.Tensor:
    """Per-sample continuous values drawn as the training data draws them (the class's whole colour and size
    range), in the ``full`` models' order (RGB, then size)."""
    from ..shapes import PAPER_COLOR_JITTER, PAPER_SIZE_JITTER, RenderConfig, render_classes

    batch = render_classes(graph.space, concepts, seed=seed,
                           config=RenderConfig(color_jitter=PAPER_COLOR_JITTER, size_jitter=PAPER_SIZE_JITTER))
    return torch.cat([torch.as_tensor(batch.rgb), torch.as_tensor(batch.size)[:, None]], dim=1)


def sampling_options(last_record: dict[str, Any], num_inference_steps: int | None, mixed_precision: str | None
                     ) -> tuple[int | None, str, dict[str, Any]]:
    """The sampler of a re-scoring: ``num_inference_steps`` and ``mixed_precision`` where given, else the training
    evaluation's (its log's ``sampling``; logs before it was recorded: the pipeline's defaults), and the evaluation's
    other sampler options (GIVT's and MAR's ``temperature``, MAR's ``num_head_steps``). Raises ``ValueError`` for a
    precision this CPU cannot re-score in."""
    sampling = dict(last_record.get("sampling", {}))
    recorded_steps = sampling.pop("num_inference_steps", None)
    recorded_precision = sampling.pop("mixed_precision", "no")
    mixed_precision = mixed_precision or recorded_precision
    if mixed_precision not in ("no", "bf16"):
        raise ValueError(f"re-scoring samples on the CPU in fp32 (no) or bf16; the training evaluation used "
                         f"{mixed_precision!r}: pass --mixed_precision no or bf16")
    return num_inference_steps or recorded_steps, mixed_precision, sampling


def evaluate_run(run_dir: str | Path, num_inference_steps: int | None = None, guidance_scale: float | None = None,
                 concept_values: str = "canonical", checkpoint: str | None = None, weights: str = "ema",
                 images_per_class: int = 50, seed: int = 0, batch_size: int = 400,
                 mixed_precision: str | None = None, sample_dir: str | Path | None = None,
                 temperature: float | None = None, lenient: Any = None) -> dict[str, Any]:
    """Score ``run_dir``'s pipeline as the training loop does; returns the evaluation record. ``None`` options take
    the training evaluation's (its log's ``sampling``). ``sample_dir``: keep 8 samples per class there (as the loop's
    ``samples/``), to look at. ``temperature``: the sampler's (MaskGIT's re-masking, GIVT's and MAR's sampling
    temperature), to sweep it on one set of weights. ``lenient``: Paper B's lenient score
    (:class:`~compgen.evaluation.lenient.LenientScorer`, or a dataset name or export directory for :func:`lenient_for`),
    added to the record beside the strict scorers, as the loop logs it."""
    from diffusers import DDIMScheduler

    from ..clips import ClipConfig
    from ..evaluation.clip_evaluation import ClipTracker
    from ..evaluation.clip_probes import clip_probes_for
    from ..evaluation.probes import default_shapes_probes
    from ..evaluation.tracker import LearningDynamicsTracker, graph_from_record

    if weights == "online" and checkpoint is None:
        raise ValueError("--weights online needs --checkpoint: an export holds only the weights it was saved with")
    last_record, checkpoint_dir, step = resolve_run(run_dir, checkpoint, weights)
    graph = graph_from_record(last_record)
    num_inference_steps, mixed_precision, sampler = sampling_options(last_record, num_inference_steps,
                                                                     mixed_precision)
    pipeline, denoiser = load_run_pipeline(run_dir)
    if temperature is not None:
        check_temperature_option(pipeline, temperature)
        sampler["temperature"] = temperature
    if checkpoint_dir is not None:
        load_checkpoint_weights(pipeline, denoiser, checkpoint_dir, weights)
    model = getattr(pipeline, denoiser).eval()
    diffusion = denoiser == "unet" or type(pipeline).__name__ == "TupleConditionedDiTPipeline"
    if diffusion:
        pipeline.scheduler = DDIMScheduler.from_config(pipeline.scheduler.config)
    if concept_values == "sampled" and model.config.conditioning != "full":
        raise ValueError("--concept_values sampled needs a model trained with full conditioning")

    options: dict[str, Any] = dict(sampler)
    if guidance_scale is not None:  # else the evaluation's (the log's sampler), or none
        options["guidance_scale"] = guidance_scale
    if num_inference_steps is not None:
        options["num_inference_steps"] = num_inference_steps

    def generate(concepts: list[str], generation_seed: int) -> np.ndarray:
        per_batch = None
        if concept_values == "sampled":
            def per_batch(names: list[str], start: int) -> dict[str, Any]:
                return {"concept_values": sampled_concept_values(graph, names, generation_seed + start)}
        return sample_in_batches(pipeline, model, concepts, generation_seed, batch_size, per_batch, **options)

    if "num_frames" in last_record:  # a video run: its clips, by the clip scorers, as in training
        tracker = ClipTracker(graph, clip_probes_for(last_record["num_frames"],
                                                     last_record.get("image_size", ClipConfig.image_size)),
            num_images_per_class=images_per_class, seed=seed, sample_dir=sample_dir, samples_per_class=8)
    else:
        tracker = LearningDynamicsTracker(graph, default_shapes_probes(graph.space),
                                          num_images_per_class=images_per_class, seed=seed, sample_dir=sample_dir,
                                          samples_per_class=8,
                                          lenient=lenient_for(lenient, graph) if isinstance(lenient, str) else lenient)
    with sampling_precision(model, mixed_precision, model.device.type):
        record = tracker.evaluate(generate, step=step)
    record["evaluation_options"] = {"num_inference_steps": num_inference_steps,
                                    "guidance_scale": sampler.get("guidance_scale", 1.0) if guidance_scale is None
                                    else guidance_scale,
                                    "concept_values": concept_values, "checkpoint": checkpoint,
                                    "weights": weights if checkpoint else "exported",
                                    "mixed_precision": mixed_precision}
    if "temperature" in sampler:  # the samplers that have one (MaskGIT, GIVT, MAR)
        record["evaluation_options"]["temperature"] = sampler["temperature"]
    return record


def lenient_for(dataset: str | None, graph: ConceptGraph):
    """Paper B's lenient scorer fitted on ``dataset``'s ``test`` split, as the loop fits it; ``None`` without one."""
    if dataset is None:
        return None
    from ..data.loading import load_concept_dataset, split_tensors
    from ..evaluation.lenient import LenientScorer

    splits = load_concept_dataset(dataset)
    if "test" not in splits:
        raise ValueError(f"--lenient_dataset {dataset} has no test split (real images of every class)")
    return LenientScorer.for_split(split_tensors(splits, "test"), graph)


def check_temperature_option(pipeline, temperature: float) -> None:
    """Raise ``ValueError`` unless ``pipeline`` samples with a ``temperature`` and ``temperature`` is one it accepts."""
    if "temperature" not in inspect.signature(pipeline.__call__).parameters:
        raise ValueError(f"--temperature: {type(pipeline).__name__} has no sampling temperature (MaskGIT, GIVT and MAR "
                         "do)")
    check_temperature(temperature, "--temperature")


def record_markdown(record: dict[str, Any]) -> str:
    """Per class: probes and pixel-statistics accuracy, object rate, hybrids and pale objects, fidelity; then per
    level."""
    pixel, fidelity = record.get("pixel_accuracy", {}), record.get("fidelity", {})
    failures = record.get("object_failures", {})
    lines = ["| class | level | probes | pixel statistics | object rate | hybrids | pale | fidelity |",
             "|---|---|---|---|---|---|---|---|"]
    for name, value in record["accuracy"].items():
        counts = failures.get(name, {})
        lines.append(f"| {name} | {record['levels'][name]} | {value:.2f} | "
                     f"{pixel.get(name, float('nan')):.2f} | {record['object_rate'][name]:.2f} | "
                     f"{counts.get('hybrid', 0)} | {counts.get('pale', 0)} | {fidelity.get(name, float('nan')):.2f} |")
    levels = ", ".join(f"L{k} {v:.2f}" for k, v in record["level_accuracy"].items())
    pixel_levels = ", ".join(f"L{k} {v:.2f}" for k, v in record.get("pixel_level_accuracy", {}).items())
    text = "\n".join(lines) + f"\n\nprobes: {levels}; pixel statistics: {pixel_levels}"
    if "lenient_level_accuracy" in record:
        lenient = ", ".join(f"L{k} {v:.2f}" for k, v in record["lenient_level_accuracy"].items())
        text += f"; lenient (Paper B's protocol, no verdict): {lenient}"
    return text + "\n"


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run_dir")
    parser.add_argument("--num_inference_steps", type=int, default=None,
                        help="default: the steps the training evaluation used (older logs: the pipeline's default)")
    parser.add_argument("--guidance_scale", type=float, default=None,
                        help="default: the training evaluation's (1, no guidance, where it recorded none)")
    parser.add_argument("--concept_values", choices=["canonical", "sampled"], default="canonical")
    parser.add_argument("--checkpoint", default=None, help="a checkpoint name or directory (default: the export)")
    parser.add_argument("--weights", choices=["ema", "online"], default="ema", help="with --checkpoint")
    parser.add_argument("--images_per_class", type=int, default=50)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--temperature", type=float, default=None,
                        help="the sampler's temperature (MaskGIT: the re-masking's, annealed to 0; default: the "
                             "training evaluation's)")
    parser.add_argument("--mixed_precision", choices=["no", "bf16"], default=None,
                        help="the sampler's precision (default: the training evaluation's)")
    parser.add_argument("--lenient_dataset", default=None,
                        help="a dataset (config name or export directory) whose test split fits Paper B's lenient "
                             "score, added beside the strict scorers (default: left out)")
    parser.add_argument("--output", default=None, help="also write the record here (JSON)")
    parser.add_argument("--sample_dir", default=None, help="also keep 8 samples per class here (npz), to look at")
    args = parser.parse_args(argv)
    if args.num_inference_steps is not None and args.num_inference_steps < 1:
        parser.error("--num_inference_steps must be at least 1")
    if args.images_per_class < 1:
        parser.error("--images_per_class must be at least 1")
    if args.weights == "online" and args.checkpoint is None:
        parser.error("--weights online needs --checkpoint: an export holds only the weights it was saved with")
    if args.output and (problem := output_file_problem(args.output)):
        parser.error(f"--output {args.output}: {problem}")
    try:
        last_record, _, _ = resolve_run(args.run_dir, args.checkpoint, args.weights)
        sampling_options(last_record, args.num_inference_steps, args.mixed_precision)
        check_export(args.run_dir, args.guidance_scale)
        if args.temperature is not None:
            check_temperature(args.temperature, "--temperature")
        from ..evaluation.tracker import graph_from_record

        lenient = lenient_for(args.lenient_dataset, graph_from_record(last_record))
    except ValueError as error:
        parser.error(str(error))
    record = evaluate_run(args.run_dir, args.num_inference_steps, args.guidance_scale, args.concept_values,
                          args.checkpoint, args.weights, args.images_per_class, args.seed,
                          mixed_precision=args.mixed_precision, sample_dir=args.sample_dir,
                          temperature=args.temperature, lenient=lenient)
    print(record_markdown(record))
    if args.output:
        atomic_write_text(args.output, json.dumps(record, indent=1) + "\n")
    return record


if __name__ == "__main__":
    main()
