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
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ..concepts import ConceptGraph
from ..data.loading import (
    CELEBA_SOURCE,
    ConceptImageData,
    load_concept_dataset,
    split_tensors,
    training_data_from,
)
from .trainer import Trainer, TrainingConfig, TrainingTask, add_training_arguments, config_from_args

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

CELEBA_FLAGS = ("celeba_dir", "celeba_parquet", "celeba_training_classes")


@dataclass
class TrainingRun:
    """Everything a script needs besides its model: data, concept graph, probes and the options."""

    config: TrainingConfig
    train_data: ConceptImageData
    graph: ConceptGraph
    probes: nn.Module | None
    dataset_name: str

    @property
    def continuous_concepts(self) -> dict[str, list[list[float]]]:
        """Canonical per-class values of the continuous variables ("full" conditioning) for this dataset."""
        if self.train_data.concept_values is None:
            return {}
        from ..models.tuple_unet import shapes_continuous_concepts

        return shapes_continuous_concepts(self.train_data.space)

    def train(self, task: TrainingTask, probes: bool = True, **config_overrides: Any) -> list[dict[str, Any]]:
        """Run the shared loop on ``task``; ``config_overrides`` (e.g. another ``output_dir`` and step count for a
        tokenizer trained before the generator) replace fields of this run's :class:`TrainingConfig`."""
        config = dataclasses.replace(self.config, **config_overrides)
        trainer = Trainer(config, task, self.train_data, self.graph, self.probes if probes else None,
                          self.dataset_name)
        return trainer.train()


def apply_preset(parser: argparse.ArgumentParser, presets: dict[str, dict[str, Any]], argv: list[str] | None) -> str:
    """Parse ``--preset`` first and make its values the defaults, so explicit flags still win."""
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--preset", choices=sorted(presets), default=None)
    known, _ = pre.parse_known_args(argv)
    if known.preset:
        unknown = set(presets[known.preset]) - {a.dest for a in parser._actions}
        if unknown:
            raise ValueError(f"preset {known.preset!r} sets unknown options {sorted(unknown)}")
        parser.set_defaults(**presets[known.preset])
    return known.preset or "none"


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


def add_celeba_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags that locate a local CelebA copy for ``--dataset celeba`` (see :mod:`compgen.data.celeba`)."""
    from ..data.celeba import CelebAConcepts

    group = parser.add_argument_group("CelebA (--dataset celeba)")
    group.add_argument("--celeba_dir", "--celeba-dir", dest="celeba_dir", default=None,
                       help="official CelebA tree: img_align_celeba/, list_attr_celeba.txt, list_eval_partition.txt")
    group.add_argument("--celeba_parquet", "--celeba-parquet", dest="celeba_parquet", default=None,
                       help="CelebA with attribute columns as Parquet: a local file or directory, or a Hub dataset id "
                            "(its config name goes in --dataset_config)")
    group.add_argument("--celeba_config", "--celeba-config", dest="celeba_config", default="default",
                       choices=sorted(CelebAConcepts.builder_configs),
                       help="builder config: default (64 px, paper caps) or cpu (32 px, smaller caps)")
    group.add_argument("--celeba_training_classes", "--celeba-training-classes", dest="celeba_training_classes",
                       default=None, help="comma-separated training classes (default 000,001,010,100)")


def celeba_builder_options(args: argparse.Namespace) -> dict[str, Any]:
    """CelebA builder keyword arguments from the flags (``{}`` for other datasets, whose use of them is an error)."""
    if args.dataset != CELEBA_SOURCE:
        given = [f"--{name}" for name in CELEBA_FLAGS if getattr(args, name, None)]
        if given:
            raise ValueError(
                f"{', '.join(given)} only apply to --dataset {CELEBA_SOURCE} (got --dataset {args.dataset})"
            )
        return {}
    if (args.celeba_dir is None) == (args.celeba_parquet is None):
        raise ValueError(
            f"--dataset {CELEBA_SOURCE} needs exactly one of --celeba_dir DIR (the official tree with "
            "img_align_celeba/, list_attr_celeba.txt, list_eval_partition.txt) or --celeba_parquet PATH_OR_HUB_ID"
        )
    if args.celeba_dir is not None:
        options: dict[str, Any] = {"data_dir": args.celeba_dir}
    else:
        options = {"parquet": args.celeba_parquet, "parquet_config": args.dataset_config}
    if args.celeba_training_classes:
        options["training_classes"] = tuple(c.strip() for c in args.celeba_training_classes.split(",") if c.strip())
    return options


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
    parser: argparse.ArgumentParser, presets: dict[str, dict[str, Any]], argv: list[str] | None = None
) -> tuple[argparse.Namespace, TrainingConfig, TrainingRun]:
    """Add the shared flags, apply the preset and dataset defaults, parse, load the data and the probes."""
    parser.add_argument("--preset", choices=sorted(presets), default=None, help="named option set (flags override it)")
    parser.add_argument("--dataset", default="okawa-h32-train1",
                        help=f"concept-graph config name, {CELEBA_SOURCE!r}, local exported directory or Hub id")
    parser.add_argument("--dataset_config", default=None,
                        help="config of a directory / Hub dataset (for celeba: of the --celeba_parquet dataset)")
    parser.add_argument("--cache_dir", default=None)
    parser.add_argument("--probes_path", default=None,
                        help="saved ConceptProbes (save_pretrained dir or Hub id); default: train probes now (linear "
                             "on rendered shapes, or CNN on the dataset's probe_train split, e.g. for celeba)")
    parser.add_argument("--no_eval", action="store_true", help="train without the learning-dynamics evaluation")
    add_celeba_arguments(parser)
    add_training_arguments(parser)
    preset = apply_preset(parser, presets, argv)
    apply_dataset_defaults(parser, preset, argv)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")

    celeba_options = celeba_builder_options(args)
    if args.dataset == CELEBA_SOURCE:
        dataset_name = f"{CELEBA_SOURCE}-{args.celeba_config}"
        dataset_dict = load_concept_dataset(CELEBA_SOURCE, args.celeba_config, cache_dir=args.cache_dir,
                                            **celeba_options)
    else:
        config_name = args.dataset_config or (args.dataset if not Path(args.dataset).is_dir() else None)
        dataset_name = config_name or args.dataset
        dataset_dict = load_concept_dataset(args.dataset, args.dataset_config, cache_dir=args.cache_dir)
    train_data, graph = training_data_from(dataset_dict)
    logger.info("training data %s: %d images (%d px) of classes %s", dataset_name, len(train_data),
                train_data.image_size, train_data.class_strings())
    check_image_size(args, train_data.image_size, dataset_name)
    probe_splits = None
    if not args.no_eval and not args.probes_path and {"probe_train", "probe_val"} <= set(dataset_dict):
        probe_splits = (split_tensors(dataset_dict, "probe_train"), split_tensors(dataset_dict, "probe_val"))
    probes = None if args.no_eval else load_probes(args.probes_path, train_data, args.seed, probe_splits)
    extra = {k: v for k, v in vars(args).items() if k not in {f for f in TrainingConfig.__dataclass_fields__}}
    extra["preset"] = preset
    config = config_from_args(args, extra=extra)
    run = TrainingRun(config, train_data, graph, probes, dataset_name=dataset_name)
    torch.manual_seed(config.seed)  # the script builds its model next: initial weights are a function of --seed
    return args, config, run


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
