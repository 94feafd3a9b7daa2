"""Train the diffusion transformer over a tokenizer's continuous latents (Paper B's continuous counterpart of
MaskGIT) on a concept-graph split, evaluating as it trains.

    accelerate launch -m compgen.train tuple-dit --preset cpu-quick --output_dir outputs/dit
    accelerate launch -m compgen.train tuple-dit --preset cpu-quick --tokenizer_path outputs/maskgit-jepa/tokenizer ...
    accelerate launch -m compgen.train tuple-dit --preset cpu-quick --tokenizer kl --output_dir outputs/dit-kl

The tokenizer comes first exactly as for the ``maskgit`` recipe (same flags, same presets, trained on the
images ``--tokenizer_data`` names into ``OUTPUT/tokenizer``, or shared with ``--tokenizer_path``),
so MaskGIT and the DiT
can diffuse or predict the very same tokens. ``--tokenizer kl`` trains a KL tokenizer (a diffusers ``AutoencoderKL``,
Paper B's continuous tokenizer) instead, with the same architecture and training flags, and diffuses its posterior
means (``--tokenizer_path`` then takes an ``AutoencoderKL`` directory). The transformer is MaskGIT's backbone with the
same concept tokens (``TupleConditionedDiT``); the objective is DDPM on the standardized latents (a VQ tokenizer's
before quantization). ``OUTPUT`` then holds the pipeline (``TupleConditionedDiTPipeline.from_pretrained(OUTPUT)``),
``README.md`` (with the tokenizer's reconstruction accuracy) and ``learning_dynamics.jsonl``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

from compgen import TupleConditionedDiT
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
from compgen.training.fine_tuning import InitialWeights
from compgen.training.tasks.dit import DiTTask

PRESETS = {
    "paper": TOKEN_TRANSFORMER_PRESETS["paper"] | dict(use_ema=True, ema_decay=0.9999),
    # v-prediction, constant lr after warm-up and EMA, as the cpu-quick U-Net.
    "cpu-quick": CONTINUOUS_CPU_QUICK | dict(prediction_type="v_prediction"),
}


def check_arguments(args: argparse.Namespace, initial: InitialWeights | None) -> None:
    """This script's own options, checked before any work."""
    check_tokenizer_first_arguments(args, initial, allow_kl=True)
    check_transformer_arguments(args, TupleConditionedDiT)
    if initial is not None:
        initial.check_objective("ddpm")
    if args.num_train_timesteps < 1:
        raise ValueError(f"--num_train_timesteps must be at least 1, got {args.num_train_timesteps}")
    DiTTask.Options.from_args(args)  # the task's own options, checked by their owner


def main(argv: list[str] | None = None) -> None:
    parser = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_tokenizer_first_arguments(parser, allow_kl=True)
    model = add_latent_transformer_arguments(parser, "diffusion transformer")
    model.add_argument("--num_train_timesteps", type=int, default=500)
    model.add_argument("--prediction_type", default="epsilon", choices=list(PREDICTION_TYPES))
    model.add_argument("--eval_inference_steps", type=int, default=20)
    args, config, run = prepare_run(parser, PRESETS, argv, validate=check_arguments, model_class=TupleConditionedDiT)

    tokenizer, report = load_or_train_tokenizer(args, run, Path(config.output_dir))
    with run.profile.phase("startup: model and task (latents, transformer)"):
        latents, options = latent_transformer_options(args, run, tokenizer)

        torch.manual_seed(config.seed)  # the initial weights are a function of --seed, so runs repeat exactly
        transformer = TupleConditionedDiT(**options)
        # The U-Net's schedule, without clipping: standardized latents are not bounded by [-1, 1] (clipping them turned
        # every sample into a blue smear).
        scheduler = paper_ddpm_scheduler(args.num_train_timesteps, args.prediction_type, clip_sample=False)
        task = DiTTask(transformer, tokenizer, scheduler, latents, DiTTask.Options.from_args(args),
                       tokenizer_report=report)
    run.train(task)


if __name__ == "__main__":
    main()
