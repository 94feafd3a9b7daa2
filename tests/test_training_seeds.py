"""``--data_seed`` and ``--noise_seed`` (issue 40, item 2): the model's initialisation (``--seed``), the data order and
the training's random draws can be seeded apart, to tell which of them a seed's result depends on."""

import pytest
import torch
from conftest import reset_accelerate_state
from safetensors.torch import load_file

import compgen.training.trainer as trainer
from compgen.recipes import load_recipe

pytestmark = pytest.mark.usefixtures("single_thread")
TINY = ["--block_out_channels", "8,16", "--layers_per_block", "1", "--train_batch_size", "8", "--no_eval",
        "--max_train_steps", "2", "--mixed_precision", "no", "--no_use_ema", "--checkpointing_steps", "2"]


def _run(tmp_path, name, monkeypatch, *argv):
    seen = {"order": [], "draws": []}
    monkeypatch.undo()  # the module's own functions, not an earlier run's spies
    batch_indices, mix_seed = trainer.batch_indices, trainer.mix_seed
    monkeypatch.setattr(trainer, "batch_indices", lambda n, b, step, seed: seen["order"].append(seed)
                        or batch_indices(n, b, step, seed))
    monkeypatch.setattr(trainer, "mix_seed", lambda seed, *parts: seen["draws"].append(seed) or mix_seed(seed, *parts))
    reset_accelerate_state()
    load_recipe("tuple-unet").main(
        [*TINY, "--dataset", "okawa-h32-train1", "--cache_dir", str(tmp_path / "cache"),
         "--output_dir", str(tmp_path / name), *argv])
    return seen, load_file(str(tmp_path / name / "unet" / "diffusion_pytorch_model.safetensors"))


def test_the_data_order_and_the_draws_follow_their_own_seeds(tmp_path, monkeypatch):
    default, _ = _run(tmp_path, "default", monkeypatch, "--seed", "3")
    assert set(default["order"]) == {3} and set(default["draws"]) == {3}  # both follow --seed unless given
    apart, weights = _run(tmp_path, "apart", monkeypatch, "--seed", "3", "--data_seed", "7", "--noise_seed", "9")
    assert set(apart["order"]) == {7} and set(apart["draws"]) == {9}
    # Another initialisation on the same data order and draws: only the weights' start differs.
    other, other_weights = _run(tmp_path, "other", monkeypatch, "--seed", "4", "--data_seed", "7", "--noise_seed", "9")
    assert set(other["order"]) == {7} and set(other["draws"]) == {9}
    assert any(not torch.equal(weights[k], other_weights[k]) for k in weights)
