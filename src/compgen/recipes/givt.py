"""Train GIVT (a Gaussian mixture per token over a tokenizer's continuous latents, with MaskGIT's masking; Paper B's
rung between MaskGIT and the DiT) on a concept-graph split, evaluating as it trains.

    accelerate launch -m compgen.train givt --preset cpu-quick --output_dir outputs/givt
    accelerate launch -m compgen.train givt --preset cpu-quick --tokenizer kl --output_dir outputs/givt-kl

The tokenizer comes first exactly as for the ``tuple-dit`` recipe (same flags and presets; ``--tokenizer_path`` shares
one), and the latents are the DiT's (a VQ tokenizer's before quantization, or a KL tokenizer's posterior means), so
MaskGIT, GIVT and the DiT can be compared on the same tokens and the same transformer. ``OUTPUT`` then holds the
pipeline (``GIVTPipeline.from_pretrained(OUTPUT)``), ``README.md`` and ``learning_dynamics.jsonl``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

from compgen import GIVTTransformer, MaskGITScheduler
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
from compgen.schedulers.scheduling_maskgit import MASKING_SCHEDULES
from compgen.training.fine_tuning import InitialWeights
from compgen.training.tasks.givt import GIVTTask

PRESETS = {
    "paper": TOKEN_TRANSFORMER_PRESETS["paper"],
    # As the cpu-quick DiT: a constant learning rate after warm-up and EMA weights; the positions at the tokens' scale,
    # since a fully masked grid is told apart by its positions alone.
    "cpu-quick": CONTINUOUS_CPU_QUICK | dict(position_embedding_std=1.0),
}


def check_arguments(args: argparse.Namespace, initial: InitialWeights | None) -> None:
    """This script's own options, checked before any work."""
    check_tokenizer_first_arguments(args, initial, allow_kl=True)
    check_transformer_arguments(args, GIVTTransformer)
    GIVTTask.Options.from_args(args)  # the task's own options, checked by their owner


def main(argv: list[str] | None = None) -> None:
    parser = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_tokenizer_first_arguments(parser, allow_kl=True)
    model = add_latent_transformer_arguments(parser, "GIVT transformer")
    model.add_argument("--num_mixtures", type=int, default=8, help="Gaussian mixture components per token")
    model.add_argument("--masking_schedule", default="cosine", choices=list(MASKING_SCHEDULES))
    model.add_argument("--eval_inference_steps", type=int, default=12)
    model.add_argument("--eval_temperature", type=float, default=1.0,
                       help="scale of the mixtures' standard deviations when sampling (1: the mixtures themselves)")
    args, config, run = prepare_run(parser, PRESETS, argv, validate=check_arguments, model_class=GIVTTransformer)

    tokenizer, report = load_or_train_tokenizer(args, run, Path(config.output_dir))
    with run.profile.phase("startup: model and task (latents, transformer)"):
        latents, options = latent_transformer_options(args, run, tokenizer)
        torch.manual_seed(config.seed)  # the initial weights are a function of --seed, so runs repeat exactly
        transformer = GIVTTransformer(**options, num_mixtures=args.num_mixtures)
        scheduler = MaskGITScheduler(mask_token_id=0, masking_schedule=args.masking_schedule)  # no token ids in GIVT
        task = GIVTTask(transformer, tokenizer, scheduler, latents, GIVTTask.Options.from_args(args),
                        tokenizer_report=report)
    run.train(task)


if __name__ == "__main__":
    main()
