"""compgen's speed beside its peers, in one run: training and sampling throughput, FLOP/s, evaluation cost.

    python benchmarks/run_benchmarks.py [--device cpu|cuda] [--threads 1] [--peer-dir PATH] [--only unet ...]
                                        [--output benchmarks/results/cpu.json] [--time-to-emergence]

Every figure is the median of ``--repeats`` timed repeats (with min and max), measured in this process, one after
another, so compgen and its peers see the same machine:

- **train**: images per second of one training step (forward, backward, AdamW) of compgen's tasks as the training loop
  runs them (the U-Net at the cpu-quick and paper widths, MaskGIT and MaskGIT + JEPA, the VQ tokenizer, the DiT), and
  of the peers: Paper A's official ``ContextUnet`` (imported from a local checkout of phys-ai/concept_graphs given by
  ``--peer-dir``; none of its code is in compgen), diffusers' ``UNet2DModel`` and ``torch.nn.TransformerEncoder``;
- **flops**: each step's FLOPs (``torch.utils.flop_counter``) times steps per second, as a fraction of the matmul peak
  measured in the same run in the precision the step's convolutions and matmuls run in (TF32 for CUDA convolutions
  by default, and for CUDA matmuls when ``torch.backends.cuda.matmul.allow_tf32`` is on);
- **kernels**: kernels and host synchronisations of one step, optimizer and EMA included (``step_profile.py``);
- **sample**: images per second of DDPM sampling (DDIM, 50 steps) and MaskGIT decoding (12 steps);
- **eval**: one learning-dynamics evaluation of the cpu-quick U-Net preset as a fraction of the training time between
  two evaluations;
- **time to emergence** (``--time-to-emergence``, minutes): wall-clock of the cpu-quick U-Net preset until every level
  reaches 0.9 by both scorers.

Results go to ``--output`` (JSON) and a markdown table beside it; ``docs/performance.md`` collects them.
"""

from __future__ import annotations

import argparse
import copy
import json
import platform
import re
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from step_profile import profile_call

REPO_ROOT = Path(__file__).resolve().parents[1]
PAPER_LAYOUT: dict[str, Any] = {"block_type": "paper", "norm_type": "batch"}
"""The U-Net options of Paper A's exact layout (the ``paper`` preset of ``examples/train_tuple_unet.py``)."""


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


def count_flops(fn: Callable[[], Any]) -> tuple[int, int]:
    """FLOPs of one call of ``fn`` (matmuls, convolutions and attention, forward and backward). The fused inference
    path of ``nn.TransformerEncoderLayer`` (one op the counter cannot see into) is off while counting: the same layer
    as separate ops. Returns (all FLOPs, those of convolutions)."""
    from torch.utils.flop_counter import FlopCounterMode

    count_cpu_attention()
    fastpath = torch.backends.mha.get_fastpath_enabled()
    torch.backends.mha.set_fastpath_enabled(False)
    try:
        with FlopCounterMode(display=False) as counter:
            fn()
    finally:
        torch.backends.mha.set_fastpath_enabled(fastpath)
    per_op = counter.get_flop_counts().get("Global", {})
    convolutions = sum(count for op, count in per_op.items() if str(op).split(".")[1] in CONVOLUTIONS)
    return int(counter.get_total_flops()), int(convolutions)


def count_cpu_attention() -> None:
    """Give the FLOP counter the formulas of the CPU attention kernels (it knows only the GPU ones)."""
    from torch.utils import flop_counter

    forward = getattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu", None)
    if forward is None or forward in flop_counter.flop_registry:
        return

    @flop_counter.register_flop_formula(forward)
    def _forward(query_shape, key_shape, value_shape, *args, out_shape=None, **kwargs) -> int:
        return flop_counter.sdpa_flop_count(query_shape, key_shape, value_shape)

    @flop_counter.register_flop_formula(torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward)
    def _backward(grad_out_shape, query_shape, key_shape, value_shape, *args, out_shape=None, **kwargs) -> int:
        return flop_counter.sdpa_backward_flop_count(grad_out_shape, query_shape, key_shape, value_shape)


def matmul_peak(device: torch.device, dtype: torch.dtype, sync: Callable[[], None], tf32: bool = False) -> float:
    """FLOP/s of the best of a few square matmuls on this device (the roofline the steps are compared with); on
    CUDA with ``tf32``, fp32 matmuls run in TF32 (tensor cores), as convolutions do by default there."""
    best = 0.0
    previous = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = tf32
    try:
        for n in (256, 512, 1024) if device.type == "cpu" else (2048, 4096, 8192):
            a = torch.randn(n, n, device=device, dtype=dtype)
            b = torch.randn(n, n, device=device, dtype=dtype)
            rate = timed(lambda a=a, b=b: a @ b, items=1, repeats=3, calls=3 if device.type == "cpu" else 20,
                         sync=sync)["median"]
            best = max(best, rate * 2 * n**3)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = previous
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


CONVOLUTIONS = ("convolution", "_convolution", "convolution_backward", "cudnn_convolution", "mkldnn_convolution")


# --- the models ------------------------------------------------------------------------------------------------


def make_batch(batch_size: int, device: torch.device) -> dict[str, torch.Tensor]:
    from compgen import get_split_preset
    from compgen.shapes import PAPER_COLOR_JITTER, PAPER_SIZE_JITTER, RenderConfig, render_classes

    space = get_split_preset("H32-train1").graph().space
    classes = np.array([space.all_classes()[i % 4] for i in range(batch_size)])
    render = render_classes(space, classes, seed=0,
                            config=RenderConfig(color_jitter=PAPER_COLOR_JITTER, size_jitter=PAPER_SIZE_JITTER))
    from compgen.images import uint8_to_signed

    return {"images": uint8_to_signed(render.images).to(device),
            "concepts": torch.as_tensor(render.concepts).to(device),
            "concept_values": torch.cat([torch.as_tensor(render.rgb), torch.as_tensor(render.size)[:, None]], 1).to(
                device), "index": torch.arange(batch_size, device=device), "uint8": torch.as_tensor(render.images)}


def task_step(task, batch: dict[str, torch.Tensor], device: torch.device, dtype: torch.dtype | None,
              compile_mode: str | None = None, ema: bool = False) -> Callable[[], None]:
    """One training step of a compgen task as the loop runs it (its own random draws, AdamW as the loop builds it,
    gradient clipping, the post-step hook and, with ``ema``, the EMA update); with ``compile_mode``, the model
    through ``torch.compile`` in that mode, as ``--torch_compile MODE`` does."""
    from compgen.training.ema import ExponentialMovingAverage, MomentumSchedule

    task.to(device)
    if CHANNELS_LAST and any(isinstance(m, torch.nn.Conv2d) for m in task.model.modules()):
        task.model.to(memory_format=torch.channels_last)
        batch = {**batch, "images": batch["images"].contiguous(memory_format=torch.channels_last)}
    model = torch.compile(task.model, mode=compile_mode) if compile_mode else task.model
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4,
                                  **optimizer_options(device))
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


CHANNELS_LAST = False
"""``--channels-last``: compgen's convolutional models and their input images in channels-last memory order."""

ADAMW = "compgen"
"""``--adamw``: the AdamW implementation of compgen's steps: ``compgen`` (the loop's choice), ``fused``, ``foreach``
or ``loop`` (one op per parameter tensor)."""


def optimizer_options(device: torch.device) -> dict[str, Any]:
    """The AdamW options of compgen's training loop on ``device`` (or those ``--adamw`` names)."""
    if ADAMW != "compgen":
        return {"fused": ADAMW == "fused", "foreach": ADAMW == "foreach"}
    try:
        from compgen.training.acceleration import fused_optimizer_supported
    except ImportError:  # compgen before the fused CPU optimizer: fused on CUDA only
        return {"fused": device.type == "cuda"}
    return {"fused": fused_optimizer_supported(device)}


def plain_step(model: torch.nn.Module, forward: Callable[[], torch.Tensor], device: torch.device,
               dtype: torch.dtype | None) -> Callable[[], None]:
    """Forward, loss, backward and AdamW for a peer model (``forward`` returns the loss)."""
    model.to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)

    def step() -> None:
        with torch.autocast(device.type, dtype=dtype or torch.float32, enabled=dtype is not None):
            loss = forward()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return step


def has_paper_layout() -> bool:
    """Whether this compgen has the U-Net's ``block_type`` option (an earlier revision measured as "before" may not)."""
    import inspect

    from compgen import TupleConditionedUNet2DModel

    return "block_type" in inspect.signature(TupleConditionedUNet2DModel.__init__).parameters


def unet_task(widths: tuple[int, ...], layers_per_block: int, **options: Any):
    from diffusers import DDPMScheduler

    from compgen import TupleConditionedUNet2DModel, get_split_preset
    from compgen.shapes import shapes_continuous_concepts
    from compgen.training.ddpm_task import DDPMTask

    space = get_split_preset("H32-train1").graph().space
    torch.manual_seed(0)
    unet = TupleConditionedUNet2DModel(space.to_dict(), block_out_channels=widths, layers_per_block=layers_per_block,
                                       conditioning="full", continuous_concepts=shapes_continuous_concepts(space),
                                       **options)
    scheduler = DDPMScheduler(num_train_timesteps=500, beta_start=1e-4, beta_end=0.02,
                              prediction_type="v_prediction")
    return DDPMTask(unet, scheduler, eval_inference_steps=50)


def token_models(hidden: int, layers: int, heads: int, batch: dict[str, torch.Tensor], jepa: bool):
    from compgen import MaskGITScheduler, MaskGITTransformer, get_split_preset
    from compgen.models.vq_tokenizer import build_vq_tokenizer
    from compgen.shapes import shapes_continuous_concepts
    from compgen.training.maskgit_task import MaskGITTask, precompute_tokens

    space = get_split_preset("H32-train1").graph().space
    torch.manual_seed(0)
    vqvae = build_vq_tokenizer(block_out_channels=(16, 32, 32), vq_embed_dim=16)
    tokens = precompute_tokens(vqvae, batch["uint8"])
    transformer = MaskGITTransformer(space.to_dict(), codebook_size=256, grid_size=7, hidden_size=hidden,
                                     num_layers=layers, num_heads=heads, conditioning="full",
                                     continuous_concepts=shapes_continuous_concepts(space))
    return MaskGITTask(transformer, vqvae, MaskGITScheduler(mask_token_id=256), tokens,
                       jepa_weight=0.6 if jepa else 0.0, total_steps=1000, eval_batch_size=256)


# --- the benchmarks ----------------------------------------------------------------------------------------------


class Bench:
    def __init__(self, device: torch.device, repeats: int, dtype: torch.dtype | None, peer_dir: str | None,
                 compile_models: bool = False, kernels_only: bool = False, skip: list[str] | None = None) -> None:
        self.device, self.repeats, self.dtype, self.peer_dir = device, repeats, dtype, peer_dir
        self.skip = skip or []
        self.compile, self.kernels_only = compile_models, kernels_only
        self.sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
        self.results: list[dict[str, Any]] = []
        self.precision = precisions(device, dtype)
        self.peaks = {} if kernels_only else {
            precision: matmul_peak(device, dtype or torch.float32, self.sync, tf32=precision == "tf32")
            for precision in sorted(set(self.precision.values()))}
        self.peak = self.peaks.get(self.precision["matmul"], 0.0)

    def roofline(self, flops: int, conv_flops: int) -> float:
        """FLOP/s of a step whose convolutions and matmuls each run at the matmul peak of their precision."""
        seconds = conv_flops / self.peaks[self.precision["conv"]] + (flops - conv_flops) / self.peak
        return flops / seconds

    def record(self, name: str, kind: str, rate: dict[str, float], unit: str, flops: tuple[int, int] | None = None,
               **extra: Any) -> None:
        entry = {"name": name, "kind": kind, "unit": unit, **{k: round(v, 3) for k, v in rate.items()}, **extra}
        if flops:
            steps_per_second = rate["median"] / extra.get("batch_size", 1)
            entry["flops_per_step"], entry["conv_flops_per_step"] = flops
            entry["peak_fraction"] = round(flops[0] * steps_per_second / self.roofline(*flops), 4)
        self.results.append(entry)
        print(f"{kind:6s} {name:42s} {rate['median']:10.1f} {unit} (min {rate['min']:.1f}, max {rate['max']:.1f})"
              + (f", {entry['peak_fraction']:.1%} of matmul peak" if flops else ""), flush=True)

    def wanted(self, name: str) -> bool:
        """Whether the row ``name`` is measured (``--skip``: regular expressions of the rows to leave out)."""
        return not any(re.search(pattern, name) for pattern in self.skip)

    def train_task(self, name: str, make_task: Callable[[], Any], batch: dict[str, torch.Tensor], batch_size: int,
                   ema: bool = False) -> None:
        """The row of a compgen task's step, and with ``--compile`` the row of the same step compiled."""
        for mode in [None] + ([self.compile] if self.compile else []):
            row = name + (f", compiled ({mode})" if mode else "")
            if self.wanted(row):
                self.train(row, task_step(make_task(), batch, self.device, self.dtype, compile_mode=mode, ema=ema),
                           batch_size)

    def train_pair(self, names: list[str], steps: list[Callable[[], None] | None], batch_size: int) -> None:
        """Two steps timed call by call in turn (so both see the same load on a shared machine); the second row also
        gets ``cost_vs_first``, the median over the pairs of calls of its time over the first's."""
        if self.kernels_only or None in steps:
            for name, step in zip(names, steps, strict=True):
                if step is not None:
                    self.train(name, step, batch_size)
            return
        for step in steps:  # warm-up, as timed() does
            step()
            step()
        self.sync()
        seconds: list[list[float]] = [[], []]
        for _ in range(3 * self.repeats):
            for index, step in enumerate(steps):
                start = time.perf_counter()
                step()
                self.sync()
                seconds[index].append(time.perf_counter() - start)
        ratios = [b / a for a, b in zip(*seconds, strict=True)]
        for index, (name, step) in enumerate(zip(names, steps, strict=True)):
            rates = [batch_size / s for s in seconds[index]]
            rate = {"median": statistics.median(rates), "min": min(rates), "max": max(rates)}
            extra = {"cost_vs_first": round(statistics.median(ratios), 3)} if index else {}
            profile = profile_call(step, self.device, warmup=0)
            self.record(name, "train", rate, "img/s", count_flops(step), batch_size=batch_size, **profile, **extra)

    def train(self, name: str, step: Callable[[], None], batch_size: int, calls: int = 3) -> None:
        if not self.wanted(name):
            return
        if self.kernels_only:
            profile = profile_call(step, self.device)
            self.results.append({"name": name, "kind": "train", "unit": "img/s", "batch_size": batch_size, **profile})
            print(f"train  {name:56s} {profile['kernels']:6d} kernels, {profile['syncs']} syncs", flush=True)
            return
        rate = timed(step, batch_size, self.repeats, calls=calls, sync=self.sync)
        # The profile before the FLOP count: under the counter's dispatch mode a compiled model falls back to eager.
        profile = profile_call(step, self.device, warmup=0)  # the timing warmed it up
        self.record(name, "train", rate, "img/s", count_flops(step), batch_size=batch_size, **profile)

    def unets(self, configs: list[tuple[str, tuple[int, ...], int, int, bool]]) -> None:
        from diffusers import UNet2DModel

        for label, widths, layers, batch_size, ema in configs:
            batch = make_batch(batch_size, self.device)
            layouts = [("", {})] + ([(", paper layout", PAPER_LAYOUT)] if layers == 2 and has_paper_layout() else [])
            for suffix, options in layouts:
                self.train_task(f"compgen U-Net {label} {widths}{suffix}",
                                lambda o=options, w=widths, n=layers: unet_task(w, n, **o), batch, batch_size, ema)
            if self.wanted(f"diffusers UNet2DModel {label} {widths}"):
                torch.manual_seed(0)
                peer = UNet2DModel(sample_size=28, block_out_channels=widths, layers_per_block=layers,
                                   down_block_types=("DownBlock2D",) * len(widths),
                                   up_block_types=("UpBlock2D",) * len(widths), norm_num_groups=8)
                timesteps = torch.randint(0, 500, (batch_size,), device=self.device)
                images = batch["images"]
                self.train(f"diffusers UNet2DModel {label} {widths}", plain_step(
                    peer, lambda p=peer, t=timesteps, x=images: F.mse_loss(p(x, t).sample.float(), x), self.device,
                    self.dtype), batch_size)
            if self.peer_dir and self.wanted(f"official ContextUnet {label} n_feat {widths[0]}"):
                self.train(f"official ContextUnet {label} n_feat {widths[0]}",
                           self.context_unet_step(widths[0], batch), batch_size)

    def context_unet_step(self, n_feat: int, batch: dict[str, torch.Tensor]) -> Callable[[], None]:
        peer = self.peer_module()
        torch.manual_seed(0)
        net = peer.ContextUnet(in_channels=3, n_feat=n_feat, n_classes=[2, 3, 1])
        x, concepts, values = batch["images"], batch["concepts"], batch["concept_values"]
        t = torch.rand(len(x), device=self.device)

        def loss() -> torch.Tensor:
            out = net(x, [concepts[:, 0], values[:, :3], values[:, 3:]], t)
            return F.mse_loss(out.float(), x)

        return plain_step(net, loss, self.device, self.dtype)

    def context_unet_sampler(self, n_feat: int, batch_size: int, steps: int) -> Callable[[], None]:
        """The official sampler: its ``DDPM`` with ``n_T = steps`` and ``sample_ddim`` (one ContextUnet call per step),
        in eval mode without gradients, as its training script calls it."""
        import contextlib
        import io

        peer = self.peer_module()
        torch.manual_seed(0)
        ddpm = peer.DDPM(nn_model=peer.ContextUnet(in_channels=3, n_feat=n_feat, n_classes=[2, 3, 1]),
                         betas=(1e-4, 0.02), n_T=steps, device=self.device, drop_prob=0.1, n_classes=[2, 3, 1])
        ddpm.to(self.device).eval()
        batch = make_batch(batch_size, torch.device("cpu"))
        conditions = {0: batch["concepts"][:, 0], 1: batch["concept_values"][:, :3], 2: batch["concept_values"][:, 3:]}

        def sample() -> None:
            with torch.no_grad(), contextlib.redirect_stdout(io.StringIO()):  # it prints every step
                ddpm.sample_ddim(batch_size, conditions, (3, 28, 28), self.device)

        return sample

    def peer_module(self) -> Any:
        """The official code's ``train.py`` as a module (from ``--peer-dir``)."""
        from compgen.training.runner import load_script

        return load_script(REPO_ROOT / "examples" / "compare_peer_unet.py").import_peer(self.peer_dir)

    def transformers(self, configs: list[tuple[str, int, int, int, int]]) -> None:
        for label, hidden, layers, heads, batch_size in configs:
            batch = make_batch(batch_size, self.device)
            for mode in [None] + ([self.compile] if self.compile else []):
                suffix = f", compiled ({mode})" if mode else ""
                names = [f"compgen MaskGIT{' + JEPA' if jepa else ''} {label} (h{hidden}, L{layers}){suffix}"
                         for jepa in (False, True)]
                steps = [task_step(token_models(hidden, layers, heads, batch, jepa), batch, self.device, self.dtype,
                                   compile_mode=mode) if self.wanted(name) else None
                         for jepa, name in zip((False, True), names, strict=True)]
                self.train_pair(names, steps, batch_size)
            torch.manual_seed(0)
            encoder = torch.nn.Sequential(
                torch.nn.Embedding(257, hidden),
                torch.nn.TransformerEncoder(torch.nn.TransformerEncoderLayer(
                    hidden, heads, 4 * hidden, 0.0, activation="gelu", batch_first=True, norm_first=True), layers),
                torch.nn.Linear(hidden, 256))
            ids = torch.randint(0, 257, (batch_size, 52), device=self.device)
            targets = torch.randint(0, 256, (batch_size, 52), device=self.device)
            self.train(f"torch TransformerEncoder {label} (h{hidden}, L{layers})", plain_step(
                encoder, lambda e=encoder, i=ids, t=targets: F.cross_entropy(e(i).float().transpose(1, 2), t),
                self.device, self.dtype), batch_size)

    def tokenizer_and_dit(self, batch_size: int) -> None:
        from diffusers import DDPMScheduler

        from compgen import TupleConditionedDiT, get_split_preset
        from compgen.models.vq_tokenizer import build_vq_tokenizer
        from compgen.shapes import shapes_continuous_concepts
        from compgen.training.dit_task import DiTTask, latent_statistics, precompute_latents
        from compgen.training.vq_task import VQTask

        batch = make_batch(batch_size, self.device)
        torch.manual_seed(0)
        vqvae = build_vq_tokenizer(block_out_channels=(16, 32, 32), vq_embed_dim=16)
        self.train_task("compgen VQ tokenizer cpu-quick (16,32,32)",
                        lambda: VQTask(copy.deepcopy(vqvae), restart_every=25, total_steps=1000, crop_size=16), batch,
                        batch_size)
        space = get_split_preset("H32-train1").graph().space
        latents = precompute_latents(vqvae.cpu(), batch["uint8"])
        mean, std = latent_statistics(latents)
        dit = TupleConditionedDiT(space.to_dict(), latent_channels=16, grid_size=7, hidden_size=128, num_layers=4,
                                  num_heads=4, conditioning="full", latent_mean=mean, latent_std=std,
                                  continuous_concepts=shapes_continuous_concepts(space))
        self.train_task("compgen DiT cpu-quick (h128, L4)", lambda: DiTTask(
            copy.deepcopy(dit), vqvae, DDPMScheduler(num_train_timesteps=500, prediction_type="v_prediction",
                                                     clip_sample=False), latents), batch, batch_size, ema=True)

    def sampling(self, unet_batch: int, maskgit_batch: int, steps: int = 50) -> None:
        """Images per second of compgen's samplers and of the official ContextUnet's (``DDPM.sample_ddim``), all
        with ``steps`` denoiser calls per image, at base width 64."""
        names = ["000", "001", "010", "100", "011", "101", "110", "111"]
        concepts = [names[i % 8] for i in range(unet_batch)]
        layouts = [("(64, 128)", 1, {})] + ([("(64, 128), paper layout", 2, PAPER_LAYOUT)] if has_paper_layout()
                                            else [])
        modes = [None] + ([self.compile] if self.compile else [])
        for label, layers, options in layouts:
            for mode in modes:
                name = f"DDPM sampling, DDIM {steps} steps, compgen U-Net {label}" + (f", compiled ({mode})"
                                                                                      if mode else "")
                if not self.wanted(name):
                    continue
                task = unet_task((64, 128), layers, **options)
                task.model.to(self.device).eval()
                task.to(self.device)
                task.eval_inference_steps = steps
                task.sampling_compile_mode = mode
                rate = timed(lambda t=task: t.generate(t.model, concepts, 0), unet_batch, self.repeats, warmup=1,
                             calls=1, sync=self.sync)
                self.record(name, "sample", rate, "img/s")
        name = f"DDPM sampling, {steps} steps, official ContextUnet n_feat 64 (sample_ddim)"
        if self.peer_dir and self.wanted(name):
            rate = timed(self.context_unet_sampler(64, unet_batch, steps), unet_batch, self.repeats, warmup=1,
                         calls=1, sync=self.sync)
            self.record(name, "sample", rate, "img/s")
        batch = make_batch(8, self.device)
        maskgit = token_models(128, 4, 4, batch, jepa=False)
        maskgit.model.to(self.device).eval()
        maskgit.to(self.device)
        concepts = [names[i % 8] for i in range(maskgit_batch)]
        rate = timed(lambda: maskgit.generate(maskgit.model, concepts, 0), maskgit_batch, self.repeats, warmup=1,
                     calls=1, sync=self.sync)
        self.record("MaskGIT decoding, 12 steps, cpu-quick (h128, L4)", "sample", rate, "img/s")

    def evaluation_fraction(self, eval_steps: int = 250, batch_size: int = 64) -> None:
        """One tracker evaluation (8 classes x 50 samples, 20 DDIM steps, both scorers) vs ``eval_steps`` steps."""
        from compgen import get_split_preset
        from compgen.evaluation.probes import default_shapes_probes
        from compgen.evaluation.tracker import LearningDynamicsTracker

        task = unet_task((64, 128), 1)
        task.eval_inference_steps = 20
        batch = make_batch(batch_size, self.device)
        step = task_step(task, batch, self.device, self.dtype)
        step_rate = timed(step, 1, self.repeats, calls=3, sync=self.sync)["median"]
        graph = get_split_preset("H32-train1").graph()
        tracker = LearningDynamicsTracker(graph, default_shapes_probes(graph.space), num_images_per_class=50)
        tracker.evaluate(lambda c, s: task.generate(task.model, c, s), step=0)  # calibration, warm-up
        start = time.perf_counter()
        tracker.evaluate(lambda c, s: task.generate(task.model, c, s), step=1)
        seconds = time.perf_counter() - start
        training = eval_steps / step_rate
        fraction = seconds / (seconds + training)
        self.record(f"evaluation share, U-Net cpu-quick (every {eval_steps} steps)", "eval",
                    {"median": fraction, "min": fraction, "max": fraction}, "of wall-clock",
                    eval_seconds=round(seconds, 2), training_seconds=round(training, 2))


def markdown(results: list[dict[str, Any]], header: dict[str, Any]) -> str:
    lines = [f"Device: {header['device']} ({header['machine']}), torch {header['torch']}, {header['threads']} "
             f"thread(s), {header['precision']}; convolutions in {header['op_precision']['conv']}, matmuls in "
             f"{header['op_precision']['matmul']}; matmul peak measured: "
             + ", ".join(f"{v:.3f} TFLOP/s ({k})" for k, v in header["peak_tflops"].items()) + ".",
             "", "| kind | benchmark | median | min | max | unit | share of matmul peak | kernels per step |",
             "|---|---|---|---|---|---|---|---|"]
    for r in results:
        share = f"{r['peak_fraction']:.1%}" if "peak_fraction" in r else ""
        kernels = r.get("kernels", "")
        if "median" not in r:
            lines.append(f"| {r['kind']} | {r['name']} |  |  |  |  |  | {kernels} |")
            continue
        fmt = ".1%" if r["unit"] == "of wall-clock" else ".1f"
        lines.append(f"| {r['kind']} | {r['name']} | {r['median']:{fmt}} | {r['min']:{fmt}} | {r['max']:{fmt}} | "
                     f"{r['unit'] if r['unit'] != 'of wall-clock' else 'of evaluation + training wall-clock'} | "
                     f"{share} | "
                     f"{kernels} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--threads", type=int, default=1, help="CPU threads (torch.set_num_threads)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--bf16", action="store_true", help="bf16 autocast for the training steps")
    parser.add_argument("--tf32", action="store_true",
                        help="TF32 matmuls on CUDA (torch.backends.cuda.matmul.allow_tf32; convolutions use TF32 "
                             "there by default)")
    parser.add_argument("--peer-dir", "--peer_dir", dest="peer_dir", default=None,
                        help="a checkout of phys-ai/concept_graphs (for the official ContextUnet)")
    parser.add_argument("--compile", nargs="?", const="default", default=None, metavar="MODE",
                        help="also time compgen's steps and sampling under torch.compile (default, reduce-overhead, "
                             "max-autotune)")
    parser.add_argument("--kernels-only", "--kernels_only", dest="kernels_only", action="store_true",
                        help="only count each training step's kernels and host syncs (no timing)")
    parser.add_argument("--channels-last", "--channels_last", dest="channels_last", action="store_true",
                        help="compgen's convolutional models and images in channels-last memory order")
    parser.add_argument("--adamw", choices=["compgen", "fused", "foreach", "loop"], default="compgen",
                        help="AdamW implementation of compgen's steps (compgen: the training loop's choice)")
    parser.add_argument("--sample-batch", "--sample_batch", dest="sample_batch", type=int, default=None,
                        help="images per U-Net sampling call (default 64 on a CPU, 512 on a GPU)")
    parser.add_argument("--skip", nargs="+", default=[],
                        help="leave out the rows whose names match these regular expressions")
    parser.add_argument("--only", nargs="+", default=None,
                        choices=["unet", "unet-paper", "transformer", "transformer-paper", "tokens", "sample", "eval"])
    parser.add_argument("--output", default=None, help="JSON path (a .md table is written beside it)")
    parser.add_argument("--time-to-emergence", action="store_true",
                        help="also train the cpu-quick U-Net preset until every level reaches 0.9 (minutes)")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    if args.tf32:
        torch.backends.cuda.matmul.allow_tf32 = True
    global ADAMW, CHANNELS_LAST
    ADAMW, CHANNELS_LAST = args.adamw, args.channels_last
    device = torch.device(args.device)
    dtype = torch.bfloat16 if args.bf16 else None
    bench = Bench(device, args.repeats, dtype, args.peer_dir, args.compile, args.kernels_only, args.skip)
    cpu = device.type == "cpu"
    wanted = set(args.only or ["unet", "unet-paper", "transformer", "transformer-paper", "tokens", "sample", "eval"])
    if "unet" in wanted:
        bench.unets([("cpu-quick", (32, 64), 1, 64, True), ("width 64", (64, 128), 1, 64, False)])
    if "unet-paper" in wanted:
        bench.unets([("paper", (256, 512), 2, 16 if cpu else 64, False)])
    if "transformer" in wanted:
        bench.transformers([("cpu-quick", 128, 4, 4, 64)])
    if "transformer-paper" in wanted:
        bench.transformers([("paper", 448, 12, 8, 16 if cpu else 64)])
    if "tokens" in wanted:
        bench.tokenizer_and_dit(64)
    if "sample" in wanted:
        bench.sampling(args.sample_batch or (64 if cpu else 512), 256 if cpu else 1024)
    if "eval" in wanted:
        bench.evaluation_fraction()
    header = {"device": str(device) if cpu else torch.cuda.get_device_name(device), "machine": platform.processor()
              or platform.machine(), "torch": torch.__version__, "threads": args.threads,
              "precision": "bf16 autocast" if dtype else "fp32", "matmul_peak_tflops": bench.peak / 1e12,
              "peak_tflops": {k: v / 1e12 for k, v in bench.peaks.items()}, "op_precision": bench.precision}
    if args.time_to_emergence:
        header["time_to_emergence"] = time_to_emergence()
    if args.output:
        path = Path(args.output)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"header": header, "results": bench.results}, indent=2) + "\n")
        path.with_suffix(".md").write_text(markdown(bench.results, header))
    print(markdown(bench.results, header))
    return bench.results


def time_to_emergence() -> dict[str, Any]:
    """Train the cpu-quick U-Net preset (as the README runs it) and report when every level first reached 0.9."""
    import tempfile

    from compgen.training.runner import load_script

    out = Path(tempfile.mkdtemp(prefix="emergence-"))
    start = time.perf_counter()
    records = load_script(REPO_ROOT / "examples" / "train_tuple_unet.py").main(
        ["--preset", "cpu-quick", "--output_dir", str(out)]) or []
    if not records:
        from compgen.evaluation.tracker import read_log

        records = read_log(out / "learning_dynamics.jsonl")
    both = [r for r in records if min(r["level_accuracy"].values()) >= 0.9
            and min(r.get("pixel_level_accuracy", r["level_accuracy"]).values()) >= 0.9]
    return {"total_minutes": round((time.perf_counter() - start) / 60, 1),
            "minutes_to_all_levels_0.9": round(both[0]["wall_clock_s"] / 60, 1) if both else None,
            "step": both[0]["step"] if both else None}


if __name__ == "__main__":
    main()
