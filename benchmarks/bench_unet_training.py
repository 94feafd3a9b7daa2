"""Training throughput of the tuple-conditioned U-Net (forward + backward + AdamW step), in images per second.

    python benchmarks/bench_unet_training.py [--widths 32,64] [--layers_per_block 1] [--threads 1] [--bf16]

Prints the median and best of several timed repeats; the cpu-quick preset is the default configuration.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from compgen import TupleConditionedUNet2DModel, shapes_space
from compgen.models.tuple_unet import shapes_continuous_concepts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--widths", default="32,64")
    parser.add_argument("--layers_per_block", type=int, default=1)
    parser.add_argument("--batch_size", type=int, default=64)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--bf16", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)

    space = shapes_space()
    model = TupleConditionedUNet2DModel(
        space.to_dict(),
        block_out_channels=tuple(int(w) for w in args.widths.split(",")),
        layers_per_block=args.layers_per_block,
        conditioning="full",
        continuous_concepts=shapes_continuous_concepts(space),
    )
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    batch = args.batch_size
    images = torch.randn(batch, 3, 28, 28)
    concepts = torch.randint(0, 2, (batch, 3))
    values = torch.rand(batch, 4)
    timesteps = torch.randint(0, 500, (batch,))

    def step() -> None:
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.bf16):
            prediction = model(images, timesteps, concepts, concept_values=values).sample
        loss = torch.nn.functional.mse_loss(prediction.float(), images)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    for _ in range(3):
        step()
    rates = []
    for _ in range(args.repeats):
        start = time.perf_counter()
        for _ in range(args.steps):
            step()
        rates.append(args.steps * batch / (time.perf_counter() - start))
    params = sum(p.numel() for p in model.parameters())
    print(
        f"U-Net widths={args.widths} layers_per_block={args.layers_per_block} params={params:,} "
        f"batch={batch} threads={args.threads} {'bf16' if args.bf16 else 'fp32'}: "
        f"median {statistics.median(rates):,.0f} img/s, best {max(rates):,.0f} img/s"
    )


if __name__ == "__main__":
    main()
