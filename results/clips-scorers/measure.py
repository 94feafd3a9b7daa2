"""The clips' two scorers on real and broken clips: writes summary.json beside this file.

    python results/clips-scorers/measure.py

Real clips: the test split of clips-h32-train1 (50 clips of every class), scored per class and level by the shipped
probes and by the pixels and motion. Broken clips: 200 real renders (25 of every class, seed 5), each broken one way;
the share the typicality check rejects, and why.
"""

import json
import sys
from pathlib import Path

import numpy as np

from compgen.clips import render_clips
from compgen.evaluation.clip_evaluation import main as evaluate
from compgen.evaluation.clip_scoring import check_clips

HERE = Path(__file__).resolve().parent


def broken(frames: np.ndarray, kind: str) -> np.ndarray:
    frames, rng = frames.copy(), np.random.default_rng(0)
    if kind == "frames shuffled":
        return np.stack([clip[rng.permutation(len(clip))] for clip in frames])
    if kind == "object teleports":
        frames[:, 4:] = np.flip(frames[:, 4:], axis=(2, 3))
        return frames
    if kind == "a blank frame":
        frames[:, 3] = frames[:, 3, :1, :1]
        return frames
    if kind == "a frame inverted":
        frames[:, 2] = 255 - frames[:, 2]
        return frames
    return np.repeat(frames[:, :1], frames.shape[1], axis=1)  # the first frame held


def main() -> None:
    real = evaluate(["--dataset", "clips-h32-train1", *sys.argv[1:]])
    clips = render_clips([c for c in ("000", "001", "010", "011", "100", "101", "110", "111") for _ in range(25)],
                         seed=5).frames
    rejected = {}
    for kind in ("frames shuffled", "object teleports", "a blank frame", "a frame inverted", "object still"):
        check = check_clips(broken(clips, kind))
        reasons = {str(reason): int((check.reasons == reason).sum()) for reason in sorted(set(check.reasons))}
        rejected[kind] = {"clips": len(clips), "rejected_share": float((~check.valid).mean()), "reasons": reasons}
    summary = {"real_test_clips": {key: real[key] for key in ("level_accuracy", "pixel_level_accuracy", "typical",
                                                               "num_clips_per_class", "concept_accuracy")},
               "broken_clips": rejected, "machine": "2-core Intel Xeon CPU, fp32", "date": "2026-11-29"}
    (HERE / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")


if __name__ == "__main__":
    main()
