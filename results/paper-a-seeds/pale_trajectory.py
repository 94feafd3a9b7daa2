"""Where along the sampling a held-out class loses its colour strength: the colour strength of the denoised estimate
(the scheduler's ``pred_original_sample``) at every DDIM step of the evaluation's sampler, per class, against real
renders of the class (the fidelity of ``compgen.evaluation.tracker``, 1.0: as strong as the data).

    python results/paper-a-seeds/pale_trajectory.py RUN_DIR [RUN_DIR ...] --output causes/pale_trajectory.json

Each ``RUN_DIR`` is an exported run of the README command (``TupleConditionedDDPMPipeline.from_pretrained``); the
sampler is the evaluation's (DDIM, 15 steps, 50 images per class, the evaluation's seed, EMA weights as exported).
If a class is pale only at the end, detail added at low noise washes it out; if its estimate is pale from the first,
noisiest steps on, the colour is decided early, by the coarse conditional mean the model predicts for the class.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1] / "src"))

from diffusers import DDIMScheduler  # noqa: E402

from compgen import TupleConditionedDDPMPipeline  # noqa: E402
from compgen.evaluation.tracker import FIDELITY_REFERENCE_IMAGES, FIDELITY_REFERENCE_SEED  # noqa: E402
from compgen.evaluation.typicality import colour_strength  # noqa: E402
from compgen.images import unit_to_uint8  # noqa: E402
from compgen.shapes import PAPER_COLOR_JITTER, PAPER_SIZE_JITTER, RenderConfig, render_classes  # noqa: E402

CLASSES = ("001", "100", "011", "110", "101", "111")
"""Two training classes (the small sphere and the large cone), the two held-out classes drawn at the data's strength
in the runs looked at, and the two drawn pale."""


def median_strength(images: np.ndarray) -> float:
    strength = colour_strength(images)
    strength = strength[np.isfinite(strength)]
    return float(np.median(strength)) if len(strength) else float("nan")


@torch.no_grad()
def trajectory(pipe: TupleConditionedDDPMPipeline, name: str, images: int, steps: int, seed: int, real: float) -> dict:
    """The median colour strength of the denoised estimate at each step over ``real`` (the class's real median)."""
    scheduler = DDIMScheduler.from_config(pipe.scheduler.config)
    scheduler.set_timesteps(steps)
    unet = pipe.unet.eval()
    concepts = torch.tensor([[int(c) for c in name]] * images)
    size = unet.config.sample_size
    generator = torch.Generator().manual_seed(seed)
    sample = torch.randn((images, unet.config.in_channels, size, size), generator=generator)
    estimates = []
    for t in scheduler.timesteps:
        output = unet(sample, t, concepts).sample
        step = scheduler.step(output, t, sample, generator=generator)
        sample = step.prev_sample
        estimate = unit_to_uint8((step.pred_original_sample.clamp(-1, 1) / 2 + 0.5).permute(0, 2, 3, 1).numpy())
        estimates.append(round(median_strength(estimate) / real, 4))
    final = unit_to_uint8((sample.clamp(-1, 1) / 2 + 0.5).permute(0, 2, 3, 1).numpy())
    return {"timesteps": [int(t) for t in scheduler.timesteps], "estimate_fidelity": estimates,
            "sample_fidelity": round(median_strength(final) / real, 4)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run_dirs", nargs="+", type=Path)
    parser.add_argument("--output", type=Path, default=HERE / "causes" / "pale_trajectory.json")
    parser.add_argument("--images", type=int, default=50)
    parser.add_argument("--steps", type=int, default=15)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.set_num_threads(1)
    pipe = TupleConditionedDDPMPipeline.from_pretrained(args.run_dirs[0])
    config = RenderConfig(image_size=pipe.unet.config.sample_size, color_jitter=PAPER_COLOR_JITTER,
                          size_jitter=PAPER_SIZE_JITTER)
    space = pipe.unet.concept_space
    real = {name: median_strength(render_classes(space, [name] * FIDELITY_REFERENCE_IMAGES,
                                                 seed=FIDELITY_REFERENCE_SEED, config=config).images)
            for name in CLASSES}
    result = {"what": __doc__.split("\n\n")[0], "images_per_class": args.images, "ddim_steps": args.steps,
              "seed": args.seed, "runs": {}}
    for run_dir in args.run_dirs:
        pipe = TupleConditionedDDPMPipeline.from_pretrained(run_dir)
        result["runs"][run_dir.name] = {name: trajectory(pipe, name, args.images, args.steps, args.seed, real[name])
                                        for name in CLASSES}
        print(run_dir.name, {name: (r["estimate_fidelity"][0], r["estimate_fidelity"][len(r["estimate_fidelity"]) // 2],
                                    r["sample_fidelity"]) for name, r in result["runs"][run_dir.name].items()})
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
