"""The tokenizer-first workflow of token-space generators (MaskGIT, DiT) and of ``train_vq_tokenizer.py``.

A token-space script trains its tokenizer first (VQ, or KL for the DiT), on the images ``--tokenizer_data`` names,
into ``OUTPUT/tokenizer`` through the shared loop (:func:`load_or_train_tokenizer`), or takes one with
``--tokenizer_path``; a rerun reuses a tokenizer only if it was trained with the same options
(:data:`TOKENIZER_OPTIONS_NAME`). The tokenizer's and the token transformer's
flags, presets and checks live here too, so the scripts share them.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
from pathlib import Path
from typing import Any

import torch
from diffusers import AutoencoderKL, VQModel

from ..atomic_io import atomic_write_text
from ..cli import add_renamed_argument, parse_widths
from ..data.concept_graph_builder import TOKENIZER_SPLIT
from ..data.loading import ConceptImageData, split_tensors
from ..evaluation.tokenizer_report import RECONSTRUCTION_REPORT_NAME
from ..models.concept_embedding import CONDITIONING_MODES, ConceptConditionedMixin
from ..models.kl_tokenizer import build_kl_tokenizer
from ..models.vq_tokenizer import build_vq_tokenizer
from ..option_names import renamed_options
from ..training.fine_tuning import InitialWeights
from ..training.run_directory import RunDirectory
from ..training.tasks.base import TrainingTask
from ..training.tasks.kl_tokenizer import KLTask
from ..training.tasks.vq_tokenizer import VQTask
from .directory_claim import check_start
from .run_setup import TrainingRun
from .tokenizer_kind import (
    add_tokenizer_kind_arguments,
    check_tokenizer_kind,
    fine_tuning_tokenizer,
    kl_latent_channels,
    kl_tokenizer_options,
    load_tokenizer,
)

logger = logging.getLogger(__name__)

VQ_PRESETS: dict[str, dict[str, Any]] = {
    "paper": dict(tokenizer_block_out_channels="64,128,128", tokenizer_embed_dim=128, tokenizer_steps=5000,
                  tokenizer_learning_rate=1e-3),
    # Whole images with --tokenizer_data all-classes (the default), 16 px crops with training-classes
    # (CROP_SIZE_FOR_DATA); no mid-block attention and dead-code restarts either way.
    # 1000 steps: enough for an all-classes tokenizer to reconstruct every class (results/paper-b-tokenizers/).
    "cpu-quick": dict(tokenizer_block_out_channels="16,32,32", tokenizer_embed_dim=16, tokenizer_steps=1000,
                      tokenizer_learning_rate=2e-3, mixed_precision="auto"),
}
"""Tokenizer options per preset, shared by ``train_vq_tokenizer.py`` and ``train_maskgit_jepa.py``."""


def add_vq_tokenizer_arguments(parser: argparse.ArgumentParser) -> None:
    """The tokenizer's architecture and training flags, shared by every script that trains one (the VQ tokenizer's,
    most of them the KL one's too). Their old ``--vq_*`` names stay as deprecated aliases for a release
    (:data:`~compgen.option_names.RENAMED_OPTIONS`)."""
    group = parser.add_argument_group("tokenizer")
    add_renamed_argument(group, "--tokenizer_block_out_channels", default="32,64,64",
                         help="3 entries = downsampling 4")
    group.add_argument("--codebook_size", type=int, default=256, help="VQ only: the codebook's entries")
    add_renamed_argument(group, "--tokenizer_embed_dim", type=int, default=32,
                         help="the VQ tokenizer's code dimension (vq_embed_dim); the KL tokenizer's latent channels "
                              "default to it (--kl_latent_channels)")
    add_renamed_argument(group, "--tokenizer_mid_attention", action=argparse.BooleanOptionalAction, default=False,
                         help="self-attention in the encoder/decoder mid blocks (global context; off by default)")
    add_renamed_argument(group, "--tokenizer_commitment_cost", type=float, default=0.25,
                         help="VQ only: the commitment term's weight")
    add_renamed_argument(group, "--tokenizer_restart_every", type=int, default=25,
                         help="VQ only: steps between dead-code restarts; 0: off")
    add_renamed_argument(group, "--tokenizer_crop_size", type=int, default=None,
                         help="train on random crops of this size (a multiple of the downsampling; 0: whole images); "
                              "default: 0 with --tokenizer_data all-classes, 16 with training-classes")
    group.add_argument("--tokenizer_data", default="all-classes", choices=list(TOKENIZER_DATA),
                       help="the images the tokenizer trains on: " + "; ".join(
                           f"{name}: {text}" for name, text in TOKENIZER_DATA.items()))


TOKENIZER_DATA: dict[str, str] = {
    "all-classes": "the dataset's tokenizer split, images of every class of the concept space, labels unused",
    "training-classes": "the training split only (a tokenizer that may not draw held-out classes)",
}
"""Where a tokenizer's training images come from (``--tokenizer_data``). Paper B (Farid et al. 2025) does not say what
its tokenizers saw. ``all-classes`` (the default) lets the generator alone decide whether a held-out combination comes
out; ``training-classes`` shows how a tokenizer can cap compositional generalization, as one that never saw a held-out
class may not reconstruct it (evidence: ``results/dit-diagnosis/NOTES.md``)."""


CROP_SIZE_FOR_DATA = {"all-classes": 0, "training-classes": 16}
"""``--tokenizer_crop_size``'s default per ``--tokenizer_data``. Crops keep a training-classes tokenizer's codes local,
which lets it reconstruct held-out classes at all (``VQTask``); a tokenizer that sees every class needs no such help and
reconstructs better from whole images (evidence: ``results/paper-b-tokenizers/README.md``)."""


def resolve_crop_size(args: argparse.Namespace) -> None:
    """Fill ``--tokenizer_crop_size`` from ``--tokenizer_data`` when it was not given (:data:`CROP_SIZE_FOR_DATA`)."""
    if args.tokenizer_crop_size is None:
        args.tokenizer_crop_size = CROP_SIZE_FOR_DATA[args.tokenizer_data]


def tokenizer_training_data(args: argparse.Namespace, run: TrainingRun) -> ConceptImageData:
    """The images ``--tokenizer_data`` names (the check that the dataset has them ran before any work); of clips, their
    frames (a frame tokenizer)."""
    if args.tokenizer_data == "training-classes":
        return run.train_data.frames_as_images()
    with run.profile.phase("tokenizer: its data (decode the tokenizer split)"):
        data = split_tensors(run.splits, TOKENIZER_SPLIT).frames_as_images()
    logger.info("tokenizer data all-classes: %d images of classes %s (labels unused)", len(data), data.class_strings())
    return data


TOKENIZER_OPTIONS_NAME = "tokenizer_options.json"
"""Written beside an exported tokenizer: the options it was trained with, so a rerun reuses it only if they match."""


def tokenizer_options(args: argparse.Namespace, steps: int, learning_rate: float) -> dict[str, Any]:
    """The options that determine a tokenizer trained by :func:`train_vq_tokenizer`."""
    names = ("tokenizer_block_out_channels", "codebook_size", "tokenizer_embed_dim", "tokenizer_mid_attention",
             "tokenizer_commitment_cost",
             "tokenizer_restart_every", "tokenizer_crop_size", "tokenizer_data", "seed", "dataset", "dataset_config",
             "train_batch_size")
    options = {name: getattr(args, name, None) for name in names} | {"steps": steps, "learning_rate": learning_rate}
    return kl_tokenizer_options(args, options) if getattr(args, "tokenizer", "vq") == "kl" else options


def check_vq_tokenizer_arguments(args: argparse.Namespace) -> None:
    """Raise ``ValueError`` for tokenizer flags that cannot build a tokenizer (before any work is done); fills in
    ``--tokenizer_crop_size``'s default."""
    resolve_crop_size(args)
    widths = parse_widths(args.tokenizer_block_out_channels, "tokenizer_block_out_channels")
    if len(widths) < 2 or any(w < 1 for w in widths):
        raise ValueError("--tokenizer_block_out_channels needs two or more positive widths, got "
                         f"{args.tokenizer_block_out_channels}")
    for name in ("codebook_size", "tokenizer_embed_dim"):
        if getattr(args, name) < 2:
            raise ValueError(f"--{name} must be at least 2, got {getattr(args, name)}")
    if args.tokenizer_crop_size < 0 or args.tokenizer_restart_every < 0:
        raise ValueError("--tokenizer_crop_size and --tokenizer_restart_every must be non-negative")
    if not math.isfinite(args.tokenizer_commitment_cost) or args.tokenizer_commitment_cost < 0:  # nan < 0 is False
        raise ValueError(f"--tokenizer_commitment_cost must be a finite number >= 0, got "
                         f"{args.tokenizer_commitment_cost}")
    downsampling = 2 ** (len(widths) - 1)
    if args.tokenizer_crop_size % downsampling:
        raise ValueError(f"--tokenizer_crop_size {args.tokenizer_crop_size} must be a multiple of the tokenizer's "
                         "downsampling, "
                         f"{downsampling} for {len(widths)} --tokenizer_block_out_channels (0: no crops)")


def reusable_tokenizer(directory: Path, options: dict[str, Any], overwrite: bool) -> bool:
    """Whether ``directory`` holds a finished tokenizer trained with ``options`` (then it is reused).

    A finished tokenizer trained with other options, or one without its options file (from an older compgen or a
    killed export), is refused with a ``ValueError`` naming the differences, unless ``overwrite`` is set (then it is
    trained again; nothing is removed here: the loop replaces its files once that training begins, so a run refused
    by a later check leaves it as it was)."""
    if not (directory / "config.json").is_file():
        return False
    record = directory / TOKENIZER_OPTIONS_NAME
    saved = renamed_options(json.loads(record.read_text())) if record.is_file() else None  # old names read as new
    if saved == json.loads(json.dumps(options)):
        return True
    if overwrite:
        return False
    differences = "no record of its options" if saved is None else ", ".join(
        f"--{k} {saved.get(k)!r} there vs {options.get(k)!r} now" for k in sorted(set(saved) | set(options))
        if saved.get(k) != options.get(k))
    raise ValueError(f"{directory} holds a tokenizer trained with other options ({differences}); pass "
                     "--overwrite_output_dir to train a new one, or --tokenizer_path to use a tokenizer as it is")


def build_vq_tokenizer_from_args(args: argparse.Namespace, sample_size: int) -> VQModel:
    """A fresh tokenizer from the flags of :func:`add_vq_tokenizer_arguments` (weights seeded by ``--seed``)."""
    torch.manual_seed(args.seed)
    return build_vq_tokenizer(
        sample_size=sample_size,
        block_out_channels=parse_widths(args.tokenizer_block_out_channels, "tokenizer_block_out_channels"),
        num_vq_embeddings=args.codebook_size,
        vq_embed_dim=args.tokenizer_embed_dim,
        mid_block_add_attention=args.tokenizer_mid_attention,
    )


def train_vq_tokenizer(
    args: argparse.Namespace, run: TrainingRun, output_dir: str | Path, report: bool = True, **config_overrides: Any
) -> tuple[VQModel, dict[str, Any] | None]:
    """Build a tokenizer from the flags, train it on the images ``--tokenizer_data`` names into ``output_dir``
    through the shared loop, and write its reconstruction report there (``report``, when ``run`` has probes).

    Returns the trained tokenizer (reloaded from ``output_dir``, in eval mode) and the report (or ``None``).
    ``config_overrides`` replace fields of the run's config (e.g. the step count of a tokenizer trained before a
    generator).
    """
    output_dir = Path(output_dir)
    vqvae = build_vq_tokenizer_from_args(args, run.train_data.image_size)
    steps = config_overrides.get("max_train_steps", run.config.max_train_steps)
    learning_rate = config_overrides.get("learning_rate", run.config.learning_rate)
    task = VQTask(vqvae, commitment_cost=args.tokenizer_commitment_cost, restart_every=args.tokenizer_restart_every,
                  total_steps=steps, seed=args.seed, crop_size=args.tokenizer_crop_size,
                  tokenizer_options=tokenizer_options(args, steps, learning_rate))
    train_tokenizer_task(run, task, tokenizer_training_data(args, run), output_dir, **config_overrides)
    trained = VQModel.from_pretrained(output_dir).eval()
    return trained, report_for_run(trained, run, output_dir, args.tokenizer_data) if report else None


def train_tokenizer_task(run: TrainingRun, task: TrainingTask, train_data: ConceptImageData, output_dir: Path,
                         **config_overrides: Any) -> None:
    """Train a tokenizer's task on its images: as the run's own model (the ``tokenizer`` recipe, ``output_dir`` the
    run's), or as the first stage of a token model's run (``OUTPUT/tokenizer``, :meth:`TrainingRun.train_first_stage`);
    without evaluation either way."""
    if Path(output_dir) == Path(run.config.output_dir):
        run.train(task, train_data=train_data, evaluate=False)
    else:
        run.train_first_stage(task, train_data, output_dir, **config_overrides)


def report_for_run(vqvae: VQModel, run: TrainingRun, output_dir: str | Path, tokenizer_data: str | None = None
                   ) -> dict[str, Any] | None:
    """The :func:`~compgen.evaluation.tokenizer_report.reconstruction_report` of ``vqvae`` on the real images of
    ``run``'s ``test`` split (with the tokenizer's ``--tokenizer_data``), written to ``output_dir`` and logged;
    ``None`` without probes or a test split."""
    from ..evaluation.tokenizer_report import reconstruction_report, reconstruction_summary

    if run.probes is None or run.eval_data is None or run.eval_data.num_frames > 1:
        return None  # (a frame tokenizer's clips are judged by the clip scorers through the generator)
    with run.profile.phase("tokenizer: reconstruction report"):
        report = reconstruction_report(vqvae, run.graph, run.probes, run.eval_data.images, run.eval_data.concepts,
                                       output_path=Path(output_dir) / RECONSTRUCTION_REPORT_NAME,
                                       tokenizer_data=tokenizer_data)
    logger.info("tokenizer reconstruction accuracy: %s", reconstruction_summary(report))
    return report


TOKENIZER_DIR = "tokenizer"
"""Where a token-space generator's script trains its tokenizer (a run of its own, with checkpoints and card); the
exported pipeline holds its copy in ``vqvae/`` (a KL tokenizer's in ``vae/``)."""


def add_tokenizer_first_arguments(parser: argparse.ArgumentParser, allow_kl: bool = False) -> None:
    """The flags of a script that trains a tokenizer first (MaskGIT, DiT): the tokenizer's own, and where it comes
    from; ``allow_kl`` (the DiT) adds ``--tokenizer kl`` and the KL tokenizer's flags."""
    add_vq_tokenizer_arguments(parser)
    add_tokenizer_kind_arguments(parser, allow_kl)
    group = parser.add_argument_group("tokenizer training (when no --tokenizer_path)")
    add_renamed_argument(group, "--tokenizer_path", default=None,
                         help="a trained tokenizer directory (a VQModel, or an AutoencoderKL with --tokenizer kl); "
                              "default: train one first")
    add_renamed_argument(group, "--tokenizer_steps", type=int, default=2000, help="the tokenizer's training steps")
    add_renamed_argument(group, "--tokenizer_learning_rate", type=float, default=1e-3,
                         help="the tokenizer's learning rate")


def check_tokenizer_first_arguments(args: argparse.Namespace, initial: InitialWeights | None,
                                    allow_kl: bool = False) -> None:
    """The tokenizer flags, and a tokenizer a previous run left in ``OUTPUT/tokenizer`` (it must match them);
    ``--tokenizer kl`` (or a KL ``--tokenizer_path``) is refused unless ``allow_kl``."""
    check_vq_tokenizer_arguments(args)
    check_tokenizer_kind(args, allow_kl)
    check_flags_the_tokenizer_ignores(args)
    if args.tokenizer_steps < 1:
        raise ValueError(f"--tokenizer_steps must be at least 1, got {args.tokenizer_steps}")
    if not math.isfinite(args.tokenizer_learning_rate) or args.tokenizer_learning_rate <= 0:
        raise ValueError(f"--tokenizer_learning_rate must be a finite number > 0, got {args.tokenizer_learning_rate}")
    if fine_tuning_tokenizer(args, initial) is None and args.tokenizer_path is None:
        directory = Path(args.output_dir) / TOKENIZER_DIR
        if not reusable_tokenizer(directory, tokenizer_options(args, args.tokenizer_steps,
                                                               args.tokenizer_learning_rate),
                                  overwrite=args.overwrite_output_dir):
            # It trains: a stage killed before it finished is refused here, not after the data and the probes.
            check_start(RunDirectory(directory), args.resume_from_checkpoint, args.overwrite_output_dir)


VQ_ONLY_OPTIONS = ("codebook_size", "tokenizer_commitment_cost", "tokenizer_restart_every")
"""Tokenizer flags a KL tokenizer has no use for (it has no codebook)."""
LOADED_TOKENIZER_CONFIG = {"codebook_size": ("num_vq_embeddings",), "tokenizer_embed_dim": ("vq_embed_dim",
                                                                                          "latent_channels"),
                           "tokenizer_block_out_channels": ("block_out_channels",)}
"""Tokenizer flags given beside ``--tokenizer_path``, and the loaded tokenizer's config entries they must match."""


def check_flags_the_tokenizer_ignores(args: argparse.Namespace) -> None:
    """Refuse tokenizer flags given on the command line that would be silently ignored: VQ-only flags with
    ``--tokenizer kl``, and architecture flags beside ``--tokenizer_path`` that contradict the tokenizer it loads."""
    given = getattr(args, "given_options", frozenset())
    if getattr(args, "tokenizer", "vq") == "kl":
        vq_only = [f"--{name}" for name in VQ_ONLY_OPTIONS if name in given]
        if vq_only:
            raise ValueError(f"{', '.join(vq_only)}: a VQ tokenizer's options, which --tokenizer kl (no codebook) "
                             "would ignore; drop them")
    path = getattr(args, "tokenizer_path", None)
    if path is None or not Path(path, "config.json").is_file():
        return
    config = json.loads(Path(path, "config.json").read_text())
    for option, keys in LOADED_TOKENIZER_CONFIG.items():
        if option not in given:
            continue
        value = getattr(args, option)
        if option == "tokenizer_block_out_channels":
            value = list(parse_widths(value, option))
        loaded = next((config[key] for key in keys if config.get(key) is not None), None)
        if loaded is not None and loaded != value:
            raise ValueError(f"--{option} {getattr(args, option)} contradicts the tokenizer --tokenizer_path {path} "
                             f"loads ({keys[0]} {loaded}), which is used as it is: drop --{option}")


TOKEN_TRANSFORMER_PRESETS: dict[str, dict[str, Any]] = {
    # Paper B's scale (Farid et al. 2025, Shapes2D): a 12-layer transformer of width 448 over 7x7 tokens.
    "paper": VQ_PRESETS["paper"] | dict(hidden_size=448, num_layers=12, num_heads=8, train_batch_size=64,
                                        learning_rate=3e-4, lr_scheduler="constant_with_warmup", lr_warmup_steps=1000,
                                        max_train_steps=40000, eval_steps=1000, checkpointing_steps=5000),
    # Small enough for a 2-core CPU: width 128 costs no more per step than 64 on one core
    # (results/maskgit-jepa-h32-old-probes/NOTES.md, section 5).
    "cpu-quick": VQ_PRESETS["cpu-quick"] | dict(hidden_size=128, num_layers=4, num_heads=4, train_batch_size=64,
                                                max_train_steps=3000, lr_warmup_steps=100, mixed_precision="auto",
                                                eval_steps=250, checkpointing_steps=1000),
}
"""What MaskGIT (``train_maskgit_jepa.py``) and the DiT (``train_dit.py``) share per preset: the tokenizer and the
transformer, so that the two objectives are compared on the same tokens and the same backbone."""
CONTINUOUS_CPU_QUICK: dict[str, Any] = TOKEN_TRANSFORMER_PRESETS["cpu-quick"] | dict(
    learning_rate=1e-3, lr_scheduler="constant_with_warmup", use_ema=True, ema_decay=0.995)
"""What the cpu-quick presets of the continuous rungs (the DiT, GIVT, MAR) share: a constant learning rate after
warm-up and EMA weights."""


def add_token_transformer_arguments(parser: argparse.ArgumentParser, title: str) -> argparse._ArgumentGroup:
    """The backbone and conditioning flags every token transformer (MaskGIT, DiT) takes; returns the group."""
    group = parser.add_argument_group(title)
    group.add_argument("--hidden_size", type=int, default=128)
    group.add_argument("--num_layers", type=int, default=4)
    group.add_argument("--num_heads", type=int, default=4)
    group.add_argument("--conditioning", default="full", choices=list(CONDITIONING_MODES))
    group.add_argument("--concept_dropout", type=float, default=0.0)
    group.add_argument("--dropout", type=float, default=0.0,
                       help="dropout on every block's attention and feed-forward outputs (MaskGIT's code: 0.1)")
    return group


def token_transformer_options(args: argparse.Namespace, run: TrainingRun, grid_size: int) -> dict[str, Any]:
    """What every token transformer (MaskGIT, DiT) is built with from the flags of
    :func:`add_token_transformer_arguments`: the concept space and conditioning, the grid and the backbone's size."""
    return dict(concept_space=run.train_data.space.to_dict(), grid_size=grid_size, hidden_size=args.hidden_size,
                num_layers=args.num_layers, num_heads=args.num_heads, conditioning=args.conditioning,
                continuous_concepts=run.continuous_concepts if args.conditioning == "full" else {},
                concept_dropout=args.concept_dropout, dropout=args.dropout)


def add_latent_transformer_arguments(parser: argparse.ArgumentParser, title: str) -> argparse._ArgumentGroup:
    """The flags of a transformer over continuous latents (the DiT, GIVT): the token transformer's, and the scale of
    its position embedding; returns the group."""
    group = add_token_transformer_arguments(parser, title)
    group.add_argument("--position_embedding_std", type=float, default=0.02,
                       help="init std of the learned position embedding (0.02: ViT's; 1.0: the image tokens' scale)")
    return group


def latent_transformer_options(args: argparse.Namespace, run: TrainingRun, tokenizer) -> tuple[Any, dict[str, Any]]:
    """The training latents and what a transformer over them is built with (:func:`token_transformer_options`, the
    latent statistics, ``--position_embedding_std``). A fine-tuning run (``--init_from``) keeps the source model's
    latent statistics, as it keeps its tokenizer (:func:`fine_tuning_tokenizer`)."""
    from ..models.vq_tokenizer import token_grid_size
    from ..training.tasks.latent_tokenizer import latent_model_options

    latents, options = latent_model_options(tokenizer, run.train_data.images)
    if run.initial is not None:  # the loaded weights work on the source's standardized latents: keep its statistics
        source = next(config for config in run.initial.model_configs.values()
                      if "latent_mean" in config)
        options = {name: source[name] for name in ("latent_channels", "latent_mean", "latent_std")}
    return latents, (token_transformer_options(args, run, token_grid_size(tokenizer)) | options
                     | {"position_embedding_std": args.position_embedding_std})


def check_transformer_arguments(args: argparse.Namespace, model_class: type[ConceptConditionedMixin]) -> None:
    """A token transformer's flags (``--hidden_size``, ``--num_heads``, ``--num_layers``, ``--concept_dropout``,
    ``--dropout``, and
    where the recipe has them ``--position_embedding_std``, GIVT's ``--num_mixtures``, MAR's ``--head_width`` and
    ``--head_depth``), checked by their owner, ``model_class.check_options``, before any work."""
    options = {name: getattr(args, name) for name in ("hidden_size", "num_heads", "num_layers", "concept_dropout",
                                                      "dropout", "position_embedding_std", "num_mixtures",
                                                      "head_width", "head_depth") if hasattr(args, name)}
    model_class.check_options(**options)


def load_or_train_tokenizer(args: argparse.Namespace, run: TrainingRun, output_dir: Path
                            ) -> tuple[VQModel | AutoencoderKL, dict[str, Any] | None]:
    """``--tokenizer_path`` if given; else ``OUTPUT/tokenizer`` if a previous run trained it with these tokenizer
    options;
    else train it now on the images ``--tokenizer_data`` names through the shared loop (resuming its checkpoints with
    ``--resume_from_checkpoint``). Returns the tokenizer (on the CPU, frozen) and its reconstruction report (written
    to ``OUTPUT/vq_reconstruction.json``; ``None`` without probes)."""
    vq_dir = Path(output_dir) / TOKENIZER_DIR
    options = tokenizer_options(args, args.tokenizer_steps, args.tokenizer_learning_rate)
    path = fine_tuning_tokenizer(args, run.initial) or args.tokenizer_path
    if path is None and reusable_tokenizer(vq_dir, options, overwrite=run.config.overwrite_output_dir):
        path = vq_dir
    if path is None:
        vqvae, _ = (train_kl_tokenizer if getattr(args, "tokenizer", "vq") == "kl" else train_vq_tokenizer)(
            args, run, vq_dir, max_train_steps=args.tokenizer_steps, learning_rate=args.tokenizer_learning_rate,
            lr_scheduler="cosine", lr_warmup_steps=0, use_ema=False, push_to_hub=False,
            checkpointing_steps=max(args.tokenizer_steps, 1), eval_steps=max(args.tokenizer_steps, 1), report=False,
        )
        return vqvae, report_for_run(vqvae, run, output_dir, args.tokenizer_data)
    logger.info("using the tokenizer in %s", path)
    vqvae = load_tokenizer(path)
    trained_on = _read_json(path, TOKENIZER_OPTIONS_NAME)
    tokenizer_data = trained_on.get("tokenizer_data", "not recorded")
    logger.info("the tokenizer's training data: %s", tokenizer_data)
    shared_report = Path(path) / RECONSTRUCTION_REPORT_NAME
    same_data = (trained_on.get("dataset"), trained_on.get("dataset_config")) == (args.dataset, args.dataset_config)
    if shared_report.is_file() and same_data:
        # The tokenizer's own run measured its reconstruction accuracy on this dataset's test split: reuse it.
        report = json.loads(shared_report.read_text()) | {"tokenizer_data": tokenizer_data}
        atomic_write_text(Path(output_dir) / RECONSTRUCTION_REPORT_NAME, json.dumps(report, indent=2) + "\n")
        return vqvae, report
    return vqvae, report_for_run(vqvae, run, output_dir, tokenizer_data)


def _read_json(directory: str | Path, name: str) -> dict[str, Any]:
    """The JSON file ``name`` in ``directory`` (empty if it is missing)."""
    path = Path(directory) / name
    return json.loads(path.read_text()) if path.is_file() else {}


def train_kl_tokenizer(
    args: argparse.Namespace, run: TrainingRun, output_dir: str | Path, report: bool = True, **config_overrides: Any
) -> tuple[AutoencoderKL, dict[str, Any] | None]:
    """:func:`train_vq_tokenizer` for the KL tokenizer: build it from the flags (weights seeded by ``--seed``),
    train it with :class:`~compgen.training.tasks.kl_tokenizer.KLTask` into ``output_dir``, reload it and report."""
    output_dir = Path(output_dir)
    torch.manual_seed(args.seed)
    vae = build_kl_tokenizer(
        sample_size=run.train_data.image_size,
        block_out_channels=parse_widths(args.tokenizer_block_out_channels, "tokenizer_block_out_channels"),
        latent_channels=kl_latent_channels(args),
        mid_block_add_attention=args.tokenizer_mid_attention,
    )
    steps = config_overrides.get("max_train_steps", run.config.max_train_steps)
    learning_rate = config_overrides.get("learning_rate", run.config.learning_rate)
    task = KLTask(vae, kl_weight=args.kl_weight, crop_size=args.tokenizer_crop_size,
                  tokenizer_options=tokenizer_options(args, steps, learning_rate))
    train_tokenizer_task(run, task, tokenizer_training_data(args, run), output_dir, **config_overrides)
    trained = AutoencoderKL.from_pretrained(output_dir).eval()
    return trained, report_for_run(trained, run, output_dir, args.tokenizer_data) if report else None
