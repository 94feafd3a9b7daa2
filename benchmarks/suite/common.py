"""Shared by the families: timing, the benchmark batch, compgen's models and their training steps as the loop runs."""

from __future__ import annotations

import contextlib
import inspect
import statistics
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import torch

REPO_ROOT = Path(__file__).resolve().parents[2]
PAPER_LAYOUT: dict[str, Any] = {"block_type": "paper", "norm_type": "batch"}
"""The U-Net options of Paper A's exact layout (the ``paper`` preset of ``examples/train_tuple_unet.py``)."""

ADAMW_CHOICES = ("compgen", "fused", "foreach", "loop")


@dataclass(frozen=True)
class StepSettings:
    """How the training steps of one run are built (each a command-line option of ``run_benchmarks.py``). Settings
    travel as arguments; torch's process-wide switches change only inside this module's context managers, which
    restore them on exit."""

    device: torch.device
    dtype: torch.dtype | None = None
    """``--bf16``: the autocast dtype of the steps (``None``: fp32, no autocast)."""
    channels_last: bool = False
    """``--channels-last``: compgen's convolutional models and their input images in channels-last memory order."""
    adamw: str = "compgen"
    """``--adamw``: the AdamW implementation of compgen's steps: ``compgen`` (the loop's choice), ``fused``,
    ``foreach`` or ``loop`` (one op per parameter tensor)."""


def timed(fn: Callable[[], Any], items: int, repeats: int, warmup: int = 2, calls: int = 3,
          sync: Callable[[], None] = lambda: None) -> dict[str, float]:
    """Median, min and max of ``items`` processed per second over ``repeats`` timings of ``calls`` calls."""
    for _ in range(warmup):
        fn()
    sync()
    rates = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        sync()
        rates.append(items * calls / (time.perf_counter() - start))
    return {"median": statistics.median(rates), "min": min(rates), "max": max(rates)}


@contextlib.contextmanager
def matmul_tf32(enabled: bool) -> Iterator[None]:
    """``torch.backends.cuda.matmul.allow_tf32`` set to ``enabled`` inside the scope, restored on exit."""
    previous = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = enabled
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32 = previous


@contextlib.contextmanager
def torch_threads(threads: int) -> Iterator[None]:
    """``torch.set_num_threads(threads)`` inside the scope, the previous count restored on exit."""
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def load_script(path: str | Path) -> ModuleType:
    """An example script as a module (``compgen``'s ``load_script``, wherever this revision of compgen keeps it)."""
    try:
        from compgen.studies.runner import load_script as load
    except ImportError:  # compgen before the studies package
        from compgen.training.runner import load_script as load
    return load(path)


def peer_module(peer_dir: str) -> Any:
    """The official code's ``train.py`` as a module (from a checkout of phys-ai/concept_graphs at ``peer_dir``)."""
    return load_script(REPO_ROOT / "examples" / "compare_peer_unet.py").import_peer(peer_dir)


# --- the batch and the models -----------------------------------------------------------------------------------


def make_batch(batch_size: int, device: torch.device) -> dict[str, torch.Tensor]:
    """``batch_size`` rendered training images of H32-train1's first four classes, with their concepts."""
    from compgen import get_split_preset
    from compgen.images import uint8_to_signed
    from compgen.shapes import PAPER_COLOR_JITTER, PAPER_SIZE_JITTER, RenderConfig, render_classes

    space = get_split_preset("H32-train1").graph().space
    classes = np.array([space.all_classes()[i % 4] for i in range(batch_size)])
    render = render_classes(space, classes, seed=0,
                            config=RenderConfig(color_jitter=PAPER_COLOR_JITTER, size_jitter=PAPER_SIZE_JITTER))
    return {"images": uint8_to_signed(render.images).to(device),
            "concepts": torch.as_tensor(render.concepts).to(device),
            "concept_values": torch.cat([torch.as_tensor(render.rgb), torch.as_tensor(render.size)[:, None]], 1).to(
                device), "index": torch.arange(batch_size, device=device), "uint8": torch.as_tensor(render.images)}


def has_paper_layout() -> bool:
    """Whether this compgen has the U-Net's ``block_type`` option (an earlier revision measured as "before" may not)."""
    from compgen import TupleConditionedUNet2DModel

    return "block_type" in inspect.signature(TupleConditionedUNet2DModel.__init__).parameters


def unet_task(widths: tuple[int, ...], layers_per_block: int, **options: Any):
    """compgen's DDPM task on a ``full``-conditioned U-Net of ``widths`` (v-prediction, T = 500)."""
    from diffusers import DDPMScheduler

    from compgen import TupleConditionedUNet2DModel, get_split_preset
    from compgen.shapes import shapes_continuous_concepts
    from compgen.training.tasks.ddpm import DDPMTask

    space = get_split_preset("H32-train1").graph().space
    torch.manual_seed(0)
    unet = TupleConditionedUNet2DModel(space.to_dict(), block_out_channels=widths, layers_per_block=layers_per_block,
                                       conditioning="full", continuous_concepts=shapes_continuous_concepts(space),
                                       **options)
    scheduler = DDPMScheduler(num_train_timesteps=500, beta_start=1e-4, beta_end=0.02,
                              prediction_type="v_prediction")
    return DDPMTask(unet, scheduler, eval_inference_steps=50)


def token_models(hidden: int, layers: int, heads: int, batch: dict[str, torch.Tensor], jepa: bool):
    """compgen's MaskGIT task (with ``jepa``, MaskGIT + JEPA) over a cpu-quick VQ tokenizer's tokens of ``batch``."""
    from compgen import MaskGITScheduler, MaskGITTransformer, get_split_preset
    from compgen.models.vq_tokenizer import build_vq_tokenizer
    from compgen.shapes import shapes_continuous_concepts
    from compgen.training.tasks.maskgit import MaskGITTask, precompute_tokens

    space = get_split_preset("H32-train1").graph().space
    torch.manual_seed(0)
    vqvae = build_vq_tokenizer(block_out_channels=(16, 32, 32), vq_embed_dim=16)
    tokens = precompute_tokens(vqvae, batch["uint8"])
    transformer = MaskGITTransformer(space.to_dict(), codebook_size=256, grid_size=7, hidden_size=hidden,
                                     num_layers=layers, num_heads=heads, conditioning="full",
                                     continuous_concepts=shapes_continuous_concepts(space))
    return MaskGITTask(transformer, vqvae, MaskGITScheduler(mask_token_id=256), tokens,
                       jepa_weight=0.6 if jepa else 0.0, total_steps=1000, eval_batch_size=256)


# --- the training steps -----------------------------------------------------------------------------------------


def optimizer_options(device: torch.device, adamw: str = "compgen") -> dict[str, Any]:
    """The AdamW options of compgen's training loop on ``device`` (or those ``adamw`` names)."""
    if adamw != "compgen":
        return {"fused": adamw == "fused", "foreach": adamw == "foreach"}
    try:
        from compgen.training.acceleration import fused_optimizer_supported
    except ImportError:  # compgen before the fused CPU optimizer: fused on CUDA only
        return {"fused": device.type == "cuda"}
    return {"fused": fused_optimizer_supported(device)}


def task_step(task, batch: dict[str, torch.Tensor], settings: StepSettings, compile_mode: str | None = None,
              ema: bool = False) -> Callable[[], None]:
    """One training step of a compgen task as the loop runs it (its own random draws, AdamW as the loop builds it,
    gradient clipping, the post-step hook and, with ``ema``, the EMA update); with ``compile_mode``, the model
    through ``torch.compile`` in that mode, as ``--torch_compile MODE`` does."""
    from compgen.training.ema import ExponentialMovingAverage, MomentumSchedule

    device, dtype = settings.device, settings.dtype
    task.to(device)
    if settings.channels_last and any(isinstance(m, torch.nn.Conv2d) for m in task.model.modules()):
        task.model.to(memory_format=torch.channels_last)
        batch = {**batch, "images": batch["images"].contiguous(memory_format=torch.channels_last)}
    model = torch.compile(task.model, mode=compile_mode) if compile_mode else task.model
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4,
                                  **optimizer_options(device, settings.adamw))
    average = ExponentialMovingAverage(task.model, MomentumSchedule(0.999, kind="warmup")) if ema else None
    counter = [0]

    def step() -> None:
        counter[0] += 1
        generator = torch.Generator().manual_seed(counter[0])
        with torch.autocast(device.type, dtype=dtype or torch.float32, enabled=dtype is not None):
            loss, _ = task.compute_loss(model, batch, generator, counter[0])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        task.after_optimizer_step(task.model, counter[0])
        if average is not None:
            average.update(task.model, counter[0])

    return step


def plain_step(model: torch.nn.Module, forward: Callable[[], torch.Tensor], settings: StepSettings
               ) -> Callable[[], None]:
    """Forward, loss, backward and AdamW for a peer model (``forward`` returns the loss)."""
    device, dtype = settings.device, settings.dtype
    model.to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)

    def step() -> None:
        with torch.autocast(device.type, dtype=dtype or torch.float32, enabled=dtype is not None):
            loss = forward()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return step
