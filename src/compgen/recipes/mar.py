"""Train MAR (MaskGIT's transformer whose per-token output conditions a small diffusion head over a tokenizer's
continuous latents; Paper B's rung between GIVT and the DiT) on a concept-graph split, evaluating as it trains.

    accelerate launch -m compgen.train mar --preset cpu-quick --output_dir outputs/mar
    accelerate launch -m compgen.train mar --preset cpu-quick --tokenizer kl --output_dir outputs/mar-kl

The tokenizer and latents are those of the ``tuple-dit`` and ``givt`` recipes (same flags and
presets), so the four rungs (MaskGIT, GIVT, MAR, DiT) can be compared on the same tokens and transformer. ``OUTPUT``
then holds the pipeline (``MARPipeline.from_pretrained(OUTPUT)``), ``README.md`` and ``learning_dynamics.jsonl``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

from compgen import MARTransformer, MaskGITScheduler
from compgen.cli import ArgumentParser
from compgen.launch.run_setup import prepare_run
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
from compgen.pipelines.tuple_ddpm import PREDICTION_TYPES, paper_ddpm_scheduler
from compgen.schedulers.scheduling_maskgit import MASKING_SCHEDULES
from compgen.training.fine_tuning import InitialWeights
from compgen.training.tasks.mar import MARTask

PRESETS = {
    # MAR's head (Li et al. 2024): three adaLN blocks; width 1024 at its scale, 256 for these latents.
    "paper": TOKEN_TRANSFORMER_PRESETS["paper"] | dict(head_width=1024),
    # As the cpu-quick GIVT (a constant learning rate after warm-up, EMA weights, positions at the tokens' scale), with
    # a narrower head, one noise draw per token and 2000 steps: with MAR's width 256 and four draws a step took 0.87 s
    # on one core of a 2-core EPYC, 44 minutes for 3000 steps.
    "cpu-quick": CONTINUOUS_CPU_QUICK | dict(position_embedding_std=1.0, head_width=128, diffusion_batch_multiplier=1,
                                             max_train_steps=2000),
}


def check_arguments(args: argparse.Namespace, initial: InitialWeights | None) -> None:
    """This script's own options, checked before any work."""
    check_tokenizer_first_arguments(args, initial, allow_kl=True)
    check_transformer_arguments(args, MARTransformer)
    if args.num_train_timesteps < 1:
        raise ValueError(f"--num_train_timesteps must be at least 1, got {args.num_train_timesteps}")
    MARTask.Options.from_args(args)  # the task's own options, checked by their owner


def main(argv: list[str] | None = None) -> None:
    parser = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_tokenizer_first_arguments(parser, allow_kl=True)
    model = add_latent_transformer_arguments(parser, "MAR transformer and diffusion head")
    model.add_argument("--head_width", type=int, default=256)
    model.add_argument("--head_depth", type=int, default=3)
    model.add_argument("--num_train_timesteps", type=int, default=1000)
    model.add_argument("--prediction_type", default="epsilon", choices=list(PREDICTION_TYPES))
    model.add_argument("--diffusion_batch_multiplier", type=int, default=4, help="noise draws per masked token")
    model.add_argument("--masking_schedule", default="cosine", choices=list(MASKING_SCHEDULES))
    model.add_argument("--eval_inference_steps", type=int, default=12)
    model.add_argument("--eval_head_steps", type=int, default=25)
    model.add_argument("--eval_temperature", type=float, default=1.0, help="scale of the head's initial noise")
    args, config, run = prepare_run(parser, PRESETS, argv, validate=check_arguments, model_class=MARTransformer)

    tokenizer, report = load_or_train_tokenizer(args, run, Path(config.output_dir))
    with run.profile.phase("startup: model and task (latents, transformer)"):
        latents, options = latent_transformer_options(args, run, tokenizer)
        torch.manual_seed(config.seed)  # the initial weights are a function of --seed, so runs repeat exactly
        transformer = MARTransformer(**options, head_width=args.head_width, head_depth=args.head_depth)
        scheduler = MaskGITScheduler(mask_token_id=0, masking_schedule=args.masking_schedule)  # no token ids in MAR
        head_scheduler = paper_ddpm_scheduler(args.num_train_timesteps, args.prediction_type, clip_sample=False)
        task = MARTask(transformer, tokenizer, scheduler, head_scheduler, latents, MARTask.Options.from_args(args),
                       tokenizer_report=report)
    run.train(task)


if __name__ == "__main__":
    main()
