"""Export in Hub layout: load_dataset round trip, the dataset card's YAML, the upload list, contact sheets."""

from __future__ import annotations

from pathlib import Path

import datasets
import pytest
from huggingface_hub import DatasetCard
from repo_scripts import load_repo_script

from compgen.concepts import get_split_preset
from compgen.data.concept_graph_builder import build_concept_graph_dataset
from compgen.data.export import contact_sheet, export_datasets, parquet_path, push_export_to_hub
from compgen.hub import files_to_upload
from compgen.quickstart import main as quickstart_main
from compgen.recipes import load_recipe
from compgen.shapes import render_classes


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> dict[str, datasets.DatasetDict]:
    cache = str(tmp_path_factory.mktemp("cache"))
    return {
        "okawa-h32-train1": build_concept_graph_dataset("okawa-h32-train1", cache_dir=cache),
        "only-2-of-001": build_concept_graph_dataset(
            "only-2-of-001",
            cache_dir=cache,
            split_preset="H42-train1",
            images_per_class=4,
            test_images_per_class=2,
            class_counts={"0010": 2},
        ),
    }


@pytest.fixture(scope="module")
def exported(built, tmp_path_factory) -> Path:
    return export_datasets(built, tmp_path_factory.mktemp("export") / "dataset", samples_per_class=4)


def _comparable(split: datasets.Dataset) -> list[dict]:
    return split.cast_column("image", datasets.Image(decode=False)).to_list()


def test_load_dataset_on_the_export_returns_the_same_rows(built, exported, tmp_path):
    for name, original in built.items():
        loaded = datasets.load_dataset(str(exported), name, cache_dir=str(tmp_path))
        assert set(loaded) == set(original)
        for split in original:
            assert loaded[split].features == original[split].features
            assert _comparable(loaded[split]) == _comparable(original[split])
    # What a user runs first: load_dataset on the exported copy.
    default = datasets.load_dataset(str(exported), cache_dir=str(tmp_path))  # the first config is the default
    assert len(default["train"]) == 5000 and set(default["train"]["concepts"]) == {"000", "001", "010", "100"}
    levels = dict(zip(default["test"]["concepts"], default["test"]["level"], strict=True))
    assert levels == get_split_preset("H32-train1").graph().levels


def test_card_yaml_lists_every_config_and_split(built, exported):
    card = DatasetCard.load(exported / "README.md")
    configs = {entry["config_name"]: entry for entry in card.data.to_dict()["configs"]}
    assert set(configs) == set(built)
    assert configs["okawa-h32-train1"].get("default") is True and "default" not in configs["only-2-of-001"]
    for name, dataset in built.items():
        data_files = {item["split"]: item["path"] for item in configs[name]["data_files"]}
        assert data_files == {split: f"{name}/{split}-*" for split in dataset}
        for split in dataset:
            assert (exported / parquet_path(name, split)).is_file()
    infos = {info["config_name"]: info for info in card.data.to_dict()["dataset_info"]}
    assert {s["name"]: s["num_examples"] for s in infos["only-2-of-001"]["splits"]} == {"train": 18, "test": 32,
                                                                                     "tokenizer": 64}
    text = card.text
    assert "| `0010` | circle | red | small | white | 0 | 2 | 2 |" in text
    assert "| `111` | triangle | blue | small | 2 | 0 | 100 |" in text
    for name in built:
        assert f"![{name}: samples per concept class](images/{name}.png)" in text


def test_files_to_upload_is_exactly_the_export(built, exported, tmp_path):
    expected = ["README.md", *(f"images/{name}.png" for name in built)]
    expected += [parquet_path(name, split) for name, dataset in built.items() for split in dataset]
    assert files_to_upload(exported) == sorted(expected)
    (exported / ".cache").mkdir(exist_ok=True)
    (exported / ".cache" / "lock").write_text("x")
    assert files_to_upload(exported) == sorted(expected)  # hidden files are never uploaded
    with pytest.raises(ValueError, match="README.md is missing"):  # refused before any network call
        push_export_to_hub(tmp_path, "someone/not-an-export")


def test_failed_export_leaves_the_previous_one_intact(built, tmp_path):
    target = tmp_path / "dataset"
    export_datasets({"okawa-h32-train1": built["okawa-h32-train1"]}, target)
    before = files_to_upload(target)
    broken = datasets.DatasetDict({"train": built["okawa-h32-train1"]["train"].remove_columns("level")})
    with pytest.raises(ValueError, match="lacks the concept-graph columns"):
        export_datasets({"broken": broken}, target)
    with pytest.raises(ValueError, match="default_config"):
        export_datasets(built, target, default_config="nope")
    assert files_to_upload(target) == before


def test_contact_sheet_has_one_row_per_class(built):
    test = built["only-2-of-001"]["test"]
    sheet = contact_sheet(test, samples_per_class=2, scale=2)
    assert sheet.mode == "RGB"
    assert sheet.height == 16 * (56 + 4) + 4  # 16 classes of the 4-cube, 28 px tiles at scale 2, 4 px gaps
    batch = render_classes(get_split_preset("H32-train1").space, ["000", "111", "000"], seed=0)
    small = contact_sheet(batch, samples_per_class=3, graph=get_split_preset("H32-train1").graph(), scale=1)
    assert small.height == 2 * (28 + 4) + 4 and small.width == 120 + 3 * (28 + 4) + 4
    with pytest.raises(ValueError, match="datasets.Dataset or a ShapesBatch"):
        contact_sheet([1, 2, 3])
    with pytest.raises(ValueError, match="positive"):
        contact_sheet(batch, samples_per_class=0)


def test_publish_script_exports_the_requested_configs(tmp_path):
    publish = load_repo_script("dataset_scripts/publish_concept_graph.py")
    publish.main(["--output_dir", str(tmp_path / "out"), "--configs", "okawa-fail1", "--cache_dir", str(tmp_path)])
    assert files_to_upload(tmp_path / "out") == [
        "README.md",
        "images/okawa-fail1.png",
        "okawa-fail1/test-00000-of-00001.parquet",
        "okawa-fail1/tokenizer-00000-of-00001.parquet",
        "okawa-fail1/train-00000-of-00001.parquet",
    ]
    with pytest.raises(SystemExit):
        publish.main(["--output_dir", str(tmp_path / "out"), "--configs", "not-a-config"])


def test_publish_script_exports_the_clips_configs_with_their_preview(tmp_path, capsys):
    publish = load_repo_script("dataset_scripts/publish_concept_graph.py")
    publish.main(["--clips", "--output_dir", str(tmp_path / "clips"), "--configs", "clips-h32-train2", "--cache_dir",
                  str(tmp_path)])
    assert files_to_upload(tmp_path / "clips") == [
        "README.md", "clips-h32-train2/test-00000-of-00001.parquet",
        "clips-h32-train2/tokenizer-00000-of-00001.parquet", "clips-h32-train2/train-00000-of-00001.parquet",
        "images/clips-h32-train2.gif", "images/clips-h32-train2.png"]
    capsys.readouterr()
    with pytest.raises(SystemExit):  # a shapes config among clips: named, nothing written
        publish.main(["--clips", "--output_dir", str(tmp_path / "mixed"), "--configs", "okawa-fail1"])
    assert "okawa-fail1: shapes configs" in capsys.readouterr().err and not (tmp_path / "mixed").exists()


def test_quickstart_writes_the_dataset_and_a_contact_sheet(tmp_path, capsys):
    quickstart_main(["--output_dir", str(tmp_path / "outputs"), "--cache_dir", str(tmp_path / "cache")])
    assert (tmp_path / "outputs" / "contact_sheet.png").is_file()
    exported = files_to_upload(tmp_path / "outputs" / "dataset")
    assert "okawa-h32-train1-sizes-touching/train-00000-of-00001.parquet" in exported  # what the README trains on
    assert "contact_sheet.png" in capsys.readouterr().out
    # another config into the same output: refused before any building, with advice quickstart can follow
    with pytest.raises(SystemExit):
        quickstart_main(["--output_dir", str(tmp_path / "outputs"), "--cache_dir", str(tmp_path / "cache"),
                         "--config", "okawa-fail1"])
    assert "holds another export (not okawa-fail1): choose another --output_dir" in capsys.readouterr().err


@pytest.mark.usefixtures("single_thread")
def test_quickstart_report_prints_both_scorers_per_level_and_where_the_plots_are(tmp_path, capsys):
    """``make quickstart``'s last step (issue 41, item 7): the per-level table by both scorers, the headline's
    verdict, the learning-dynamics plot and the sample sheet of the run."""
    from conftest import reset_accelerate_state

    reset_accelerate_state()
    load_recipe("tuple-unet").main([
        "--dataset", "okawa-h32-train1", "--cache_dir", str(tmp_path / "cache"), "--block_out_channels", "8,16",
        "--layers_per_block", "1", "--train_batch_size", "8", "--max_train_steps", "4", "--eval_steps", "2",
        "--eval_images_per_class", "2", "--eval_inference_steps", "2", "--output_dir", str(tmp_path / "unet")])
    # issue 74, item 5: a run ends with its result (per level, the verdict) and its card's path, as its last lines
    last_lines = capsys.readouterr().out.strip().splitlines()[-10:]
    assert last_lines[0].startswith("step 4: per-level accuracy (multiplicative; chance 0.125)")
    assert last_lines[-2].startswith("Paper A's headline")
    assert last_lines[-1] == f"model card: {tmp_path / 'unet' / 'README.md'}"
    quickstart_main(["--report", str(tmp_path / "unet")])
    out = capsys.readouterr().out
    assert "| level | probes | pixel statistics | fidelity |" in out and "| 2 |" in out
    assert "Paper A's headline" in out and "does not hold" in out  # four steps of a tiny model
    assert (tmp_path / "unet" / "figures" / "learning_dynamics.png").is_file()
    assert f"sample sheet: {tmp_path / 'unet' / 'figures' / 'samples.png'}" in out
    with pytest.raises(SystemExit):
        quickstart_main(["--report", str(tmp_path / "nothing")])
    # an empty log, a log of something else: a usage error naming the problem, not an IndexError or a KeyError
    for name, text, message in (("empty", "", "no evaluation yet"),
                                ("foreign", '{"loss": 0.5}\n', "not an evaluation record")):
        (tmp_path / name).mkdir()
        (tmp_path / name / "learning_dynamics.jsonl").write_text(text)
        capsys.readouterr()
        with pytest.raises(SystemExit):
            quickstart_main(["--report", str(tmp_path / name)])
        assert message in capsys.readouterr().err


def test_the_report_says_why_the_headline_does_not_hold():
    """A run that fails the headline is told which level and which part of the criterion failed."""
    from compgen.quickstart import headline_reason

    assert headline_reason({"held": True, "lowest_accuracy": {}, "fidelity": {}, "steps": [6, 7, 8]}) == ""
    pale = {"held": False, "lowest_accuracy": {"0": 1.0, "2": 1.0}, "fidelity": {"0": 0.86, "2": 0.7326},
            "steps": [600, 700, 800]}
    assert headline_reason(pale) == ": level 2's fidelity 0.73 (pale or partial objects)"
    round_cone = {"held": False, "lowest_accuracy": {"1": 0.95, "2": 0.68}, "fidelity": {"2": 0.8}, "steps": [1, 2]}
    assert headline_reason(round_cone) == ": level 2 at 0.68 (its lowest of the last 2 evaluations), only 2 evaluations"
    # the verdict's number is named for what it is: the lowest of the last evaluations, not the last one
    lowest = {"held": False, "lowest_accuracy": {"2": 0.62}, "fidelity": {"2": 0.8}, "steps": [6, 7, 8]}
    assert headline_reason(lowest) == ": level 2 at 0.62 (its lowest of the last 3 evaluations)"
