"""Evaluation cost: one learning-dynamics evaluation of the cpu-quick U-Net as a share of the wall-clock around it."""

from __future__ import annotations

import time

from suite.bench import Bench
from suite.common import make_batch, task_step, timed, unet_task


def evaluation_fraction(bench: Bench, eval_steps: int = 250, batch_size: int = 64, images_per_class: int = 50) -> None:
    """One tracker evaluation (8 classes x ``images_per_class`` samples, 20 DDIM steps, both scorers) against the
    training time of ``eval_steps`` steps, as a share of the two together."""
    from compgen import get_split_preset
    from compgen.evaluation.probes import default_shapes_probes
    from compgen.evaluation.tracker import LearningDynamicsTracker

    task = unet_task((64, 128), 1)
    task.eval_inference_steps = 20
    batch = make_batch(batch_size, bench.device)
    step = task_step(task, batch, bench.settings)
    step_rate = timed(step, 1, bench.repeats, calls=3, sync=bench.sync)["median"]
    graph = get_split_preset("H32-train1").graph()
    tracker = LearningDynamicsTracker(graph, default_shapes_probes(graph.space), num_images_per_class=images_per_class)
    tracker.evaluate(lambda c, s: task.generate(task.model, c, s), step=0)  # calibration, warm-up
    start = time.perf_counter()
    tracker.evaluate(lambda c, s: task.generate(task.model, c, s), step=1)
    seconds = time.perf_counter() - start
    training = eval_steps / step_rate
    fraction = seconds / (seconds + training)
    bench.record(f"evaluation share, U-Net cpu-quick (every {eval_steps} steps)", "eval",
                 {"median": fraction, "min": fraction, "max": fraction}, "of wall-clock",
                 eval_seconds=round(seconds, 2), training_seconds=round(training, 2))
