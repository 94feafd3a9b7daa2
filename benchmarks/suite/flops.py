"""FLOPs of one training step, and the matmul peak (the roofline) measured in the same run to compare them with."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import torch

from suite.common import matmul_tf32, timed

CONVOLUTIONS = ("convolution", "_convolution", "convolution_backward", "cudnn_convolution", "mkldnn_convolution")
"""The aten ops whose FLOPs count as convolution FLOPs (they run at the convolutions' precision)."""


@contextlib.contextmanager
def mha_fastpath(enabled: bool):
    """``torch.backends.mha`` fast path set to ``enabled`` inside the scope, restored on exit."""
    previous = torch.backends.mha.get_fastpath_enabled()
    torch.backends.mha.set_fastpath_enabled(enabled)
    try:
        yield
    finally:
        torch.backends.mha.set_fastpath_enabled(previous)


def cpu_attention_formulas() -> dict[Any, Callable[..., int]]:
    """The FLOP formulas of the CPU attention kernels (the counter knows only the GPU ones), for the counter's
    ``custom_mapping`` (torch's own registry is left as it is)."""
    from torch.utils import flop_counter

    forward = getattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu", None)
    if forward is None or forward in flop_counter.flop_registry:
        return {}

    def _forward(query_shape, key_shape, value_shape, *args, out_shape=None, **kwargs) -> int:
        return flop_counter.sdpa_flop_count(query_shape, key_shape, value_shape)

    def _backward(grad_out_shape, query_shape, key_shape, value_shape, *args, out_shape=None, **kwargs) -> int:
        return flop_counter.sdpa_backward_flop_count(grad_out_shape, query_shape, key_shape, value_shape)

    return {forward: _forward, torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward: _backward}


def count_flops(fn: Callable[[], Any]) -> tuple[int, int]:
    """FLOPs of one call of ``fn`` (matmuls, convolutions and attention, forward and backward). The fused inference
    path of ``nn.TransformerEncoderLayer`` (one op the counter cannot see into) is off while counting: the same layer
    as separate ops. Returns (all FLOPs, those of convolutions)."""
    from torch.utils.flop_counter import FlopCounterMode

    with mha_fastpath(False), FlopCounterMode(display=False, custom_mapping=cpu_attention_formulas()) as counter:
        fn()
    per_op = counter.get_flop_counts().get("Global", {})
    convolutions = sum(count for op, count in per_op.items() if str(op).split(".")[1] in CONVOLUTIONS)
    return int(counter.get_total_flops()), int(convolutions)


def matmul_peak(device: torch.device, dtype: torch.dtype, sync: Callable[[], None], tf32: bool = False) -> float:
    """FLOP/s of the best of a few square matmuls on this device (the roofline the steps are compared with); on
    CUDA with ``tf32``, fp32 matmuls run in TF32 (tensor cores), as convolutions do by default there."""
    best = 0.0
    with matmul_tf32(tf32):
        for n in (256, 512, 1024) if device.type == "cpu" else (2048, 4096, 8192):
            a = torch.randn(n, n, device=device, dtype=dtype)
            b = torch.randn(n, n, device=device, dtype=dtype)
            rate = timed(lambda a=a, b=b: a @ b, items=1, repeats=3, calls=3 if device.type == "cpu" else 20,
                         sync=sync)["median"]
            best = max(best, rate * 2 * n**3)
    return best


def precisions(device: torch.device, dtype: torch.dtype | None) -> dict[str, str]:
    """The precision convolutions and matmuls of an fp32 step run in on ``device``: TF32 on CUDA where PyTorch's
    switches allow it (``torch.backends.cudnn.allow_tf32``, on by default; ``torch.backends.cuda.matmul.allow_tf32``,
    off by default), else the step's dtype."""
    if dtype is not None:
        return {"conv": str(dtype).removeprefix("torch."), "matmul": str(dtype).removeprefix("torch.")}
    cuda = device.type == "cuda"
    return {"conv": "tf32" if cuda and torch.backends.cudnn.allow_tf32 else "fp32",
            "matmul": "tf32" if cuda and torch.backends.cuda.matmul.allow_tf32 else "fp32"}
