"""The seeded batches of the loop: the batch of step ``s`` and every random draw of its loss are functions of
``(seed, s)`` alone.

:func:`batch_indices` draws a fresh permutation per epoch from :func:`mix_seed`, and the loop hands each step a CPU
generator seeded the same way. A run resumed from a checkpoint therefore replays exactly the steps an uninterrupted
run would have taken. Whether the split holds one global batch is checked once per run (:func:`check_batch_fits`, by
the loop before its first step and by the command line before any work), not per step.
"""

from __future__ import annotations

import hashlib

import torch

from ..data.loading import ConceptImageData
from ..images import uint8_to_signed
from .acceleration import to_device


def check_batch_fits(num_examples: int, batch_size: int, num_processes: int = 1) -> None:
    """Raise ``ValueError`` unless the training split holds one global batch (``batch_size`` x ``num_processes``)."""
    if num_examples < batch_size * num_processes:
        per = f" ({num_processes} processes x {batch_size})" if num_processes > 1 else ""
        raise ValueError(f"--train_batch_size {batch_size}: the training split has {num_examples} examples, fewer "
                         f"than one batch of {batch_size * num_processes}{per}; lower --train_batch_size")


def batch_indices(num_examples: int, batch_size: int, step: int, seed: int) -> torch.Tensor:
    """Indices of the batch at ``step``: a fresh seeded permutation per epoch, incomplete last batch dropped. The split
    must hold one batch (:func:`check_batch_fits`, checked once before the first step)."""
    steps_per_epoch = num_examples // batch_size
    epoch, position = divmod(step, steps_per_epoch)
    generator = torch.Generator().manual_seed(mix_seed(seed, epoch))
    permutation = torch.randperm(num_examples, generator=generator)
    return permutation[position * batch_size : (position + 1) * batch_size]


def mix_seed(seed: int, *parts: int) -> int:
    """One 63-bit seed from a run seed and counters (an epoch, a step, a rank), distinct for distinct inputs."""
    digest = hashlib.blake2b(repr((int(seed), *map(int, parts))).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") & (2**63 - 1)


def make_batch(data: ConceptImageData, indices: torch.Tensor, channels_last: bool = False) -> dict[str, torch.Tensor]:
    """Images as float NCHW in [-1, 1] (``channels_last``: in that memory layout; clips as NCTHW), the conditioning
    of each image, and its row ``index`` in ``data`` (so a task can look up per-example features it precomputed, e.g.
    VQ token indices). The tensors are on the device ``data`` is on."""
    indices = to_device(indices, data.images.device)
    if data.images.ndim == 5:  # clips (N, T, H, W, 3): float (B, C, T, H, W), diffusers' video layout
        clips = data.images[indices]
        images = uint8_to_signed(clips.flatten(0, 1)).unflatten(0, clips.shape[:2]).transpose(1, 2).contiguous()
    else:
        images = uint8_to_signed(data.images[indices])
    if channels_last and images.ndim == 4:
        images = images.contiguous(memory_format=torch.channels_last)
    batch = {"images": images, "concepts": data.concepts[indices], "index": indices}
    if data.concept_values is not None:
        batch["concept_values"] = data.concept_values[indices]
    return batch
