"""Upper bounds on what a model or scheduler config may ask for, checked before anything is allocated.

A config file is data: a crafted or mistyped ``config.json`` (a width of 10^7, a ``sample_size`` of 10^6, 10^9
training timesteps) would otherwise allocate tens of gigabytes, or hang, before any other check. The bounds sit far
above every preset (Paper A's U-Net is 256/512 wide, its DDPM has 500 timesteps)."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

CONFIG_BOUNDS: dict[str, float] = {
    "sample_size": 1024, "block_out_channels": 4096, "layers_per_block": 16, "hidden_size": 8192, "num_layers": 128,
    "num_heads": 128, "mlp_ratio": 16, "grid_size": 256, "latent_channels": 1024, "codebook_size": 1_048_576,
    "num_vq_embeddings": 1_048_576, "vq_embed_dim": 1024, "num_mixtures": 1024, "head_width": 8192, "head_depth": 64,
    "num_train_timesteps": 100_000, "num_frames": 1024,
}
"""Field -> the largest value (each entry of a list) a config may hold."""


def check_config_bounds(owner: str, config: Mapping[str, Any]) -> None:
    """Raise ``ValueError`` naming the field if a bounded field of ``config`` is not a finite number within
    :data:`CONFIG_BOUNDS`."""
    for name, bound in CONFIG_BOUNDS.items():
        value = config.get(name)
        if value is None:
            continue
        for number in value if isinstance(value, list | tuple) else [value]:
            if isinstance(number, bool) or not isinstance(number, int | float) or not math.isfinite(number) \
                    or number > bound:
                raise ValueError(f"{owner} config: {name} = {value!r} is not a number up to {bound:g}; refused "
                                 "before anything is allocated (a crafted or mistyped config?)")


def check_model_directory(directory: str | Path) -> None:
    """Check every component config of a saved pipeline or model (``config.json``, ``scheduler_config.json``) before
    ``from_pretrained`` builds any of it; a config that is not JSON is refused naming its file."""
    directory = Path(directory)
    for path in sorted([*directory.glob("config.json"), *directory.glob("*/config.json"),
                        *directory.glob("*/scheduler_config.json")]):
        try:
            config = json.loads(path.read_text())
        except (OSError, ValueError) as error:
            raise ValueError(f"{path}: not a readable JSON config ({error})") from None
        if isinstance(config, dict):
            check_config_bounds(str(path.relative_to(directory)), config)
