"""examples/train_maskgit_jepa.py end to end with tiny sizes: tokenizer first, pipeline, card, exact resume."""

import json

import pytest
import torch
from conftest import reset_accelerate_state
from diffusers import VQModel
from safetensors.torch import load_file

from compgen import MaskGITPipeline, MaskGITTransformer
from compgen.data.concept_graph_builder import build_concept_graph_dataset
from compgen.recipes import load_recipe
from compgen.training.checkpoint import list_checkpoints
from compgen.training.tasks.maskgit import MaskGITTask

TINY = ["--train_batch_size", "16", "--hidden_size", "16", "--num_layers", "2", "--num_heads", "2",
        "--tokenizer_block_out_channels", "8,8,8", "--tokenizer_embed_dim", "4", "--codebook_size", "32",
        "--tokenizer_steps", "3",
        "--learning_rate", "3e-3", "--logging_steps", "2", "--eval_inference_steps", "3", "--seed", "0"]

pytestmark = pytest.mark.usefixtures("fresh_accelerator_state")


@pytest.fixture(scope="module")
def script():
    return load_recipe("maskgit")


@pytest.fixture(scope="module")
def dataset_dir(tmp_path_factory):
    """A tiny H32-train1 split in Hub layout (Parquet per split), as --dataset DIR."""
    root = tmp_path_factory.mktemp("tiny-h32")
    dataset = build_concept_graph_dataset("tiny-maskgit", cache_dir=str(root / "cache"), split_preset="H32-train1",
                                          images_per_class=16, test_images_per_class=2)
    for split, data in dataset.items():
        (root / "data").mkdir(exist_ok=True)
        data.to_parquet(str(root / "data" / f"{split}-00000-of-00001.parquet"))
    return root


@pytest.fixture(scope="module")
def trained_run(script, dataset_dir, tmp_path_factory):
    reset_accelerate_state()
    out = tmp_path_factory.mktemp("run")
    script.main(["--dataset", str(dataset_dir), "--output_dir", str(out), *TINY, "--max_train_steps", "4",
                 "--eval_steps", "2", "--eval_images_per_class", "4", "--checkpointing_steps", "2",
                 "--jepa_layers", "1,2", "--jepa_momentum", "0.99"])
    return out


def test_end_to_end_writes_pipeline_card_report_and_target_encoder(trained_run):
    out = trained_run
    pipe = MaskGITPipeline.from_pretrained(out)
    pipe.set_progress_bar_config(disable=True)
    assert pipe("111", num_inference_steps=3, output_type="np").images.shape == (1, 28, 28, 3)
    assert VQModel.from_pretrained(out / "vqvae").config.num_vq_embeddings == 32

    report = json.loads((out / "vq_reconstruction.json").read_text())
    assert sorted(report["classes"]) == ["000", "001", "010", "011", "100", "101", "110", "111"]
    assert report["classes"]["111"]["level"] == 2
    assert 0 <= report["classes"]["111"]["probe_accuracy_reconstructed"] <= 1

    records = [json.loads(line) for line in (out / "learning_dynamics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [2, 4]
    card = (out / "README.md").read_text()
    assert "jepa_weight: `0.6`" in card and "mask_type: `random`" in card  # the task's options, listed once
    assert "jepa_layers: `[1, 2]`" in card
    assert "jepa_ema_momentum: `0.99 -> 1.0 (linear over 4 steps)`" in card
    assert "## Tokenizer reconstruction accuracy" in card and "| 111 | 2 |" in card
    assert "| level | classes | final accuracy |" in card
    # Paper B's lenient protocol, logged beside the verdict's scorers and named on the card as a comparison only.
    assert set(records[-1]["lenient_accuracy"]) == set(records[-1]["accuracy"])
    assert records[-1]["lenient_chance"] == 0.125
    assert "Paper B's protocol" in card

    # Where the time went, from the process's start: phases (the tokenizer's prefixed) plus the rest make the total.
    profile = json.loads((out / "profile.json").read_text())
    assert {"startup: dataset (build or load, decode)", "tokenizer: training steps", "training steps",
            "evaluation: sampling", "evaluation: scoring and logging"} <= set(profile["phases"])
    assert sum(profile["phases"].values()) + profile["other_s"] == pytest.approx(profile["total_s"], abs=0.01)
    assert profile["other_s"] >= -0.01 and profile["total_s"] > 0

    # What the JEPA term does, at every logging interval (--logging_steps 2): both losses, the JEPA loss per layer,
    # the target spread and the gradient norms on the shared blocks, measured on the interval's last step.
    scalars = [json.loads(line) for line in (out / "training_log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in scalars] == [2, 4]
    for record in scalars:
        assert {"loss", "ce", "jepa", "jepa_layer_1", "jepa_layer_2", "jepa_target_spread_1", "jepa_target_spread_2",
                "grad_norm_ce", "grad_norm_jepa", "grad_norm_ratio", "lr"} <= set(record)
        assert record["jepa"] == pytest.approx((record["jepa_layer_1"] + record["jepa_layer_2"]) / 2, rel=1e-5)
        assert record["loss"] == pytest.approx(record["ce"] + 0.6 * record["jepa"], rel=1e-5)
        assert record["grad_norm_ratio"] == pytest.approx(record["grad_norm_jepa"] / record["grad_norm_ce"], rel=1e-4)
        assert 0 < record["jepa_target_spread_1"] < 1.5

    target = MaskGITTransformer.from_pretrained(out / "jepa_target")
    assert target.config.num_layers == 2
    assert "heads.1.1.weight" in load_file(str(out / "jepa_target" / "predictor.safetensors"))


class Crash(Exception):
    pass


def run_resumable(script, dataset_dir, out, tokenizer_path, extra=()):
    script.main(["--dataset", str(dataset_dir), "--output_dir", str(out), "--tokenizer_path", str(tokenizer_path),
                 *TINY,
                 "--max_train_steps", "6", "--checkpointing_steps", "3", "--no_eval", *extra])


@pytest.mark.parametrize("jepa_weight", ["0.6", "0"])
def test_resume_after_a_crash_is_exact(script, dataset_dir, trained_run, tmp_path, monkeypatch, jepa_weight):
    tokenizer_path = trained_run / "vqvae"
    # The JEPA arm trains on Paper B's context (one visible block), plain MaskGIT on a masked block.
    flags = ["--jepa_weight", jepa_weight, "--mask_type", "block" if jepa_weight == "0" else "visible_block"]
    run_resumable(script, dataset_dir, tmp_path / "straight", tokenizer_path, flags)

    original = MaskGITTask.after_optimizer_step

    def crash_at_five(self, model, step):
        if step == 5:
            raise Crash
        return original(self, model, step)

    monkeypatch.setattr(MaskGITTask, "after_optimizer_step", crash_at_five)
    reset_accelerate_state()
    with pytest.raises(Crash):
        run_resumable(script, dataset_dir, tmp_path / "crashed", tokenizer_path, flags)
    assert [s for s, _ in list_checkpoints(tmp_path / "crashed" / "checkpoints")] == [3]
    monkeypatch.setattr(MaskGITTask, "after_optimizer_step", original)
    reset_accelerate_state()
    run_resumable(script, dataset_dir, tmp_path / "crashed", tokenizer_path, [*flags, "--resume_from_checkpoint",
                                                                              "latest"])

    files = ["transformer/diffusion_pytorch_model.safetensors"]
    if jepa_weight != "0":
        files += ["jepa_target/diffusion_pytorch_model.safetensors", "jepa_target/predictor.safetensors"]
    else:
        assert not (tmp_path / "straight" / "jepa_target").exists()
        assert "MaskGIT (no JEPA)" in (tmp_path / "straight" / "README.md").read_text()
    # The training log is cut back to the checkpoint and continued: the same records as the uninterrupted run's.
    def scalars(run):
        return [{k: v for k, v in json.loads(line).items() if k != "images_per_second"}
                for line in (tmp_path / run / "training_log.jsonl").read_text().splitlines()]

    # The interval the crash cut (steps 3-4) averages the losses over the step after the resume only; the diagnostics
    # measured on its last step agree.
    crashed, straight = scalars("crashed"), scalars("straight")
    assert [r["step"] for r in crashed] == [2, 4, 6]
    assert crashed[0] == straight[0] and crashed[2] == straight[2]
    point_measured = [k for k in straight[1] if k.startswith(("grad_norm", "jepa_target_spread")) or k == "lr"]
    assert ("grad_norm_ratio" in point_measured) == (jepa_weight != "0")
    assert {k: crashed[1][k] for k in point_measured} == {k: straight[1][k] for k in point_measured}
    for name in files:
        straight = load_file(str(tmp_path / "straight" / name))
        resumed = load_file(str(tmp_path / "crashed" / name))
        assert straight.keys() == resumed.keys()
        for key in straight:
            torch.testing.assert_close(resumed[key], straight[key], rtol=0, atol=0, msg=f"{name}: {key}")


def test_dead_code_restarts_and_crops_are_deterministic():
    from compgen.models.vq_tokenizer import build_vq_tokenizer
    from compgen.training.tasks.vq_tokenizer import random_crops, restart_dead_codes

    torch.manual_seed(0)
    vqvae = build_vq_tokenizer(sample_size=16, block_out_channels=(8, 8, 8), num_vq_embeddings=32, vq_embed_dim=4)
    codebook = vqvae.quantize.embedding.weight
    latents = torch.randn(2, 4, 2, 2)  # 8 vectors: at most 8 codes used, at least 24 dead
    before = codebook.detach().clone()
    restarted = restart_dead_codes(vqvae, latents, seed=5)
    assert restarted >= 24
    changed = (codebook != before).any(dim=1)
    assert int(changed.sum()) == restarted
    vectors = latents.permute(0, 2, 3, 1).reshape(-1, 4)
    # every restarted code is one of the batch's latent vectors
    assert all(torch.isclose(codebook[i], vectors).all(dim=1).any() for i in changed.nonzero()[:, 0])
    again = vqvae.quantize.embedding.weight.detach().clone()
    vqvae.quantize.embedding.weight.data.copy_(before)
    restart_dead_codes(vqvae, latents, seed=5)
    assert torch.equal(vqvae.quantize.embedding.weight, again)

    images = torch.arange(2 * 3 * 28 * 28, dtype=torch.float32).reshape(2, 3, 28, 28)
    crops = random_crops(images, 12, torch.Generator().manual_seed(1))
    assert crops.shape == (2, 3, 12, 12)
    assert torch.equal(crops, random_crops(images, 12, torch.Generator().manual_seed(1)))
    for image, crop in zip(images, crops, strict=True):  # each crop is a window of its own image
        top, left = divmod(int(crop[0, 0, 0] - image[0, 0, 0]), 28)
        assert torch.equal(crop, image[:, top : top + 12, left : left + 12])
    with pytest.raises(ValueError, match="crop_size"):
        random_crops(images, 30)


@pytest.mark.parametrize(("choice", "classes"), [
    ("all-classes", ["000", "001", "010", "011", "100", "101", "110", "111"]),
    ("training-classes", ["000", "001", "010", "100"]),
])
def test_tokenizer_data_names_the_classes_the_tokenizer_sees_and_is_recorded(script, dataset_dir, tmp_path,
                                                                             monkeypatch, choice, classes):
    """``--tokenizer_data`` decides which images reach the tokenizer (all-classes: the dataset's tokenizer split,
    never the test images); the tokenizer's options, its card, the reconstruction report and the generator's card
    name the choice."""
    from compgen.launch.run_setup import TrainingRun

    seen, original = [], TrainingRun.train_first_stage

    def spy(self, task, train_data, output_dir, **overrides):  # the tokenizer's run, before the generator's
        seen.append((train_data.class_strings(), len(train_data)))
        return original(self, task, train_data, output_dir, **overrides)

    monkeypatch.setattr(TrainingRun, "train_first_stage", spy)
    reset_accelerate_state()
    out = tmp_path / "out"
    script.main(["--dataset", str(dataset_dir), "--output_dir", str(out), *TINY, "--max_train_steps", "2",
                 "--eval_steps", "2", "--eval_images_per_class", "2", "--jepa_weight", "0",
                 "--tokenizer_data", choice])
    assert seen == [(classes, 16 * len(classes))]
    assert json.loads((out / "tokenizer" / "tokenizer_options.json").read_text())["tokenizer_data"] == choice
    assert f"tokenizer_data: `{choice}`" in (out / "tokenizer" / "README.md").read_text()
    assert json.loads((out / "vq_reconstruction.json").read_text())["tokenizer_data"] == choice
    assert f"Trained on: {choice} (" in (out / "README.md").read_text()


def test_all_classes_tokenizer_data_needs_the_tokenizer_split(script, dataset_dir, tmp_path, capsys):
    """A dataset without the tokenizer split (built before it existed, CelebA, Paper A's files) is refused before any
    training, naming the split and the way out."""
    old = tmp_path / "old"
    (old / "data").mkdir(parents=True)
    for split in ("train", "test"):
        (old / "data" / f"{split}-00000-of-00001.parquet").write_bytes(
            (dataset_dir / "data" / f"{split}-00000-of-00001.parquet").read_bytes())
    reset_accelerate_state()
    with pytest.raises(SystemExit):
        script.main(["--dataset", str(old), "--output_dir", str(tmp_path / "out"), *TINY, "--max_train_steps", "2"])
    error = capsys.readouterr().err
    assert "'tokenizer' split" in error and "--tokenizer_data training-classes" in error
    assert not (tmp_path / "out" / "tokenizer").exists()


def test_the_tokenizer_flags_old_names_are_deprecated_aliases():
    """Issue 43: the tokenizer's flags are named ``--tokenizer_*`` (they serve the KL tokenizer too); the old ``--vq_*``
    and ``--vqvae_path`` still parse into the new names for a release, each with a ``FutureWarning`` naming its new
    name; the new names parse silently."""
    import argparse
    import warnings

    from compgen.launch.token_model_setup import add_tokenizer_first_arguments
    from compgen.option_names import RENAMED_OPTIONS

    parser = argparse.ArgumentParser()
    add_tokenizer_first_arguments(parser, allow_kl=True)
    values = {"vqvae_path": "/tmp/tok", "vq_steps": "7", "vq_learning_rate": "0.5", "vq_block_out_channels": "8,8",
              "vq_embed_dim": "4", "vq_commitment_cost": "0.1", "vq_restart_every": "3", "vq_crop_size": "8"}
    assert set(values) | {"vq_mid_attention"} == set(RENAMED_OPTIONS)
    old = [token for name, value in values.items() for token in (f"--{name}", value)] + ["--vq_mid_attention"]
    with pytest.warns(FutureWarning) as caught:
        args = parser.parse_args(old)
    messages = [str(warning.message) for warning in caught]
    assert len(messages) == len(RENAMED_OPTIONS)
    assert "--vq_steps is deprecated: use --tokenizer_steps" in messages[1]
    assert (args.tokenizer_path, args.tokenizer_steps, args.tokenizer_crop_size) == ("/tmp/tok", 7, 8)
    assert args.tokenizer_mid_attention is True and not any(name.startswith("vq") for name in vars(args))
    with pytest.warns(FutureWarning, match="--no-vq_mid_attention is deprecated: use --no-tokenizer_mid_attention"):
        assert parser.parse_args(["--no-vq_mid_attention"]).tokenizer_mid_attention is False
    new = [token for name, value in values.items() for token in (f"--{RENAMED_OPTIONS[name]}", value)]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert vars(parser.parse_args(new)) == vars(args) | {"tokenizer_mid_attention": False}


def test_the_evaluation_temperature_is_logged_and_a_rescore_sweeps_it(trained_run, dataset_dir, tmp_path, capsys):
    """The log keeps the MaskGIT evaluation's Gumbel temperature (re-scoring used the pipeline's default before), the
    re-score reproduces the training evaluation with it, and ``--temperature`` samples with another one."""
    from compgen.analysis.rescore import evaluate_run
    from compgen.analysis.rescore import main as rescore_main

    last = json.loads((trained_run / "learning_dynamics.jsonl").read_text().splitlines()[-1])
    assert last["sampling"]["temperature"] == 2.0 and last["sampling"]["num_inference_steps"] == 3
    record = evaluate_run(trained_run, images_per_class=4, lenient=str(dataset_dir))  # Paper B's scorer, refitted
    for key in ("accuracy", "pixel_accuracy", "object_rate", "lenient_accuracy"):
        assert record[key] == last[key], key
    hot = evaluate_run(trained_run, images_per_class=4, temperature=8.0, num_inference_steps=2)
    assert hot["evaluation_options"]["temperature"] == 8.0
    assert hot["evaluation_options"]["num_inference_steps"] == 2
    with pytest.raises(SystemExit):
        rescore_main([str(trained_run), "--temperature", "nan"])
    assert "--temperature must be a finite number >= 0" in capsys.readouterr().err


def test_the_tokenizer_is_a_first_stage_and_each_check_runs_once_per_stage(script, dataset_dir, tmp_path, monkeypatch):
    """The tokenizer trains as an explicit first stage (``TrainingRun.train_first_stage``, its own directory and
    data); the environment and batch checks run once per stage: ``prepare_run`` checks the generator's before any
    work and its loop does not check them again; the tokenizer's loop checks its own data's batch."""
    from compgen.launch import run_setup
    from compgen.training import trainer
    from compgen.training.config import TrainingConfig

    calls = {"environment": 0, "batch": []}
    original_environment, original_batch = TrainingConfig.check_environment, trainer.check_batch_fits

    def environment(self):
        calls["environment"] += 1
        return original_environment(self)

    def batch(num_examples, batch_size, num_processes=1):
        calls["batch"].append(num_examples)
        return original_batch(num_examples, batch_size, num_processes)

    monkeypatch.setattr(TrainingConfig, "check_environment", environment)
    monkeypatch.setattr(trainer, "check_batch_fits", batch)
    monkeypatch.setattr(run_setup, "check_batch_fits", batch)
    reset_accelerate_state()
    script.main(["--dataset", str(dataset_dir), "--output_dir", str(tmp_path / "out"), *TINY, "--max_train_steps",
                 "2", "--no_eval", "--jepa_weight", "0"])
    # the generator's checks (prepare_run), then the tokenizer's loop; the generator's loop checks nothing again
    assert calls == {"environment": 2, "batch": [16 * 4, 16 * 8]}


@pytest.mark.parametrize("refusal", [["--hidden_size", "100000"], ["--train_batch_size", "100000"]],
                         ids=["size-limits", "batch-over-the-split"])
def test_a_refused_overwrite_removes_nothing_of_the_earlier_run(script, dataset_dir, trained_run, tmp_path, capsys,
                                                                refusal):
    """Issue 76, case 1: ``--overwrite_output_dir`` with another tokenizer option, refused by a later check (the size
    limits before any work, the batch once the data are read), leaves the earlier run's tokenizer and export as they
    were: the loop replaces files only once the new training begins."""
    import shutil

    out = tmp_path / "out"
    shutil.copytree(trained_run, out)
    before = {path: path.read_bytes() for path in sorted((out / "tokenizer").rglob("*")) if path.is_file()}
    reset_accelerate_state()
    with pytest.raises(SystemExit) as exit_info:
        script.main(["--dataset", str(dataset_dir), "--output_dir", str(out), *TINY, "--max_train_steps", "4",
                     "--overwrite_output_dir", "--codebook_size", "16", *refusal])
    assert exit_info.value.code == 2 and refusal[0] in capsys.readouterr().err
    after = {path: path.read_bytes() for path in sorted((out / "tokenizer").rglob("*")) if path.is_file()}
    assert after == before and (out / "tokenizer" / "config.json").is_file()
    assert MaskGITPipeline.from_pretrained(out).vqvae.config.num_vq_embeddings == 32


def test_a_tokenizer_stage_killed_before_its_end_is_refused_before_the_data(script, dataset_dir, trained_run,
                                                                            tmp_path, capsys, monkeypatch):
    """Issue 76, case 6: a run killed while its tokenizer trains leaves ``OUTPUT/tokenizer`` with a log (and
    checkpoints) and no export. The same command again is refused before the data are built, naming the directory
    and ``--resume_from_checkpoint latest`` (not a raw ``FileExistsError`` after the data and the probes)."""
    import shutil

    from compgen.launch import run_setup

    out = tmp_path / "out"
    out.mkdir()
    shutil.copytree(trained_run / "tokenizer", out / "tokenizer")
    for name in ("config.json", "README.md", "tokenizer_options.json"):
        (out / "tokenizer" / name).unlink(missing_ok=True)  # what a SIGKILL during the stage leaves: no export

    def no_data(*args, **kwargs):
        raise AssertionError("the data were built before the refusal")

    monkeypatch.setattr(run_setup, "_load_dataset", no_data)
    reset_accelerate_state()
    with pytest.raises(SystemExit) as exit_info:
        script.main(["--dataset", str(dataset_dir), "--output_dir", str(out), *TINY, "--max_train_steps", "4"])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2
    assert f"{out / 'tokenizer'} holds another run" in err and "--resume_from_checkpoint latest" in err
