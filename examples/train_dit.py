"""Train the diffusion transformer over a VQ tokenizer's continuous latents (Paper B's continuous counterpart of
MaskGIT) on a concept-graph split, evaluating as it trains.

    accelerate launch examples/train_dit.py --preset cpu-quick --output_dir outputs/dit
    accelerate launch examples/train_dit.py --preset cpu-quick --vqvae_path outputs/maskgit-jepa/tokenizer ...

The tokenizer comes first exactly as for ``examples/train_maskgit_jepa.py`` (same flags, same presets, trained on the
training split only into ``OUTPUT/tokenizer``, or shared with ``--vqvae_path``), so MaskGIT and the DiT can diffuse or
predict the very same tokens. The transformer is MaskGIT's backbone with the same concept tokens
(``TupleConditionedDiT``); the objective is DDPM on the standardized latents before quantization. ``OUTPUT`` then holds
the pipeline (``TupleConditionedDiTPipeline.from_pretrained(OUTPUT)``), ``README.md`` (with the tokenizer ceiling)
and ``learning_dynamics.jsonl``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

from compgen import TupleConditionedDiT
from compgen.models.vq_tokenizer import token_grid_size
from compgen.pipelines.tuple_ddpm import paper_ddpm_scheduler
from compgen.training.dit_task import DiTTask, latent_statistics, precompute_latents
from compgen.training.script import (
    VQ_PRESETS,
    add_tokenizer_first_arguments,
    check_tokenizer_first_arguments,
    check_transformer_arguments,
    load_or_train_tokenizer,
    prepare_run,
)

PRESETS = {
    # The transformer of MaskGIT's paper preset, diffusing instead of predicting codes.
    "paper": VQ_PRESETS["paper"] | dict(
        hidden_size=448,
        num_layers=12,
        num_heads=8,
        train_batch_size=64,
        learning_rate=3e-4,
        lr_scheduler="constant_with_warmup",
        lr_warmup_steps=1000,
        max_train_steps=40000,
        use_ema=True,
        ema_decay=0.9999,
        eval_steps=1000,
        checkpointing_steps=5000,
    ),
    # MaskGIT's cpu-quick transformer and tokenizer; v-prediction and EMA as the cpu-quick U-Net.
    "cpu-quick": VQ_PRESETS["cpu-quick"] | dict(
        hidden_size=128,
        num_layers=4,
        num_heads=4,
        train_batch_size=64,
        learning_rate=1e-3,
        lr_scheduler="constant_with_warmup",
        lr_warmup_steps=100,
        max_train_steps=3000,
        use_ema=True,
        ema_decay=0.995,
        prediction_type="v_prediction",
        mixed_precision="auto",
        eval_steps=250,
        checkpointing_steps=1000,
    ),
}


def check_arguments(args: argparse.Namespace) -> None:
    """This script's own options, checked before any work."""
    check_tokenizer_first_arguments(args)
    check_transformer_arguments(args)
    if args.num_train_timesteps < 1 or args.eval_inference_steps < 1:
        raise ValueError("--num_train_timesteps and --eval_inference_steps must be at least 1")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_tokenizer_first_arguments(parser)
    model = parser.add_argument_group("diffusion transformer")
    model.add_argument("--hidden_size", type=int, default=128)
    model.add_argument("--num_layers", type=int, default=4)
    model.add_argument("--num_heads", type=int, default=4)
    model.add_argument("--conditioning", default="full", choices=["full", "quantized"])
    model.add_argument("--concept_dropout", type=float, default=0.0)
    model.add_argument("--num_train_timesteps", type=int, default=500)
    model.add_argument("--prediction_type", default="epsilon", choices=["epsilon", "v_prediction", "sample"])
    model.add_argument("--eval_inference_steps", type=int, default=20)
    args, config, run = prepare_run(parser, PRESETS, argv, validate=check_arguments)

    vqvae, report = load_or_train_tokenizer(args, run, Path(config.output_dir))
    latents = precompute_latents(vqvae, run.train_data.images)
    mean, std = latent_statistics(latents)

    torch.manual_seed(config.seed)  # the initial weights are a function of --seed, so runs repeat exactly
    transformer = TupleConditionedDiT(
        concept_space=run.train_data.space.to_dict(),
        latent_channels=latents.shape[1],
        grid_size=token_grid_size(vqvae),
        hidden_size=args.hidden_size,
        num_layers=args.num_layers,
        num_heads=args.num_heads,
        conditioning=args.conditioning,
        continuous_concepts=run.continuous_concepts if args.conditioning == "full" else {},
        concept_dropout=args.concept_dropout,
        latent_mean=mean,
        latent_std=std,
    )
    scheduler = paper_ddpm_scheduler(args.num_train_timesteps, args.prediction_type)  # the U-Net's schedule
    task = DiTTask(transformer, vqvae, scheduler, latents, eval_inference_steps=args.eval_inference_steps,
                   tokenizer_report=report)
    run.train(task)


if __name__ == "__main__":
    main()
