"""Train concept probes and save them (optionally push them to the Hub).

Shapes (the default CNN instrument, or Paper A's linear probes with ``--probe_type linear``)::

    python -m compgen.evaluation.train_probes --split_preset H32-train1 --output_dir DIR

renders real images of *every* class of the graph, trains one probe per concept variable with the recipe of
:func:`compgen.evaluation.probes.train_shapes_probes` and a held-out validation split (Paper A: 4500 / 500), prints
per-concept validation accuracy and saves the probes with ``save_pretrained`` (safetensors + config).

CelebA (the 3-conv-layer CNN probes of Paper A's CelebA experiment, trained with photometric corruptions)::

    python -m compgen.evaluation.train_probes --dataset celeba --celeba_dir /data/celeba --output_dir DIR

trains on the ``probe_train`` split (every composition, official train partition) and reports accuracy on
``probe_val`` (official validation partition); pass the saved directory to a training script's ``--probes_path``.
"""

from __future__ import annotations

import argparse
import json
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from ..atomic_io import atomic_directory, check_writable_directory
from ..cli import ArgumentParser, add_celeba_arguments, celeba_builder_options
from ..concepts import ConceptSpace, get_split_preset
from ..data.loading import CELEBA_SOURCE, ConceptImageData, load_concept_dataset, split_tensors
from .corruptions import ProbeAugmentation
from .probes import PROBE_TYPES, ConceptProbes, fit_probes, train_shapes_probes

logger = logging.getLogger(__name__)

CNN_PROBE_EPOCHS = 15


def probe_accuracy(probes: ConceptProbes, data: ConceptImageData) -> dict[str, float]:
    """Per-concept accuracy of ``probes`` on real labelled images, plus ``"all"``: every concept right at once."""
    predicted = probes.predict(data.images)
    correct = predicted == data.concepts
    accuracy = {name: float(correct[:, j].float().mean()) for j, name in enumerate(probes.space.names)}
    accuracy["all"] = float(correct.all(dim=1).float().mean())
    return accuracy


def train_cnn_probes(
    train_data: ConceptImageData,
    val_data: ConceptImageData,
    epochs: int = CNN_PROBE_EPOCHS,
    lr: float = 3e-3,
    batch_size: int = 128,
    cnn_channels: int = 16,
    seed: int = 0,
    device: str | torch.device | None = None,
    progress: bool = False,
) -> tuple[ConceptProbes, dict[str, float]]:
    """CNN probes (3 conv layers per concept) trained on ``train_data``; returns them with ``val_data`` accuracy.

    Meant for natural images such as CelebA's ``probe_train`` / ``probe_val`` splits: no object centering.
    Training runs on ``device`` (default: CUDA when available) and the probes stay there.
    """
    if train_data.space.to_dict() != val_data.space.to_dict():
        raise ValueError(f"probe splits disagree on the concept space: {train_data.space.to_dict()} vs "
                         f"{val_data.space.to_dict()}")
    if train_data.image_size != val_data.image_size:
        raise ValueError(f"probe splits have different image sizes: {train_data.image_size} vs {val_data.image_size}")
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    torch.manual_seed(seed)
    probes = ConceptProbes(
        train_data.space.to_dict(), image_size=train_data.image_size, probe_type="cnn", center_objects=False,
        cnn_channels=cnn_channels,
    ).to(device)
    # train_probes holds out a random part of its input; the reported number is the separate probe_val split.
    # Photometric corruptions (brightness, contrast, saturation, noise, blur) keep generated faces' rendering
    # quality from deciding the verdict.
    fit_probes(probes, train_data.images, train_data.concepts, val_fraction=0.05, epochs=epochs, lr=lr,
                 batch_size=batch_size, seed=seed, progress=progress, augmentation=ProbeAugmentation(layered=False))
    return probes.eval(), probe_accuracy(probes, val_data)


def load_probe_splits(
    source: str, config_name: str | None = None, cache_dir: str | None = None, **options: Any
) -> tuple[ConceptImageData, ConceptImageData]:
    """The ``probe_train`` and ``probe_val`` splits of a dataset (e.g. ``"celeba"``) as tensors."""
    dataset_dict = load_concept_dataset(source, config_name, cache_dir=cache_dir, **options)
    return split_tensors(dataset_dict, "probe_train"), split_tensors(dataset_dict, "probe_val")


def _train_shapes(args: argparse.Namespace) -> tuple[ConceptProbes, dict[str, float], dict[str, Any]]:
    graph = get_split_preset(args.split_preset).graph()
    probes, accuracy = train_shapes_probes(graph.space, args.probe_type, image_size=args.image_size, seed=args.seed,
                                           images_per_class=args.images_per_class, epochs=args.epochs, lr=args.lr,
                                           batch_size=args.batch_size, val_fraction=args.val_fraction, progress=True)
    metadata = {"split_preset": args.split_preset, "images_per_class": args.images_per_class,
                "epochs": args.epochs, "recipe": f"train_shapes_probes(probe_type={args.probe_type!r})"}
    return probes, accuracy, metadata


def _train_celeba(
    args: argparse.Namespace, options: dict[str, Any]
) -> tuple[ConceptProbes, dict[str, float], dict[str, Any]]:
    if args.probe_type != "cnn":
        raise ValueError("CelebA probes are CNN probes (--probe_type cnn); linear pixel probes do not fit faces")
    train_data, val_data = load_probe_splits(CELEBA_SOURCE, args.celeba_config, cache_dir=args.cache_dir, **options)
    epochs = args.epochs or CNN_PROBE_EPOCHS
    probes, accuracy = train_cnn_probes(train_data, val_data, epochs=epochs, lr=args.lr or 3e-3,
                                        batch_size=args.batch_size, seed=args.seed, progress=True)
    metadata = {"dataset": CELEBA_SOURCE, "celeba_config": args.celeba_config, "epochs": epochs,
                "probe_train_images": len(train_data), "probe_val_images": len(val_data),
                "accuracy_split": "probe_val"}
    return probes.to("cpu"), accuracy, metadata


def main(argv: Sequence[str] | None = None) -> dict[str, float]:

    parser = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dataset", choices=("shapes", CELEBA_SOURCE), default="shapes")
    parser.add_argument("--split_preset", default="H32-train1", help="shapes: the concept graph")
    parser.add_argument("--images_per_class", type=int, default=300, help="shapes: rendered images per class")
    parser.add_argument("--image_size", type=int, default=28, help="shapes: image side in pixels")
    parser.add_argument("--output_dir", "--output_dir", dest="output_dir", required=True,
                        help="where to save the probes: a new or empty directory, or any with --overwrite")
    parser.add_argument("--overwrite", action="store_true", help="replace what --output_dir holds")
    parser.add_argument("--probe_type", choices=PROBE_TYPES, default="cnn",
                        help="cnn (the default instrument) or linear (Paper A's probes; shapes only)")
    parser.add_argument("--epochs", type=int, default=None,
                        help=f"default: shapes 20 (cnn) or 30 (linear); celeba {CNN_PROBE_EPOCHS}")
    parser.add_argument("--lr", type=float, default=None, help="default: 3e-3 (cnn), 1e-2 (linear shapes probes)")
    parser.add_argument("--batch_size", type=int, default=128)
    parser.add_argument("--val_fraction", type=float, default=0.1, help="shapes: held-out fraction")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--cache_dir", "--cache_dir", dest="cache_dir", default=None)
    parser.add_argument("--dataset_config", default=None, help="celeba: config of the --celeba_parquet dataset")
    add_celeba_arguments(parser)
    parser.add_argument("--push_to_hub", default=None, metavar="REPO", help="also push the probes to this repo")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    try:
        check_writable_directory(Path(args.output_dir), args.overwrite)
    except FileExistsError as error:
        parser.error(str(error))

    celeba = args.dataset == CELEBA_SOURCE
    options = celeba_builder_options(args)
    probes, accuracy, metadata = _train_celeba(args, options) if celeba else _train_shapes(args)
    split = "probe_val" if celeba else "validation"
    for name, value in accuracy.items():
        print(f"{name}: {split} accuracy {value:.4f}")
    with atomic_directory(args.output_dir, overwrite=args.overwrite) as tmp:
        probes.save_pretrained(tmp)
        metadata |= {"seed": args.seed, "validation_accuracy": accuracy}
        (tmp / "probe_training.json").write_text(json.dumps(metadata, indent=2) + "\n")
    print(f"saved probes to {args.output_dir}")
    if args.push_to_hub:
        probes.push_to_hub(args.push_to_hub)
    return accuracy


if __name__ == "__main__":
    main()


WEAK_PROBE_MARGIN = 0.15
"""A probe whose validation accuracy lies within this of chance cannot tell the run's samples apart: every accuracy
the run reports would rest on it, so such a run is refused before training (unless accepted, and then the card says
so)."""


def probe_quality(accuracy: dict[str, float], space: ConceptSpace) -> dict[str, dict[str, float | bool]]:
    """Per concept variable: the probe's validation ``accuracy``, its ``chance`` (one over the values) and whether it
    is ``near_chance`` (within :data:`WEAK_PROBE_MARGIN`)."""
    return {variable.name: {"accuracy": round(float(accuracy[variable.name]), 4),
                            "chance": round(1.0 / len(variable.values), 4),
                            "near_chance": float(accuracy[variable.name]) - 1.0 / len(variable.values)
                            < WEAK_PROBE_MARGIN}
            for variable in space.variables}


def check_probe_quality(quality: dict[str, dict[str, float | bool]], accept_weak: bool = False) -> None:
    """Refuse (``ValueError``) probes that read some concept near chance, naming it, unless ``accept_weak``."""
    weak = [f"{name} {row['accuracy']:.3f} (chance {row['chance']:.3f})" for name, row in quality.items()
            if row["near_chance"]]
    if weak and not accept_weak:
        raise ValueError(f"the probes trained on the data read {', '.join(weak)}: within {WEAK_PROBE_MARGIN} of "
                         "chance, so the run's accuracies would rest on them. Is that concept visible in the images? "
                         "Pass --accept_weak_probes to train anyway (the card then says so)")
