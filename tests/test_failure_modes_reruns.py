"""Nothing lost, nothing silently wrong when a run is rerun, resumed longer or re-scored, and every late or unclear
error turned into a clear one before any work (argparse's exit status 2, nothing built).

Each test reproduces one failure case (docs/failure_modes.md) on tiny settings (see ``test_failure_modes.py`` for the
single-run cases and the helpers used here).
"""

import json
import math

import pytest
import torch
from conftest import reset_accelerate_state, small_training_data
from diffusers import DDPMScheduler
from safetensors.torch import load_file
from test_failure_modes import steps, task, train

from compgen import TupleConditionedDDPMPipeline, TupleConditionedUNet2DModel
from compgen.analysis.rescore import evaluate_run
from compgen.analysis.rescore import main as evaluate_main
from compgen.concepts import shapes_space
from compgen.recipes import load_recipe
from compgen.shapes import shapes_continuous_concepts
from compgen.training.checkpoint import CheckpointError, list_checkpoints
from compgen.training.config import TrainingConfig

pytestmark = pytest.mark.usefixtures("fresh_accelerator_state", "single_thread")

@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return small_training_data("tiny-reruns", cache_dir=tmp_path_factory.mktemp("hf"), split_preset="H32-train1",
                               images_per_class=16, test_images_per_class=2)


@pytest.fixture(scope="module")
def probes(data):
    from compgen.evaluation.probes import default_shapes_probes

    return default_shapes_probes(data[0].space)


TINY_UNET = ["--block_out_channels", "8,16", "--layers_per_block", "1", "--train_batch_size", "8", "--no_eval"]


def run_unet_script(tmp_path, *argv: str):
    reset_accelerate_state()
    return load_recipe("tuple-unet").main(
        ["--cache_dir", str(tmp_path / "cache"), "--output_dir", str(tmp_path / "out"), *argv])


def exits_with_usage_error(capsys, call, *args) -> str:
    """Run ``call(*args)``; it must stop with argparse's exit status 2. Returns its message."""
    with pytest.raises(SystemExit) as exit_info:
        call(*args)
    assert exit_info.value.code == 2
    return capsys.readouterr().err


# 2. `latest` on a finished run whose checkpoints were deleted.
def test_latest_without_checkpoints_never_replaces_a_finished_run(data, probes, tmp_path):
    train(data, tmp_path, probes=probes)
    log, card = (tmp_path / "learning_dynamics.jsonl").read_text(), (tmp_path / "README.md").read_text()
    weights = (tmp_path / "unet" / "diffusion_pytorch_model.safetensors").read_bytes()
    for _, checkpoint in list_checkpoints(tmp_path / "checkpoints"):
        for file in checkpoint.iterdir():
            file.unlink()
        checkpoint.rmdir()
    with pytest.raises(FileExistsError, match="holds a finished run .* but no checkpoint"):
        train(data, tmp_path, probes=probes, seed=1, max_train_steps=2, resume_from_checkpoint="latest")
    assert (tmp_path / "learning_dynamics.jsonl").read_text() == log and (tmp_path / "README.md").read_text() == card
    assert (tmp_path / "unet" / "diffusion_pytorch_model.safetensors").read_bytes() == weights
    # Starting over is explicit.
    train(data, tmp_path, probes=probes, seed=1, max_train_steps=2, overwrite_output_dir=True)
    assert steps(tmp_path) == [2]
    # A fresh, empty directory (a study cell's) still starts with `latest`.
    train(data, tmp_path / "fresh", probes=probes, max_train_steps=2, resume_from_checkpoint="latest")
    assert steps(tmp_path / "fresh") == [2]


# 6. Re-scoring a checkpoint.
def test_rescoring_a_checkpoint_is_labelled_with_its_step_and_missing_ones_are_listed(data, probes, tmp_path, capsys):
    train(data, tmp_path, probes=probes, max_train_steps=8, checkpointing_steps=4, eval_steps=4,
          checkpoints_total_limit=None)
    record = evaluate_run(tmp_path, checkpoint="checkpoint-4", weights="online", images_per_class=1,
                          num_inference_steps=2)
    assert record["step"] == 4
    assert evaluate_run(tmp_path, images_per_class=1, num_inference_steps=2)["step"] == 8
    message = exits_with_usage_error(capsys, evaluate_main, [str(tmp_path), "--checkpoint", "checkpoint-5"])
    assert "no checkpoint 'checkpoint-5'" in message and "checkpoint-4, checkpoint-8" in message


def test_evaluate_refuses_what_it_cannot_score_before_any_work(data, tmp_path, capsys):
    (tmp_path / "not-a-run").mkdir()
    message = exits_with_usage_error(capsys, evaluate_main, [str(tmp_path / "not-a-run")])
    assert "is not a trained run" in message
    train(data, tmp_path / "no-eval", max_train_steps=2, use_ema=False)  # no probes: trained like --no_eval
    message = exits_with_usage_error(capsys, evaluate_main, [str(tmp_path / "no-eval")])
    assert "was it trained with --no_eval?" in message
    message = exits_with_usage_error(capsys, evaluate_main, [str(tmp_path / "no-eval"), "--weights", "online"])
    assert "--weights online needs --checkpoint" in message
    message = exits_with_usage_error(capsys, evaluate_main, [str(tmp_path / "no-eval"), "--output",
                                                             str(tmp_path / "missing" / "dir" / "x.json")])
    assert "no directory" in message


def test_ema_weights_of_a_run_without_ema_are_named_as_such(data, probes, tmp_path, capsys):
    train(data, tmp_path, probes=probes, max_train_steps=2, use_ema=False)
    message = exits_with_usage_error(capsys, evaluate_main, [str(tmp_path), "--checkpoint", "checkpoint-2"])
    assert "trained without EMA" in message and "use --weights online" in message


# 7. Resuming longer under a decaying learning rate.
def test_resume_longer_is_refused_under_a_decaying_schedule_and_exact_under_a_constant_one(data, tmp_path):
    train(data, tmp_path / "linear", max_train_steps=4, lr_scheduler="linear")
    with pytest.raises(CheckpointError, match="run of 4 steps, and --lr_scheduler linear run over the whole length"):
        train(data, tmp_path / "linear", max_train_steps=8, lr_scheduler="linear", resume_from_checkpoint="latest")
    train(data, tmp_path / "linear", max_train_steps=4, lr_scheduler="linear", resume_from_checkpoint="latest")

    constant = {"lr_scheduler": "constant_with_warmup", "lr_warmup_steps": 1}
    train(data, tmp_path / "straight", max_train_steps=4, **constant)
    train(data, tmp_path / "extended", max_train_steps=2, **constant)
    train(data, tmp_path / "extended", max_train_steps=4, resume_from_checkpoint="latest", **constant)
    name = "unet/diffusion_pytorch_model.safetensors"
    straight, extended = load_file(str(tmp_path / "straight" / name)), load_file(str(tmp_path / "extended" / name))
    for key in straight:
        torch.testing.assert_close(extended[key], straight[key], rtol=0, atol=0, msg=key)


def test_a_task_schedule_over_the_length_also_blocks_a_longer_resume(data, tmp_path):
    class RampOverTheLength(type(task(data))):
        def schedules_over_length(self):
            return ["a ramp"]

    ramped = RampOverTheLength(task(data).model, DDPMScheduler(num_train_timesteps=50), eval_inference_steps=2)
    train(data, tmp_path, ramped, max_train_steps=2)
    with pytest.raises(CheckpointError, match="a ramp run over the whole length"):
        train(data, tmp_path, ramped, max_train_steps=4, resume_from_checkpoint="latest")


# 8. Silent failures and late errors of a training script: each an argparse message before any data is built.
@pytest.mark.parametrize("tracker, message", [
    ("wandb", "--report_to wandb: wandb is not installed, so nothing would be tracked"),
    ("nosuchtracker", "--report_to nosuchtracker: unknown tracker"),
    ("all", "--report_to all: no tracker is installed"),
])
def test_trackers_that_would_track_nothing_are_refused_before_any_work(tracker, message, tmp_path, capsys):
    from accelerate.tracking import get_available_trackers

    installed = [t.value for t in get_available_trackers()]
    if tracker == "wandb" and "wandb" in installed or tracker == "all" and installed:
        pytest.skip(f"{installed} installed here")
    err = exits_with_usage_error(capsys, run_unet_script, tmp_path, *TINY_UNET, "--report_to", tracker)
    assert message in err
    assert not (tmp_path / "cache").exists() and not (tmp_path / "out").exists()


def test_push_to_hub_without_hub_access_is_refused_before_any_work(tmp_path, capsys, monkeypatch):
    import huggingface_hub
    from huggingface_hub import constants

    push = ["--push_to_hub", "--hub_model_id", "someone/model"]
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    err = exits_with_usage_error(capsys, run_unet_script, tmp_path, *TINY_UNET, *push)
    assert "HF_HUB_OFFLINE is set" in err
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(huggingface_hub, "get_token", lambda: None)  # nobody logged in
    err = exits_with_usage_error(capsys, run_unet_script, tmp_path, *TINY_UNET, *push)
    assert "--push_to_hub needs a Hub token" in err
    assert not (tmp_path / "cache").exists() and not (tmp_path / "out").exists()


def test_an_output_dir_that_is_or_lies_under_a_file_is_refused_before_any_work(tmp_path, capsys):
    (tmp_path / "a-file").write_text("not a directory")
    for target, message in ((tmp_path / "a-file", "is a file"), (tmp_path / "a-file" / "run", "lies under the file")):
        reset_accelerate_state()
        err = exits_with_usage_error(capsys, load_recipe("tuple-unet").main, [
            "--cache_dir", str(tmp_path / "cache"), "--output_dir", str(target), *TINY_UNET])
        assert f"--output_dir {target} {message}" in err
    assert not (tmp_path / "cache").exists() and (tmp_path / "a-file").read_text() == "not a directory"


def test_a_batch_larger_than_the_data_is_a_clear_error_and_leaves_no_empty_output_dir(tmp_path, capsys):
    err = exits_with_usage_error(capsys, run_unet_script, tmp_path, *TINY_UNET, "--dataset_config", "tiny",
                                 "--train_batch_size", "100000", "--dataset", str(_tiny_export(tmp_path)))
    assert "--train_batch_size 100000: the training split has" in err
    assert not (tmp_path / "out").exists()


def _tiny_export(tmp_path):
    from compgen.data.concept_graph_builder import ConceptGraphShapesConfig
    from compgen.data.export import export_concept_graph_configs

    target = tmp_path / "tiny-export"
    export_concept_graph_configs([ConceptGraphShapesConfig(name="tiny", split_preset="H32-train1", images_per_class=4,
                                                           test_images_per_class=1)], target,
                                 cache_dir=str(tmp_path / "export-cache"))
    return target


def test_resume_from_a_checkpoint_that_does_not_exist_is_refused_before_any_work(tmp_path, capsys):
    err = exits_with_usage_error(capsys, run_unet_script, tmp_path, *TINY_UNET, "--resume_from_checkpoint",
                                 "checkpoint-7")
    assert "'checkpoint-7': no complete checkpoint" in err and "(there: none)" in err
    assert not (tmp_path / "cache").exists() and not (tmp_path / "out").exists()


def test_a_config_edited_by_hand_is_named_with_the_weights_that_do_not_fit(tmp_path):
    space = shapes_space()
    unet = TupleConditionedUNet2DModel(space.to_dict(), block_out_channels=(8, 16), norm_num_groups=4,
                                       conditioning="full", continuous_concepts=shapes_continuous_concepts(space))
    TupleConditionedDDPMPipeline(unet=unet, scheduler=DDPMScheduler(num_train_timesteps=50)).save_pretrained(tmp_path)
    config_path = tmp_path / "unet" / "config.json"
    config = json.loads(config_path.read_text())
    config["conditioning"] = "quantized"
    config_path.write_text(json.dumps(config))
    with pytest.raises(ValueError, match=r"unet/config.json does not match the weights beside it .*"
                                         r"concept_embedding.embedders.(color|size).weight"):
        TupleConditionedDDPMPipeline.from_pretrained(tmp_path)


def test_non_finite_concept_values_are_refused():
    space = shapes_space()
    unet = TupleConditionedUNet2DModel(space.to_dict(), block_out_channels=(8, 16), norm_num_groups=4,
                                       conditioning="full", continuous_concepts=shapes_continuous_concepts(space))
    pipe = TupleConditionedDDPMPipeline(unet=unet, scheduler=DDPMScheduler(num_train_timesteps=50))
    pipe.set_progress_bar_config(disable=True)
    for bad in (math.nan, math.inf):
        with pytest.raises(ValueError, match="concept_values must be finite"):
            pipe("111", num_inference_steps=2, concept_values=torch.full((1, 4), bad))


def test_the_training_config_names_its_trackers():
    assert TrainingConfig(report_to=None).trackers == [] and TrainingConfig(report_to="none").trackers == []
    assert TrainingConfig(report_to="tensorboard, wandb").trackers == ["tensorboard", "wandb"]


def test_runner_files_report_the_line_of_a_bad_quote_expand_home_and_refuse_parallel_0(tmp_path, capsys, monkeypatch):
    from compgen.studies.runner import main as runner_main
    from compgen.studies.runner import parse_runs

    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    (command,) = parse_runs("# a queue\nexamples/train_tuple_unet.py --output_dir ~/runs/a\n")
    assert command[-1] == str(tmp_path / "home" / "runs" / "a")
    with pytest.raises(ValueError, match="runs file line 3: No closing quotation"):
        parse_runs("examples/a.py --seed 0\n\nexamples/a.py --run_name 'unclosed\n")
    runs = tmp_path / "runs.txt"
    runs.write_text("examples/train_tuple_unet.py --seed 0 --output_dir 'x\n")
    assert "line 1: No closing quotation" in exits_with_usage_error(capsys, runner_main, ["--runs", str(runs)])
    message = exits_with_usage_error(capsys, runner_main, ["--run", "examples/train_tuple_unet.py", "--parallel", "0"])
    assert "--parallel must be at least 1, got 0" in message


def test_a_run_queue_names_recipes_or_scripts_and_refuses_anything_else(tmp_path, capsys):
    """A queue's command starts with a recipe (``tuple-unet``, as ``python -m compgen.train`` takes it) or a script
    path; a recipe runs in process through its module, and an unknown first word is named."""
    from compgen.recipes import tuple_unet
    from compgen.studies.runner import load_script, parse_runs
    from compgen.studies.runner import main as runner_main

    assert load_script("tuple-unet") is tuple_unet
    (recipe, script) = parse_runs("tuple-unet --seed 0\nexamples/train_tuple_unet.py --seed 1\n")
    assert recipe[0] == "tuple-unet" and script[0].endswith(".py")
    with pytest.raises(ValueError, match=r"line 1: a command starts with a recipe \(tuple-unet, .*\) or a script path"):
        parse_runs("unet --seed 0\n")
    message = exits_with_usage_error(capsys, runner_main, ["--run", "dit --seed 0"])
    assert "no recipe 'dit' and no script at dit" in message
