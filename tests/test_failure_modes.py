"""Nothing lost, nothing silently wrong: reruns, kills, torn and corrupt files, divergence and bad options.

Each test reproduces one case of the hardening issue with tiny settings; kills are simulated by an exception raised
at the named point (the process dies there; what is on disk is what a kill would leave).
"""

import json
import math
import os
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import reset_accelerate_state, small_training_data
from diffusers import DDPMScheduler
from repo_scripts import load_repo_script
from safetensors.torch import load_file

from compgen import TupleConditionedDDPMPipeline, TupleConditionedUNet2DModel
from compgen.evaluation.tracker import renderer_generator
from compgen.launch.directory_claim import start_run
from compgen.recipes import load_recipe
from compgen.training.checkpoint import CheckpointError, list_checkpoints
from compgen.training.config import TrainingConfig
from compgen.training.tasks.ddpm import DDPMTask
from compgen.training.trainer import NonFiniteLossError, Trainer

pytestmark = pytest.mark.usefixtures("fresh_accelerator_state", "single_thread")


class Killed(Exception):
    """Stands for the process being killed at this point."""


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return small_training_data("tiny-faults", cache_dir=tmp_path_factory.mktemp("hf"), split_preset="H32-train1",
                              images_per_class=16, test_images_per_class=2)


@pytest.fixture(scope="module")
def probes(data):
    from compgen.evaluation.probes import default_shapes_probes

    return default_shapes_probes(data[0].space)


class FaultyTask(DDPMTask):
    """A tiny DDPM task that can be killed while generating (evaluating) or exporting."""

    kill_generate_at: int | None = None
    kill_export = False
    perfect_samples = True

    def generate(self, model, concepts, seed):
        self.generate_calls = getattr(self, "generate_calls", 0) + 1
        if self.kill_generate_at == self.generate_calls:
            raise Killed("during the evaluation")
        return renderer_generator(self.model.concept_space)(concepts, seed)

    def save_pretrained(self, model, output_dir):
        super().save_pretrained(model, output_dir)
        if self.kill_export:
            raise Killed("during the export")


def task(data, seed=0, **faults) -> FaultyTask:
    torch.manual_seed(seed)
    unet = TupleConditionedUNet2DModel(data[0].space.to_dict(), block_out_channels=(8, 16), norm_num_groups=4,
                                       conditioning="quantized")
    result = FaultyTask(unet, DDPMScheduler(num_train_timesteps=50), eval_inference_steps=2)
    for name, value in faults.items():
        setattr(result, name, value)
    return result


def train(data, tmp_path, the_task=None, probes=None, **options):
    reset_accelerate_state()
    config = TrainingConfig(**({"output_dir": str(tmp_path), "train_batch_size": 8, "max_train_steps": 4,
                                "learning_rate": 1e-3, "checkpointing_steps": 2, "eval_steps": 2,
                                "eval_images_per_class": 2, "logging_steps": 1} | options))
    with start_run(config, num_processes=1) as start:  # as a script's run: its directory claimed and checked first
        return Trainer(config, the_task or task(data), *data, probes=probes, replaced=start.replaced).train()


def steps(path):
    return [json.loads(line)["step"] for line in (path / "learning_dynamics.jsonl").read_text().splitlines()]


# 1. A rerun into a used --output_dir.
def test_rerun_into_a_used_output_dir_is_refused_and_resume_only_takes_this_runs_checkpoints(data, probes, tmp_path):
    train(data, tmp_path, probes=probes)
    log_before = (tmp_path / "learning_dynamics.jsonl").read_text()
    with pytest.raises(FileExistsError, match="holds another run"):
        train(data, tmp_path, probes=probes, seed=1, max_train_steps=2)
    assert (tmp_path / "learning_dynamics.jsonl").read_text() == log_before  # nothing eaten
    assert [s for s, _ in list_checkpoints(tmp_path / "checkpoints")] == [2, 4]
    # Resuming with other training options would mix two runs: refused, naming the option.
    with pytest.raises(CheckpointError, match="seed"):
        train(data, tmp_path, probes=probes, seed=1, max_train_steps=6, resume_from_checkpoint="latest")
    # Starting over is explicit, and then the old run's files are gone.
    train(data, tmp_path, probes=probes, seed=1, max_train_steps=2, overwrite_output_dir=True)
    assert steps(tmp_path) == [2] and [s for s, _ in list_checkpoints(tmp_path / "checkpoints")] == [2]


def test_a_checkpoint_from_before_an_option_existed_resumes_when_the_option_keeps_its_default(data, probes, tmp_path):
    """Upgrading compgen adds options; a checkpoint written before one existed resumes as long as this run keeps the
    new option's default (the old run trained that way), and is refused when it does not."""
    train(data, tmp_path, probes=probes, max_train_steps=2)
    state_path = tmp_path / "checkpoints" / "checkpoint-2" / "trainer_state.json"
    state = json.loads(state_path.read_text())
    del state["config"]["torch_compile"]
    state["fingerprint"] = "from-an-older-compgen"
    state_path.write_text(json.dumps(state))
    with pytest.raises(CheckpointError, match="torch_compile"):
        train(data, tmp_path, probes=probes, max_train_steps=4, resume_from_checkpoint="latest", torch_compile=True)
    train(data, tmp_path, probes=probes, max_train_steps=4, resume_from_checkpoint="latest")
    assert steps(tmp_path) == [2, 4]


# 2. Publishing into a directory that holds files.
def test_publish_refuses_a_non_empty_directory_and_a_file(tmp_path, capsys):
    publish = load_repo_script("dataset_scripts/publish_concept_graph.py")
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("my notes")
    (tmp_path / "a-file").write_text("not a directory")
    for target, message in ((tmp_path / "mine", "already holds files"), (tmp_path / "a-file", "is a file")):
        with pytest.raises(SystemExit) as exit_info:
            publish.main(["--output_dir", str(target), "--configs", "okawa-h32-train1"])
        assert exit_info.value.code == 2 and message in capsys.readouterr().err
    assert (tmp_path / "mine" / "notes.txt").read_text() == "my notes"
    assert (tmp_path / "a-file").read_text() == "not a directory"


@pytest.mark.parametrize("kind", [[], ["--clips"]], ids=["shapes", "clips"])
def test_publish_with_the_hub_unreachable_is_refused_before_rendering(tmp_path, capsys, monkeypatch, kind):
    """Issue 76, case 9: ``--push_to_hub REPO`` with the Hub switched off rendered and wrote the whole export, then
    failed with a raw ``OfflineModeIsEnabled``; now refused before anything is rendered or written."""
    from huggingface_hub import constants

    publish = load_repo_script("dataset_scripts/publish_concept_graph.py")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(SystemExit) as exit_info:
        publish.main(["--output_dir", str(tmp_path / "export"), *kind, "--push_to_hub", "someone/shapes",
                      "--cache_dir", str(tmp_path / "cache")])
    assert exit_info.value.code == 2 and "HF_HUB_OFFLINE is set" in capsys.readouterr().err
    assert not (tmp_path / "export").exists() and not (tmp_path / "cache").exists()


# 3. A kill during the evaluation of a checkpoint step.
def test_a_kill_during_an_evaluation_at_a_checkpoint_step_loses_no_evaluation(data, probes, tmp_path):
    with pytest.raises(Killed):
        train(data, tmp_path, task(data, kill_generate_at=2), probes=probes)  # the evaluation of step 4
    assert steps(tmp_path) == [2]
    assert [s for s, _ in list_checkpoints(tmp_path / "checkpoints")] == [2]  # step 4 was not checkpointed yet
    train(data, tmp_path, probes=probes, resume_from_checkpoint="latest")
    assert steps(tmp_path) == [2, 4]


# 4. Export and model card as one unit.
def test_a_kill_during_an_export_leaves_the_previous_export_whole(data, tmp_path):
    train(data, tmp_path, max_train_steps=2)
    card = (tmp_path / "README.md").read_text()
    weights = load_file(str(tmp_path / "unet" / "diffusion_pytorch_model.safetensors"))
    with pytest.raises(Killed):
        train(data, tmp_path, task(data, kill_export=True), max_train_steps=4, resume_from_checkpoint="latest")
    assert (tmp_path / "README.md").read_text() == card
    reloaded = TupleConditionedDDPMPipeline.from_pretrained(tmp_path).unet.state_dict()
    assert all(torch.equal(reloaded[k], weights[k]) for k in weights)


def test_a_kill_while_the_export_is_moved_in_leaves_nothing_loadable(data, tmp_path, monkeypatch):
    train(data, tmp_path, max_train_steps=2)
    real_replace = os.replace

    def replace_then_die(source, target):
        if Path(source).parent.name == ".tmp-export" and Path(target).parent == tmp_path:
            raise Killed("while moving the export in")  # the first component moved into place: the process dies
        real_replace(source, target)

    monkeypatch.setattr(os, "replace", replace_then_die)
    with pytest.raises(Killed):
        train(data, tmp_path, max_train_steps=4, resume_from_checkpoint="latest")
    monkeypatch.undo()
    assert not (tmp_path / "model_index.json").exists()  # no marker: a mix of old and new parts never loads
    with pytest.raises(OSError):
        TupleConditionedDDPMPipeline.from_pretrained(tmp_path)
    train(data, tmp_path, max_train_steps=4, resume_from_checkpoint="latest")  # rerunning completes the export
    TupleConditionedDDPMPipeline.from_pretrained(tmp_path)


# 5. and 12. Sampling options that used to pass silently.
def test_pipeline_refuses_zero_negative_steps_and_non_finite_guidance(data):
    unet = TupleConditionedUNet2DModel(data[0].space.to_dict(), block_out_channels=(8, 16), norm_num_groups=4,
                                       concept_dropout=0.1)
    pipe = TupleConditionedDDPMPipeline(unet=unet, scheduler=DDPMScheduler(num_train_timesteps=50))
    for steps_ in (0, -3, 2.5):
        with pytest.raises(ValueError, match="num_inference_steps"):
            pipe("111", num_inference_steps=steps_)
    for scale in (math.nan, math.inf):
        with pytest.raises(ValueError, match="guidance_scale"):
            pipe("111", num_inference_steps=2, guidance_scale=scale)


# 6. A diverging run.
def test_a_diverging_run_stops_names_the_step_keeps_the_last_good_checkpoint_and_exports_nothing(data, tmp_path):
    class DivergesAtStep3(FaultyTask):
        def compute_loss(self, model, batch, generator, step):
            loss, scalars = super().compute_loss(model, batch, generator, step)
            return (loss * math.inf if step == 2 else loss), scalars  # step index 2 is the 3rd optimizer step

    diverging = DivergesAtStep3(task(data).model, DDPMScheduler(num_train_timesteps=50), eval_inference_steps=2)
    with pytest.raises(NonFiniteLossError, match="step 3"):
        train(data, tmp_path, diverging, max_train_steps=6, logging_steps=1)
    assert [s for s, _ in list_checkpoints(tmp_path / "checkpoints")] == [2]
    assert not (tmp_path / "model_index.json").exists() and not (tmp_path / "unet").exists()
    weights = load_file(str(tmp_path / "checkpoints" / "checkpoint-2" / "model.safetensors"))
    assert all(torch.isfinite(v).all() for v in weights.values())


def test_a_huge_learning_rate_is_caught_through_the_script(tmp_path):
    script = load_recipe("tuple-unet")
    reset_accelerate_state()
    with pytest.raises(NonFiniteLossError, match="non-finite at step"):
        script.main(["--dataset", "okawa-h32-train1", "--cache_dir", str(tmp_path / "cache"), "--no_eval",
                     "--block_out_channels", "16,32", "--layers_per_block", "1", "--train_batch_size", "8",
                     "--max_train_steps", "6", "--learning_rate", "1e30", "--logging_steps", "2",
                     "--output_dir", str(tmp_path / "out")])
    assert not (tmp_path / "out" / "model_index.json").exists()


# 7. A torn last line in the evaluation log (what a kill leaves).
def test_a_torn_last_log_line_does_not_block_resume(data, probes, tmp_path):
    train(data, tmp_path, probes=probes, max_train_steps=2)
    log = tmp_path / "learning_dynamics.jsonl"
    log.write_text(log.read_text() + '{"step": 3, "accura')
    train(data, tmp_path, probes=probes, max_train_steps=4, resume_from_checkpoint="latest")
    assert steps(tmp_path) == [2, 4]


# 10. A corrupt checkpoint.
def test_a_corrupt_checkpoint_is_named_and_latest_falls_back_to_the_previous_one(data, tmp_path):
    train(data, tmp_path, max_train_steps=4)
    newest = tmp_path / "checkpoints" / "checkpoint-4" / "model.safetensors"
    newest.write_bytes(newest.read_bytes()[:100])  # truncated by a full disk
    train(data, tmp_path, max_train_steps=6, resume_from_checkpoint="latest")  # resumes from checkpoint-2
    assert [s for s, _ in list_checkpoints(tmp_path / "checkpoints")][-1] == 6
    (tmp_path / "checkpoints" / "checkpoint-6" / "optimizer.json").write_text("{not json")
    with pytest.raises(CheckpointError, match="checkpoint-6.*optimizer.json"):
        train(data, tmp_path, max_train_steps=8, resume_from_checkpoint="checkpoint-6")


# 11. fp16 on a CPU.
@pytest.mark.skipif(torch.cuda.is_available(), reason="fp16 autocast exists on CUDA")
def test_fp16_without_a_gpu_is_refused(data, tmp_path):
    with pytest.raises(ValueError, match="fp16 needs a CUDA GPU"):
        train(data, tmp_path, mixed_precision="fp16")


# 8, 9 and 13. Options are checked before any work, with argparse messages.
@pytest.mark.parametrize("argv, message", [
    (["--learning_rate", "-1"], "learning_rate must be a positive number"),
    (["--dataset_config", "bogus"], "only applies to a local export directory or a Hub dataset"),
    (["--block_out_channels", "16,x"], "comma-separated integers"),
    (["--lr_scheduler", "sometimes"], "lr_scheduler must be one of"),
    (["--concept_embedding_init", "zero"], "'multiply' modulation"),
])
def test_bad_options_stop_the_unet_script_before_any_work(argv, message, tmp_path, capsys):
    script = load_recipe("tuple-unet")
    with pytest.raises(SystemExit) as exit_info:
        script.main(["--cache_dir", str(tmp_path / "cache"), "--output_dir", str(tmp_path / "out"), *argv])
    assert exit_info.value.code == 2 and message in capsys.readouterr().err
    assert not (tmp_path / "cache").exists()  # no dataset was built


@pytest.mark.parametrize("argv, message", [
    (["--jepa_layers", "9"], "--jepa_layers '9': layers must lie in 1..2"),
    (["--jepa_weight", "-0.5"], "jepa_weight must be a finite number >= 0"),
    (["--jepa_weight", "nan"], "jepa_weight must be a finite number >= 0"),
    (["--eval_temperature", "nan"], "eval_temperature must be a finite number >= 0"),
    (["--eval_temperature", "inf"], "eval_temperature must be a finite number >= 0"),
])
def test_bad_maskgit_options_stop_before_the_tokenizer_is_trained(argv, message, tmp_path, capsys):
    script = load_recipe("maskgit")
    with pytest.raises(SystemExit) as exit_info:
        script.main(["--cache_dir", str(tmp_path / "cache"), "--output_dir", str(tmp_path / "out"),
                     "--num_layers", "2", *argv])
    assert exit_info.value.code == 2 and message in capsys.readouterr().err
    assert not (tmp_path / "out" / "tokenizer").exists()


@pytest.mark.parametrize("recipe, argv", [
    *((recipe, argv) for recipe in ("givt", "mar") for argv in (["--eval_temperature", "nan"],
                                                                ["--eval_temperature", "inf"])),
    *((recipe, ["--tokenizer", "kl", "--kl_weight", "nan"]) for recipe in ("givt", "mar", "tuple-dit", "tokenizer")),
])
def test_non_finite_sampling_and_loss_weights_stop_the_latent_scripts_before_any_work(recipe, argv, tmp_path, capsys):
    script = load_recipe(recipe)
    with pytest.raises(SystemExit) as exit_info:
        script.main(["--cache_dir", str(tmp_path / "cache"), "--output_dir", str(tmp_path / "out"), *argv])
    assert exit_info.value.code == 2 and "a finite number >= 0" in capsys.readouterr().err
    assert not (tmp_path / "cache").exists() and not (tmp_path / "out" / "tokenizer").exists()


@pytest.mark.parametrize("argv, message", [
    (["--tokenizer_path", "/nonexistent/tokenizer"], "holds no tokenizer (no config.json there)"),
    (["--tokenizer_crop_size", "13"], "--tokenizer_crop_size 13 must be a multiple of the tokenizer's downsampling, 4"),
    (["--tokenizer_learning_rate", "nan"], "--tokenizer_learning_rate must be a finite number > 0, got nan"),
    (["--tokenizer_learning_rate", "-1"], "--tokenizer_learning_rate must be a finite number > 0, got -1.0"),
    (["--tokenizer_commitment_cost", "nan"], "--tokenizer_commitment_cost must be a finite number >= 0, got nan"),
])
def test_a_tokenizer_that_cannot_be_is_refused_before_any_work(argv, message, tmp_path, capsys):
    script = load_recipe("maskgit")
    with pytest.raises(SystemExit) as exit_info:
        script.main(["--cache_dir", str(tmp_path / "cache"), "--output_dir", str(tmp_path / "out"),
                     "--tokenizer_block_out_channels", "8,8,8", *argv])
    assert exit_info.value.code == 2 and message in capsys.readouterr().err
    assert not (tmp_path / "cache").exists()


def test_a_vqvae_path_at_an_export_root_names_its_tokenizer(tmp_path, capsys):
    from conftest import tiny_tokenizer

    tiny_tokenizer(kl=False, channels=4).save_pretrained(tmp_path / "run" / "vqvae")
    script = load_recipe("maskgit")
    with pytest.raises(SystemExit):
        script.main(["--cache_dir", str(tmp_path / "cache"), "--output_dir", str(tmp_path / "out"),
                     "--tokenizer_path", str(tmp_path / "run")])
    assert f"pass {tmp_path / 'run' / 'vqvae'}" in capsys.readouterr().err
    assert not (tmp_path / "cache").exists()


def test_non_finite_temperatures_are_refused_by_every_masked_pipeline():
    from model_families import givt, givt_pipeline, mar, mar_pipeline, maskgit, maskgit_pipeline

    for pipe in (givt_pipeline(givt()), mar_pipeline(mar())):
        for temperature in (float("nan"), float("inf"), -1.0):
            with pytest.raises(ValueError, match="temperature must be a finite number >= 0"):
                pipe("021", num_inference_steps=2, temperature=temperature)
    pipe = maskgit_pipeline(maskgit())
    for temperature in (float("nan"), (2.0, float("inf")), -1.0):
        with pytest.raises(ValueError, match="temperature must be finite numbers >= 0"):
            pipe("021", num_inference_steps=2, temperature=temperature)


def test_a_leftover_tokenizer_with_other_options_is_refused_not_reused(tmp_path, capsys):
    script = load_recipe("maskgit")
    tiny = ["--cache_dir", str(tmp_path / "cache"), "--no_eval", "--train_batch_size", "8", "--hidden_size", "16",
            "--num_layers", "2", "--num_heads", "2", "--tokenizer_block_out_channels", "8,8,8",
            "--tokenizer_embed_dim", "4",
            "--tokenizer_steps", "2", "--max_train_steps", "2", "--output_dir", str(tmp_path / "out")]
    reset_accelerate_state()
    script.main([*tiny, "--codebook_size", "16"])
    options = json.loads((tmp_path / "out" / "tokenizer" / "tokenizer_options.json").read_text())
    assert options["codebook_size"] == 16
    reset_accelerate_state()
    with pytest.raises(SystemExit) as exit_info:
        script.main([*tiny, "--codebook_size", "32", "--resume_from_checkpoint", "latest"])
    assert exit_info.value.code == 2
    assert "--codebook_size 16 there vs 32 now" in capsys.readouterr().err
    reset_accelerate_state()
    script.main([*tiny, "--codebook_size", "32", "--overwrite_output_dir"])
    assert json.loads((tmp_path / "out" / "tokenizer" / "tokenizer_options.json").read_text())["codebook_size"] == 32
    assert np.isfinite(json.loads((tmp_path / "out" / "tokenizer" / "tokenizer_options.json").read_text())["steps"])


def test_a_crop_larger_than_the_images_is_refused_once_the_data_are_known(dataset_dir, tmp_path, capsys):
    """Issue 42, case 17: ``--tokenizer_crop_size 40`` on 28 px images failed as a traceback after data and probes; now
    a
    usage error before the probes and the tokenizer."""
    script = load_recipe("maskgit")
    with pytest.raises(SystemExit) as exit_info:
        script.main(["--dataset", str(dataset_dir), "--output_dir", str(tmp_path / "out"),
                     "--tokenizer_block_out_channels", "8,8,8", "--tokenizer_crop_size", "40"])
    assert exit_info.value.code == 2
    assert "--tokenizer_crop_size 40 is larger than the images" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_tokenizer_flags_that_would_be_ignored_are_refused_before_any_work(tmp_path, capsys):
    """``--tokenizer kl`` with a VQ-only flag, and an architecture flag beside ``--tokenizer_path`` that contradicts
    the tokenizer it loads, were silently ignored. A flag that agrees with the loaded tokenizer, or comes from a preset,
    passes."""
    from conftest import tiny_tokenizer

    tiny_tokenizer(kl=False, channels=4).save_pretrained(tmp_path / "vq")
    vq_embed_dim = json.loads((tmp_path / "vq" / "config.json").read_text())["vq_embed_dim"]
    cases = [("tuple-dit", ["--tokenizer", "kl", "--codebook_size", "32"],
              "--codebook_size: a VQ tokenizer's options, which --tokenizer kl (no codebook) would ignore"),
             ("maskgit", ["--tokenizer_path", str(tmp_path / "vq"), "--tokenizer_embed_dim", str(vq_embed_dim + 1)],
              f"--tokenizer_embed_dim {vq_embed_dim + 1} contradicts the tokenizer --tokenizer_path")]
    for recipe, argv, message in cases:
        with pytest.raises(SystemExit) as exit_info:
            load_recipe(recipe).main(["--cache_dir", str(tmp_path / "cache"), "--output_dir", str(tmp_path / "out"),
                                      *argv])
        assert exit_info.value.code == 2 and message in capsys.readouterr().err
        assert not (tmp_path / "cache").exists()


def test_the_options_given_on_the_command_line_are_told_from_defaults_and_presets():
    import argparse

    from compgen.launch.run_setup import given_options

    parser = argparse.ArgumentParser()
    parser.add_argument("--codebook_size", "--vq_num_embeddings", type=int, default=256)
    parser.add_argument("--tokenizer", default="vq")
    parser.set_defaults(codebook_size=32)  # a preset's default
    assert given_options(parser, []) == frozenset()
    assert given_options(parser, ["--vq_num_embeddings", "8"]) == {"codebook_size"}
    assert given_options(parser, ["--tokenizer=kl", "--codebook_size", "8"]) == {"tokenizer", "codebook_size"}
