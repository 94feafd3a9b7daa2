"""Command-line plumbing shared by the example training scripts: presets, data, probes, and the Trainer.

Option defaults are layered, each layer overriding the one before:

1. the script's own ``add_argument`` defaults;
2. its ``--preset`` (e.g. ``paper`` or ``cpu-quick``);
3. :data:`DATASET_DEFAULTS` for ``--dataset``: first its ``"*"`` entry, then the entry named like the preset
   (e.g. CelebA at 32 px with ``cpu-quick``), applied to the options the script defines;
4. flags given on the command line.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from accelerate import PartialState
from diffusers import VQModel
from torch import nn

from ..atomic_io import atomic_write_text
from ..cli import add_celeba_arguments, apply_preset, celeba_builder_options
from ..concepts import ConceptGraph
from ..data.loading import (
    CELEBA_SOURCE,
    ConceptImageData,
    load_concept_dataset,
    split_tensors,
    training_data_from,
)
from ..evaluation.tokenizer_report import RECONSTRUCTION_REPORT_NAME
from ..models.vq_tokenizer import build_vq_tokenizer
from .config import TrainingConfig, add_training_arguments, config_from_args, multi_cpu_launch
from .run_directory import RunDirectory, RunDirectoryClaim, RunDirectoryInUseError
from .task import TrainingTask, check_batch_fits
from .trainer import Trainer
from .vq_task import VQTask

logger = logging.getLogger(__name__)

DATASET_DEFAULTS: dict[str, dict[str, dict[str, Any]]] = {
    CELEBA_SOURCE: {
        # Faces carry binary labels only, so "full" conditioning has no continuous values to use.
        "*": {"celeba_config": "default", "conditioning": "quantized"},
        # 64 px with three U-Net stages keeps Paper A's bottleneck at 8x8 (28 px -> 7x7 with two stages).
        "paper": {"block_out_channels": "256,512,512"},
        "cpu-quick": {"celeba_config": "cpu"},
    },
}
"""``{dataset: {"*" or preset name: {option: default}}}``: dataset-level defaults, layered over the preset.

An option a script does not define is skipped, so one table serves every training script.
"""


@dataclass
class TrainingRun:
    """Everything a script needs besides its model: data, concept graph, probes and the options."""

    config: TrainingConfig
    train_data: ConceptImageData
    graph: ConceptGraph
    probes: nn.Module | None
    dataset_name: str
    eval_data: ConceptImageData | None = None
    """Real images of every class (the dataset's ``test`` split), for reports on real data."""
    claim: RunDirectoryClaim | None = None
    """The claim on ``config.output_dir`` taken before the data were built; given back once training there ends."""

    @property
    def continuous_concepts(self) -> dict[str, list[list[float]]]:
        """Canonical per-class values of the continuous variables ("full" conditioning) for this dataset."""
        if self.train_data.concept_values is None:
            return {}
        from ..shapes import shapes_continuous_concepts

        return shapes_continuous_concepts(self.train_data.space)

    def train(self, task: TrainingTask, probes: bool = True, **config_overrides: Any) -> list[dict[str, Any]]:
        """Run the shared loop on ``task``; ``config_overrides`` (e.g. another ``output_dir`` and step count for a
        tokenizer trained before the generator) replace fields of this run's :class:`TrainingConfig`."""
        config = dataclasses.replace(self.config, **config_overrides)
        trainer = Trainer(config, task, self.train_data, self.graph, self.probes if probes else None,
                          self.dataset_name)
        try:
            return trainer.train()
        finally:
            if self.claim is not None and Path(config.output_dir) == Path(self.config.output_dir):
                self.claim.release()


def apply_dataset_defaults(parser: argparse.ArgumentParser, preset: str, argv: list[str] | None) -> dict[str, Any]:
    """Make :data:`DATASET_DEFAULTS` of ``--dataset`` (``"*"``, then ``preset``) the defaults; returns them."""
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--dataset", default=parser.get_default("dataset"))
    known, _ = pre.parse_known_args(argv)
    table = DATASET_DEFAULTS.get(known.dataset, {})
    defined = {a.dest for a in parser._actions}
    values = {k: v for k, v in {**table.get("*", {}), **table.get(preset, {})}.items() if k in defined}
    parser.set_defaults(**values)
    if values:
        logger.info("defaults for dataset %s with preset %s: %s", known.dataset, preset, values)
    return values


IMAGE_HALVINGS: dict[str, int] = {"block_out_channels": 0, "vq_block_out_channels": -1}
"""Width options whose entry count sets how often a model halves the images: the tuple U-Net halves once per
entry, a diffusers ``VQModel`` once per entry but the last; the value is that offset."""


def check_image_size(args: argparse.Namespace, image_size: int, dataset_name: str) -> None:
    """Fail before training when a model's width option (see :data:`IMAGE_HALVINGS`) cannot halve the images that
    many times, e.g. ``--block_out_channels 32,64,64`` (divisor 8) on 28 px shapes."""
    for option, offset in IMAGE_HALVINGS.items():
        widths = getattr(args, option, None)
        if not isinstance(widths, str):
            continue
        halvings = len(widths.split(",")) + offset
        if image_size % 2**halvings:
            raise ValueError(
                f"--{option} {widths} halves the images {halvings} times, so their size must be divisible by "
                f"{2**halvings}; dataset {dataset_name} has {image_size}x{image_size} images"
            )


def prepare_run(
    parser: argparse.ArgumentParser,
    presets: dict[str, dict[str, Any]],
    argv: list[str] | None = None,
    validate: Callable[[argparse.Namespace], None] | None = None,
) -> tuple[argparse.Namespace, TrainingConfig, TrainingRun]:
    """Add the shared flags, apply the preset and dataset defaults, parse, check every option (the shared ones and the
    script's own through ``validate``, which raises ``ValueError``), then load the data and the probes.

    An invalid option stops the script with an argparse message (exit status 2) before any work is done."""
    parser.add_argument("--preset", choices=sorted(presets), default=None, help="named option set (flags override it)")
    parser.add_argument("--dataset", default="okawa-h32-train1",
                        help=f"concept-graph config name, {CELEBA_SOURCE!r}, local exported directory or Hub id")
    parser.add_argument("--dataset_config", default=None,
                        help="config of a directory / Hub dataset (for celeba: of the --celeba_parquet dataset)")
    parser.add_argument("--cache_dir", default=None)
    parser.add_argument("--probes_path", default=None,
                        help="saved ConceptProbes (save_pretrained dir or Hub id); default: the default shapes "
                             "probes (trained once, cached), or CNN probes trained on the probe_train split (celeba)")
    parser.add_argument("--no_eval", action="store_true", help="train without the learning-dynamics evaluation")
    add_celeba_arguments(parser)
    add_training_arguments(parser)
    preset = apply_preset(parser, presets, argv)
    apply_dataset_defaults(parser, preset, argv)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")

    # Every option is checked before any work (building data, training probes, a tokenizer), with the output
    # directory claimed (one run per directory; see run_directory) before it is checked.
    state = PartialState(cpu=multi_cpu_launch())
    claim = None
    try:
        extra = {k: v for k, v in vars(args).items() if k not in {f for f in TrainingConfig.__dataclass_fields__}}
        extra["preset"] = preset
        config = config_from_args(args, extra=extra)
        celeba_options = celeba_builder_options(args)
        _check_dataset_config(args)
        config.check_environment()
        if state.is_main_process:
            run_directory = RunDirectory(config.output_dir)
            claim = run_directory.claim()
            run_directory.check_start(config.resume_from_checkpoint, config.overwrite_output_dir)
        if validate is not None:
            validate(args)
    except (ValueError, OSError, RunDirectoryInUseError) as error:
        if claim is not None:
            claim.release()
        parser.error(str(error))
    try:
        # Under data parallelism the main process builds the dataset and trains (or caches) the probes first; the
        # others then read both from the caches.
        with state.main_process_first():
            dataset_dict, dataset_name = _load_dataset(args, celeba_options)
            train_data, graph = training_data_from(dataset_dict)
            eval_data = split_tensors(dataset_dict, "test") if "test" in dataset_dict else None
            check_image_size(args, train_data.image_size, dataset_name)
            check_batch_fits(len(train_data), config.train_batch_size, state.num_processes)
            probe_splits = None
            if not args.no_eval and not args.probes_path and {"probe_train", "probe_val"} <= set(dataset_dict):
                probe_splits = (split_tensors(dataset_dict, "probe_train"), split_tensors(dataset_dict, "probe_val"))
            probes = None if args.no_eval else load_probes(args.probes_path, train_data, args.seed, probe_splits)
    except BaseException as error:
        if claim is not None:
            claim.release()  # and the output directory goes, if this run created it and wrote nothing there
        if isinstance(error, ValueError):
            parser.error(str(error))  # e.g. an option that does not fit the data (image size, batch size)
        raise
    logger.info("training data %s: %d images (%d px) of classes %s", dataset_name, len(train_data),
                train_data.image_size, train_data.class_strings())
    run = TrainingRun(config, train_data, graph, probes, dataset_name=dataset_name, eval_data=eval_data, claim=claim)
    torch.manual_seed(config.seed)  # the script builds its model next: initial weights are a function of --seed
    return args, config, run


def _check_dataset_config(args: argparse.Namespace) -> None:
    """``--dataset_config`` names a config of a directory or Hub dataset (or of ``--celeba_parquet``); a builder
    config name already is one."""
    from ..data.concept_graph_builder import ConceptGraphShapes

    if args.dataset_config and args.dataset in ConceptGraphShapes.builder_configs and not Path(args.dataset).is_dir():
        raise ValueError(f"--dataset {args.dataset} is a concept-graph config name; --dataset_config "
                         f"{args.dataset_config!r} only applies to a local export directory or a Hub dataset")


def _load_dataset(args: argparse.Namespace, celeba_options: dict[str, Any]):
    """The ``DatasetDict`` named by ``--dataset`` / ``--dataset_config``, and the name the model card gives it."""
    if args.dataset == CELEBA_SOURCE:
        dataset_name = f"{CELEBA_SOURCE}-{args.celeba_config}"
        dataset_dict = load_concept_dataset(CELEBA_SOURCE, args.celeba_config, cache_dir=args.cache_dir,
                                            **celeba_options)
    else:
        config_name = args.dataset_config or (args.dataset if not Path(args.dataset).is_dir() else None)
        dataset_name = config_name or args.dataset
        dataset_dict = load_concept_dataset(args.dataset, args.dataset_config, cache_dir=args.cache_dir)
    return dataset_dict, dataset_name


def load_probes(
    path: str | None,
    train_data: ConceptImageData,
    seed: int,
    probe_splits: tuple[ConceptImageData, ConceptImageData] | None = None,
) -> nn.Module:
    """The probes a run is evaluated with.

    Saved probes if ``path`` is given; else CNN probes trained now on ``probe_splits`` = (``probe_train``,
    ``probe_val``) of datasets that have them (CelebA), with the ``probe_val`` accuracy logged; else the default
    shapes probes (:func:`~compgen.evaluation.probes.default_shapes_probes`, trained once and cached on disk).
    """
    from ..evaluation.probes import ConceptProbes, default_shapes_probes

    if path:
        return ConceptProbes.from_pretrained(path)
    if probe_splits is not None:
        from ..evaluation.train_probes import train_cnn_probes

        probes, accuracy = train_cnn_probes(*probe_splits, seed=seed)
        logger.info("CNN probes trained on %d probe_train images; probe_val accuracy (%d images): %s",
                    len(probe_splits[0]), len(probe_splits[1]),
                    ", ".join(f"{name} {value:.3f}" for name, value in accuracy.items()))
        return probes
    from ..concepts import shapes_space

    shapes_names = set(shapes_space(background=True).names)
    if not set(train_data.space.names) <= shapes_names:
        raise ValueError(
            f"no probes for concept variables {train_data.space.names}: linear probes are trained on rendered shapes "
            f"({sorted(shapes_names)}) only; pass --probes_path or use a dataset with probe_train/probe_val splits"
        )
    # One instrument for every run: the default probes do not depend on the run's seed, so seeds compare fairly.
    return default_shapes_probes(train_data.space, image_size=train_data.image_size)


# --- the VQ tokenizer's flags (train_vq_tokenizer.py, train_maskgit_jepa.py) ----------------------------------

VQ_PRESETS: dict[str, dict[str, Any]] = {
    "paper": dict(vq_block_out_channels="64,128,128", vq_embed_dim=128, vq_steps=5000, vq_learning_rate=1e-3),
    # About 2 minutes single-threaded. Local training crops, no mid-block attention and dead-code restarts lift the
    # held-out classes' reconstruction probe accuracy on H32-train1 from ~0 to >= 0.97, except 111 (see the README).
    "cpu-quick": dict(vq_block_out_channels="16,32,32", vq_embed_dim=16, vq_steps=2500, vq_learning_rate=2e-3,
                      vq_crop_size=16, mixed_precision="auto"),
}
"""Tokenizer options per preset, shared by ``train_vq_tokenizer.py`` and ``train_maskgit_jepa.py``."""




def add_vq_tokenizer_arguments(parser: argparse.ArgumentParser) -> None:
    """The tokenizer's architecture and training flags, shared by every script that trains one."""
    group = parser.add_argument_group("VQ tokenizer")
    group.add_argument("--vq_block_out_channels", default="32,64,64", help="3 entries = downsampling 4")
    group.add_argument("--codebook_size", type=int, default=256)
    group.add_argument("--vq_embed_dim", type=int, default=32)
    group.add_argument("--vq_mid_attention", action=argparse.BooleanOptionalAction, default=False,
                       help="self-attention in the encoder/decoder mid blocks (global context; off by default)")
    group.add_argument("--vq_commitment_cost", type=float, default=0.25)
    group.add_argument("--vq_restart_every", type=int, default=25, help="steps between dead-code restarts; 0: off")
    group.add_argument("--vq_crop_size", type=int, default=16,
                       help="train on random crops of this size (a multiple of the downsampling; 0: whole images)")


TOKENIZER_OPTIONS_NAME = "tokenizer_options.json"
"""Written beside an exported tokenizer: the options it was trained with, so a rerun reuses it only if they match."""


def tokenizer_options(args: argparse.Namespace, steps: int, learning_rate: float) -> dict[str, Any]:
    """The options that determine a tokenizer trained by :func:`train_vq_tokenizer`."""
    names = ("vq_block_out_channels", "codebook_size", "vq_embed_dim", "vq_mid_attention", "vq_commitment_cost",
             "vq_restart_every", "vq_crop_size", "seed", "dataset", "dataset_config", "train_batch_size")
    return {name: getattr(args, name, None) for name in names} | {"steps": steps, "learning_rate": learning_rate}


def check_vq_tokenizer_arguments(args: argparse.Namespace) -> None:
    """Raise ``ValueError`` for tokenizer flags that cannot build a tokenizer (before any work is done)."""
    try:
        widths = [int(c) for c in args.vq_block_out_channels.split(",")]
    except ValueError:
        raise ValueError(f"--vq_block_out_channels must be comma-separated integers, got "
                         f"{args.vq_block_out_channels!r}") from None
    if len(widths) < 2 or any(w < 1 for w in widths):
        raise ValueError(f"--vq_block_out_channels needs two or more positive widths, got {args.vq_block_out_channels}")
    for name in ("codebook_size", "vq_embed_dim"):
        if getattr(args, name) < 2:
            raise ValueError(f"--{name} must be at least 2, got {getattr(args, name)}")
    if args.vq_crop_size < 0 or args.vq_restart_every < 0 or args.vq_commitment_cost < 0:
        raise ValueError("--vq_crop_size, --vq_restart_every and --vq_commitment_cost must be non-negative")


def reusable_tokenizer(directory: Path, options: dict[str, Any], overwrite: bool) -> bool:
    """Whether ``directory`` holds a finished tokenizer trained with ``options`` (then it is reused).

    A finished tokenizer trained with other options, or one without its options file (from an older compgen or a
    killed export), is refused with a ``ValueError`` naming the differences, unless ``overwrite`` is set (then it is
    removed and trained again)."""
    if not (directory / "config.json").is_file():
        return False
    record = directory / TOKENIZER_OPTIONS_NAME
    saved = json.loads(record.read_text()) if record.is_file() else None
    if saved == json.loads(json.dumps(options)):
        return True
    if overwrite:
        shutil.rmtree(directory)
        return False
    differences = "no record of its options" if saved is None else ", ".join(
        f"--{k} {saved.get(k)!r} there vs {options.get(k)!r} now" for k in sorted(set(saved) | set(options))
        if saved.get(k) != options.get(k))
    raise ValueError(f"{directory} holds a tokenizer trained with other options ({differences}); pass "
                     "--overwrite_output_dir to train a new one, or --vqvae_path to use a tokenizer as it is")


def build_vq_tokenizer_from_args(args: argparse.Namespace, sample_size: int) -> VQModel:
    """A fresh tokenizer from the flags of :func:`add_vq_tokenizer_arguments` (weights seeded by ``--seed``)."""
    torch.manual_seed(args.seed)
    return build_vq_tokenizer(
        sample_size=sample_size,
        block_out_channels=tuple(int(c) for c in args.vq_block_out_channels.split(",")),
        num_vq_embeddings=args.codebook_size,
        vq_embed_dim=args.vq_embed_dim,
        mid_block_add_attention=args.vq_mid_attention,
    )


def train_vq_tokenizer(
    args: argparse.Namespace, run: TrainingRun, output_dir: str | Path, report: bool = True, **config_overrides: Any
) -> tuple[VQModel, dict[str, Any] | None]:
    """Build a tokenizer from the flags, train it on ``run``'s training split into ``output_dir`` through the
    shared loop, and write its reconstruction report there (``report``, when ``run`` has probes).

    Returns the trained tokenizer (reloaded from ``output_dir``, in eval mode) and the report (or ``None``).
    ``config_overrides`` replace fields of the run's config (e.g. the step count of a tokenizer trained before a
    generator).
    """
    output_dir = Path(output_dir)
    vqvae = build_vq_tokenizer_from_args(args, run.train_data.image_size)
    steps = config_overrides.get("max_train_steps", run.config.max_train_steps)
    learning_rate = config_overrides.get("learning_rate", run.config.learning_rate)
    task = VQTask(vqvae, commitment_cost=args.vq_commitment_cost, restart_every=args.vq_restart_every,
                  total_steps=steps, seed=args.seed, crop_size=args.vq_crop_size,
                  options=tokenizer_options(args, steps, learning_rate))
    run.train(task, probes=False, output_dir=str(output_dir), **config_overrides)
    trained = VQModel.from_pretrained(output_dir).eval()
    return trained, report_for_run(trained, run, output_dir) if report else None


def report_for_run(vqvae: VQModel, run: TrainingRun, output_dir: str | Path) -> dict[str, Any] | None:
    """The :func:`~compgen.evaluation.tokenizer_report.reconstruction_report` of ``vqvae`` on the real images of
    ``run``'s ``test`` split, written to ``output_dir`` and logged; ``None`` without probes or a test split."""
    from ..evaluation.tokenizer_report import reconstruction_report, reconstruction_summary

    if run.probes is None or run.eval_data is None:
        return None
    report = reconstruction_report(vqvae, run.graph, run.probes, run.eval_data.images, run.eval_data.concepts,
                                   output_path=Path(output_dir) / RECONSTRUCTION_REPORT_NAME)
    logger.info("VQ reconstruction accuracy: %s", reconstruction_summary(report))
    return report


TOKENIZER_DIR = "tokenizer"
"""Where a token-space generator's script trains its tokenizer (a run of its own, with checkpoints and card); the
exported pipeline holds its copy in ``vqvae/``."""


def add_tokenizer_first_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags of a script that trains a tokenizer first (MaskGIT, DiT): the tokenizer's own, and where it comes
    from."""
    add_vq_tokenizer_arguments(parser)
    group = parser.add_argument_group("VQ tokenizer training (when no --vqvae_path)")
    group.add_argument("--vqvae_path", default=None, help="a trained VQModel directory; default: train one first")
    group.add_argument("--vq_steps", type=int, default=2000)
    group.add_argument("--vq_learning_rate", type=float, default=1e-3)


def check_tokenizer_first_arguments(args: argparse.Namespace) -> None:
    """The tokenizer flags, and a tokenizer a previous run left in ``OUTPUT/tokenizer`` (it must match them)."""
    check_vq_tokenizer_arguments(args)
    if args.vq_steps < 1:
        raise ValueError(f"--vq_steps must be at least 1, got {args.vq_steps}")
    if args.vqvae_path is None:
        reusable_tokenizer(Path(args.output_dir) / TOKENIZER_DIR,
                           tokenizer_options(args, args.vq_steps, args.vq_learning_rate),
                           overwrite=args.overwrite_output_dir)


TOKEN_TRANSFORMER_PRESETS: dict[str, dict[str, Any]] = {
    # Paper B's scale (Farid et al. 2025, Shapes2D): a 12-layer transformer of width 448 over 7x7 tokens.
    "paper": VQ_PRESETS["paper"] | dict(hidden_size=448, num_layers=12, num_heads=8, train_batch_size=64,
                                        learning_rate=3e-4, lr_scheduler="constant_with_warmup", lr_warmup_steps=1000,
                                        max_train_steps=40000, eval_steps=1000, checkpointing_steps=5000),
    # Small enough for a 2-core CPU: width 128 costs no more per step than 64 on one core.
    "cpu-quick": VQ_PRESETS["cpu-quick"] | dict(hidden_size=128, num_layers=4, num_heads=4, train_batch_size=64,
                                                max_train_steps=3000, lr_warmup_steps=100, mixed_precision="auto",
                                                eval_steps=250, checkpointing_steps=1000),
}
"""What MaskGIT (``train_maskgit_jepa.py``) and the DiT (``train_dit.py``) share per preset: the tokenizer and the
transformer, so that the two objectives are compared on the same tokens and the same backbone."""


def add_token_transformer_arguments(parser: argparse.ArgumentParser, title: str) -> argparse._ArgumentGroup:
    """The backbone and conditioning flags every token transformer (MaskGIT, DiT) takes; returns the group."""
    group = parser.add_argument_group(title)
    group.add_argument("--hidden_size", type=int, default=128)
    group.add_argument("--num_layers", type=int, default=4)
    group.add_argument("--num_heads", type=int, default=4)
    group.add_argument("--conditioning", default="full", choices=["full", "quantized"])
    group.add_argument("--concept_dropout", type=float, default=0.0)
    return group


def check_transformer_arguments(args: argparse.Namespace) -> None:
    """``--hidden_size``, ``--num_layers``, ``--num_heads`` of a token transformer (MaskGIT, DiT)."""
    if args.hidden_size < 1 or args.num_layers < 1 or args.num_heads < 1 or args.hidden_size % args.num_heads:
        raise ValueError(f"--hidden_size {args.hidden_size} must be positive and divisible by --num_heads "
                         f"{args.num_heads}; --num_layers must be positive")
    if not 0 <= args.concept_dropout < 1:
        raise ValueError(f"--concept_dropout must be in [0, 1), got {args.concept_dropout}")


def load_or_train_tokenizer(args: argparse.Namespace, run: TrainingRun, output_dir: Path
                            ) -> tuple[VQModel, dict[str, Any] | None]:
    """``--vqvae_path`` if given; else ``OUTPUT/tokenizer`` if a previous run trained it with these tokenizer options;
    else train it now on the training split through the shared loop (resuming its checkpoints with
    ``--resume_from_checkpoint``). Returns the tokenizer (on the CPU, frozen) and its reconstruction report (written
    to ``OUTPUT/vq_reconstruction.json``; ``None`` without probes)."""
    vq_dir = Path(output_dir) / TOKENIZER_DIR
    options = tokenizer_options(args, args.vq_steps, args.vq_learning_rate)
    path = args.vqvae_path
    if path is None and reusable_tokenizer(vq_dir, options, overwrite=run.config.overwrite_output_dir):
        path = vq_dir
    if path is None:
        vqvae, _ = train_vq_tokenizer(
            args, run, vq_dir, max_train_steps=args.vq_steps, learning_rate=args.vq_learning_rate,
            lr_scheduler="cosine", lr_warmup_steps=0, use_ema=False, push_to_hub=False,
            checkpointing_steps=max(args.vq_steps, 1), eval_steps=max(args.vq_steps, 1), report=False,
        )
    else:
        logger.info("using the tokenizer in %s", path)
        vqvae = VQModel.from_pretrained(path).eval()
        shared_report = Path(path) / RECONSTRUCTION_REPORT_NAME
        trained_on = _read_json(path, TOKENIZER_OPTIONS_NAME)
        same_data = (trained_on.get("dataset"), trained_on.get("dataset_config")) == (args.dataset, args.dataset_config)
        if shared_report.is_file() and same_data:
            # The tokenizer's own run measured its ceiling on this dataset's test split: reuse the report.
            report = json.loads(shared_report.read_text())
            atomic_write_text(Path(output_dir) / RECONSTRUCTION_REPORT_NAME, json.dumps(report, indent=2) + "\n")
            return vqvae, report
    return vqvae, report_for_run(vqvae, run, output_dir)


def _read_json(directory: str | Path, name: str) -> dict[str, Any]:
    path = Path(directory) / name
    return json.loads(path.read_text()) if path.is_file() else {}
