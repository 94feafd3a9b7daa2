"""``--print_config``: every resolved option with the layer that set it, and no work done."""

from __future__ import annotations

import pytest

from compgen.recipes import load_recipe


def test_print_config_names_each_options_layer_and_exits_before_any_work(tmp_path, capsys):
    script = load_recipe("tuple-unet")
    with pytest.raises(SystemExit) as exit_info:
        script.main(["--preset", "quickstart", "--learning_rate", "5e-4", "--cache_dir", str(tmp_path / "cache"),
                     "--output_dir", str(tmp_path / "out"), "--print_config"])
    assert exit_info.value.code == 0
    lines = dict(line.split(" = ", 1) for line in capsys.readouterr().out.splitlines())
    assert lines["learning_rate"] == "0.0005  [command line]"  # the command line beats the preset's 1e-3
    assert lines["max_train_steps"] == "800  [preset quickstart]"
    assert lines["seed"] == "0  [default]"
    assert not (tmp_path / "cache").exists() and not (tmp_path / "out").exists()


def test_maskgit_regularised_preset_and_the_baseline_options_appear_in_print_config(tmp_path, capsys):
    """The options Paper B's MaskGIT baseline needs (transformer dropout, a constant-momentum EMA, the JEPA target's
    initialisation and loss positions) resolve like every other option; the regularised preset sets the references'."""
    script = load_recipe("maskgit")
    with pytest.raises(SystemExit) as exit_info:
        script.main(["--preset", "cpu-long-regularised", "--ema_schedule", "constant", "--jepa_target_init",
                     "independent", "--cache_dir", str(tmp_path / "cache"), "--output_dir", str(tmp_path / "out"),
                     "--print_config"])
    assert exit_info.value.code == 0
    lines = dict(line.split(" = ", 1) for line in capsys.readouterr().out.splitlines())
    for option, value in {"dropout": "0.1", "label_smoothing": "0.1", "adam_weight_decay": "0.045",
                          "adam_beta2": "0.96", "learning_rate": "0.0003"}.items():
        assert lines[option] == f"{value}  [preset cpu-long-regularised]", option
    assert lines["ema_schedule"] == "'constant'  [command line]"
    assert lines["jepa_target_init"] == "'independent'  [command line]"
    assert lines["jepa_loss_positions"] == "'masked'  [default]"
    assert not (tmp_path / "cache").exists() and not (tmp_path / "out").exists()


def test_resolved_options_take_the_highest_layer():
    import argparse

    from compgen.cli import resolved_options

    args = argparse.Namespace(a=1, b=2, c=3)
    table = resolved_options(args, [("preset p", {"a", "b"}), ("command line", {"b"})])
    assert table.splitlines() == ["a = 1  [preset p]", "b = 2  [command line]", "c = 3  [default]"]
