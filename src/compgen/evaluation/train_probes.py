"""Train the concept probes of a shapes split preset and save them (optionally push them to the Hub).

``python -m compgen.evaluation.train_probes --split-preset H32-train1 --images-per-class 600 --output-dir DIR``
renders real images of *every* class of the graph, trains one probe per concept variable with a held-out
validation split (Paper A: 4500 / 500), prints per-concept validation accuracy and saves the probes with
``save_pretrained`` (safetensors + config).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence

import torch

from ..concepts import get_split_preset
from ..io import atomic_directory
from .probes import PROBE_TYPES, ConceptProbes, render_probe_data, train_probes


def main(argv: Sequence[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description="Train concept probes on real shapes images of every class.")
    parser.add_argument("--split-preset", default="H32-train1")
    parser.add_argument("--images-per-class", type=int, default=600)
    parser.add_argument("--image-size", type=int, default=28)
    parser.add_argument("--output-dir", required=True)
    parser.add_argument("--probe-type", choices=PROBE_TYPES, default="linear")
    parser.add_argument("--epochs", type=int, default=None, help="default: 60 (linear) or 15 (cnn)")
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--val-fraction", type=float, default=0.1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--push-to-hub", default=None, metavar="REPO", help="also push the probes to this repo")
    args = parser.parse_args(argv)

    graph = get_split_preset(args.split_preset).graph()
    torch.manual_seed(args.seed)
    probes = ConceptProbes(graph.space.to_dict(), image_size=args.image_size, probe_type=args.probe_type)
    data = render_probe_data(graph, args.images_per_class, image_size=args.image_size, seed=args.seed)
    epochs = args.epochs or (60 if args.probe_type == "linear" else 15)
    accuracy = train_probes(
        probes, data.images, data.concepts, val_fraction=args.val_fraction, epochs=epochs, lr=args.lr,
        batch_size=args.batch_size, seed=args.seed, progress=True,
    )
    for name, value in accuracy.items():
        print(f"{name}: validation accuracy {value:.4f}")
    with atomic_directory(args.output_dir) as tmp:
        probes.save_pretrained(tmp)
        metadata = {"split_preset": args.split_preset, "images_per_class": args.images_per_class,
                    "epochs": epochs, "seed": args.seed, "validation_accuracy": accuracy}
        (tmp / "probe_training.json").write_text(json.dumps(metadata, indent=2) + "\n")
    print(f"saved probes to {args.output_dir}")
    if args.push_to_hub:
        probes.push_to_hub(args.push_to_hub)
    return accuracy


if __name__ == "__main__":
    main()
