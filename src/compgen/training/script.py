"""Command-line plumbing shared by the example training scripts: presets, data, probes, and the Trainer."""

from __future__ import annotations

import argparse
import dataclasses
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torch import nn

from ..concepts import ConceptGraph
from ..data.loading import ConceptImageData, load_training_data
from .trainer import Trainer, TrainingConfig, TrainingTask, add_training_arguments, config_from_args

logger = logging.getLogger(__name__)


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


def prepare_run(
    parser: argparse.ArgumentParser, presets: dict[str, dict[str, Any]], argv: list[str] | None = None
) -> tuple[argparse.Namespace, TrainingConfig, TrainingRun]:
    """Add the shared flags, apply the preset, parse, load the data and the probes."""
    parser.add_argument("--preset", choices=sorted(presets), default=None, help="named option set (flags override it)")
    parser.add_argument("--dataset", default="okawa-h32-train1",
                        help="concept-graph config name, local exported directory, or Hub dataset id")
    parser.add_argument("--dataset_config", default=None, help="config of a directory / Hub dataset")
    parser.add_argument("--cache_dir", default=None)
    parser.add_argument("--probes_path", default=None,
                        help="saved ConceptProbes (save_pretrained dir or Hub id); default: train linear probes now")
    parser.add_argument("--no_eval", action="store_true", help="train without the learning-dynamics evaluation")
    add_training_arguments(parser)
    preset = apply_preset(parser, presets, argv)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")

    config_name = args.dataset_config or (args.dataset if not Path(args.dataset).is_dir() else None)
    train_data, graph = load_training_data(args.dataset, args.dataset_config, cache_dir=args.cache_dir)
    logger.info("training data %s: %d images of classes %s", args.dataset, len(train_data),
                train_data.class_strings())
    probes = None if args.no_eval else load_probes(args.probes_path, train_data, args.seed)
    extra = {k: v for k, v in vars(args).items() if k not in {f for f in TrainingConfig.__dataclass_fields__}}
    extra["preset"] = preset
    config = config_from_args(args, extra=extra)
    run = TrainingRun(config, train_data, graph, probes, dataset_name=config_name or args.dataset)
    return args, config, run


def load_probes(path: str | None, train_data: ConceptImageData, seed: int) -> nn.Module:
    """Saved probes if ``path`` is given, else linear probes trained now on rendered shapes of every class."""
    from ..evaluation.probes import ConceptProbes, default_shapes_probes

    if path:
        return ConceptProbes.from_pretrained(path)
    return default_shapes_probes(train_data.space, image_size=train_data.image_size, seed=seed)
