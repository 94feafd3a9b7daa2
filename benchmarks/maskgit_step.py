"""The cpu-quick MaskGIT training step (``examples/train_maskgit_jepa.py``'s cpu-quick and cpu-long model), timed per
objective, precision and attention kernel: what a 2x10^4-step run of ``studies/paper_b_jepa.yaml`` costs.

One step is what the training loop does: the task's loss (masks, the JEPA target's forward), backward, a fused AdamW
update and the JEPA target's EMA update, at batch 64 on a 7x7 token grid with three concept tokens, on synthetic
tokens (the cost does not depend on their values). Each configuration is warmed up, then timed over ``--steps``.

    OMP_NUM_THREADS=1 python benchmarks/maskgit_step.py --output benchmarks/results/maskgit_step_cpu.json
"""

from __future__ import annotations

import itertools
import json
import platform
import statistics
import time
from pathlib import Path

import torch

from compgen import MaskGITScheduler, MaskGITTransformer
from compgen.cli import ArgumentParser
from compgen.models.vq_tokenizer import build_vq_tokenizer
from compgen.training.acceleration import attention_kernel
from compgen.training.tasks.maskgit import MaskGITTask

SPACE = {"shape": ["circle", "triangle"], "color": ["red", "blue"], "size": ["large", "small"]}


def build_task(jepa_weight: float) -> MaskGITTask:
    """The cpu-quick MaskGIT (width 128, 4 layers, 4 heads) over a 256-code tokenizer, as the preset builds it."""
    torch.manual_seed(0)
    transformer = MaskGITTransformer(SPACE, codebook_size=256, grid_size=7, hidden_size=128, num_layers=4,
                                     num_heads=4, conditioning="quantized")
    vqvae = build_vq_tokenizer(28, block_out_channels=(8, 8, 8), num_vq_embeddings=256, vq_embed_dim=4,
                               norm_num_groups=4)
    tokens = torch.randint(0, 256, (5000, 49))
    return MaskGITTask(transformer, vqvae, MaskGITScheduler(mask_token_id=256), tokens, jepa_weight=jepa_weight,
                       total_steps=20000)


def time_steps(jepa_weight: float, precision: str, kernel: str, steps: int, warmup: int) -> list[float]:
    """Seconds per step of ``steps`` steps after ``warmup`` untimed ones."""
    task = build_task(jepa_weight)
    model = task.model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, fused=True)
    generator = torch.Generator().manual_seed(0)
    times = []
    for step in range(warmup + steps):
        batch = {"index": torch.randint(0, 5000, (64,), generator=generator),
                 "concepts": torch.randint(0, 2, (64, 3), generator=generator)}
        begin = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16"), attention_kernel(kernel):
            loss, _ = task.compute_loss(model, batch, torch.Generator().manual_seed(step), step)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        task.after_optimizer_step(model, step + 1)
        if step >= warmup:
            times.append(time.perf_counter() - begin)
    return times


def main() -> None:
    parser = ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--output", default=None, help="a JSON file for the results")
    args = parser.parse_args()
    rows = []
    for jepa_weight, precision, kernel in itertools.product((0.0, 0.6), ("bf16", "fp32"), ("auto", "math")):
        times = time_steps(jepa_weight, precision, kernel, args.steps, args.warmup)
        row = {"objective": "MaskGIT + JEPA" if jepa_weight else "MaskGIT", "precision": precision,
               "attention_kernel": kernel, "median_ms_per_step": round(1000 * statistics.median(times), 1),
               "steps": args.steps}
        rows.append(row)
        print(json.dumps(row), flush=True)
    if args.output:
        result = {"machine": f"{platform.processor() or platform.machine()}, torch {torch.__version__}, "
                             f"{torch.get_num_threads()} thread(s)",
                  "bf16_native": torch.cpu._is_amx_tile_supported() or torch.cpu._is_avx512_bf16_supported(),
                  "command": "OMP_NUM_THREADS=1 python benchmarks/maskgit_step.py", "rows": rows}
        Path(args.output).write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
