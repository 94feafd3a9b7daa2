"""How well a frame tokenizer passes real clips: the ceiling of any video generator over its tokens.

Each test clip of the dataset (50 per class) is tokenized frame by frame, decoded, and scored by both clip scorers
behind the clip typicality check, per class and per level, beside the pixel MSE of the reconstruction. Writes one entry
per tokenizer to ``--output`` (JSON) and prints the level accuracies.

    python results/paper-b-video/frame_tokenizer.py --tokenizer all-classes=RUNS/tokenizer/vq__clips-h32-train1 \
        --output results/paper-b-video/frame_tokenizer.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import torch
from diffusers import VQModel

from compgen.atomic_io import atomic_write_text
from compgen.data.loading import load_concept_dataset, split_tensors, training_data_from
from compgen.evaluation.clip_evaluation import evaluate_clips
from compgen.evaluation.clip_probes import default_clip_probes
from compgen.images import signed_to_uint8, uint8_to_signed
from compgen.models.vq_tokenizer import decode_indices, encode_to_indices


@torch.no_grad()
def reconstruct(vqvae: VQModel, clips: torch.Tensor, batch_size: int = 50) -> np.ndarray:
    """uint8 clips ``(N, T, H, W, 3)`` through the tokenizer, frame by frame."""
    out = []
    for start in range(0, len(clips), batch_size):
        chunk = clips[start : start + batch_size]
        frames = decode_indices(vqvae, encode_to_indices(vqvae, uint8_to_signed(chunk.flatten(0, 1))))
        out.append(torch.from_numpy(signed_to_uint8(frames)).unflatten(0, chunk.shape[:2]))
    return torch.cat(out).numpy()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dataset", default="clips-h32-train1")
    parser.add_argument("--tokenizer", action="append", required=True, metavar="NAME=DIR")
    parser.add_argument("--output", required=True)
    args = parser.parse_args()
    torch.set_num_threads(1)
    dataset = load_concept_dataset(args.dataset)
    _, graph = training_data_from(dataset)
    test = split_tensors(dataset, "test")
    names = ["".join(map(str, row)) for row in test.concepts.tolist()]
    probes = default_clip_probes()
    results = {"dataset": args.dataset, "clips_per_class": len(names) // len(set(names)), "tokenizers": {}}
    for item in args.tokenizer:
        name, directory = item.split("=", 1)
        vqvae = VQModel.from_pretrained(directory).eval()
        clips = reconstruct(vqvae, test.images)
        record = evaluate_clips(graph, clips, names, probes)
        mse = float((((clips.astype(np.float64) - test.images.numpy()) / 255.0) ** 2).mean())
        options = json.loads((Path(directory) / "tokenizer_options.json").read_text())
        results["tokenizers"][name] = {
            "directory": directory, "options": options, "mse": round(mse, 6),
            **{key: record[key] for key in ("accuracy", "pixel_accuracy", "level_accuracy", "pixel_level_accuracy",
                                            "typical", "failures")}}
        print(name, "probes", record["level_accuracy"], "pixels", record["pixel_level_accuracy"], "mse", round(mse, 6))
    atomic_write_text(args.output, json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
