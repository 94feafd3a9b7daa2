"""Training step speed: images per second, share of the matmul peak and kernels per step, of compgen and its peers."""

from __future__ import annotations

import copy
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from step_profile import profile_call

from suite.bench import Bench
from suite.common import (
    PAPER_LAYOUT,
    has_paper_layout,
    make_batch,
    peer_module,
    plain_step,
    task_step,
    timed,
    token_models,
    unet_task,
)
from suite.flops import count_flops


def train(bench: Bench, name: str, step: Callable[[], None], batch_size: int, calls: int = 3) -> None:
    """The row of one step: its rate, FLOPs and kernels (with ``--kernels-only``, its kernels alone)."""
    if not bench.wanted(name):
        return
    if bench.kernels_only:
        profile = profile_call(step, bench.device)
        bench.results.append({"name": name, "kind": "train", "unit": "img/s", "batch_size": batch_size, **profile})
        print(f"train  {name:56s} {profile['kernels']:6d} kernels, {profile['syncs']} syncs", flush=True)
        return
    rate = timed(step, batch_size, bench.repeats, calls=calls, sync=bench.sync)
    # The profile before the FLOP count: under the counter's dispatch mode a compiled model falls back to eager.
    profile = profile_call(step, bench.device, warmup=0)  # the timing warmed it up
    bench.record(name, "train", rate, "img/s", count_flops(step), batch_size=batch_size, **profile)


def train_task(bench: Bench, name: str, make_task: Callable[[], Any], batch: dict[str, torch.Tensor],
               batch_size: int, ema: bool = False) -> None:
    """The row of a compgen task's step, and with ``--compile`` the row of the same step compiled."""
    for mode in bench.compile_modes:
        row = name + (f", compiled ({mode})" if mode else "")
        if bench.wanted(row):
            train(bench, row, task_step(make_task(), batch, bench.settings, compile_mode=mode, ema=ema), batch_size)


def train_pair(bench: Bench, names: list[str], steps: list[Callable[[], None] | None], batch_size: int) -> None:
    """Two steps timed call by call in turn (so both see the same load on a shared machine); the second row also
    gets ``cost_vs_first``, the median over the pairs of calls of its time over the first's."""
    if bench.kernels_only or None in steps:
        for name, step in zip(names, steps, strict=True):
            if step is not None:
                train(bench, name, step, batch_size)
        return
    for step in steps:  # warm-up, as timed() does
        step()
        step()
    bench.sync()
    seconds: list[list[float]] = [[], []]
    for _ in range(3 * bench.repeats):
        for index, step in enumerate(steps):
            start = time.perf_counter()
            step()
            bench.sync()
            seconds[index].append(time.perf_counter() - start)
    ratios = [b / a for a, b in zip(*seconds, strict=True)]
    for index, (name, step) in enumerate(zip(names, steps, strict=True)):
        rates = [batch_size / s for s in seconds[index]]
        rate = {"median": statistics.median(rates), "min": min(rates), "max": max(rates)}
        extra = {"cost_vs_first": round(statistics.median(ratios), 3)} if index else {}
        profile = profile_call(step, bench.device, warmup=0)
        bench.record(name, "train", rate, "img/s", count_flops(step), batch_size=batch_size, **profile, **extra)


def context_unet_step(bench: Bench, n_feat: int, batch: dict[str, torch.Tensor]) -> Callable[[], None]:
    """A training step of the official ContextUnet (from ``--peer-dir``) on ``batch``."""
    peer = peer_module(bench.peer_dir)
    torch.manual_seed(0)
    net = peer.ContextUnet(in_channels=3, n_feat=n_feat, n_classes=[2, 3, 1])
    x, concepts, values = batch["images"], batch["concepts"], batch["concept_values"]
    t = torch.rand(len(x), device=bench.device)

    def loss() -> torch.Tensor:
        out = net(x, [concepts[:, 0], values[:, :3], values[:, 3:]], t)
        return F.mse_loss(out.float(), x)

    return plain_step(net, loss, bench.settings)


def unets(bench: Bench, configs: list[tuple[str, tuple[int, ...], int, int, bool]]) -> None:
    """compgen's U-Net step at each (label, widths, layers per block, batch size, EMA), beside diffusers'
    ``UNet2DModel`` and the official ContextUnet of the same widths."""
    from diffusers import UNet2DModel

    for label, widths, layers, batch_size, ema in configs:
        batch = make_batch(batch_size, bench.device)
        layouts = [("", {})] + ([(", paper layout", PAPER_LAYOUT)] if layers == 2 and has_paper_layout() else [])
        for suffix, options in layouts:
            train_task(bench, f"compgen U-Net {label} {widths}{suffix}",
                       lambda o=options, w=widths, n=layers: unet_task(w, n, **o), batch, batch_size, ema)
        if bench.wanted(f"diffusers UNet2DModel {label} {widths}"):
            torch.manual_seed(0)
            peer = UNet2DModel(sample_size=28, block_out_channels=widths, layers_per_block=layers,
                               down_block_types=("DownBlock2D",) * len(widths),
                               up_block_types=("UpBlock2D",) * len(widths), norm_num_groups=8)
            timesteps = torch.randint(0, 500, (batch_size,), device=bench.device)
            images = batch["images"]
            train(bench, f"diffusers UNet2DModel {label} {widths}", plain_step(
                peer, lambda p=peer, t=timesteps, x=images: F.mse_loss(p(x, t).sample.float(), x), bench.settings),
                batch_size)
        if bench.peer_dir and bench.wanted(f"official ContextUnet {label} n_feat {widths[0]}"):
            train(bench, f"official ContextUnet {label} n_feat {widths[0]}",
                  context_unet_step(bench, widths[0], batch), batch_size)


def transformers(bench: Bench, configs: list[tuple[str, int, int, int, int]]) -> None:
    """MaskGIT and MaskGIT + JEPA steps, timed in turn, at each (label, hidden, layers, heads, batch size), beside
    ``torch.nn.TransformerEncoder`` of the same size."""
    for label, hidden, layers, heads, batch_size in configs:
        batch = make_batch(batch_size, bench.device)
        for mode in bench.compile_modes:
            suffix = f", compiled ({mode})" if mode else ""
            names = [f"compgen MaskGIT{' + JEPA' if jepa else ''} {label} (h{hidden}, L{layers}){suffix}"
                     for jepa in (False, True)]
            steps = [task_step(token_models(hidden, layers, heads, batch, jepa), batch, bench.settings,
                               compile_mode=mode) if bench.wanted(name) else None
                     for jepa, name in zip((False, True), names, strict=True)]
            train_pair(bench, names, steps, batch_size)
        torch.manual_seed(0)
        encoder = torch.nn.Sequential(
            torch.nn.Embedding(257, hidden),
            torch.nn.TransformerEncoder(torch.nn.TransformerEncoderLayer(
                hidden, heads, 4 * hidden, 0.0, activation="gelu", batch_first=True, norm_first=True), layers),
            torch.nn.Linear(hidden, 256))
        ids = torch.randint(0, 257, (batch_size, 52), device=bench.device)
        targets = torch.randint(0, 256, (batch_size, 52), device=bench.device)
        train(bench, f"torch TransformerEncoder {label} (h{hidden}, L{layers})", plain_step(
            encoder, lambda e=encoder, i=ids, t=targets: F.cross_entropy(e(i).float().transpose(1, 2), t),
            bench.settings), batch_size)


def tokenizer_and_dit(bench: Bench, batch_size: int) -> None:
    """The cpu-quick VQ tokenizer's step and the cpu-quick DiT's step (with EMA) over its latents."""
    from diffusers import DDPMScheduler

    from compgen import TupleConditionedDiT, get_split_preset
    from compgen.models.vq_tokenizer import build_vq_tokenizer
    from compgen.shapes import shapes_continuous_concepts
    from compgen.training.tasks.dit import DiTTask
    from compgen.training.tasks.latent_tokenizer import latent_statistics, precompute_latents
    from compgen.training.tasks.vq_tokenizer import VQTask

    batch = make_batch(batch_size, bench.device)
    torch.manual_seed(0)
    vqvae = build_vq_tokenizer(block_out_channels=(16, 32, 32), vq_embed_dim=16)
    train_task(bench, "compgen VQ tokenizer cpu-quick (16,32,32)",
               lambda: VQTask(copy.deepcopy(vqvae), restart_every=25, total_steps=1000, crop_size=16), batch,
               batch_size)
    space = get_split_preset("H32-train1").graph().space
    latents = precompute_latents(vqvae.cpu(), batch["uint8"])
    mean, std = latent_statistics(latents)
    dit = TupleConditionedDiT(space.to_dict(), latent_channels=16, grid_size=7, hidden_size=128, num_layers=4,
                              num_heads=4, conditioning="full", latent_mean=mean, latent_std=std,
                              continuous_concepts=shapes_continuous_concepts(space))
    train_task(bench, "compgen DiT cpu-quick (h128, L4)", lambda: DiTTask(
        copy.deepcopy(dit), vqvae, DDPMScheduler(num_train_timesteps=500, prediction_type="v_prediction",
                                                 clip_sample=False), latents), batch, batch_size, ema=True)
