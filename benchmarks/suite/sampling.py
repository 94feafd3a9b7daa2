"""Sampling speed: images per second of DDPM sampling (compgen's U-Net, official ContextUnet) and MaskGIT decoding."""

from __future__ import annotations

import contextlib
import io
from collections.abc import Callable

import torch

from suite.bench import Bench
from suite.common import PAPER_LAYOUT, has_paper_layout, make_batch, peer_module, timed, token_models, unet_task

CLASS_NAMES = ["000", "001", "010", "100", "011", "101", "110", "111"]


def context_unet_sampler(bench: Bench, n_feat: int, batch_size: int, steps: int) -> Callable[[], None]:
    """The official sampler: its ``DDPM`` with ``n_T = steps`` and ``sample_ddim`` (one ContextUnet call per step),
    in eval mode without gradients, as its training script calls it."""
    peer = peer_module(bench.peer_dir)
    torch.manual_seed(0)
    ddpm = peer.DDPM(nn_model=peer.ContextUnet(in_channels=3, n_feat=n_feat, n_classes=[2, 3, 1]),
                     betas=(1e-4, 0.02), n_T=steps, device=bench.device, drop_prob=0.1, n_classes=[2, 3, 1])
    ddpm.to(bench.device).eval()
    batch = make_batch(batch_size, torch.device("cpu"))
    conditions = {0: batch["concepts"][:, 0], 1: batch["concept_values"][:, :3], 2: batch["concept_values"][:, 3:]}

    def sample() -> None:
        with torch.no_grad(), contextlib.redirect_stdout(io.StringIO()):  # it prints every step
            ddpm.sample_ddim(batch_size, conditions, (3, 28, 28), bench.device)

    return sample


def sampling(bench: Bench, unet_batch: int, maskgit_batch: int, steps: int = 50) -> None:
    """Images per second of compgen's samplers and of the official ContextUnet's (``DDPM.sample_ddim``), all
    with ``steps`` denoiser calls per image, at base width 64."""
    concepts = [CLASS_NAMES[i % 8] for i in range(unet_batch)]
    layouts = [("(64, 128)", 1, {})] + ([("(64, 128), paper layout", 2, PAPER_LAYOUT)] if has_paper_layout()
                                        else [])
    for label, layers, options in layouts:
        for mode in bench.compile_modes:
            name = f"DDPM sampling, DDIM {steps} steps, compgen U-Net {label}" + (f", compiled ({mode})"
                                                                                  if mode else "")
            if not bench.wanted(name):
                continue
            task = unet_task((64, 128), layers, **options)
            task.model.to(bench.device).eval()
            task.to(bench.device)
            task.eval_inference_steps = steps
            task.sampling_compile_mode = mode
            rate = timed(lambda t=task: t.generate(t.model, concepts, 0), unet_batch, bench.repeats, warmup=1,
                         calls=1, sync=bench.sync)
            bench.record(name, "sample", rate, "img/s")
    name = f"DDPM sampling, {steps} steps, official ContextUnet n_feat 64 (sample_ddim)"
    if bench.peer_dir and bench.wanted(name):
        rate = timed(context_unet_sampler(bench, 64, unet_batch, steps), unet_batch, bench.repeats, warmup=1,
                     calls=1, sync=bench.sync)
        bench.record(name, "sample", rate, "img/s")
    batch = make_batch(8, bench.device)
    maskgit = token_models(128, 4, 4, batch, jepa=False)
    maskgit.model.to(bench.device).eval()
    maskgit.to(bench.device)
    concepts = [CLASS_NAMES[i % 8] for i in range(maskgit_batch)]
    rate = timed(lambda: maskgit.generate(maskgit.model, concepts, 0), maskgit_batch, bench.repeats, warmup=1,
                 calls=1, sync=bench.sync)
    bench.record("MaskGIT decoding, 12 steps, cpu-quick (h128, L4)", "sample", rate, "img/s")
