"""The training loop's building blocks: deterministic batches, EMA math, momentum schedules, argument parsing."""

import argparse

import pytest
import torch
from torch import nn

from compgen.recipes import load_recipe
from compgen.training.batches import batch_indices, check_batch_fits
from compgen.training.config import TrainingConfig, add_training_arguments, config_from_args
from compgen.training.ema import ExponentialMovingAverage, MomentumSchedule


def test_batch_indices_cover_each_epoch_once_and_depend_only_on_step():
    n, b = 103, 10
    epoch0 = torch.cat([batch_indices(n, b, s, seed=3) for s in range(10)])
    assert len(set(epoch0.tolist())) == 100  # 10 full batches, 3 examples dropped
    assert torch.equal(batch_indices(n, b, 4, seed=3), batch_indices(n, b, 4, seed=3))
    assert not torch.equal(batch_indices(n, b, 0, seed=3), batch_indices(n, b, 10, seed=3))  # new epoch, new order
    assert not torch.equal(batch_indices(n, b, 0, seed=3), batch_indices(n, b, 0, seed=4))
    with pytest.raises(ValueError, match="fewer than one batch"):  # checked once per run, not by every step's draw
        check_batch_fits(5, 10)


def test_ema_update_matches_formula():
    torch.manual_seed(0)
    model = nn.Linear(3, 2)
    ema = ExponentialMovingAverage(model, MomentumSchedule(0.9))
    before = ema.shadow.weight.clone()
    with torch.no_grad():
        model.weight.add_(1.0)
    momentum = ema.update(model, step=1)
    assert momentum == 0.9
    torch.testing.assert_close(ema.shadow.weight, 0.9 * before + 0.1 * model.weight)
    assert not any(p.requires_grad for p in ema.shadow.parameters())


def test_momentum_schedules():
    assert MomentumSchedule(0.99, kind="constant")(1000) == 0.99
    linear = MomentumSchedule(0.996, 1.0, kind="linear", total_steps=100)
    assert linear(0) == pytest.approx(0.996) and linear(50) == pytest.approx(0.998) and linear(500) == 1.0
    warmup = MomentumSchedule(0.999, kind="warmup")
    assert warmup(0) == pytest.approx(0.1) and warmup(10**6) == 0.999
    with pytest.raises(ValueError, match="unknown momentum schedule"):
        MomentumSchedule(kind="cosine")


def test_training_arguments_round_trip():
    parser = argparse.ArgumentParser()
    add_training_arguments(parser)
    args = parser.parse_args(["--max_train_steps", "7", "--no_use_ema", "--checkpoints_total_limit", "none",
                              "--learning_rate", "0.01"])
    config = config_from_args(args)
    assert config.max_train_steps == 7 and config.use_ema is False and config.checkpoints_total_limit is None
    assert config.learning_rate == 0.01
    with pytest.raises(ValueError, match="hub_model_id"):
        TrainingConfig(push_to_hub=True)
    with pytest.raises(ValueError, match="mixed_precision"):
        TrainingConfig(mixed_precision="fp8")


def test_prepare_run_makes_model_initialisation_a_function_of_the_seed(tmp_path):
    from compgen.launch.run_setup import prepare_run

    def draw(seed: int) -> torch.Tensor:
        argv = ["--no_eval", "--seed", str(seed), "--cache_dir", str(tmp_path), "--output_dir", str(tmp_path / "out")]
        prepare_run(argparse.ArgumentParser(), {}, argv)
        return torch.randn(4)

    assert torch.equal(draw(3), draw(3))
    assert not torch.equal(draw(3), draw(4))


def test_a_preset_trains_in_fp32_on_a_cpu_with_its_fp32_defaults(tmp_path, monkeypatch):
    """A script's ``cpu_fp32_presets`` entry layers over its preset where the run trains in fp32 on a CPU
    (``--mixed_precision no``, or ``auto`` without native bf16); flags still win; bf16 and CUDA runs are untouched."""

    from compgen.launch.run_setup import apply_cpu_fp32_defaults, prepare_run

    fp32 = {"quick": {"channels_last": True, "eval_start_step": 600}}
    native_bf16 = {"value": False}
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: native_bf16["value"], raising=False)
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: native_bf16["value"], raising=False)

    def parse(*argv: str, cuda: bool = False) -> argparse.Namespace:
        monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
        parser = argparse.ArgumentParser()
        add_training_arguments(parser, {"mixed_precision": "auto"})
        apply_cpu_fp32_defaults(parser, fp32, "quick", list(argv))
        return parser.parse_args(list(argv))

    assert (parse().channels_last, parse().eval_start_step) == (True, 600)  # auto, no native bf16: fp32
    assert parse("--eval_start_step", "0", "--no_channels_last").eval_start_step == 0
    assert not parse("--eval_start_step", "0", "--no_channels_last").channels_last
    assert parse("--mixed_precision", "bf16").eval_start_step == 0
    assert parse("--mixed_precision", "no", cuda=True).eval_start_step == 0
    native_bf16["value"] = True
    assert parse().eval_start_step == 0 and parse("--mixed_precision", "no").eval_start_step == 600
    with pytest.raises(ValueError, match="unknown options"):
        apply_cpu_fp32_defaults(argparse.ArgumentParser(), {"quick": {"eval_from": 3}}, "quick",
                                ["--mixed_precision", "no"])

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    argv = ["--preset", "quick", "--mixed_precision", "no", "--no_eval", "--cache_dir", str(tmp_path),
            "--output_dir", str(tmp_path / "out")]
    quick = {"quick": {"max_train_steps": 800, "eval_steps": 100}}
    _, config, _ = prepare_run(argparse.ArgumentParser(), quick, argv, cpu_fp32_presets=fp32)
    assert (config.channels_last, config.eval_start_step) == (True, 600)
    # a shorter run keeps its last three evaluations (a fixed 600 in 500 steps would leave one: the headline could
    # never hold); an explicit --eval_start_step is kept as given
    shorter = [*argv[:-1], str(tmp_path / "short"), "--max_train_steps", "500"]
    assert prepare_run(argparse.ArgumentParser(), quick, shorter, cpu_fp32_presets=fp32)[1].eval_start_step == 300
    explicit = [*argv[:-1], str(tmp_path / "explicit"), "--max_train_steps", "500", "--eval_start_step", "450"]
    assert prepare_run(argparse.ArgumentParser(), quick, explicit, cpu_fp32_presets=fp32)[1].eval_start_step == 450
    script = load_recipe("tuple-unet")
    assert set(script.CPU_FP32_PRESETS) <= set(script.PRESETS)
    for values in script.CPU_FP32_PRESETS.values():
        TrainingConfig(**values)  # every entry names training options with valid values


def test_the_evaluation_samples_in_its_own_precision_not_the_training_autocast():
    """Accelerate patches an autocast ``forward`` onto a model it prepares under bf16, and a deep copy (the EMA
    weights) inherits it; inside ``sampling_precision`` the evaluation's precision decides, and the patch returns."""
    import copy

    from accelerate import Accelerator
    from accelerate.state import AcceleratorState

    from compgen.evaluation.sampling_precision import sampling_precision

    class Probe(nn.Linear):
        def forward(self, x):
            self.autocast_seen = torch.is_autocast_enabled("cpu")
            return super().forward(x)

    AcceleratorState._reset_state(True)
    try:
        accelerator = Accelerator(mixed_precision="bf16", cpu=True)
        prepared = accelerator.prepare(Probe(4, 4))
        shadow = copy.deepcopy(accelerator.unwrap_model(prepared))
        x = torch.randn(2, 4)
        shadow(x)
        assert shadow.autocast_seen  # the inherited wrapper
        with sampling_precision(shadow, "no", "cpu"):
            assert shadow(x).dtype == torch.float32 and not shadow.autocast_seen
        with sampling_precision(shadow, "bf16", "cpu"):
            assert shadow(x).dtype == torch.float32 and shadow.autocast_seen  # bf16 inside, fp32 out
        shadow(x)
        assert shadow.autocast_seen and "forward" in vars(shadow)  # restored after the block
    finally:
        AcceleratorState._reset_state(True)


def test_every_command_spells_options_with_underscores_and_still_takes_the_old_hyphens_with_a_warning():
    """``compgen.cli.ArgumentParser``: ``--output_dir`` as in the training scripts; ``--output-dir`` (the commands'
    old spelling) parses to the same option for a release, with a FutureWarning naming the new spelling."""
    from compgen.cli import ArgumentParser

    parser = ArgumentParser()
    parser.add_argument("--output_dir")
    parser.add_argument("--images_per_class", type=int)
    assert parser.parse_args(["--output_dir", "a", "--images_per_class=3"]).output_dir == "a"
    with pytest.warns(FutureWarning, match="is spelled") as caught:
        args = parser.parse_args(["--output-dir", "b", "--images-per-class=4"])
    assert [str(w.message).split(" now")[0] for w in caught] == [
        "--output-dir is spelled --output_dir", "--images-per-class is spelled --images_per_class"]
    assert (args.output_dir, args.images_per_class) == ("b", 4)
    with pytest.raises(SystemExit):
        parser.parse_args(["--no-such-option", "x"])


def test_the_concept_dropout_mask_is_drawn_in_one_place_from_the_steps_generator(monkeypatch):
    """``--concept_dropout`` ends in ``ConceptConditionedMixin.draw_drop_mask``: every task's training forward gets its
    mask there, from the step's generator (so a step repeats), and a rate the model refuses is named before any work."""
    from diffusers import DDPMScheduler

    from compgen import TupleConditionedUNet2DModel
    from compgen.models.concept_embedding import ConceptConditionedMixin
    from compgen.training.tasks.ddpm import DDPMTask

    space = {"shape": ["circle", "triangle"], "colour": ["red", "blue"], "size": ["large", "small"]}
    with pytest.raises(ValueError, match=r"concept_dropout must be in \[0, 1\), got 1.5"):
        TupleConditionedUNet2DModel.check_options(concept_dropout=1.5)
    torch.manual_seed(0)
    unet = TupleConditionedUNet2DModel(space, sample_size=8, block_out_channels=(8, 16), norm_num_groups=4,
                                       conditioning="quantized", concept_dropout=0.5)
    task = DDPMTask(unet, DDPMScheduler(num_train_timesteps=50))
    batch = {"images": torch.zeros(16, 3, 8, 8), "concepts": torch.randint(0, 2, (16, 3))}
    draws = []
    original = ConceptConditionedMixin.draw_drop_mask

    def recorded(concepts, rate, generator=None):
        draws.append((rate, generator))
        return original(concepts, rate, generator)

    monkeypatch.setattr(ConceptConditionedMixin, "draw_drop_mask", staticmethod(recorded))
    losses = [task.compute_loss(unet, batch, torch.Generator().manual_seed(3), 0)[0] for _ in range(2)]
    assert [rate for rate, _ in draws] == [0.5, 0.5] and all(g is not None for _, g in draws)
    torch.testing.assert_close(losses[0], losses[1], rtol=0, atol=0)
    masks = [task.training_conditioning(unet, batch, torch.Generator().manual_seed(s))["drop_mask"] for s in (1, 1, 2)]
    assert masks[0].dtype == torch.bool and torch.equal(masks[0], masks[1]) and not torch.equal(masks[0], masks[2])


def test_a_token_transformer_names_its_refused_width_options_before_any_arithmetic_on_them():
    """``--num_heads 0`` is refused by name (not a ZeroDivisionError from the divisibility check)."""
    from compgen import MaskGITTransformer

    with pytest.raises(ValueError, match="num_heads must be at least 1, got 0"):
        MaskGITTransformer.check_options(hidden_size=32, num_heads=0, num_layers=2)
    with pytest.raises(ValueError, match="hidden_size 30 must be divisible by num_heads 4"):
        MaskGITTransformer.check_options(hidden_size=30, num_heads=4)
