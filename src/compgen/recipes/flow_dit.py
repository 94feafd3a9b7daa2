"""Train the diffusion transformer over a tokenizer's continuous latents by flow matching (rectified flow, as diffusers
trains Stable Diffusion 3) on a concept-graph split, evaluating as it trains.

    accelerate launch -m compgen.train flow-dit --preset cpu-quick --output_dir outputs/flow-dit
    accelerate launch -m compgen.train flow-dit --preset cpu-quick --tokenizer kl --output_dir outputs/flow-dit-kl
    accelerate launch -m compgen.train flow-dit --preset cpu-quick --tokenizer_path outputs/dit/tokenizer ...

Everything but the objective is the ``tuple-dit`` recipe's: the tokenizer first (same flags and presets, ``--tokenizer
vq|kl``, trained into ``OUTPUT/tokenizer`` or shared with ``--tokenizer_path``), the same transformer
(``TupleConditionedDiT``) with the same flags, the same presets. The DiT's DDPM loss is replaced by flow matching: the
model sees ``(1 - sigma) x0 + sigma noise`` at timestep ``sigma * --num_train_timesteps`` and regresses the velocity
``noise - x0``, with ``sigma`` drawn ``--weighting_scheme uniform`` (the default) or ``logit_normal`` (SD3's, with
``--logit_mean`` and ``--logit_std``) from ``FlowMatchEulerDiscreteScheduler``'s sigmas (``--shift``, 1: none). The
evaluation samples with ``--eval_inference_steps`` Euler steps. ``OUTPUT`` then holds the pipeline
(``TupleConditionedFlowDiTPipeline.from_pretrained(OUTPUT)``), ``README.md`` (with the tokenizer's reconstruction
accuracy) and ``learning_dynamics.jsonl``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

from compgen import TupleConditionedDiT
from compgen.cli import ArgumentParser
from compgen.launch.run_setup import TrainingRun, prepare_run
from compgen.launch.token_model_setup import (
    CONTINUOUS_CPU_QUICK,
    TOKEN_TRANSFORMER_PRESETS,
    add_latent_transformer_arguments,
    add_tokenizer_first_arguments,
    check_tokenizer_first_arguments,
    check_transformer_arguments,
    latent_transformer_options,
    load_or_train_tokenizer,
)
from compgen.launch.video_setup import space_time_options
from compgen.pipelines.flow_dit import check_flow_scheduler_options, flow_matching_scheduler
from compgen.training.fine_tuning import InitialWeights
from compgen.training.tasks.flow_matching import WEIGHTING_SCHEMES, FlowMatchingDiTTask

PRESETS = {
    # The DiT's presets (the tuple-dit recipe), whose objective options do not apply here.
    "paper": TOKEN_TRANSFORMER_PRESETS["paper"] | dict(use_ema=True, ema_decay=0.9999),
    "cpu-quick": CONTINUOUS_CPU_QUICK,
}


def check_arguments(args: argparse.Namespace, initial: InitialWeights | None) -> None:
    """This script's own options, checked before any work."""
    check_tokenizer_first_arguments(args, initial, allow_kl=True)
    check_transformer_arguments(args, TupleConditionedDiT)
    if initial is not None:
        initial.check_objective("flow")
    check_flow_scheduler_options(args.num_train_timesteps, args.shift)
    FlowMatchingDiTTask.Options.from_args(args)  # the task's own options, checked by their owner


def main(argv: list[str] | None = None) -> None:
    parser = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(parser)
    args, config, run = prepare_run(parser, PRESETS, argv, validate=check_arguments, model_class=TupleConditionedDiT)
    run.train(build_task(args, run, FlowMatchingDiTTask))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The flow DiT's flags (the tokenizer's, the transformer's, the objective's), for its image recipe and its video
    recipe (:mod:`compgen.recipes.flow_dit_video`)."""
    add_tokenizer_first_arguments(parser, allow_kl=True)
    model = add_latent_transformer_arguments(parser, "diffusion transformer (flow matching)")
    model.add_argument("--num_train_timesteps", type=int, default=1000)
    model.add_argument("--shift", type=float, default=1.0, help="the scheduler's sigma shift (1: none; SD3: 3)")
    model.add_argument("--weighting_scheme", default="uniform", choices=WEIGHTING_SCHEMES,
                       help="how the training noise level is drawn (logit_normal: SD3's default)")
    model.add_argument("--logit_mean", type=float, default=0.0)
    model.add_argument("--logit_std", type=float, default=1.0)
    model.add_argument("--eval_inference_steps", type=int, default=20)


def build_task(args: argparse.Namespace, run: TrainingRun, task_class: type[FlowMatchingDiTTask]
               ) -> FlowMatchingDiTTask:
    """The tokenizer (loaded, reused or trained first), the training latents (every frame's for clips), the
    transformer and ``task_class``'s task of the run."""
    tokenizer, report = load_or_train_tokenizer(args, run, Path(run.config.output_dir))
    with run.profile.phase("startup: model and task (latents, transformer)"):
        latents, options = latent_transformer_options(args, run, tokenizer)

        torch.manual_seed(run.config.seed)  # the initial weights are a function of --seed, so runs repeat exactly
        transformer = TupleConditionedDiT(**options, **space_time_options(args, run))
        scheduler = flow_matching_scheduler(args.num_train_timesteps, args.shift)
        return task_class(transformer, tokenizer, scheduler, latents, task_class.Options.from_args(args),
                          tokenizer_report=report)


if __name__ == "__main__":
    main()
