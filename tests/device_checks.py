"""Device checks shared by the tests: PyTorch's ``meta`` device and a mode that refuses mixed-device operations.

``meta`` is a real, non-CPU device that every PyTorch build has: a tensor on it has a shape and a dtype but no data,
and an operation that mixes it with a CPU tensor fails where it would fail on CUDA.
"""

import torch
from torch.utils import _pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode

META = torch.device("meta")


class StrictDeviceMode(TorchDispatchMode):
    """Raise on any operation whose tensor arguments live on different devices (0-dim CPU scalars aside)."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        devices = {t.device.type for t in pytree.tree_leaves((args, kwargs))
                   if isinstance(t, torch.Tensor) and not (t.device.type == "cpu" and t.dim() == 0)}
        if len(devices) > 1:
            raise RuntimeError(f"{func} mixes tensors on {sorted(devices)}")
        return func(*args, **kwargs)


def tensors_off_device(module: torch.nn.Module, device: torch.device) -> list[str]:
    """The names of ``module``'s parameters and buffers (persistent or not) that are not on ``device``."""
    named = [*module.named_parameters(), *module.named_buffers()]
    return [name for name, tensor in named if tensor.device != device]
