"""Crafted or mistyped configs are refused, naming the field, before anything is allocated."""

import json

import pytest

from compgen import TupleConditionedDiT, TupleConditionedUNet2DModel, get_split_preset
from compgen.analysis.rescore import load_run_pipeline
from compgen.models.config_bounds import check_config_bounds, check_model_directory
from compgen.recipes import load_recipe

SPACE = get_split_preset("H32-train1").space.to_dict()


@pytest.mark.parametrize("field, value", [("block_out_channels", [32, 10**7]), ("sample_size", 10**6),
                                          ("num_train_timesteps", 10**9), ("layers_per_block", float("nan"))])
def test_a_crafted_unet_config_is_refused_before_allocation(tmp_path, field, value):
    directory = tmp_path / "unet"
    TupleConditionedUNet2DModel(SPACE, block_out_channels=(8, 16), norm_num_groups=4).save_pretrained(directory)
    config = json.loads((directory / "config.json").read_text())
    (directory / "config.json").write_text(json.dumps(config | {field: value}))
    with pytest.raises(ValueError, match=f"{field} = "):
        TupleConditionedUNet2DModel.from_pretrained(directory)


def test_transformer_widths_and_a_scheduler_in_an_export_are_bounded(tmp_path):
    with pytest.raises(ValueError, match="hidden_size"):
        TupleConditionedDiT(SPACE, hidden_size=10**6)
    with pytest.raises(ValueError, match="mlp_ratio"):
        check_config_bounds("x", {"mlp_ratio": True})
    export = tmp_path / "export"
    (export / "scheduler").mkdir(parents=True)
    (export / "model_index.json").write_text(json.dumps({"_class_name": "TupleConditionedDDPMPipeline"}))
    (export / "scheduler" / "scheduler_config.json").write_text(json.dumps({"num_train_timesteps": 10**9}))
    with pytest.raises(ValueError, match="scheduler/scheduler_config.json config: num_train_timesteps"):
        load_run_pipeline(export)
    (export / "scheduler" / "scheduler_config.json").write_text("{not json")
    with pytest.raises(ValueError, match="not a readable JSON config"):
        check_model_directory(export)


def test_a_huge_width_on_the_command_line_is_an_argument_error_leaving_nothing(tmp_path, capsys):
    from conftest import reset_accelerate_state

    reset_accelerate_state()
    with pytest.raises(SystemExit) as exit_info:
        load_recipe("tuple-unet").main(
            ["--block_out_channels", "32,1000000", "--output_dir", str(tmp_path / "run")])
    assert exit_info.value.code == 2 and "block_out_channels = [32, 1000000]" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()  # no lock file left behind either
