"""The evaluation's object check on one CPU thread: the 3x3 maximum filter as shifted slices
(``compgen.evaluation.objects.max_filter3``) against ``F.max_pool2d``, and ``check_objects`` per image.

``max_filter3`` runs inside every round of the connected-component labelling, so it bounds how fast every evaluation
scores its samples. Prints milliseconds (median of ``--repeats``) and the speed-up.
Run: ``python benchmarks/bench_objects.py [--batch_size 400] [--repeats 7]``.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F

from compgen.cli import ArgumentParser
from compgen.concepts import shapes_space
from compgen.evaluation.objects import check_objects, max_filter3
from compgen.shapes import RenderConfig, render_classes


def milliseconds(function: Callable[[], object], repeats: int) -> float:
    """Median wall-clock of ``function()`` in milliseconds, after one warm-up call."""
    function()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        function()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def main() -> None:
    parser = ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch_size", type=int, default=400, help="images (an evaluation scores 8 x 50)")
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    torch.set_num_threads(1)

    space = shapes_space()
    classes = space.all_classes()
    concepts = [classes[index % len(classes)] for index in range(args.batch_size)]
    images = render_classes(space, concepts, seed=0, config=RenderConfig(image_size=28)).images
    labels = torch.rand(args.batch_size, 28, 28)

    pool = milliseconds(lambda: F.max_pool2d(labels[:, None], 3, stride=1, padding=1), args.repeats)
    slices = milliseconds(lambda: max_filter3(labels), args.repeats)
    check = milliseconds(lambda: check_objects(images), args.repeats)
    print(f"3x3 max filter on {args.batch_size} maps of 28x28: max_pool2d {pool:.2f} ms, max_filter3 {slices:.2f} ms "
          f"({pool / slices:.1f}x)")
    print(f"check_objects on {args.batch_size} rendered images: {check:.1f} ms "
          f"({check / args.batch_size * 1e3:.0f} us per image)")


if __name__ == "__main__":
    main()
