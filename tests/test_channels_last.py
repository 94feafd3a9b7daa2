"""``--channels_last`` (issue 40, item 4: an honest speed-up of fp32 training on CPUs): the convolution weights and the
image batches in channels-last layout, the same training up to float rounding."""

import pytest
import torch
from conftest import reset_accelerate_state
from safetensors.torch import load_file

import compgen.training.trainer as trainer
from compgen.recipes import load_recipe

pytestmark = pytest.mark.usefixtures("single_thread")
TINY = ["--block_out_channels", "8,16", "--layers_per_block", "1", "--train_batch_size", "8", "--no_eval",
        "--max_train_steps", "3", "--mixed_precision", "no", "--no_use_ema", "--checkpointing_steps", "3",
        "--dataset", "okawa-h32-train1"]


def _train(tmp_path, name, *argv):
    reset_accelerate_state()
    load_recipe("tuple-unet").main(
        [*TINY, "--cache_dir", str(tmp_path / "cache"), "--output_dir", str(tmp_path / name), *argv])
    return load_file(str(tmp_path / name / "unet" / "diffusion_pytorch_model.safetensors"))


def test_channels_last_trains_the_same_model_in_another_layout(tmp_path, monkeypatch):
    layouts = []
    make_batch = trainer.make_batch

    def spy(data, indices, channels_last=False):
        batch = make_batch(data, indices, channels_last)
        layouts.append(batch["images"].is_contiguous(memory_format=torch.channels_last))
        return batch

    monkeypatch.setattr(trainer, "make_batch", spy)
    plain = _train(tmp_path, "plain")
    assert layouts and not any(layouts)
    layouts.clear()
    fast = _train(tmp_path, "channels-last", "--channels_last")
    assert layouts and all(layouts)
    # Adam steps of 1e-3 from gradients equal up to rounding: the weights agree to a small fraction of one step (the
    # biases before a GroupNorm, whose gradient is rounding noise that Adam scales up to whole steps, left out).
    weights = [name for name in plain if not name.endswith(".bias")]
    for name in weights:
        torch.testing.assert_close(fast[name], plain[name], rtol=0, atol=3e-4)
    assert max(float((fast[n] - plain[n]).abs().mean()) for n in weights) < 2e-5


def test_a_channels_last_run_resumes_bit_exactly(tmp_path):
    """Killed after a checkpoint and resumed, a ``--channels_last`` run ends with the weights of the uninterrupted run,
    bit for bit (the optimizer state comes back in the weights' layout, not the file's contiguous one)."""
    length = ["--lr_scheduler", "constant", "--checkpointing_steps", "2", "--channels_last"]
    straight = _train(tmp_path, "straight", *length, "--max_train_steps", "4")
    _train(tmp_path, "resumed", *length, "--max_train_steps", "2")
    resumed = _train(tmp_path, "resumed", *length, "--max_train_steps", "4", "--resume_from_checkpoint", "latest")
    assert straight.keys() == resumed.keys()
    for name in straight:
        assert torch.equal(straight[name], resumed[name]), name
