"""Colour strength of a run's samples against the real test images of each class
(results/paper-a-reproduction/cpu-quick-2000-steps/).

    python results/paper-a-reproduction/cpu-quick-2000-steps/saturation_check.py RUN_DIR DATASET_CONFIG OUT.json

Samples 50 images per class (DDIM 20, seed 0, canonical class values) from the run's export and measures, per
image, the mean saturation (max minus min channel) of its 10 most saturated pixels; compares each class with the
100 real test images of the same class (their 1st percentile and median).
"""

from __future__ import annotations

import json
import sys

import numpy as np
import torch
from diffusers import DDIMScheduler

from compgen.analysis.rescore import load_run_pipeline
from compgen.data.concept_graph_builder import build_concept_graph_dataset


def colour_strength(images: np.ndarray) -> np.ndarray:
    """uint8 (N, H, W, 3) -> the mean saturation of each image's 10 most saturated pixels, in [0, 1]."""
    pixels = images.astype(np.float32) / 255.0
    saturation = (pixels.max(-1) - pixels.min(-1)).reshape(len(pixels), -1)
    return np.sort(saturation, axis=1)[:, -10:].mean(axis=1)


def main(run_dir: str, dataset_config: str, output: str) -> dict[str, dict[str, float]]:
    test = build_concept_graph_dataset(dataset_config)["test"].with_format("numpy")
    images, classes = np.asarray(test["image"]), np.array([str(c) for c in test["concepts"]])
    pipeline, denoiser = load_run_pipeline(run_dir)
    pipeline.scheduler = DDIMScheduler.from_config(pipeline.scheduler.config)
    getattr(pipeline, denoiser).eval()
    rows = {}
    for concepts in sorted(set(classes)):
        real = colour_strength(images[classes == concepts])
        generated = pipeline(concepts, num_images_per_prompt=50, generator=torch.Generator().manual_seed(0),
                             output_type="np", num_inference_steps=20).images
        strength = colour_strength((np.clip(generated, 0, 1) * 255).round().astype(np.uint8))
        floor = np.percentile(real, 1)
        rows[concepts] = {"real_p1": round(float(floor), 3), "real_median": round(float(np.median(real)), 3),
                          "generated_median": round(float(np.median(strength)), 3),
                          "share_within": round(float((strength >= floor).mean()), 2)}
        print(concepts, rows[concepts], flush=True)
    with open(output, "w") as file:
        json.dump(rows, file, indent=1)
    return rows


if __name__ == "__main__":
    main(*sys.argv[1:4])
