"""The precision a model samples in during evaluation (``--eval_mixed_precision``), whatever it trained in."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
from torch import nn

PRECISION_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


@contextlib.contextmanager
def sampling_precision(model: nn.Module, precision: str, device_type: str) -> Iterator[nn.Module]:
    """Inside the block ``model`` runs in ``precision``: its class's ``forward`` as it is (``no``), or under ``bf16`` /
    ``fp16`` autocast with fp32 outputs, as Accelerate runs a model it prepared under mixed precision. Accelerate
    patches that autocast ``forward`` onto the model, and a copy (the EMA weights) inherits it; the patch is set aside
    for the block, so that the evaluation samples in ``--eval_mixed_precision``, not in whatever the model carries."""
    from types import MethodType

    from accelerate.utils import convert_outputs_to_fp32

    patched = {name: model.__dict__.pop(name) for name in ("forward", "_original_forward") if name in model.__dict__}
    if precision != "no":
        autocast = torch.autocast(device_type=device_type, dtype=PRECISION_DTYPES[precision])
        model.forward = MethodType(convert_outputs_to_fp32(autocast(type(model).forward)), model)
    try:
        yield model
    finally:
        model.__dict__.pop("forward", None)
        model.__dict__.update(patched)
