"""Train MaskGIT, with Paper B's JEPA auxiliary objective by default, on a concept-graph split.

    accelerate launch -m compgen.train maskgit --preset cpu-quick --output_dir outputs/maskgit-jepa
    accelerate launch -m compgen.train maskgit --preset cpu-quick --jepa_weight 0 --output_dir outputs/maskgit

Without ``--tokenizer_path`` the VQ tokenizer is trained first, on the images ``--tokenizer_data`` names (default
``all-classes``: the dataset's tokenizer split, every class, labels unused), into ``OUTPUT/tokenizer``
(its own run: checkpoints, card) through the same loop; a rerun reuses it when its tokenizer options match and
refuses it otherwise. The pipeline's copy of it is ``OUTPUT/vqvae``. Its reconstruction
report (``OUTPUT/vq_reconstruction.json``: per-class MSE and accuracy of reconstructions of the test split's real
images, held-out classes included: the tokenizer's reconstruction accuracy) goes into the model card. ``OUTPUT``
then holds the pipeline (``MaskGITPipeline.from_pretrained(OUTPUT)``), ``README.md``, ``learning_dynamics.jsonl``
and the JEPA target encoder in ``OUTPUT/jepa_target``.
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

import torch

from compgen import MaskGITScheduler, MaskGITTransformer
from compgen.cli import ArgumentParser
from compgen.launch.run_setup import TrainingRun, prepare_run
from compgen.launch.token_model_setup import (
    TOKEN_TRANSFORMER_PRESETS,
    add_token_transformer_arguments,
    add_tokenizer_first_arguments,
    check_tokenizer_first_arguments,
    check_transformer_arguments,
    load_or_train_tokenizer,
    token_transformer_options,
)
from compgen.launch.video_setup import space_time_options
from compgen.models.jepa import parse_jepa_layers
from compgen.models.vq_tokenizer import token_grid_size
from compgen.schedulers.scheduling_maskgit import MASK_TYPES, MASKING_SCHEDULES
from compgen.training.ema import MOMENTUM_SCHEDULES
from compgen.training.fine_tuning import InitialWeights
from compgen.training.tasks.maskgit import (
    JEPA_LOSS_POSITIONS,
    JEPA_PREDICTOR_INITS,
    JEPA_TARGET_INITS,
    MaskGITOptions,
    MaskGITTask,
    precompute_tokens,
)

logger = logging.getLogger(__name__)

PRESETS = {
    "paper": TOKEN_TRANSFORMER_PRESETS["paper"] | dict(use_ema=False),
    # Cosine-decayed lr and no label smoothing (it flattens the token distribution the sampler draws from).
    "cpu-quick": TOKEN_TRANSFORMER_PRESETS["cpu-quick"] | dict(learning_rate=1.5e-3, lr_scheduler="cosine",
                                                               label_smoothing=0.0, use_ema=False),
}
# ``make quickstart-maskgit``'s job: cpu-quick cut to 1000 steps, where level 0 passes 0.9 by both scorers;
# tokenizer included, it fits 15 minutes on one CPU core (results/paper-b-tokenizers/README.md).
PRESETS["quickstart"] = PRESETS["cpu-quick"] | dict(max_train_steps=1000, eval_steps=250, checkpointing_steps=500)
# Paper B's question at CPU scale (studies/paper_b_jepa.yaml): its JEPA effect appears after 10^4 steps, so cpu-quick's
# model trains 2x10^4 steps at the paper preset's constant learning rate after warm-up (no cosine to 0 that freezes it),
# evaluated on a log-spaced ladder of steps, with the attention kernel that trains fastest in bf16 on a CPU.
PRESETS["cpu-long"] = PRESETS["cpu-quick"] | dict(learning_rate=3e-4, lr_scheduler="constant_with_warmup",
                                                  lr_warmup_steps=1000, max_train_steps=20000, eval_schedule="log",
                                                  checkpointing_steps=1000, attention_kernel="math")
# cpu-long with the regularisation of the MaskGIT code Paper B builds on (google-research/maskgit,
# valeoai/Maskgit-pytorch: transformer dropout 0.1, label smoothing 0.1, weight decay 0.045, Adam beta2 0.96): arm (a)
# of studies/paper_b_maskgit_baseline.yaml (results/paper-b-maskgit-baseline/).
PRESETS["cpu-long-regularised"] = PRESETS["cpu-long"] | dict(dropout=0.1, label_smoothing=0.1, adam_weight_decay=0.045,
                                                             adam_beta2=0.96)


def main(argv: list[str] | None = None) -> None:
    parser = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(parser)
    args, config, run = prepare_run(parser, PRESETS, argv, validate=check_arguments, model_class=MaskGITTransformer)
    run.train(build_task(args, run, MaskGITTask))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """MaskGIT's flags (the tokenizer's, the transformer's, the JEPA term's and the evaluation sampler's), for its
    image recipe and its video recipe (:mod:`compgen.recipes.maskgit_video`)."""
    add_tokenizer_first_arguments(parser)
    model = add_token_transformer_arguments(parser, "MaskGIT transformer")
    model.add_argument("--masking_schedule", default="cosine", choices=list(MASKING_SCHEDULES))
    model.add_argument("--mask_type", default="random", choices=list(MASK_TYPES),
                       help="training masks for both objectives (block: one contiguous masked block, I-JEPA-style "
                            "targets; visible_block: one visible block of 15-40%% of the grid, the rest masked, Paper "
                            "B's context)")
    model.add_argument("--label_smoothing", type=float, default=0.1)
    jepa = parser.add_argument_group("JEPA objective")
    jepa.add_argument("--jepa_weight", type=float, default=0.6, help="lambda; 0 trains plain MaskGIT")
    jepa.add_argument("--jepa_layers", default="auto", help="e.g. 7,9,11; auto scales {7,9,11} of 12 to the depth")
    jepa.add_argument("--jepa_momentum", type=float, default=0.996, help="target-encoder EMA momentum at the start")
    jepa.add_argument("--jepa_momentum_end", type=float, default=1.0)
    jepa.add_argument("--jepa_momentum_schedule", default="linear", choices=list(MOMENTUM_SCHEDULES))
    jepa.add_argument("--jepa_predictor_hidden_size", type=int, default=None)
    jepa.add_argument("--jepa_target_norm", action="store_true", default=True,
                      help="layer-normalize the JEPA targets (the default; --no_jepa_target_norm: raw hidden states)")
    jepa.add_argument("--no_jepa_target_norm", dest="jepa_target_norm", action="store_false")
    jepa.add_argument("--jepa_predictor_init", default="zero", choices=list(JEPA_PREDICTOR_INITS),
                      help="the predictor's last layer at zero, or PyTorch's default initialisation")
    jepa.add_argument("--jepa_target_init", default="copy", choices=list(JEPA_TARGET_INITS),
                      help="the target encoder starts as a copy of the transformer, or initialised on its own")
    jepa.add_argument("--jepa_loss_positions", default="masked", choices=list(JEPA_LOSS_POSITIONS),
                      help="the JEPA loss on the masked positions, or on all of them")
    jepa.add_argument("--cross_entropy_delay_steps", type=int, default=0,
                      help="train the JEPA term alone (cross-entropy weight 0) for these first steps")
    jepa.add_argument("--cross_entropy_warmup_steps", type=int, default=0,
                      help="then ramp the cross-entropy's weight 0 -> 1 over these steps, so the JEPA term leads")
    sampling = parser.add_argument_group("evaluation sampling")
    sampling.add_argument("--eval_inference_steps", type=int, default=12)
    sampling.add_argument("--eval_temperature", type=float, default=2.0)


def build_task(args: argparse.Namespace, run: TrainingRun, task_class: type[MaskGITTask]) -> MaskGITTask:
    """The tokenizer (loaded, reused or trained first), the training tokens, the transformer (over every frame's
    tokens for clips) and ``task_class``'s task of the run."""
    vqvae, report = load_or_train_tokenizer(args, run, Path(run.config.output_dir))
    with run.profile.phase("startup: model and task (tokens, transformer, JEPA target)"):
        train_tokens = precompute_tokens(vqvae, run.train_data.images)

        torch.manual_seed(run.config.seed)  # the initial weights are a function of --seed, so runs repeat exactly
        transformer = MaskGITTransformer(**token_transformer_options(args, run, token_grid_size(vqvae)),
                                         codebook_size=vqvae.config.num_vq_embeddings,
                                         **space_time_options(args, run))
        scheduler = MaskGITScheduler(mask_token_id=transformer.mask_token_id, masking_schedule=args.masking_schedule)
        return task_class(transformer, vqvae, scheduler, train_tokens, task_options(args), tokenizer_report=report)


def task_options(args: argparse.Namespace) -> MaskGITOptions:
    """The task's options from the flags (``--jepa_layers`` parsed, the run's length): built, and so checked, by their
    owner."""
    layers = parse_jepa_layers(args.jepa_layers, args.num_layers) if args.jepa_weight > 0 else None
    return MaskGITTask.Options.from_args(args, jepa_layers=layers, total_steps=args.max_train_steps)


def check_arguments(args: argparse.Namespace, initial: InitialWeights | None) -> None:
    """Every option this script adds, checked before any work (a bad --jepa_layers must not cost a tokenizer)."""
    check_tokenizer_first_arguments(args, initial)
    check_transformer_arguments(args, MaskGITTransformer)
    task_options(args)


if __name__ == "__main__":
    main()
