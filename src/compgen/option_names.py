"""Options renamed for what they are, old name to new: one table for the command line (the old names as deprecated
aliases, :func:`compgen.cli.add_renamed_argument`) and for options stored under the old names (a study's records, a
tokenizer's ``tokenizer_options.json``, a checkpoint's options), which read as the new ones (:func:`renamed_options`).
"""

from __future__ import annotations

from typing import Any

RENAMED_OPTIONS: dict[str, str] = {
    "vqvae_path": "tokenizer_path",
    "vq_steps": "tokenizer_steps",
    "vq_learning_rate": "tokenizer_learning_rate",
    "vq_block_out_channels": "tokenizer_block_out_channels",
    "vq_embed_dim": "tokenizer_embed_dim",
    "vq_mid_attention": "tokenizer_mid_attention",
    "vq_commitment_cost": "tokenizer_commitment_cost",
    "vq_restart_every": "tokenizer_restart_every",
    "vq_crop_size": "tokenizer_crop_size",
}
"""Options renamed for what they are (old name -> new name): the tokenizer's flags serve the KL tokenizer as well as
the VQ one. The old names stay as deprecated aliases for a release (:func:`add_renamed_argument`), and flags stored
under them (a study's records, a tokenizer's ``tokenizer_options.json``, a checkpoint's options) read as the new names
(:func:`renamed_options`)."""


def renamed_options(options: dict[str, Any]) -> dict[str, Any]:
    """``options`` with every old name of :data:`RENAMED_OPTIONS` replaced by its new one (a new name wins)."""
    renamed = {RENAMED_OPTIONS.get(name, name): value for name, value in options.items() if name in RENAMED_OPTIONS}
    return renamed | {name: value for name, value in options.items() if name not in RENAMED_OPTIONS}
