"""What a video run has learned when none of its clips is typical: the time of day, read from every clip's scene
(``compgen.evaluation.clip_scoring``'s brightness threshold, typical or not), per class, beside the share of typical
clips. The final exports are sampled as the training evaluation samples them (its seed and sampler).

    python results/paper-b-video/time_of_day.py --run maskgit-video=RUN_DIR --run flow-dit-video=RUN_DIR \
        --output results/paper-b-video/time_of_day.json
"""

from __future__ import annotations

import argparse
import json

import torch

from compgen.analysis.rescore import load_run_pipeline, resolve_run, sampling_options
from compgen.atomic_io import atomic_write_text
from compgen.clips import CLIP_SPACE
from compgen.evaluation.clip_scoring import NIGHT_BRIGHTNESS, check_clips
from compgen.evaluation.sampling_precision import sampling_precision
from compgen.training.tasks.base import sample_in_batches


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run", action="append", required=True, metavar="ARM=RUN_DIR")
    parser.add_argument("--clips_per_class", type=int, default=20)
    parser.add_argument("--output", required=True)
    args = parser.parse_args()
    torch.set_num_threads(1)
    results = {"clips_per_class": args.clips_per_class, "night_brightness": NIGHT_BRIGHTNESS, "arms": {}}
    for item in args.run:
        arm, run_dir = item.split("=", 1)
        last, _, step = resolve_run(run_dir)
        steps, precision, sampler = sampling_options(last, None, None)
        sampler |= {"num_inference_steps": steps} if steps else {}
        pipeline, denoiser = load_run_pipeline(run_dir)
        model = getattr(pipeline, denoiser)
        classes = [CLIP_SPACE.format(node) for node in CLIP_SPACE.all_classes()]
        concepts = [c for c in classes for _ in range(args.clips_per_class)]
        with sampling_precision(model, precision, "cpu"):
            clips = sample_in_batches(pipeline, model, concepts, 0, 40, **sampler)
        check = check_clips(clips)
        night = check.background.mean(axis=(1, 2)) < NIGHT_BRIGHTNESS  # per clip, typical or not
        per_class = {}
        for index, name in enumerate(classes):
            rows = slice(index * args.clips_per_class, (index + 1) * args.clips_per_class)
            wanted = CLIP_SPACE.parse(name)[1] == 1
            per_class[name] = {"time_of_day": float((night[rows] == wanted).mean()),
                               "typical": float(check.valid[rows].mean())}
        results["arms"][arm] = {"run_dir": run_dir, "step": step, "sampling": sampler | {"mixed_precision": precision},
                                "classes": per_class}
        print(arm, step, {name: row["time_of_day"] for name, row in per_class.items()})
    atomic_write_text(args.output, json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
