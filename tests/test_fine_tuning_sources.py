"""``--init_from`` from every kind of source (issue 42, cases 1-5): a token model fine-tunes on the tokenizer and
latent statistics its source was trained with, another architecture is refused before any work, a source inside
the output directory is never deleted, and an export keeps its own step when its run trained on past it."""

import json

import pytest
import torch
from conftest import reset_accelerate_state, tiny_tokenizer
from safetensors.torch import load_file, save_file
from test_kl_tokenizer import TINY

from compgen.launch.init_from import resolve_initial_weights
from compgen.recipes import load_recipe

pytestmark = pytest.mark.usefixtures("single_thread")
GIVT = ["--num_mixtures", "2", "--no_eval", "--checkpointing_steps", "2", *TINY]
WEIGHTS = "diffusion_pytorch_model.safetensors"


def _givt(*argv):
    reset_accelerate_state()
    return load_recipe("givt").main([*GIVT, *argv])


@pytest.fixture(scope="module")
def source(dataset_dir, tmp_path_factory):
    """A tiny GIVT over a VQ tokenizer, 2 steps: an export, ``tokenizer/`` and ``checkpoints/checkpoint-2``."""
    out = tmp_path_factory.mktemp("givt-source") / "run"
    _givt("--dataset", str(dataset_dir), "--max_train_steps", "2", "--output_dir", str(out))
    return out


def _same_weights(a, b):
    first, second = load_file(str(a / WEIGHTS)), load_file(str(b / WEIGHTS))
    return set(first) == set(second) and all(torch.equal(first[k], second[k]) for k in first)


@pytest.mark.parametrize("where", ["export", "checkpoint", "run directory without export"])
def test_a_givt_fine_tunes_on_its_sources_tokenizer_and_latent_statistics(source, dataset_dir, tmp_path, where):
    """Cases 1 and 2: a checkpoint or a run directory (no export) no longer crashes in the tokenizer's run, and no
    source kind retrains the tokenizer or recomputes the latent statistics under the loaded transformer."""
    init_from = {"export": source, "checkpoint": source / "checkpoints" / "checkpoint-2"}.get(where)
    if init_from is None:  # the same run without its export (a run killed after its last checkpoint)
        init_from = tmp_path / "bare"
        init_from.mkdir()
        for name in ("checkpoints", "tokenizer"):
            (init_from / name).symlink_to(source / name)
    out = tmp_path / "fine-tuned"
    _givt("--dataset", str(dataset_dir), "--init_from", str(init_from), "--max_train_steps", "2",
          "--learning_rate", "1e-5", "--output_dir", str(out))
    assert not (out / "tokenizer").exists()  # nothing trained, nothing fine-tuned: the source's, as it is
    assert _same_weights(out / "vqvae", source / "vqvae")
    theirs = json.loads((source / "transformer" / "config.json").read_text())
    mine = json.loads((out / "transformer" / "config.json").read_text())
    assert [mine[k] for k in ("latent_mean", "latent_std")] == [theirs[k] for k in ("latent_mean", "latent_std")]


@pytest.mark.parametrize("argv, message", [
    (["--tokenizer", "kl"], "its model read a VQModel"),
    (["--tokenizer_path", "OTHER"], "is not the tokenizer the --init_from model read"),
])
def test_a_fine_tuning_run_refuses_another_tokenizer_before_any_work(source, tmp_path, capsys, argv, message):
    other = tmp_path / "other"
    tiny_tokenizer(kl=False, channels=4).save_pretrained(other)
    argv = [str(other) if a == "OTHER" else a for a in argv]
    with pytest.raises(SystemExit) as exit_info:
        _givt("--init_from", str(source), "--cache_dir", str(tmp_path / "cache"), "--output_dir",
              str(tmp_path / "out"), *argv)
    assert exit_info.value.code == 2 and message in capsys.readouterr().err
    assert not (tmp_path / "cache").exists() and not (tmp_path / "out").exists()


@pytest.mark.parametrize("init_from", ["", "checkpoints/checkpoint-2"])
def test_another_architecture_is_refused_before_any_work(source, tmp_path, capsys, init_from):
    """Case 3: a U-Net from a GIVT export or checkpoint, refused before the data (no cache) is built."""
    reset_accelerate_state()
    with pytest.raises(SystemExit) as exit_info:
        load_recipe("tuple-unet").main(
            ["--init_from", str(source / init_from), "--cache_dir", str(tmp_path / "cache"),
             "--output_dir", str(tmp_path / "out")])
    assert exit_info.value.code == 2
    assert "GIVTTransformer" in (err := capsys.readouterr().err) and "not the TupleConditionedUNet2DModel" in err
    assert not (tmp_path / "cache").exists()


def test_a_source_inside_the_output_directory_is_refused_and_kept(source, dataset_dir, tmp_path, capsys):
    """Case 4: ``--init_from OUT/checkpoints/checkpoint-2 --output_dir OUT --overwrite_output_dir`` deleted the
    source before loading it; now refused, with the run as it was."""
    import shutil

    out = tmp_path / "run"
    shutil.copytree(source, out)
    before = sorted(p.relative_to(out) for p in out.rglob("*"))
    with pytest.raises(SystemExit) as exit_info:
        _givt("--dataset", str(dataset_dir), "--init_from", str(out / "checkpoints" / "checkpoint-2"),
              "--output_dir", str(out), "--overwrite_output_dir")
    assert exit_info.value.code == 2 and "lies inside --output_dir" in capsys.readouterr().err
    assert sorted(p.relative_to(out) for p in out.rglob("*")) == before


def test_an_export_keeps_its_step_when_its_run_trained_on(tmp_path):
    """Case 5: a run resumed past its export (a later checkpoint and later records): the export is labelled with
    its own step and brings only the records up to it."""
    from test_fine_tuning import _hub_layout, _train

    data = _hub_layout(tmp_path / "train1", "H32-train1")
    run = tmp_path / "source"
    _train("--dataset", str(data), "--max_train_steps", "2", "--eval_steps", "2", "--output_dir", str(run))
    log = run / "learning_dynamics.jsonl"
    later = json.loads(log.read_text().splitlines()[-1]) | {"step": 4}  # what a resumed run, killed, logs on
    log.write_text(log.read_text() + json.dumps(later) + "\n")
    initial = resolve_initial_weights(run)
    assert initial.step == 2 and [r["step"] for r in initial.records] == [2]


@pytest.mark.parametrize("where", ["export", "checkpoint"])
def test_a_dit_of_the_other_objective_is_refused_before_any_work(tmp_path, where):
    """A DDPM DiT and a flow-matching DiT share their class: the check reads the export's pipeline or the checkpoint's
    script options, so noise predictions are never trained on as a velocity field, nor the reverse."""
    sources = {}
    for objective, pipeline, options in (("ddpm", "TupleConditionedDiTPipeline", {"prediction_type": "epsilon"}),
                                         ("flow", "TupleConditionedFlowDiTPipeline", {"weighting_scheme": "uniform"})):
        if where == "export":
            source = tmp_path / objective
            (source / "transformer").mkdir(parents=True)
            save_file({"weight": torch.zeros(4)}, source / "transformer" / WEIGHTS)
            (source / "model_index.json").write_text(json.dumps({"_class_name": pipeline}))
        else:
            source = tmp_path / objective / "checkpoints" / "checkpoint-2"
            source.mkdir(parents=True)
            save_file({"weight": torch.zeros(4)}, source / "model.safetensors")
            (source / "trainer_state.json").write_text(json.dumps({"step": 2, "config": {"extra": options}}))
        sources[objective] = resolve_initial_weights(source)
        assert sources[objective].objective == objective
    sources["ddpm"].check_objective("ddpm")
    with pytest.raises(ValueError, match="holds a DDPM model .* trains a flow-matching velocity field"):
        sources["ddpm"].check_objective("flow")
    with pytest.raises(ValueError, match="holds a flow-matching velocity field, but this script trains a DDPM"):
        sources["flow"].check_objective("ddpm")


def test_a_truncated_weight_file_is_named_before_any_work(tmp_path):
    """A copy cut short (a full disk): the file is named when ``--init_from`` is checked, not a SafetensorError naming
    nothing after the data and the probes were loaded."""
    source = tmp_path / "export"
    (source / "transformer").mkdir(parents=True)
    (source / "model_index.json").write_text(json.dumps({"_class_name": "MaskGITPipeline"}))
    weights = source / "transformer" / WEIGHTS
    save_file({"weight": torch.zeros(64)}, weights)
    resolve_initial_weights(source)  # whole: accepted
    weights.write_bytes(weights.read_bytes()[:-16])
    with pytest.raises(ValueError, match=f"{WEIGHTS} is not a whole safetensors file"):
        resolve_initial_weights(source)
    weights.write_bytes(b"\x10")
    with pytest.raises(ValueError, match="not a whole safetensors file"):
        resolve_initial_weights(source)


@pytest.mark.parametrize("source_frames, recipe", [(1, "maskgit-video"), (4, "maskgit")],
                         ids=["image-source-video-recipe", "video-source-image-recipe"])
def test_a_source_of_the_other_kind_of_data_is_refused_before_any_work(tmp_path, capsys, source_frames, recipe):
    """Issue 76, case 7: ``maskgit-video --init_from`` an image MaskGIT (and the reverse) was accepted, then failed
    after the data, the probes and the tokens ("train_tokens must be (N, 392), got (32, 512)"). One class serves
    both: the source's ``num_frames`` names the kind, before the data are built."""
    from compgen import MaskGITTransformer
    from compgen.concepts import shapes_space

    source = tmp_path / "source"
    MaskGITTransformer(concept_space=shapes_space().to_dict(), codebook_size=8, grid_size=2, hidden_size=8,
                       num_layers=1, num_heads=2, num_frames=source_frames).save_pretrained(source / "transformer")
    (source / "model_index.json").write_text(json.dumps({"_class_name": "MaskGITPipeline"}))
    reset_accelerate_state()
    with pytest.raises(SystemExit) as exit_info:
        load_recipe(recipe).main(["--init_from", str(source), "--cache_dir", str(tmp_path / "cache"),
                                  "--output_dir", str(tmp_path / "out")])
    err = capsys.readouterr().err
    kind = "a model of 4-frame clips" if source_frames > 1 else "a model of images"
    assert exit_info.value.code == 2 and kind in err and "start it from a run of the same kind" in err
    assert not (tmp_path / "cache").exists() and not (tmp_path / "out").exists()
