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
from diffusers import DDPMScheduler

from compgen import (
    GIVTTransformer,
    MARTransformer,
    MaskGITScheduler,
    MaskGITTransformer,
    TupleConditionedDiT,
    TupleConditionedUNet2DModel,
    shapes_space,
)
from compgen.models.kl_tokenizer import build_kl_tokenizer
from compgen.models.vq_tokenizer import build_vq_tokenizer
from compgen.shapes import shapes_continuous_concepts
from compgen.training import acceleration
from compgen.training.config import TrainingConfig, add_training_arguments, config_from_args
from compgen.training.tasks.ddpm import DDPMTask
from compgen.training.tasks.dit import DiTTask
from compgen.training.tasks.givt import GIVTTask
from compgen.training.tasks.kl_tokenizer import KLTask
from compgen.training.tasks.latent_tokenizer import latent_statistics, precompute_latents
from compgen.training.tasks.mar import MARTask
from compgen.training.tasks.maskgit import MaskGITTask, precompute_tokens
from compgen.training.tasks.vq_tokenizer import VQTask

pytestmark = pytest.mark.usefixtures("single_thread")
SPACE = shapes_space()
VALUES = shapes_continuous_concepts(SPACE)


def batch(size: int = 4) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    images = torch.randint(0, 256, (size, 28, 28, 3), dtype=torch.uint8, generator=generator)
    concepts = torch.tensor([[0, 0, 0], [1, 1, 1], [0, 1, 0], [1, 0, 1]])[:size]
    values = torch.rand(size, 4, generator=generator)
    return {"uint8": images, "images": images.permute(0, 3, 1, 2).float() / 127.5 - 1, "concepts": concepts,
            "concept_values": values, "index": torch.arange(size)}


def unet(**options) -> DDPMTask:
    model = TupleConditionedUNet2DModel(SPACE.to_dict(), block_out_channels=(8, 16), norm_num_groups=4,
                                        conditioning="full", continuous_concepts=VALUES, **options)
    return DDPMTask(model, DDPMScheduler(num_train_timesteps=50, prediction_type="v_prediction"),
                    eval_inference_steps=3)


def tokenizer():
    return build_vq_tokenizer(block_out_channels=(8, 8, 8), num_vq_embeddings=16, vq_embed_dim=4)


def maskgit(jepa_weight: float) -> MaskGITTask:
    vqvae = tokenizer()
    transformer = MaskGITTransformer(SPACE.to_dict(), codebook_size=16, grid_size=7, hidden_size=16, num_layers=2,
                                     num_heads=2, conditioning="full", continuous_concepts=VALUES, concept_dropout=0.1)
    tokens = precompute_tokens(vqvae, batch()["uint8"])
    return MaskGITTask(transformer, vqvae, MaskGITScheduler(mask_token_id=16), tokens, jepa_weight=jepa_weight,
                       jepa_layers=(1, 2) if jepa_weight else None, total_steps=4)


def dit() -> DiTTask:
    vqvae = tokenizer()
    latents = precompute_latents(vqvae, batch()["uint8"])
    mean, std = latent_statistics(latents)
    model = TupleConditionedDiT(SPACE.to_dict(), latent_channels=4, grid_size=7, hidden_size=16, num_layers=2,
                                num_heads=2, conditioning="full", continuous_concepts=VALUES, latent_mean=mean,
                                latent_std=std, concept_dropout=0.1)
    scheduler = DDPMScheduler(num_train_timesteps=50, prediction_type="v_prediction", clip_sample=False)
    return DiTTask(model, vqvae, scheduler, latents, eval_inference_steps=3)


def masked_latent(family: str) -> GIVTTask | MARTask:
    """GIVT or MAR over the VQ tokenizer's latents (their masks drawn on the CPU, gathered by index)."""
    vqvae = tokenizer()
    latents = precompute_latents(vqvae, batch()["uint8"])
    mean, std = latent_statistics(latents)
    options = dict(concept_space=SPACE.to_dict(), latent_channels=4, grid_size=7, hidden_size=16, num_layers=2,
                   num_heads=2, conditioning="full", continuous_concepts=VALUES, latent_mean=mean, latent_std=std,
                   concept_dropout=0.1)
    masking = MaskGITScheduler(mask_token_id=0)
    if family == "givt":
        return GIVTTask(GIVTTransformer(**options, num_mixtures=2), vqvae, masking, latents)
    ddpm = DDPMScheduler(num_train_timesteps=50, prediction_type="v_prediction", clip_sample=False)
    return MARTask(MARTransformer(**options, head_width=16, head_depth=1), vqvae, masking, ddpm, latents)


TASKS = {
    "unet": unet,
    "unet-paper-layout": lambda: unet(block_type="paper", norm_type="batch", layers_per_block=2),
    "unet-concept-dropout": lambda: unet(concept_dropout=0.2),
    "maskgit": lambda: maskgit(0.0),
    "maskgit-jepa": lambda: maskgit(0.6),
    "dit": dit,
    "vq": lambda: VQTask(tokenizer(), restart_every=1, total_steps=4, crop_size=16),
    "kl": lambda: KLTask(build_kl_tokenizer(block_out_channels=(8, 8, 8), latent_channels=4), crop_size=16),
    "givt": lambda: masked_latent("givt"),
    "mar": lambda: masked_latent("mar"),
}


def loss_and_grads(task, model, data, seed: int = 3):
    for p in task.model.parameters():
        p.grad = None
    loss, _ = task.compute_loss(model, data, torch.Generator().manual_seed(seed), 1)
    loss.backward()
    return loss.detach(), [None if p.grad is None else p.grad.clone() for p in task.model.parameters()]


@pytest.mark.parametrize("name", sorted(TASKS))
def test_every_training_step_compiles_whole_and_matches_eager(name):
    torch.manual_seed(0)
    task = TASKS[name]()
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


@pytest.mark.parametrize("name", ["unet", "dit"])
def test_sampling_runs_compiled_with_the_eager_result(name, monkeypatch):
    torch.manual_seed(0)
    task = TASKS[name]()
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
    task = unet(layers_per_block=1)
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
