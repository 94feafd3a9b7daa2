"""compgen's speed beside its peers, in one run: training and sampling throughput, FLOP/s, evaluation cost.

    python benchmarks/run_benchmarks.py [--device cpu|cuda] [--threads 1] [--peer_dir PATH] [--only unet ...]
                                        [--output benchmarks/results/cpu.json] [--time_to_emergence]

Every figure is the median of ``--repeats`` timed repeats (with min and max), measured in this process, one after
another, so compgen and its peers see the same machine:

- **train**: images per second of one training step (forward, backward, AdamW) of compgen's tasks as the training loop
  runs them (the U-Net at the cpu-quick and paper widths, MaskGIT and MaskGIT + JEPA, the VQ tokenizer, the DiT), and
  of the peers: Paper A's official ``ContextUnet`` (imported from a local checkout of phys-ai/concept_graphs given by
  ``--peer_dir``; none of its code is in compgen), diffusers' ``UNet2DModel`` and ``torch.nn.TransformerEncoder``;
- **flops**: each step's FLOPs (``torch.utils.flop_counter``) times steps per second, as a fraction of the matmul peak
  measured in the same run in the precision the step's convolutions and matmuls run in (TF32 for CUDA convolutions
  by default, and for CUDA matmuls when ``torch.backends.cuda.matmul.allow_tf32`` is on);
- **kernels**: kernels and host synchronisations of one step, optimizer and EMA included (``step_profile.py``);
- **sample**: images per second of DDPM sampling (DDIM, 50 steps) and MaskGIT decoding (12 steps);
- **eval**: one learning-dynamics evaluation of the cpu-quick U-Net preset as a fraction of the training time between
  two evaluations;
- **time to emergence** (``--time_to_emergence``, minutes): wall-clock of the cpu-quick U-Net preset until every level
  reaches 0.9 by both scorers.

Results go to ``--output`` (JSON) and a markdown table beside it; ``docs/performance.md`` collects them. Each family
is a module of ``benchmarks/suite/`` (``training``, ``sampling``, ``evaluation``, ``emergence``); this script parses the
options, runs the families they ask for and writes the files.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import platform
from pathlib import Path
from typing import Any

import torch
from step_profile import kernel_profiling
from suite import evaluation, sampling, training
from suite.bench import Bench
from suite.common import ADAMW_CHOICES, StepSettings, matmul_tf32, torch_threads
from suite.emergence import time_to_emergence
from suite.report import markdown

from compgen.cli import ArgumentParser

FAMILIES = ["unet", "unet-paper", "transformer", "transformer-paper", "tokens", "sample", "eval"]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--threads", type=int, default=1, help="CPU threads (torch.set_num_threads)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--bf16", action="store_true", help="bf16 autocast for the training steps")
    parser.add_argument("--tf32", action="store_true",
                        help="TF32 matmuls on CUDA (torch.backends.cuda.matmul.allow_tf32; convolutions use TF32 "
                             "there by default)")
    parser.add_argument("--peer_dir", "--peer-dir", dest="peer_dir", default=None,
                        help="a checkout of phys-ai/concept_graphs (for the official ContextUnet)")
    parser.add_argument("--compile", nargs="?", const="default", default=None, metavar="MODE",
                        help="also time compgen's steps and sampling under torch.compile (default, reduce-overhead, "
                             "max-autotune)")
    parser.add_argument("--kernels_only", "--kernels-only", dest="kernels_only", action="store_true",
                        help="only count each training step's kernels and host syncs (no timing)")
    parser.add_argument("--channels_last", "--channels-last", dest="channels_last", action="store_true",
                        help="compgen's convolutional models and images in channels-last memory order")
    parser.add_argument("--adamw", choices=list(ADAMW_CHOICES), default="compgen",
                        help="AdamW implementation of compgen's steps (compgen: the training loop's choice)")
    parser.add_argument("--sample_batch", "--sample-batch", dest="sample_batch", type=int, default=None,
                        help="images per U-Net sampling call (default 64 on a CPU, 512 on a GPU)")
    parser.add_argument("--skip", nargs="+", default=[],
                        help="leave out the rows whose names match these regular expressions")
    parser.add_argument("--only", nargs="+", default=None, choices=FAMILIES)
    parser.add_argument("--output", default=None, help="JSON path (a .md table is written beside it)")
    parser.add_argument("--time_to_emergence", "--time-to-emergence", dest="time_to_emergence", action="store_true",
                        help="also train the cpu-quick U-Net preset until every level reaches 0.9 (minutes)")
    return parser.parse_args(argv)


def run(args: argparse.Namespace) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The families ``args`` ask for, measured; returns their rows and the run's header."""
    device = torch.device(args.device)
    dtype = torch.bfloat16 if args.bf16 else None
    settings = StepSettings(device, dtype, channels_last=args.channels_last, adamw=args.adamw)
    bench = Bench(settings, args.repeats, args.peer_dir, args.compile, args.kernels_only, args.skip)
    cpu = device.type == "cpu"
    wanted = set(args.only or FAMILIES)
    if "unet" in wanted:
        training.unets(bench, [("cpu-quick", (32, 64), 1, 64, True), ("width 64", (64, 128), 1, 64, False)])
    if "unet-paper" in wanted:
        training.unets(bench, [("paper", (256, 512), 2, 16 if cpu else 64, False)])
    if "transformer" in wanted:
        training.transformers(bench, [("cpu-quick", 128, 4, 4, 64)])
    if "transformer-paper" in wanted:
        training.transformers(bench, [("paper", 448, 12, 8, 16 if cpu else 64)])
    if "tokens" in wanted:
        training.tokenizer_and_dit(bench, 64)
    if "sample" in wanted:
        sampling.sampling(bench, args.sample_batch or (64 if cpu else 512), 256 if cpu else 1024)
    if "eval" in wanted:
        evaluation.evaluation_fraction(bench)
    header = {"device": str(device) if cpu else torch.cuda.get_device_name(device), "machine": platform.processor()
              or platform.machine(), "torch": torch.__version__, "threads": args.threads,
              "precision": "bf16 autocast" if dtype else "fp32", "matmul_peak_tflops": bench.peak / 1e12,
              "peak_tflops": {k: v / 1e12 for k, v in bench.peaks.items()}, "op_precision": bench.precision}
    if args.time_to_emergence:
        header["time_to_emergence"] = time_to_emergence()
    return bench.results, header


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    args = parse_args(argv)
    # torch's process-wide switches change only for the run, and are restored after it.
    with contextlib.ExitStack() as scope:
        scope.enter_context(torch_threads(args.threads))
        scope.enter_context(kernel_profiling())
        if args.tf32:
            scope.enter_context(matmul_tf32(True))
        results, header = run(args)
    if args.output:
        path = Path(args.output)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"header": header, "results": results}, indent=2) + "\n")
        path.with_suffix(".md").write_text(markdown(results, header))
    print(markdown(results, header))
    return results


if __name__ == "__main__":
    main()
