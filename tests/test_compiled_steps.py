"""Every task's training step, and DDPM sampling, traced whole by ``torch.compile``.

``fullgraph=True`` refuses any graph break, so a model that read a tensor on the host (``.item()``, ``if
tensor.any()``), branched on data or changed shape with the data would fail here: what compiles whole can also be
captured as a CUDA graph (``--torch_compile reduce-overhead``). The ``aot_eager`` backend traces the forward and the
backward exactly as inductor does but runs the traced graph with eager kernels, so the check takes seconds on a CPU;
one test runs inductor itself on the smallest model.
"""

import numpy as np
import pytest
import torch
from model_families import TABLE, TASK_CASES, Family, require

from compgen.training import acceleration
from compgen.training.config import TrainingConfig, add_training_arguments, config_from_args

pytestmark = pytest.mark.usefixtures("single_thread")
FAMILY = {family.id: family for family in TABLE}


def batch(size: int = 4) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    images = torch.randint(0, 256, (size, 28, 28, 3), dtype=torch.uint8, generator=generator)
    concepts = torch.tensor([[0, 0, 0], [1, 1, 1], [0, 1, 0], [1, 0, 1]])[:size]
    values = torch.rand(size, 4, generator=generator)
    return {"uint8": images, "images": images.permute(0, 3, 1, 2).float() / 127.5 - 1, "concepts": concepts,
            "concept_values": values, "index": torch.arange(size)}


def task_of(family: Family, variant: str = "", size: int = 4):
    """The row's task over the batch's images (its tokens or latents precomputed from them)."""
    return family.tasks[variant](family.model(), batch(size)["uint8"])


def loss_and_grads(task, model, data, seed: int = 3):
    for p in task.model.parameters():
        p.grad = None
    loss, _ = task.compute_loss(model, data, torch.Generator().manual_seed(seed), 1)
    loss.backward()
    return loss.detach(), [None if p.grad is None else p.grad.clone() for p in task.model.parameters()]


@pytest.mark.parametrize("family, variant", TASK_CASES)
def test_every_training_step_compiles_whole_and_matches_eager(family: Family, variant):
    require(family, "training-step-compiles")
    torch.manual_seed(0)
    task = task_of(family, variant)
    task.model.train()
    data = batch()
    eager_loss, eager_grads = loss_and_grads(task, task.model, data)
    compiled = torch.compile(task.model, backend="aot_eager", fullgraph=True, dynamic=False)
    for _ in range(2):  # the second step replays the graph of the first (same shapes: no recompilation)
        loss, grads = loss_and_grads(task, compiled, data)
    torch.testing.assert_close(loss, eager_loss, rtol=1e-4, atol=1e-5)
    for grad, eager in zip(grads, eager_grads, strict=True):
        assert (grad is None) == (eager is None)
        if grad is not None:
            torch.testing.assert_close(grad, eager, rtol=1e-3, atol=1e-5)


@pytest.mark.parametrize("name", ["tuple-unet", "tuple-dit", "flow-dit"])
def test_sampling_runs_compiled_with_the_eager_result(name, monkeypatch):
    torch.manual_seed(0)
    task = task_of(FAMILY[name])
    concepts = ["000", "111", "010"]
    eager = task.generate(task.model, concepts, seed=5)
    backends = []
    compile_ = torch.compile

    def aot_eager_compile(model, **options):
        backends.append(options)
        return compile_(model, backend="aot_eager", fullgraph=True, dynamic=False)

    monkeypatch.setattr(acceleration.torch, "compile", aot_eager_compile)
    task.sampling_compile_mode = "reduce-overhead"
    compiled = task.generate(task.model, concepts, seed=5)
    assert backends == [{"mode": "reduce-overhead"}]
    assert np.abs(compiled.astype(int) - eager.astype(int)).max() <= 1
    task.generate(task.model, concepts, seed=5)
    assert len(backends) == 1  # compiled once per model and mode


@pytest.mark.slow
def test_inductor_compiles_the_smallest_unet_step():
    """The real backend (C++ code generation on a CPU) on one small step: the same loss as eager."""
    torch.manual_seed(0)
    task = task_of(FAMILY["tuple-unet"], size=2)
    task.model.train()
    data = batch(2)
    eager_loss, _ = loss_and_grads(task, task.model, data)
    compiled_loss, _ = loss_and_grads(task, torch.compile(task.model, fullgraph=True, dynamic=False), data)
    torch.testing.assert_close(compiled_loss, eager_loss, rtol=1e-4, atol=1e-5)


def test_torch_compile_flag_takes_a_mode_and_stays_backward_compatible():
    import argparse

    parser = argparse.ArgumentParser()
    add_training_arguments(parser)
    read = lambda *argv: config_from_args(parser.parse_args(list(argv))).torch_compile  # noqa: E731
    assert read() is False
    assert read("--torch_compile") is True  # the flag alone: inductor's default mode, as before
    assert read("--torch_compile", "reduce-overhead") == "reduce-overhead"
    assert read("--torch_compile", "default") is True
    assert read("--torch_compile", "max-autotune", "--no_torch_compile") is False
    assert TrainingConfig(torch_compile=True).torch_compile is True
    assert acceleration.compile_mode(True) == "default" and acceleration.compile_mode(False) is None
    with pytest.raises(ValueError, match="reduce-overhead"):
        TrainingConfig(torch_compile="fastest")
    plugin = acceleration.dynamo_plugin("max-autotune")
    assert (plugin.backend.value.lower(), plugin.mode) == ("inductor", "max-autotune")
    assert acceleration.dynamo_plugin(False).backend.value.lower() == "no"
