"""Kernels and host synchronisations of one call (a training step), counted from ``torch.profiler``.

On a CPU there are no device kernels to count, so one is approximated by an aten op that has a kernel of its own (the
outermost such op in the profiler's op tree: a CPU implementation may call helper ops that a GPU kernel does not, and
an op that PyTorch decomposes into others, such as ``linear`` or ``cross_entropy``, counts as its parts), not counting
ops that only make views, read metadata or allocate. A multi-tensor op (``_foreach_*``, ``_fused_*``) counts once, as
the multi-tensor kernel it launches on a GPU, and a kernel that ``torch.compile`` generated for the CPU counts once
(inductor records them for the profiler when the model is compiled inside :func:`kernel_profiling`). On CUDA the
profiler's own kernel events are counted instead. A host synchronisation is an op that reads device data on the host
(``item``, ``nonzero``, ...), outside the optimizer, whose step counters stay on the host.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch._inductor.config
from torch.profiler import ProfilerActivity, profile

NO_WORK = frozenset(
    "aten::" + name for name in (
        "empty empty_like empty_strided resize_ view _unsafe_view reshape _reshape_alias as_strided t transpose "
        "permute expand expand_as squeeze unsqueeze slice select narrow split split_with_sizes chunk unbind flatten "
        "unflatten view_as numpy_T detach detach_ alias lift_fresh to _to_copy contiguous result_type resolve_conj "
        "resolve_neg is_same_size size stride set_ requires_grad_ retain_grad _has_compatible_shallow_copy_type "
        "lift_fresh_copy is_nonzero _local_scalar_dense item as_strided_ broadcast_tensors new_empty_strided"
    ).split()
)
"""Ops that launch no kernel of their own (views, metadata, allocation; a conversion or ``contiguous`` that copies
has a ``copy_`` child, which is counted). A sync's kernel, if any, is counted by :data:`SYNCS`."""

SYNCS = frozenset(("aten::_local_scalar_dense", "aten::nonzero", "aten::masked_select", "aten::unique",
                   "aten::_unique2", "aten::repeat_interleave"))
"""Ops whose result depends on device data on the host: each one waits for the device."""


@functools.cache
def _decomposes(name: str) -> bool:
    """Whether the aten op ``name`` has no kernel of its own (PyTorch runs it as other ops: ``linear``, ``conv2d``)."""
    op = getattr(torch.ops.aten, name.removeprefix("aten::"), None)
    if op is None:
        return True
    overloads = [o for o in op.overloads() if "out" not in o and "names" not in o]
    for overload in sorted(overloads, key=lambda o: (o != "Tensor", o != "default")):
        try:
            return getattr(op, overload).has_kernel_for_dispatch_key(torch._C.DispatchKey.CompositeImplicitAutograd)
        except RuntimeError:  # an overload listed but not registered
            continue
    return False


def _counts(event: Any) -> int:
    """Kernels of ``event`` and its descendants."""
    name = event.name
    if name.startswith(("aten::_foreach_", "aten::_fused_")) or "_cpp_fused_" in name:  # (inductor's CPU kernels)
        return 1
    if name.startswith("aten::") and name not in NO_WORK and not _decomposes(name):
        return 1
    return sum(_counts(child) for child in event.cpu_children)


def _in_optimizer(event: Any) -> bool:
    """Whether ``event`` runs inside an optimizer's step (whose step counters live on the host even for a GPU model,
    so reading them is no device synchronisation)."""
    while event is not None:
        if event.name.startswith("Optimizer.step"):
            return True
        event = event.cpu_parent
    return False


@contextlib.contextmanager
def kernel_profiling() -> Iterator[None]:
    """Inside the scope, the kernels that ``torch.compile`` generates for a CPU are profiled (inductor's
    ``cpp.enable_kernel_profile``, restored on exit): compile the models to count inside it."""
    with torch._inductor.config.patch({"cpp.enable_kernel_profile": True}):
        yield


def profile_call(fn: Callable[[], Any], device: torch.device | str = "cpu", warmup: int = 1) -> dict[str, int]:
    """Kernels, host syncs and aten ops of one call of ``fn`` running on ``device`` (after ``warmup`` calls, which
    build lazy state such as the optimizer's moments)."""
    for _ in range(warmup):
        fn()
    activities = [ProfilerActivity.CPU]
    cuda = torch.device(device).type == "cuda"
    if cuda:
        activities.append(ProfilerActivity.CUDA)
        torch.cuda.synchronize()
    with profile(activities=activities) as prof:
        fn()
        if cuda:
            torch.cuda.synchronize()
    events = prof.events()
    roots = [e for e in events if e.cpu_parent is None]
    result = {"kernels": sum(_counts(e) for e in roots),
              "syncs": sum(e.name in SYNCS and not _in_optimizer(e) for e in events),
              "aten_ops": sum(e.name.startswith("aten::") for e in events)}
    if cuda:
        device_kernels = [e for e in events if getattr(e, "device_type", None) == torch.autograd.DeviceType.CUDA
                          and not e.name.startswith(("Memcpy", "Memset", "cudaMemcpy"))]
        result["cpu_kernels"] = result["kernels"]
        result["kernels"] = len(device_kernels)
        result["memcpy"] = sum(e.name.startswith("Memcpy") for e in events)
    return result
