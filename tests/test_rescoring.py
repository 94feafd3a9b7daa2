"""Re-scoring trained runs: ``compgen.analysis.rescore`` reproduces the training evaluation and scores a
checkpoint's online weights or other sampler options; ``gate_diagnostics`` measures the U-Net's gates per class."""

import json

import numpy as np
import pytest
import torch
from conftest import reset_accelerate_state

from compgen.analysis.gate_diagnostics import main as gates_main
from compgen.analysis.rescore import evaluate_run
from compgen.analysis.rescore import main as evaluate_main
from compgen.recipes import load_recipe

pytestmark = pytest.mark.usefixtures("single_thread")


@pytest.fixture(scope="module")
def unet_run(tmp_path_factory):
    """A tiny U-Net run with evaluations, checkpoints and an export (EMA weights)."""
    out = tmp_path_factory.mktemp("unet-run")
    reset_accelerate_state()
    load_recipe("tuple-unet").main([
        "--dataset", "okawa-h32-train1", "--cache_dir", str(out / "cache"), "--block_out_channels", "8,16",
        "--layers_per_block", "1", "--train_batch_size", "8", "--max_train_steps", "4", "--eval_steps", "4",
        "--eval_images_per_class", "4", "--checkpointing_steps", "4", "--eval_inference_steps", "3",
        "--use_ema", "--output_dir", str(out / "run")])
    return out / "run"


def test_the_training_log_records_the_evaluation_sampler(unet_run):
    last = json.loads((unet_run / "learning_dynamics.jsonl").read_text().splitlines()[-1])
    assert last["sampling"] == {"num_inference_steps": 3}


def test_rescoring_the_export_reproduces_the_training_evaluation(unet_run):
    """Same sampler (read from the log), same seed, same EMA weights: the same scores, class by class."""
    last = json.loads((unet_run / "learning_dynamics.jsonl").read_text().splitlines()[-1])
    record = evaluate_run(unet_run, images_per_class=4)
    assert record["evaluation_options"]["num_inference_steps"] == 3
    for key in ("accuracy", "pixel_accuracy", "object_rate"):
        assert record[key] == last[key], key


def test_a_bf16_sampled_evaluation_is_recorded_and_rescored_the_same(tmp_path):
    """Trained under bf16 autocast, the evaluation samples in the training's precision (bf16) by default, the log says
    so, and re-scoring the export repeats that sampler exactly (the scorers judge in fp32 either way)."""
    reset_accelerate_state()
    load_recipe("tuple-unet").main([
        "--dataset", "okawa-h32-train1", "--cache_dir", str(tmp_path / "cache"), "--block_out_channels", "8,16",
        "--layers_per_block", "1", "--train_batch_size", "8", "--max_train_steps", "2", "--eval_steps", "2",
        "--eval_images_per_class", "4", "--eval_inference_steps", "3", "--mixed_precision", "bf16",
        "--output_dir", str(tmp_path / "run")])
    last = json.loads((tmp_path / "run" / "learning_dynamics.jsonl").read_text().splitlines()[-1])
    assert last["sampling"] == {"num_inference_steps": 3, "mixed_precision": "bf16"}
    record = evaluate_run(tmp_path / "run", images_per_class=4)
    assert record["evaluation_options"]["mixed_precision"] == "bf16"
    for key in ("accuracy", "pixel_accuracy", "object_rate"):
        assert record[key] == last[key], key
    with pytest.raises(SystemExit):
        evaluate_main([str(tmp_path / "run"), "--mixed_precision", "fp16"])


def test_rescoring_a_checkpoints_online_weights_and_other_options(unet_run, tmp_path, capsys):
    online = evaluate_main([str(unet_run), "--checkpoint", "checkpoint-4", "--weights", "online",
                            "--images_per_class", "2", "--num_inference_steps", "2", "--output",
                            str(tmp_path / "online.json")])
    assert online["evaluation_options"] == {"num_inference_steps": 2, "guidance_scale": 1.0,
                                            "concept_values": "canonical", "checkpoint": "checkpoint-4",
                                            "weights": "online", "mixed_precision": "no"}
    assert json.loads((tmp_path / "online.json").read_text())["accuracy"] == online["accuracy"]
    assert "| 111 | 2 |" in capsys.readouterr().out
    sampled = evaluate_run(unet_run, images_per_class=2, concept_values="sampled")
    assert set(sampled["accuracy"]) == set(online["accuracy"])
    with pytest.raises(SystemExit):
        evaluate_main([str(unet_run), "--num_inference_steps", "0"])
    # an --output onto a directory is refused before the sampling, not after it (the result would be lost)
    (tmp_path / "a_directory").mkdir()
    capsys.readouterr()
    with pytest.raises(SystemExit):
        evaluate_main([str(unet_run), "--output", str(tmp_path / "a_directory")])
    assert "is a directory" in capsys.readouterr().err


def test_gate_diagnostics_report_every_class_and_decoder_stage(unet_run, tmp_path):
    for bad in ("-1", "100000"):  # another timestep silently, or an IndexError deep in add_noise
        with pytest.raises(ValueError, match="noise_step must be an integer in"):
            gates_main([str(unet_run), "--noise_step", bad])
    result = gates_main([str(unet_run), "--noise_step", "100", "--markdown", str(tmp_path / "gates.md")])
    assert set(result["classes"]) == {f"{s}{c}{z}" for s in "01" for c in "01" for z in "01"}
    entry = result["classes"]["111"]
    assert entry["level"] == 2 and len(entry["stages"]) == 2
    for stage in entry["stages"]:
        assert np.isfinite(list(stage.values())).all() and 0 <= stage["near_zero_fraction"] <= 1
    # Feature RMS is relative to the training classes' mean: over the training classes it averages to 1 per stage.
    training = [result["classes"][name]["stages"] for name in result["training_classes"]]
    for stage in range(2):
        assert np.mean([stages[stage]["feature_rms_vs_training"] for stages in training]) == pytest.approx(1.0)
    assert (tmp_path / "gates.md").read_text().count("| 111 | 2 |") == 2


@pytest.mark.parametrize("old", ["evaluate", "results"])
def test_the_removed_command_names_are_gone(old):
    """Issue 43: the deprecated aliases ``compgen.evaluation.evaluate`` and ``.results`` (now ``rescore`` and
    ``results_folder``) are removed after their release."""
    import importlib

    with pytest.raises(ModuleNotFoundError):
        importlib.import_module(f"compgen.evaluation.{old}")


@pytest.mark.parametrize("recipe", ["givt", "mar"])
def test_a_givt_or_mar_run_is_rescored_with_its_evaluations_sampler(recipe, dataset_dir, tmp_path):
    """Issue 42, case 14: "unknown pipeline" as a traceback; now scored, with the evaluation's temperature (and
    MAR's head steps) read from the log, to the training evaluation's scores."""
    from test_kl_tokenizer import TINY

    reset_accelerate_state()
    load_recipe(recipe).main([
        *TINY, "--dataset", str(dataset_dir), "--max_train_steps", "2", "--eval_steps", "2",
        "--eval_images_per_class", "2", "--eval_temperature", "0.5", "--output_dir", str(tmp_path / "run")])
    last = json.loads((tmp_path / "run" / "learning_dynamics.jsonl").read_text().splitlines()[-1])
    assert last["sampling"]["temperature"] == 0.5
    record = evaluate_run(tmp_path / "run", images_per_class=2)
    for key in ("accuracy", "pixel_accuracy", "object_rate"):
        assert record[key] == last[key], key


def test_a_run_evaluated_in_fp16_is_a_usage_error_on_the_cpu(unet_run, tmp_path, capsys):
    """Issue 42, case 14: the right message, as a usage error before any sampling rather than a traceback."""
    import shutil

    run = tmp_path / "fp16-run"
    shutil.copytree(unet_run, run)
    log = run / "learning_dynamics.jsonl"
    records = [json.loads(line) for line in log.read_text().splitlines()]
    records[-1]["sampling"]["mixed_precision"] = "fp16"
    log.write_text("".join(json.dumps(r) + "\n" for r in records))
    with pytest.raises(SystemExit) as exit_info:
        evaluate_main([str(run)])
    assert exit_info.value.code == 2 and "pass --mixed_precision no or bf16" in capsys.readouterr().err


def test_a_guided_evaluation_is_recorded_and_rescored_the_same(tmp_path, capsys):
    """``--eval_guidance_scale`` (issue 40, item 3: guidance among the causes of pale held-out objects): the log's
    sampler records it and re-scoring repeats it; without concept dropout it is refused before any work."""
    script = load_recipe("tuple-unet")
    tiny = ["--dataset", "okawa-h32-train1", "--cache_dir", str(tmp_path / "cache"), "--block_out_channels", "8,16",
            "--layers_per_block", "1", "--train_batch_size", "8", "--max_train_steps", "2", "--eval_steps", "2",
            "--eval_images_per_class", "4", "--eval_inference_steps", "3", "--eval_guidance_scale", "2.0",
            "--mixed_precision", "no"]
    reset_accelerate_state()
    with pytest.raises(SystemExit) as exit_info:
        script.main([*tiny, "--output_dir", str(tmp_path / "refused")])
    assert exit_info.value.code == 2 and "--concept_dropout > 0" in capsys.readouterr().err
    reset_accelerate_state()
    script.main([*tiny, "--concept_dropout", "0.1", "--output_dir", str(tmp_path / "run")])
    last = json.loads((tmp_path / "run" / "learning_dynamics.jsonl").read_text().splitlines()[-1])
    assert last["sampling"] == {"num_inference_steps": 3, "guidance_scale": 2.0}
    record = evaluate_run(tmp_path / "run", images_per_class=4)
    assert record["evaluation_options"]["guidance_scale"] == 2.0
    for key in ("accuracy", "pixel_accuracy", "object_rate"):
        assert record[key] == last[key], key


@pytest.mark.parametrize("modulation", ["film", "scale_shift"])
def test_gate_diagnostics_measure_the_full_resolution_gate_too(modulation):
    """With ``modulate_full_resolution`` the gates have a third stage, the full-resolution output, measured like the
    others (its features are the gated first half of the output convolution's input); with ``scale_shift`` the gates
    are the concept scales, the first half of the concept embedding."""
    from diffusers import DDPMScheduler

    from compgen import shapes_space
    from compgen.analysis.gate_diagnostics import gate_statistics
    from compgen.concepts import ConceptGraph
    from compgen.models.tuple_unet import TupleConditionedUNet2DModel

    space = shapes_space()
    torch.manual_seed(0)
    unet = TupleConditionedUNet2DModel(space.to_dict(), block_out_channels=(8, 16), layers_per_block=1,
                                       concept_modulation=modulation, modulate_full_resolution=True)
    graph = ConceptGraph(space, training_classes=[(0, 0, 0), (0, 0, 1), (0, 1, 0), (1, 0, 0)])
    result = gate_statistics(unet, DDPMScheduler(num_train_timesteps=500), graph, images_per_class=2)
    stages = result["classes"]["111"]["stages"]
    assert len(stages) == 3
    with torch.no_grad():
        scales, _ = unet.split_concept_embedding(unet.concept_embedding(torch.tensor([[1, 1, 1]])).sum(dim=1))
    expected_rms = [float(scale.float().pow(2).mean().sqrt()) for scale in scales]
    assert [stage["gate_rms"] for stage in stages] == pytest.approx(expected_rms)
    assert all(np.isfinite(list(stage.values())).all() for stage in stages)


def test_a_broken_export_or_impossible_guidance_is_named_before_any_loading(unet_run, tmp_path, capsys):
    """A missing component folder, truncated weights, NaN guidance, guidance on a model trained without concept
    dropout: a usage error naming the problem, not a diffusers loader error about the run folder or a failure inside
    the pipeline after loading."""
    import shutil

    cases = []
    missing = tmp_path / "missing"
    shutil.copytree(unet_run, missing)
    shutil.rmtree(missing / "unet")
    cases.append(([str(missing)], "lists unet/ (TupleConditionedUNet2DModel)"))
    truncated = tmp_path / "truncated"
    shutil.copytree(unet_run, truncated)
    weights = truncated / "unet" / "diffusion_pytorch_model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])
    cases.append(([str(truncated)], "diffusion_pytorch_model.safetensors is not a whole safetensors file"))
    cases.append(([str(unet_run), "--guidance_scale", "nan"], "--guidance_scale must be a finite number"))
    cases.append(([str(unet_run), "--guidance_scale", "2"], "needs a model trained with concept dropout"))
    for argv, message in cases:
        with pytest.raises(SystemExit) as exit_info:
            evaluate_main(argv)
        assert exit_info.value.code == 2 and message in capsys.readouterr().err


def test_a_temperature_for_a_sampler_without_one_is_named(unet_run):
    """``--temperature`` is MaskGIT's, GIVT's and MAR's; a DDPM export has none: named, never silently ignored."""
    with pytest.raises(ValueError, match="TupleConditionedDDPMPipeline has no sampling temperature"):
        evaluate_run(unet_run, images_per_class=1, temperature=1.0)
