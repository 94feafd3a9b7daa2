"""Is a failed class's capability lost or only hidden? Sample it with its continuous values pushed off their class
values ("over-prompting", Park et al. 2024, "Emergence of Hidden Capabilities") and score what comes out.

    python -m compgen.analysis.hidden_capabilities RUN_DIR --concepts 111 --variable size \
        --values 1.3 1.6 1.9 2.2 [--images 50] [--checkpoint checkpoint-2000 --weights ema] [--output FILE.json]

``full``-conditioning models are conditioned at test time on each class's canonical values (Paper A's protocol). A
model that draws nothing for the canonical small size of 111 but a small blue triangle at a size value nearer the
training support of blue and triangle has the capability and misses the prompt: the failure is in how the values are
read, not in what the model can draw. Every row is scored like a training evaluation: the one-object check, the
concept probes and the pixel-statistics scorer, against the *class's* concepts, with the share of samples that hold no
object.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..cli import ArgumentParser
from ..images import unit_to_uint8


def value_sweep(pipeline, denoiser: str, concepts: str, variable: str, values: Sequence[Sequence[float]],
                images: int = 50, seed: int = 0, num_inference_steps: int = 20) -> list[dict[str, Any]]:
    """Score ``images`` samples of class ``concepts`` at each value of the continuous ``variable`` (others canonical).

    Returns one row per value: ``{"value", "probes", "pixel", "no_object", "hybrid", "pale", "non_finite"}``
    (accuracies with every concept right, the share of samples without one valid object, and of those the shares the
    typicality check rejected as hybrids and as pale: :mod:`compgen.evaluation.typicality`). A value whose samples are
    not all finite is a model failure: its row holds only that share, nothing is scored. A value far outside the
    variable's class values (:func:`value_range`) is refused.
    """
    from ..evaluation.probes import default_shapes_probes
    from ..evaluation.scoring import ImageScorer

    model = getattr(pipeline, denoiser)
    embedding = model.concept_embedding
    if variable not in embedding.value_dims:
        raise ValueError(f"{variable!r} is not a continuous variable of this model; it has "
                         f"{list(embedding.value_dims) or 'none (quantized conditioning)'}")
    space = model.concept_space
    parsed = space.parse(concepts)
    canonical = {name: getattr(embedding, f"{name}_values")[parsed[space.names.index(name)]]
                 for name in embedding.continuous_names}
    scorer = ImageScorer(default_shapes_probes(space, image_size=model.config.sample_size))
    truth = np.array(parsed)
    low, high = value_range(getattr(embedding, f"{variable}_values"))
    rows = []
    for value in values:
        value = torch.as_tensor(value, dtype=torch.float32).reshape(-1)
        if value.numel() != embedding.value_dims[variable]:
            raise ValueError(f"{variable} takes {embedding.value_dims[variable]} numbers per value, "
                             f"got {value.tolist()}")
        if not (torch.isfinite(value).all() and (value >= low).all() and (value <= high).all()):
            raise ValueError(f"{variable} value {value.tolist()} is far outside the model's {variable} values "
                             f"(allowed per number: {low.tolist()} to {high.tolist()}, three spans around them)")
        row_values = torch.cat([value if name == variable else canonical[name] for name in embedding.continuous_names])
        generator = torch.Generator().manual_seed(seed)
        out = pipeline(concepts, num_images_per_prompt=images, generator=generator, output_type="np",
                       num_inference_steps=num_inference_steps, concept_values=row_values[None]).images
        finite = np.isfinite(out).all(axis=(1, 2, 3))
        if not finite.all():  # a model failure, not an absent capability: such samples are never scored
            rows.append({"value": _rounded(value), "probes": None, "pixel": None, "no_object": None, "hybrid": None,
                         "pale": None, "non_finite": float(1.0 - finite.mean())})
            continue
        scores = scorer.score(unit_to_uint8(out), np.repeat(truth[None], len(out), axis=0))
        reasons = scores.objects.reasons if scores.objects is not None else np.array([])
        rows.append({
            "value": _rounded(value),
            "probes": float((scores.predictions == truth).all(axis=1).mean()),
            "pixel": float((scores.pixel_predictions == truth).all(axis=1).mean()),
            "no_object": float((~scores.has_object).mean()),
            "hybrid": float((reasons == "hybrid").mean()) if len(reasons) else 0.0,
            "pale": float((reasons == "pale").mean()) if len(reasons) else 0.0,
            "non_finite": 0.0,
        })
    return rows


def value_range(class_values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per number of a variable, the values an over-prompting sweep may ask for: three spans of the class values
    beyond each end (a span of at least the values' magnitude, or 1): an off-support value is fine, 1e20 is not."""
    values = class_values.reshape(len(class_values), -1).float()
    low, high = values.min(dim=0).values, values.max(dim=0).values
    span = torch.maximum(high - low, torch.maximum(high.abs(), low.abs())).clamp(min=1.0)
    return low - 3 * span, high + 3 * span


def _rounded(value: torch.Tensor) -> float | list[float]:
    return [round(v, 6) for v in value.tolist()] if value.numel() > 1 else round(float(value), 6)


def main(argv: Sequence[str] | None = None) -> list[dict[str, Any]]:
    from .rescore import load_checkpoint_weights, load_run_pipeline

    parser = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run_dir")
    parser.add_argument("--concepts", required=True, help="the class to sample, e.g. 111")
    parser.add_argument("--variable", required=True, help="the continuous variable to sweep (size, color)")
    parser.add_argument("--values", required=True, nargs="+",
                        help="values of the variable; a colour is three comma-separated numbers (0.1,0.1,0.9)")
    parser.add_argument("--images", type=int, default=50)
    parser.add_argument("--num_inference_steps", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--checkpoint", default=None, help="a checkpoint name or directory (default: the export)")
    parser.add_argument("--weights", choices=["ema", "online"], default="ema", help="with --checkpoint")
    parser.add_argument("--output", default=None, help="also write the rows here (JSON)")
    args = parser.parse_args(argv)
    try:
        values = [[float(number) for number in value.split(",")] for value in args.values]
    except ValueError:
        parser.error(f"--values must be numbers (a colour as r,g,b), got {args.values}")
    if args.images < 1 or args.num_inference_steps < 1:
        parser.error("--images and --num_inference_steps must be at least 1")
    if args.output and (Path(args.output).is_dir() or not Path(args.output).resolve().parent.is_dir()):
        parser.error(f"--output {args.output}: " + ("a directory; give a file name" if Path(args.output).is_dir()
                                                     else "its directory does not exist"))
    try:
        pipeline, denoiser = load_run_pipeline(args.run_dir)
        if denoiser != "unet":
            raise ValueError(f"{args.run_dir} holds a {type(pipeline).__name__}; value sweeps sample the tuple U-Net")
        if args.checkpoint is not None:
            path = Path(args.checkpoint) if Path(args.checkpoint).is_dir() else Path(args.run_dir) / "checkpoints" / \
                args.checkpoint
            load_checkpoint_weights(pipeline, denoiser, path, args.weights)
    except (ValueError, OSError) as error:
        parser.error(str(error))
    from diffusers import DDIMScheduler

    pipeline.scheduler = DDIMScheduler.from_config(pipeline.scheduler.config)
    getattr(pipeline, denoiser).eval()
    try:
        rows = value_sweep(pipeline, denoiser, args.concepts, args.variable, values, args.images, args.seed,
                           args.num_inference_steps)
    except ValueError as error:
        parser.error(str(error))
    print(f"| {args.variable} | probes | pixel statistics | no object | of which hybrid | of which pale |\n"
          "|---|---|---|---|---|---|")
    for row in rows:
        if row["non_finite"]:
            print(f"| {row['value']} | model failure: {row['non_finite']:.2f} of the samples are not finite | | | | |")
            continue
        print(f"| {row['value']} | {row['probes']:.2f} | {row['pixel']:.2f} | {row['no_object']:.2f} | "
              f"{row['hybrid']:.2f} | {row['pale']:.2f} |")
    if args.output:
        Path(args.output).write_text(json.dumps({"concepts": args.concepts, "variable": args.variable,
                                                 "rows": rows}, indent=1) + "\n")
    return rows


if __name__ == "__main__":
    main()
