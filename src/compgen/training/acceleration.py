"""How the training loop and the tasks run fast on a device: the optimizer's implementation, ``torch.compile`` modes
(``--torch_compile``), and host-to-device copies that do not wait for the device.

Each is a choice of implementation, not of the computation: the same options train the same model.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import nn

if TYPE_CHECKING:
    from accelerate.utils import TorchDynamoPlugin

COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
"""``torch.compile`` modes of ``--torch_compile``: inductor's default, ``reduce-overhead`` (CUDA graphs: one launch
replays the whole step's kernels), ``max-autotune`` (benchmarks kernel variants, and CUDA graphs), and
``max-autotune-no-cudagraphs``."""

_OFF = ("no", "false", "none", "off", "0", "")
_DEFAULT = ("default", "true", "yes", "1")


def parse_compile_mode(value: bool | str | None) -> bool | str:
    """``--torch_compile`` as the config stores it: ``False`` (eager), ``True`` (inductor's default mode, as the flag
    without a mode has always meant) or the name of another mode of :data:`COMPILE_MODES`."""
    if value is None or value is False:
        return False
    if value is True:
        return True
    text = str(value).strip().lower()
    if text in _OFF:
        return False
    if text in _DEFAULT:
        return True
    if text not in COMPILE_MODES:
        raise ValueError(f"--torch_compile takes no value or one of {', '.join(COMPILE_MODES)}, got {value!r}")
    return text


def compile_mode(value: bool | str | None) -> str | None:
    """The ``torch.compile`` mode of a ``--torch_compile`` value (``None``: no compilation)."""
    parsed = parse_compile_mode(value)
    return None if parsed is False else "default" if parsed is True else parsed


def dynamo_plugin(value: bool | str | None) -> TorchDynamoPlugin:
    """Accelerate's ``TorchDynamoPlugin`` for a ``--torch_compile`` value (inductor, in its mode; or none)."""
    from accelerate.utils import TorchDynamoPlugin

    mode = compile_mode(value)
    return TorchDynamoPlugin(backend="inductor" if mode else "no", mode=mode)


ATTENTION_KERNELS = ("auto", "math", "flash", "efficient", "cudnn")
"""``--attention_kernel`` values: PyTorch's own pick, or one ``scaled_dot_product_attention`` backend."""


def attention_kernel(name: str):
    """A context in which ``scaled_dot_product_attention`` uses the kernel ``name`` of :data:`ATTENTION_KERNELS`
    (``auto``: no constraint). On a CPU with AMX the ``math`` kernel runs attention as matrix products on AMX, faster
    in bf16 than the fused ("flash") kernel (``docs/performance.md``)."""
    import contextlib

    from torch.nn.attention import SDPBackend, sdpa_kernel

    if name == "auto":
        return contextlib.nullcontext()
    backend = {"math": SDPBackend.MATH, "flash": SDPBackend.FLASH_ATTENTION,
               "efficient": SDPBackend.EFFICIENT_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION}[name]
    return sdpa_kernel(backend)


def enable_gradient_checkpointing(model: nn.Module) -> list[str]:
    """diffusers' gradient checkpointing on every model inside ``model`` (the task's trainable module) that supports it;
    returns their names. A task whose models support none is refused, so the option never silently does nothing."""
    from diffusers.models.modeling_utils import ModelMixin

    enabled = []
    for name, module in model.named_modules():
        if isinstance(module, ModelMixin) and module._supports_gradient_checkpointing:
            module.enable_gradient_checkpointing()
            enabled.append(name or type(module).__name__)
    if not enabled:
        raise ValueError(f"--gradient_checkpointing: no model in {type(model).__name__} supports it")
    return enabled


def fused_optimizer_supported(device: torch.device | str) -> bool:
    """Whether PyTorch has a fused (one multi-tensor kernel) AdamW on ``device``: CUDA, and CPUs since torch 2.4."""
    from torch.utils._foreach_utils import _get_fused_kernels_supported_devices

    return torch.device(device).type in _get_fused_kernels_supported_devices()


def to_device(tensor: torch.Tensor, device: torch.device | str) -> torch.Tensor:
    """``tensor`` on ``device``. A copy from the host to a GPU goes through pinned memory without blocking: a copy
    from pageable memory would wait for every kernel queued before it, a host synchronisation in every step."""
    device = torch.device(device)
    if device.type == "cuda" and tensor.device.type == "cpu":
        return tensor.pin_memory().to(device, non_blocking=True)
    return tensor.to(device)


def compiled_for_sampling(model: nn.Module, mode: str | None) -> nn.Module:
    """``model`` under ``torch.compile(mode=mode)`` for sampling (``model`` itself when ``mode`` is ``None``), compiled
    once per model and mode: every evaluation reuses the graphs of the first. The compiled wrappers live on the model
    (outside its submodules and state dict), so they go with it."""
    if mode is None:
        return model
    per_model = model.__dict__.get("_compiled_for_sampling")
    if per_model is None:
        per_model = {}
        object.__setattr__(model, "_compiled_for_sampling", per_model)  # not a submodule: no state, no .to()
    if mode not in per_model:
        per_model[mode] = torch.compile(model, mode=mode)
    return per_model[mode]
