"""How far apart a video transformer's frames are: from a run's checkpoint, the frame vectors of a factorized
position embedding (``compgen.models.space_time_positions``) beside the grid positions and a token's own embedding.
Frames whose vectors barely differ cannot be told apart (what the runs drew meanwhile: ``sample_drift.py``).

    python results/paper-b-video/frame_embedding.py --run NAME=CELL_DIR --step 1000 \
        --output results/paper-b-video/frame_embedding.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
from safetensors.torch import load_file

from compgen.atomic_io import atomic_write_text


def rms(tensor: torch.Tensor) -> float:
    return round(float(tensor.float().pow(2).mean().sqrt()), 4)


def measure(cell: Path, step: int) -> dict:
    """The frame, grid and token scales of the run's checkpoint at ``step``."""
    checkpoint = cell / "checkpoints" / f"checkpoint-{step}"
    weights = load_file(str(checkpoint / "model.safetensors"))
    (config,) = json.loads((checkpoint / "model_config.json").read_text()).values()
    prefix = "transformer." if "transformer.position_embedding" in weights else ""
    frames = weights[prefix + "frame_embedding"][0, :, 0].float()  # (T, hidden)
    side = config["grid_size"]
    grid = weights[prefix + "position_embedding"][0, -side * side :].float().view(side, side, -1)
    if prefix:  # MaskGIT: token ids through an embedding table
        token_scale = float(weights[prefix + "token_embedding.weight"].float().norm(dim=1).mean())
        token_name = "token embedding norm (mean over the codebook)"
    else:  # the DiT: latents through a linear map (the inputs are standardized to unit variance per channel)
        token_scale = float(weights["input_projection.weight"].float().norm(dim=1).pow(2).sum().sqrt())
        token_name = "input projection norm (a unit-variance latent's typical input norm)"
    return {
        "step": step,
        "frame_vector_rms": rms(frames),
        "consecutive_frame_distance": [round(float(d), 4) for d in (frames[1:] - frames[:-1]).norm(dim=1)],
        "grid_position_norm": round(float(grid.flatten(0, 1).norm(dim=1).mean()), 4),
        "neighbouring_grid_distance": round(float((grid[:, 1:] - grid[:, :-1]).norm(dim=-1).mean()), 4),
        token_name: round(token_scale, 4),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run", action="append", required=True, metavar="NAME=CELL_DIR")
    parser.add_argument("--step", type=int, required=True)
    parser.add_argument("--output", required=True)
    args = parser.parse_args()
    results = {}
    for item in args.run:
        name, cell = item.split("=", 1)
        results[name] = measure(Path(cell), args.step)
    atomic_write_text(args.output, json.dumps(results, indent=2) + "\n")
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
