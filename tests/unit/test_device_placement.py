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
from model_families import TASK_CASES, Family, ddpm_task, full_unet, require

from compgen.training.config import TrainingConfig
from compgen.training.tasks.ddpm import DDPMTask
from compgen.training.trainer import Trainer

pytestmark = pytest.mark.usefixtures("fresh_accelerator_state", "single_thread")


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return small_training_data("tiny-device", cache_dir=tmp_path_factory.mktemp("hf"), split_preset="H32-train1",
                              images_per_class=8, test_images_per_class=2)


@pytest.fixture
def meta_accelerator(monkeypatch):
    monkeypatch.setattr(Accelerator, "device", property(lambda self: META))


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


@pytest.mark.parametrize("family, variant", TASK_CASES)
def test_every_training_step_runs_on_the_device(family: Family, variant, data, tmp_path, meta_accelerator):
    """Every family's task (``model_families.TABLE``, each task variant), over the test data's images."""
    require(family, "training-step-on-device")
    torch.manual_seed(0)
    run_steps_on_meta(family.tasks[variant](family.model(), data[0].images), data, tmp_path)


def test_the_check_catches_a_host_tensor_in_device_work(data, tmp_path, meta_accelerator):
    class LeakyDDPMTask(DDPMTask):
        """Draws its noise on the CPU and forgets to move it: the classic mistake."""

        def compute_loss(self, model, batch, generator, step):
            noise = torch.randn(batch["images"].shape, generator=generator)
            timesteps = torch.zeros(len(noise), dtype=torch.long, device=batch["images"].device)
            return (model(noise, timesteps, batch["concepts"]).sample ** 2).mean(), {}

    task = ddpm_task(full_unet(), data[0].images)
    leaky = LeakyDDPMTask(task.model, task.scheduler)
    with pytest.raises(RuntimeError, match="meta|device"):
        run_steps_on_meta(leaky, data, tmp_path)
