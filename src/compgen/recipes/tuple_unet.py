"""Train Paper A's tuple-conditioned U-Net (DDPM) on a concept-graph split, evaluating as it trains.

    accelerate launch -m compgen.train tuple-unet --preset cpu-quick --output_dir outputs/unet

writes the pipeline (``TupleConditionedDDPMPipeline.from_pretrained(output_dir)``), ``README.md`` (model card
with per-level compositional accuracy) and ``learning_dynamics.jsonl`` to ``--output_dir``.
"""

from __future__ import annotations

import argparse

from compgen import TupleConditionedUNet2DModel
from compgen.cli import ArgumentParser, parse_widths
from compgen.launch.run_setup import prepare_run
from compgen.models.concept_embedding import CONDITIONING_MODES
from compgen.models.tuple_unet import BLOCK_TYPES, CONCEPT_EMBEDDING_INITS, CONCEPT_MODULATIONS, NORM_TYPES
from compgen.pipelines.tuple_ddpm import PREDICTION_TYPES, paper_ddpm_scheduler
from compgen.training.fine_tuning import InitialWeights
from compgen.training.tasks.ddpm import DDPMTask

# For a 2-core CPU, one run per core (706 s for seed 0 with the other core busy, results/paper-a-quick/): Paper A's
# U-Net at widths (32, 64) with one residual block per stage, v-prediction (with epsilon prediction a narrow U-Net
# still drew grey, noisy backgrounds after 2000 steps), a higher learning rate after a short warm-up, and EMA
# weights. An evaluation every 100 steps resolves the order in which the levels emerge (Paper A Fig. 5), every 500 once
# they hold, sampled in the training's precision (bf16 where the CPU computes it natively; results/paper-a-quick/: the
# accuracies of fp32 sampling within their sampling error, at 2.4x the speed); results/paper-a-data-ablation/ has what
# it gives on the default data (H32-train1, seeds 0 and 1: every level 1.0 by both scorers; seed 2, in
# results/paper-a-quick/: 111 at 0.7 by the pixel scorer).
CPU_QUICK = dict(
    block_out_channels="32,64",
    layers_per_block=1,
    prediction_type="v_prediction",
    learning_rate=1e-3,
    lr_scheduler="constant_with_warmup",
    lr_warmup_steps=100,
    train_batch_size=64,
    max_train_steps=2000,
    use_ema=True,
    ema_decay=0.995,
    mixed_precision="auto",
    eval_steps=100,
    eval_steps_held=500,
    checkpointing_steps=1000,
    eval_inference_steps=20,
)

PRESETS = {
    # Paper A (Okawa et al. 2023, Appendix A, and its public code): the official ContextUnet's layout at width 256
    # (BatchNorm blocks, 27.0M parameters), Adam 1e-4 decayed linearly to 0, batch 64, 100 epochs of 5000 images.
    "paper": dict(
        block_out_channels="256,512",
        block_type="paper",
        norm_type="batch",
        learning_rate=1e-4,
        lr_scheduler="linear",
        train_batch_size=64,
        max_train_steps=7800,
        use_ema=False,
        eval_steps=78,
        checkpointing_steps=780,
        eval_inference_steps=50,
    ),
    "cpu-quick": CPU_QUICK,
    # Paper A's headline on one CPU core in under five minutes, the README's reproduction command: cpu-quick cut to
    # 800 steps with the learning rate decayed to 0 along a cosine (with the constant rate, level 2 and the pixel
    # scorer's level 1 reached 0.9 only at step 700), sampled with 15 DDIM steps (the per-level accuracies of fp32 and
    # 20 steps within their sampling error on the same checkpoints, results/paper-a-quick/); an evaluation every 100
    # steps keeps the order of emergence visible (Paper A Fig. 5). results/paper-a-reproduction/ runs it on the four
    # splits, three seeds each (by both scorers: one seed of three on H32-train1, -train3, -train4; none on -train2).
    "quickstart": CPU_QUICK | dict(max_train_steps=800, lr_scheduler="cosine", eval_inference_steps=15,
                                   eval_steps_held=None, checkpointing_steps=400),
}

# Where a preset trains in fp32 on a CPU (--mixed_precision no, or auto on a CPU without native bf16), where the same
# steps take about twice their bf16 time: quickstart keeps its headline verdict (its last three evaluations, steps 600
# to 800, the same numbers: evaluation draws from its own generators) and skips the earlier evaluations, in the
# channels-last layout (faster in fp32 on a CPU, slower in bf16). results/paper-a-seeds/ measures both times.
CPU_FP32_PRESETS = {
    "quickstart": dict(channels_last=True, eval_start_step=600),
}


def check_arguments(args: argparse.Namespace, initial: InitialWeights | None) -> None:
    """This script's own options, checked before any work."""
    widths = parse_widths(args.block_out_channels, "block_out_channels")
    if not widths or any(w < 1 or w % 8 for w in widths):
        raise ValueError(f"--block_out_channels must be positive multiples of 8, got {args.block_out_channels}")
    DDPMTask.Options.from_args(args)  # the task's own options, checked by their owner
    if args.eval_guidance_scale != 1.0 and args.concept_dropout <= 0:
        raise ValueError(f"--eval_guidance_scale {args.eval_guidance_scale} guides against the null concepts, which "
                         "a model learns only with --concept_dropout > 0 (e.g. 0.1)")
    if args.num_train_timesteps < 1:
        raise ValueError(f"--num_train_timesteps must be at least 1, got {args.num_train_timesteps}")
    TupleConditionedUNet2DModel.check_options(concept_dropout=args.concept_dropout, block_type=args.block_type,
                                              layers_per_block=args.layers_per_block,
                                              concept_modulation=args.concept_modulation,
                                              concept_embedding_init=args.concept_embedding_init)


def main(argv: list[str] | None = None) -> list[dict]:
    parser = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--block_out_channels", default="64,128", help="U-Net widths, comma separated")
    parser.add_argument("--conditioning", default="full", choices=list(CONDITIONING_MODES))
    parser.add_argument("--concept_dropout", type=float, default=0.0)
    parser.add_argument("--concept_modulation", default="multiply",
                        choices=list(CONCEPT_MODULATIONS),
                        help="how concepts enter the decoder: h*e+t (Paper A), h*(1+e)+t, h+e+t, or "
                             "h*(1+e_scale)+e_shift+t")
    parser.add_argument("--concept_embedding_init", default="normal", choices=list(CONCEPT_EMBEDDING_INITS),
                        help="zero: every concept embeds to 0 at initialisation (not with multiply)")
    parser.add_argument("--modulate_full_resolution", action="store_true",
                        help="modulate the last decoder stage's full-resolution output by the concepts too")
    parser.add_argument("--no_modulate_full_resolution", dest="modulate_full_resolution", action="store_false")
    parser.add_argument("--num_train_timesteps", type=int, default=500)
    parser.add_argument("--prediction_type", default="epsilon", choices=list(PREDICTION_TYPES))
    parser.add_argument("--layers_per_block", type=int, default=2)
    parser.add_argument("--block_type", default="residual", choices=list(BLOCK_TYPES),
                        help="compgen's residual U-Net, or Paper A's official ContextUnet layout layer for layer")
    parser.add_argument("--norm_type", default="group", choices=list(NORM_TYPES),
                        help="normalisation in the conv blocks: GroupNorm, or BatchNorm as the official code")
    parser.add_argument("--eval_inference_steps", type=int, default=20)
    parser.add_argument("--eval_guidance_scale", type=float, default=1.0,
                        help="classifier-free guidance of the evaluation's samples (1: none; needs --concept_dropout)")
    args, config, run = prepare_run(parser, PRESETS, argv, validate=check_arguments,
                                    model_class=TupleConditionedUNet2DModel, cpu_fp32_presets=CPU_FP32_PRESETS)

    unet = TupleConditionedUNet2DModel(
        sample_size=run.train_data.image_size,
        block_out_channels=parse_widths(args.block_out_channels, "block_out_channels"),
        layers_per_block=args.layers_per_block,
        concept_space=run.train_data.space.to_dict(),
        conditioning=args.conditioning,
        continuous_concepts=run.continuous_concepts if args.conditioning == "full" else {},
        concept_dropout=args.concept_dropout,
        concept_modulation=args.concept_modulation,
        concept_embedding_init=args.concept_embedding_init,
        block_type=args.block_type,
        norm_type=args.norm_type,
        num_train_timesteps=args.num_train_timesteps,
        modulate_full_resolution=args.modulate_full_resolution,
    )
    task = DDPMTask(unet, paper_ddpm_scheduler(args.num_train_timesteps, args.prediction_type),
                    DDPMTask.Options.from_args(args))
    return run.train(task)


if __name__ == "__main__":
    main()
