"""Throughput of the shapes renderer (``compgen.shapes.render_classes``) on one CPU core.

Prints images/s for a batch of every class of Paper A's cube at 28x28, for each render style (flat polygons, and the
shaded solids of the default data, ray-cast at 4 x 4 points per pixel).
Run: ``python benchmarks/bench_renderer.py [--batch_size 10000] [--repeats 7] [--image_size 28] [--style shaded]``.
"""

from __future__ import annotations

import os

# One core: pin every BLAS / OpenMP pool before numpy is imported.
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMEXPR_NUM_THREADS"):
    os.environ[_var] = "1"

import statistics  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

from compgen.cli import ArgumentParser  # noqa: E402
from compgen.concepts import shapes_space  # noqa: E402
from compgen.shapes import RenderConfig, render_classes  # noqa: E402


def main() -> None:
    parser = ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch_size", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--image_size", type=int, default=28)
    parser.add_argument("--background", action="store_true", help="use the 4-variable space with background")
    parser.add_argument("--style", choices=["flat", "shaded", "both"], default="both")
    args = parser.parse_args()

    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
    space = shapes_space(background=args.background)
    classes = np.array(space.all_classes(), dtype=np.int64)
    concepts = classes[np.arange(args.batch_size) % len(classes)]
    for style in ("flat", "shaded") if args.style == "both" else (args.style,):
        config = RenderConfig(image_size=args.image_size, style=style, rotate=style == "flat")
        render_classes(space, concepts[:256], seed=0, config=config)  # warm-up
        rates = []
        for repeat in range(args.repeats):
            start = time.perf_counter()
            render_classes(space, concepts, seed=repeat, config=config)
            rates.append(args.batch_size / (time.perf_counter() - start))
        print(
            f"render_classes {style} {args.image_size}x{args.image_size}, batch {args.batch_size}, 1 core, "
            f"{args.repeats} repeats: best {max(rates):,.0f} images/s, median {statistics.median(rates):,.0f} images/s"
        )

if __name__ == "__main__":
    main()
