"""Samples of classes at several values of one continuous concept (the images behind
``compgen.analysis.hidden_capabilities``), one row per class and value.

    python results/paper-a-hybrids/overprompt_sheet.py RUN_DIR OUT.png --concepts 100 110 --variable size \
        --values 2.2 2.45 2.7 [--images 8]
"""

from __future__ import annotations

import argparse

import numpy as np
import torch
from PIL import Image, ImageDraw

from compgen.analysis.rescore import load_run_pipeline
from compgen.images import unit_to_uint8


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run_dir")
    parser.add_argument("output")
    parser.add_argument("--concepts", nargs="+", required=True)
    parser.add_argument("--variable", required=True)
    parser.add_argument("--values", nargs="+", type=float, required=True)
    parser.add_argument("--images", type=int, default=8)
    parser.add_argument("--num_inference_steps", type=int, default=15)
    args = parser.parse_args()
    pipeline, denoiser = load_run_pipeline(args.run_dir)
    embedding = getattr(pipeline, denoiser).eval().concept_embedding
    space = getattr(pipeline, denoiser).concept_space
    rows, labels = [], []
    for concepts in args.concepts:
        parsed = space.parse(concepts)
        canonical = {name: getattr(embedding, f"{name}_values")[parsed[space.names.index(name)]]
                     for name in embedding.continuous_names}
        for value in args.values:
            values = torch.cat([torch.tensor([value]) if name == args.variable else canonical[name]
                                for name in embedding.continuous_names])
            out = pipeline(concepts, num_images_per_prompt=args.images, generator=torch.Generator().manual_seed(0),
                           output_type="np", num_inference_steps=args.num_inference_steps,
                           concept_values=values[None]).images
            rows.append(np.concatenate(list(unit_to_uint8(out)), axis=1))
            labels.append(f"{concepts} {args.variable} {value}")
    grid = np.concatenate(rows, axis=0)
    scale, left = 3, 110
    sheet = Image.new("RGB", (grid.shape[1] * scale + left, grid.shape[0] * scale), "white")
    sheet.paste(Image.fromarray(grid).resize((grid.shape[1] * scale, grid.shape[0] * scale), Image.NEAREST), (left, 0))
    draw = ImageDraw.Draw(sheet)
    for i, label in enumerate(labels):
        draw.text((2, i * 28 * scale + 14 * scale - 5), label, fill="black")
    sheet.save(args.output)


if __name__ == "__main__":
    main()
