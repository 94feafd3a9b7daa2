"""CelebA in the training scripts: loading, dataset defaults over presets, CNN probes, and a preset smoke run."""

from __future__ import annotations

import argparse
import json
import re

import numpy as np
import pytest
import torch
from celeba_fixtures import make_mini_celeba, write_hub_pm1_layout, write_official_tree
from margins import check_margin, margin_seed

from compgen import MaskGITPipeline, TupleConditionedDDPMPipeline, TupleConditionedDiTPipeline
from compgen.cli import add_celeba_arguments, apply_preset, celeba_builder_options
from compgen.data.loading import load_concept_dataset, split_tensors, training_data_from
from compgen.evaluation.probes import ConceptProbes
from compgen.evaluation.train_probes import main as train_probes_main
from compgen.evaluation.train_probes import probe_accuracy
from compgen.launch.run_setup import DATASET_DEFAULTS, apply_dataset_defaults, check_image_size, load_probes
from compgen.recipes import load_recipe
from compgen.training.config import add_training_arguments

TRAINING_CLASSES = ["000", "001", "010", "100"]
LEVELS = {"000": 0, "001": 0, "010": 0, "100": 0, "011": 1, "101": 1, "110": 1, "111": 2}

pytestmark = pytest.mark.usefixtures("fresh_accelerator_state")



@pytest.fixture(scope="module")
def mini():
    # Enough train-partition images per class for a probe to learn the color-coded concepts in a few steps.
    return make_mini_celeba(per_class=(16, 5, 2), extra_000_train=4)


@pytest.fixture(scope="module")
def celeba(mini, tmp_path_factory):
    root = tmp_path_factory.mktemp("celeba")
    return {"data_dir": str(write_official_tree(root / "official", mini)), "cache_dir": str(root / "hf-cache")}


@pytest.fixture(scope="module")
def splits(celeba):
    return load_concept_dataset("celeba", "cpu", cache_dir=celeba["cache_dir"], data_dir=celeba["data_dir"])


@pytest.fixture(scope="module")
def trained_probes_dir(celeba, tmp_path_factory):
    output = tmp_path_factory.mktemp("probes") / "celeba-probes"
    accuracy = train_probes_main(["--dataset", "celeba", "--celeba_dir", celeba["data_dir"], "--celeba_config", "cpu",
                                  "--cache_dir", celeba["cache_dir"], "--output_dir", str(output),
                                  "--seed", str(margin_seed(0))])
    return output, accuracy


def test_celeba_training_data_has_the_concept_space_graph_and_levels(mini, splits):
    train_data, graph = training_data_from(splits)
    assert train_data.space.to_dict() == {"gender": ["female", "male"], "smile": ["smiling", "not_smiling"],
                                          "hair": ["black", "blond"]}
    assert train_data.class_strings() == TRAINING_CLASSES
    assert train_data.image_size == 32 and train_data.images.dtype == torch.uint8
    assert train_data.images.shape[1:] == (32, 32, 3)
    assert train_data.concept_values is None  # binary labels only: no "full" conditioning values
    expected = [mini.class_of(i) for i in np.flatnonzero(mini.partitions == 0)]
    assert len(train_data) == sum(expected.count(c) for c in TRAINING_CLASSES)
    assert sorted(graph.format(c) for c in graph.nodes) == sorted(LEVELS)
    assert graph.levels == LEVELS
    # the probe splits see every composition; the generator's train split does not
    assert split_tensors(splits, "probe_train").class_strings() == sorted(LEVELS)
    assert split_tensors(splits, "probe_val").class_strings() == sorted(LEVELS)


def test_parquet_mirror_flags_load_the_same_training_split(mini, splits, tmp_path):
    parquet = write_hub_pm1_layout(tmp_path / "hub", mini)
    args = script_parser().parse_args(["--dataset", "celeba", "--celeba_parquet", str(parquet)])
    from_parquet = load_concept_dataset("celeba", "cpu", cache_dir=str(tmp_path / "cache"),
                                        **celeba_builder_options(args))
    assert from_parquet["train"]["image_id"] == splits["train"]["image_id"]
    assert from_parquet["test"]["concepts"] == splits["test"]["concepts"]


def script_parser(with_unet_options: bool = True) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser()
    parser.add_argument("--dataset", default="okawa-h32-train1")
    parser.add_argument("--dataset_config", default=None)
    if with_unet_options:
        parser.add_argument("--block_out_channels", default="64,128")
        parser.add_argument("--conditioning", default="full")
        parser.add_argument("--eval_inference_steps", type=int, default=20)
        parser.add_argument("--layers_per_block", type=int, default=2)
        parser.add_argument("--prediction_type", default="epsilon")
        parser.add_argument("--block_type", default="residual")
        parser.add_argument("--norm_type", default="group")
    add_celeba_arguments(parser)
    add_training_arguments(parser)
    return parser


def parse_layered(argv: list[str], presets: dict, with_unet_options: bool = True) -> argparse.Namespace:
    parser = script_parser(with_unet_options)
    parser.add_argument("--preset", default=None)
    preset = apply_preset(parser, presets, argv)
    apply_dataset_defaults(parser, preset, argv)
    return parser.parse_args(argv)


def test_dataset_defaults_layer_over_the_preset_and_flags_win():
    presets = load_recipe("tuple-unet").PRESETS
    quick = parse_layered(["--preset", "cpu-quick", "--dataset", "celeba"], presets)
    assert (quick.celeba_config, quick.conditioning) == ("cpu", "quantized")
    assert quick.block_out_channels == presets["cpu-quick"]["block_out_channels"]  # the preset's width stays
    paper = parse_layered(["--preset", "paper", "--dataset=celeba"], presets)
    assert (paper.celeba_config, paper.conditioning) == ("default", "quantized")
    # quantized because the data carry no continuous value (read from CelebA's features), not because of its name
    from compgen.data.loading import carries_continuous_values

    assert carries_continuous_values("celeba") is False and "conditioning" not in DATASET_DEFAULTS["celeba"]["*"]
    assert carries_continuous_values("okawa-h32-train1") is None
    assert paper.block_out_channels == DATASET_DEFAULTS["celeba"]["paper"]["block_out_channels"]
    assert paper.train_batch_size == presets["paper"]["train_batch_size"]
    explicit = parse_layered(["--preset", "paper", "--dataset", "celeba", "--celeba_config", "cpu",
                              "--block_out_channels", "32,64", "--conditioning", "full"], presets)
    assert (explicit.celeba_config, explicit.block_out_channels, explicit.conditioning) == ("cpu", "32,64", "full")
    shapes = parse_layered(["--preset", "paper"], presets)
    assert (shapes.block_out_channels, shapes.conditioning) == (presets["paper"]["block_out_channels"], "full")
    # a script without U-Net options still gets the dataset-level options it has
    other = parse_layered(["--preset", "cpu-quick", "--dataset", "celeba"], {"cpu-quick": {}}, with_unet_options=False)
    assert other.celeba_config == "cpu" and not hasattr(other, "block_out_channels")


def test_every_celeba_default_fits_the_unet_at_its_image_size():
    presets = load_recipe("tuple-unet").PRESETS
    sizes = {"default": 64, "cpu": 32}
    for preset in presets:
        args = parse_layered(["--preset", preset, "--dataset", "celeba"], presets)
        check_image_size(args, sizes[args.celeba_config], "celeba")
    with pytest.raises(ValueError, match="divisible by 8"):
        check_image_size(argparse.Namespace(block_out_channels="32,64,64"), 28, "okawa-h32-train1")
    check_image_size(argparse.Namespace(tokenizer_block_out_channels="32,64,64"), 28,
                     "okawa-h32-train1")  # downsampling 4
    with pytest.raises(ValueError, match="--tokenizer_block_out_channels 32,64,64,64 halves the images 3 times"):
        check_image_size(argparse.Namespace(tokenizer_block_out_channels="32,64,64,64"), 28, "okawa-h32-train1")


def test_celeba_flags_are_checked():
    parser = script_parser()
    with pytest.raises(ValueError, match="exactly one of --celeba_dir"):
        celeba_builder_options(parser.parse_args(["--dataset", "celeba"]))
    with pytest.raises(ValueError, match="exactly one of --celeba_dir"):
        celeba_builder_options(parser.parse_args(["--dataset", "celeba", "--celeba_dir", "a", "--celeba_parquet", "b"]))
    with pytest.raises(ValueError, match="only apply to --dataset celeba"):
        celeba_builder_options(parser.parse_args(["--celeba_dir", "/data/celeba"]))
    hub = parser.parse_args(["--dataset", "celeba", "--celeba_parquet", "org/celeba", "--dataset_config", "attr",
                             "--celeba_training_classes", "000, 011,101,110"])
    assert celeba_builder_options(hub) == {"parquet": "org/celeba", "parquet_config": "attr",
                                           "training_classes": ("000", "011", "101", "110")}
    assert celeba_builder_options(parser.parse_args([])) == {}


def test_celeba_never_falls_back_to_the_shapes_linear_probes(splits):
    train_data, _ = training_data_from(splits)
    with pytest.raises(ValueError, match="--probes_path"):
        load_probes(None, train_data, seed=0)


def test_train_probes_command_saves_cnn_probes_with_probe_val_accuracy(trained_probes_dir, splits, capsys):
    output, accuracy = trained_probes_dir
    assert set(accuracy) == {"gender", "smile", "hair", "all"}
    check_margin("CelebA train_probes command: lowest probe_val accuracy", min(accuracy.values()), above=0.9)
    metadata = json.loads((output / "probe_training.json").read_text())
    assert metadata["accuracy_split"] == "probe_val" and metadata["celeba_config"] == "cpu"
    reloaded = ConceptProbes.from_pretrained(output)
    assert reloaded.config.probe_type == "cnn"
    assert probe_accuracy(reloaded, split_tensors(splits, "probe_val")) == accuracy


def test_cpu_quick_preset_trains_on_celeba_and_writes_a_pipeline_and_card(celeba, tmp_path, caplog):
    output = tmp_path / "unet"
    with caplog.at_level("INFO", logger="compgen.launch"):
        load_recipe("tuple-unet").main([
        "--preset", "cpu-quick", "--dataset", "celeba", "--celeba_dir", celeba["data_dir"],
            "--cache_dir", celeba["cache_dir"], "--output_dir", str(output), "--max_train_steps", "3",
            "--eval_steps", "3", "--eval_images_per_class", "2", "--eval_inference_steps", "2",
            "--train_batch_size", "8", "--block_out_channels", "8,16", "--num_train_timesteps", "20",
            "--mixed_precision", "no", "--seed", str(margin_seed(0)),
        ])  # fmt: skip
    # Without --probes_path the run trained CNN probes on probe_train and logged their probe_val accuracy.
    pattern = (r"probe_val accuracy \(\d+ images; chance\): gender ([\d.]+) \(0.500\), smile ([\d.]+) \(0.500\), "
               r"hair ([\d.]+) \(0.500\)")
    logged = re.search(pattern, caplog.text)
    assert logged, caplog.text
    check_margin("CelebA run: lowest logged probe_val accuracy", min(float(v) for v in logged.groups()), above=0.9)
    pipe = TupleConditionedDDPMPipeline.from_pretrained(output)
    assert pipe.unet.config.sample_size == 32 and pipe.unet.config.conditioning == "quantized"
    assert [name for name, _ in pipe.unet.config.concept_space] == ["gender", "smile", "hair"]
    images = pipe("111", num_inference_steps=2, output_type="np").images
    assert images.shape == (1, 32, 32, 3) and np.isfinite(images).all()
    records = [json.loads(line) for line in (output / "learning_dynamics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [3]
    card = (output / "README.md").read_text()
    assert "celeba-cpu" in card
    assert "| 2 | 111 |" in card


TOKEN_FLAGS = ["--tokenizer_block_out_channels", "8,8,8", "--tokenizer_embed_dim", "4", "--codebook_size", "16",
               "--tokenizer_steps", "2",
               "--hidden_size", "16", "--num_layers", "2", "--num_heads", "2", "--eval_inference_steps", "2"]


@pytest.mark.parametrize("recipe", ["tokenizer", "maskgit", "tuple-dit"])
def test_every_token_recipe_trains_on_celeba(recipe, celeba, trained_probes_dir, tmp_path):
    """--dataset celeba through the tokenizer, MaskGIT + JEPA and DiT scripts: the tokenizer's reconstruction
    accuracy is measured on CelebA's real test images (no shapes are rendered anywhere)."""
    output = tmp_path / recipe
    flags = TOKEN_FLAGS if recipe != "tokenizer" else TOKEN_FLAGS[:6]
    load_recipe(recipe).main([
        "--preset", "cpu-quick", "--dataset", "celeba", "--celeba_dir", celeba["data_dir"],
        "--cache_dir", celeba["cache_dir"], "--probes_path", str(trained_probes_dir[0]), "--output_dir", str(output),
        "--max_train_steps", "2", "--eval_steps", "2", "--eval_images_per_class", "2", "--train_batch_size", "8",
        "--mixed_precision", "no", *flags,
    ])  # fmt: skip
    report = json.loads((output / "vq_reconstruction.json").read_text())
    assert sorted(report["classes"]) == ["000", "001", "010", "011", "100", "101", "110", "111"]
    assert "pixel_accuracy_reconstructed" not in report["classes"]["111"]  # no shapes scorer for faces
    if recipe != "tokenizer":
        records = [json.loads(line) for line in (output / "learning_dynamics.jsonl").read_text().splitlines()]
        assert [r["step"] for r in records] == [2] and "object_failures" not in records[0]
        pipeline_class = MaskGITPipeline if recipe == "maskgit" else TupleConditionedDiTPipeline
        images = pipeline_class.from_pretrained(output)("111", num_inference_steps=2, output_type="np").images
        assert images.shape == (1, 32, 32, 3)
        assert "celeba-cpu" in (output / "README.md").read_text()


def test_probes_that_read_a_concept_near_chance_are_refused_unless_accepted(splits):
    """Issue 74, item 3: a shape probe validated at 0.591 (chance 0.5) once decided every accuracy of a run, shown
    nowhere. Probes trained on the data carry their validation accuracy and chance (logged, in every record, on the
    card), and one within 0.15 of chance stops the run before training unless ``--accept_weak_probes``: here the
    labels of one concept are shuffled, so nothing in the images shows it."""
    import dataclasses

    from compgen.training.model_card import probe_validation_markdown

    probe_train, probe_val = split_tensors(splits, "probe_train"), split_tensors(splits, "probe_val")
    generator = torch.Generator().manual_seed(0)

    def shuffled(data):
        concepts = data.concepts.clone()
        concepts[:, 0] = concepts[torch.randperm(len(concepts), generator=generator), 0]
        return dataclasses.replace(data, concepts=concepts)

    train_data, _ = training_data_from(splits)
    weak = (shuffled(probe_train), shuffled(probe_val))
    with pytest.raises(ValueError, match=r"within 0.15 of chance.*--accept_weak_probes"):
        load_probes(None, train_data, seed=0, probe_splits=weak)
    probes = load_probes(None, train_data, seed=0, probe_splits=weak, accept_weak=True)
    first = train_data.space.names[0]
    assert probes.validation[first]["near_chance"] and probes.validation[first]["chance"] == 0.5
    assert f"The {first} probe reads near chance" in probe_validation_markdown(probes.validation)
    good = load_probes(None, train_data, seed=0, probe_splits=(probe_train, probe_val))
    assert not any(row["near_chance"] for row in good.validation.values())
    assert "near chance" not in probe_validation_markdown(good.validation)
