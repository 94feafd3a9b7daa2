"""Device placement without a GPU: every task's training step runs on PyTorch's ``meta`` device.

Why ``meta``: it is a real, non-CPU device that every PyTorch build has. A tensor on it has a shape and a dtype but
no data, and an operation that mixes it with a CPU tensor fails ("Tensor on device cpu is not on the expected device
meta") exactly where it would fail on CUDA; anything that reads data on the host (``.item()``, boolean indexing,
``if tensor.any()``) fails too, which is also what would stall a GPU step. :class:`StrictDeviceMode` adds the one
check ``meta`` lacks (a CPU tensor indexed by a device index silently stays on the CPU there; CUDA refuses).

The test makes the Trainer's Accelerator report ``meta`` as its device, so the real code path runs:
``Trainer.prepare`` places the model, the task's modules and tensors (a tokenizer, precomputed tokens, a JEPA target
encoder) and the training data, then ``Trainer.training_step`` draws the batch, the noise, the masks and the dropout
and runs forward, backward, gradient clipping, the optimizer step, the task's post-step hook and the EMA update.
AdamW reads its step counter on the host on every non-CUDA device, so the check swaps in SGD, whose update is
device-only; placing optimizer state next to its parameters is PyTorch's job.
"""

import pytest
import torch
from accelerate import Accelerator
from conftest import small_training_data
from device_checks import META, StrictDeviceMode, tensors_off_device
from diffusers import DDPMScheduler

from compgen import (
    GIVTTransformer,
    MARTransformer,
    MaskGITScheduler,
    MaskGITTransformer,
    TupleConditionedDiT,
    TupleConditionedUNet2DModel,
)
from compgen.data.loading import ConceptImageData
from compgen.models.kl_tokenizer import build_kl_tokenizer
from compgen.models.vq_tokenizer import build_vq_tokenizer
from compgen.shapes import shapes_continuous_concepts
from compgen.training.config import TrainingConfig
from compgen.training.tasks.ddpm import DDPMTask
from compgen.training.tasks.dit import DiTTask
from compgen.training.tasks.givt import GIVTTask
from compgen.training.tasks.kl_tokenizer import KLTask
from compgen.training.tasks.latent_tokenizer import latent_model_options
from compgen.training.tasks.mar import MARTask
from compgen.training.tasks.maskgit import MaskGITTask, precompute_tokens
from compgen.training.tasks.vq_tokenizer import VQTask
from compgen.training.trainer import Trainer

pytestmark = pytest.mark.usefixtures("fresh_accelerator_state", "single_thread")

@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return small_training_data("tiny-device", cache_dir=tmp_path_factory.mktemp("hf"), split_preset="H32-train1",
                              images_per_class=8, test_images_per_class=2)


@pytest.fixture
def meta_accelerator(monkeypatch):
    monkeypatch.setattr(Accelerator, "device", property(lambda self: META))


def unet_task(data: ConceptImageData, dropout: float = 0.0, **options) -> DDPMTask:
    unet = TupleConditionedUNet2DModel(data.space.to_dict(), block_out_channels=(8, 16), norm_num_groups=4,
                                       conditioning="full", continuous_concepts=shapes_continuous_concepts(data.space),
                                       concept_dropout=dropout, **options)
    return DDPMTask(unet, DDPMScheduler(num_train_timesteps=50, prediction_type="v_prediction"))


def maskgit_task(data: ConceptImageData, jepa_weight: float) -> MaskGITTask:
    vqvae = build_vq_tokenizer(block_out_channels=(8, 8, 8), num_vq_embeddings=16, vq_embed_dim=4)
    transformer = MaskGITTransformer(data.space.to_dict(), codebook_size=16, grid_size=7, hidden_size=16,
                                     num_layers=2, num_heads=2, conditioning="full",
                                     continuous_concepts=shapes_continuous_concepts(data.space), concept_dropout=0.1)
    scheduler = MaskGITScheduler(mask_token_id=transformer.mask_token_id)
    return MaskGITTask(transformer, vqvae, scheduler, precompute_tokens(vqvae, data.images), jepa_weight=jepa_weight,
                       jepa_layers=(1, 2) if jepa_weight else None, total_steps=4)


def vq_task(data: ConceptImageData) -> VQTask:
    vqvae = build_vq_tokenizer(block_out_channels=(8, 8, 8), num_vq_embeddings=16, vq_embed_dim=4)
    return VQTask(vqvae, restart_every=1, total_steps=4, crop_size=16)


def kl_task(data: ConceptImageData) -> KLTask:
    """The KL tokenizer: its crops and posterior noise are drawn on the CPU and moved."""
    return KLTask(build_kl_tokenizer(block_out_channels=(8, 8, 8), latent_channels=4), crop_size=16)


def latent_task(data: ConceptImageData, family: str, kl: bool = False):
    """The DiT, GIVT or MAR over a tiny frozen tokenizer's latents (a VQ tokenizer's, or a KL one's)."""
    tokenizer = (build_kl_tokenizer(block_out_channels=(8, 8, 8), latent_channels=4) if kl else
                 build_vq_tokenizer(block_out_channels=(8, 8, 8), num_vq_embeddings=16, vq_embed_dim=4)).eval()
    latents, options = latent_model_options(tokenizer, data.images)
    options |= dict(concept_space=data.space.to_dict(), grid_size=7, hidden_size=16, num_layers=2, num_heads=2,
                    conditioning="full", continuous_concepts=shapes_continuous_concepts(data.space),
                    concept_dropout=0.1)
    ddpm = DDPMScheduler(num_train_timesteps=50, prediction_type="v_prediction", clip_sample=False)
    if family == "dit":
        return DiTTask(TupleConditionedDiT(**options), tokenizer, ddpm, latents)
    masking = MaskGITScheduler(mask_token_id=0)
    if family == "givt":
        return GIVTTask(GIVTTransformer(**options, num_mixtures=2), tokenizer, masking, latents)
    return MARTask(MARTransformer(**options, head_width=16, head_depth=1), tokenizer, masking, ddpm, latents)


TASKS = {
    "ddpm": lambda data: unet_task(data),
    "ddpm-concept-dropout": lambda data: unet_task(data, dropout=0.2),
    "ddpm-paper-layout": lambda data: unet_task(data, block_type="paper", norm_type="batch"),
    "maskgit": lambda data: maskgit_task(data, jepa_weight=0.0),
    "maskgit-jepa": lambda data: maskgit_task(data, jepa_weight=0.6),
    "vq": vq_task,
    "kl": kl_task,
    "dit": lambda data: latent_task(data, "dit"),
    "dit-kl": lambda data: latent_task(data, "dit", kl=True),
    "givt": lambda data: latent_task(data, "givt"),
    "mar": lambda data: latent_task(data, "mar"),
}


def run_steps_on_meta(task, data, tmp_path, steps: int = 2) -> None:
    train_data, graph = data
    config = TrainingConfig(output_dir=str(tmp_path), train_batch_size=8, max_train_steps=steps, use_ema=True,
                            checkpointing_steps=100, logging_steps=100)
    trainer = Trainer(config, task, train_data, graph)
    accelerator = trainer.make_accelerator()
    with StrictDeviceMode():
        state = trainer.prepare(accelerator)
        state.optimizer = torch.optim.SGD(state.model.parameters(), lr=1e-3)
        state.lr_scheduler = torch.optim.lr_scheduler.LambdaLR(state.optimizer, lambda step: 1.0)
        for _ in range(steps):
            scalars = trainer.training_step(accelerator, state)
    assert all(value.device == META for value in scalars.values())
    assert tensors_off_device(state.model, META) == []
    assert tensors_off_device(state.ema.shadow, META) == []
    for name, value in vars(task).items():
        tensors = list(value.parameters()) if isinstance(value, torch.nn.Module) else [value]
        assert all(t.device == META for t in tensors if isinstance(t, torch.Tensor)), name


@pytest.mark.parametrize("name", sorted(TASKS))
def test_every_training_step_runs_on_the_device(name, data, tmp_path, meta_accelerator):
    torch.manual_seed(0)
    run_steps_on_meta(TASKS[name](data[0]), data, tmp_path)


def test_the_check_catches_a_host_tensor_in_device_work(data, tmp_path, meta_accelerator):
    class LeakyDDPMTask(DDPMTask):
        """Draws its noise on the CPU and forgets to move it: the classic mistake."""

        def compute_loss(self, model, batch, generator, step):
            noise = torch.randn(batch["images"].shape, generator=generator)
            timesteps = torch.zeros(len(noise), dtype=torch.long, device=batch["images"].device)
            return (model(noise, timesteps, batch["concepts"]).sample ** 2).mean(), {}

    task = unet_task(data[0])
    leaky = LeakyDDPMTask(task.model, task.scheduler)
    with pytest.raises(RuntimeError, match="meta|device"):
        run_steps_on_meta(leaky, data, tmp_path)
