"""A folder of one's own labelled images (datasets' ImageFolder layout) trains as a concept-graph dataset with one
command (issue 74, items 1-3): the space, splits and probes come from the data, and a folder whose attribute the
images do not show is refused before training."""

import csv
import json

import numpy as np
import pytest
from conftest import reset_accelerate_state
from PIL import Image

from compgen.concepts import shapes_space
from compgen.data.image_folder import load_image_folder
from compgen.recipes import load_recipe
from compgen.shapes import render_classes

pytestmark = pytest.mark.usefixtures("fresh_accelerator_state", "single_thread")
TINY = ["--block_out_channels", "8,16", "--layers_per_block", "1", "--train_batch_size", "8"]


def make_folder(root, per_class: int = 100, random_shape: bool = False, jsonl: bool = False):
    """Rendered shapes of one size as PNGs with a metadata file of two attributes, shape and colour by name."""
    root.mkdir(parents=True)
    names = [f"{shape}{color}0" for shape in "01" for color in "01"]
    batch = render_classes(shapes_space(), [n for n in names for _ in range(per_class)], seed=0)
    rng = np.random.default_rng(0)
    rows = []
    for i, (image, name) in enumerate(zip(batch.images, [n for n in names for _ in range(per_class)], strict=True)):
        Image.fromarray(image).save(root / f"{i:04d}.png")
        shape = int(rng.integers(2)) if random_shape else int(name[0])
        rows.append({"file_name": f"{i:04d}.png", "shape": ["circle", "triangle"][shape],
                     "color": ["red", "blue"][int(name[1])]})
    if jsonl:
        (root / "metadata.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    else:
        with (root / "metadata.csv").open("w", newline="") as handle:
            writer = csv.DictWriter(handle, fieldnames=["file_name", "shape", "color"])
            writer.writeheader()
            writer.writerows(rows)
    return root


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return make_folder(tmp_path_factory.mktemp("own") / "images")


def test_a_folder_trains_with_one_command_and_its_card_shows_the_probes(folder, tmp_path, capsys):
    reset_accelerate_state()
    load_recipe("tuple-unet").main(["--dataset", str(folder), "--training_classes", "00", "01", "10", *TINY,
                                    "--output_dir", str(tmp_path / "run"), "--max_train_steps", "4", "--eval_steps",
                                    "2", "--eval_images_per_class", "4", "--eval_inference_steps", "2"])
    last = capsys.readouterr().out.strip().splitlines()
    assert last[-1] == f"model card: {tmp_path / 'run' / 'README.md'}" and "| 1 |" in "\n".join(last)
    card = (tmp_path / "run" / "README.md").read_text()
    assert "validation accuracy: shape" in card and "(chance 0.500)" in card and "near chance" not in card
    assert "object rate" not in card  # no object check runs on one's own images
    record = json.loads((tmp_path / "run" / "learning_dynamics.jsonl").read_text().splitlines()[-1])
    assert record["levels"] == {"00": 0, "01": 0, "10": 0, "11": 1} and "probe_validation" in record
    config = json.loads((tmp_path / "run" / "unet" / "config.json").read_text())
    assert config["conditioning"] == "quantized"  # read from the data: no *_value columns


def test_a_folder_whose_attribute_the_images_do_not_show_is_refused_before_training(tmp_path, capsys):
    folder = make_folder(tmp_path / "random", random_shape=True, jsonl=True)
    reset_accelerate_state()
    with pytest.raises(SystemExit) as exit_info:
        load_recipe("tuple-unet").main(["--dataset", str(folder), "--training_classes", "00", "01", "10", *TINY,
                                        "--output_dir", str(tmp_path / "run"), "--max_train_steps", "4"])
    assert exit_info.value.code == 2 and "the probes trained on the data read shape" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


def test_the_folder_is_checked_and_split_by_level(folder, tmp_path):
    data = load_image_folder(folder, ["00", "01", "10"])
    assert set(data) == {"train", "test", "probe_train", "probe_val"}
    assert sorted(set(data["train"]["concepts"])) == ["00", "01", "10"]  # the held-out class 11 only in test
    assert sorted(set(data["test"]["concepts"])) == ["00", "01", "10", "11"]
    assert data["train"].features["color"].names == ["blue", "red"]  # names in sorted order: digits by position
    with pytest.raises(ValueError, match="out of range"):
        load_image_folder(folder, ["00", "02"])
    broken = make_folder(tmp_path / "broken", per_class=2)
    (broken / "0003.png").write_bytes(b"not a png")
    with pytest.raises(ValueError, match=r"0003.png: missing or unreadable"):
        load_image_folder(broken, ["00"])
    (broken / "0003.png").unlink()
    with pytest.raises(ValueError, match=r"0003.png: missing or unreadable"):
        load_image_folder(broken, ["00"])


def test_a_hub_layout_copy_of_ones_images_gives_the_same_dataset(folder, tmp_path, capsys):
    """The same images as a Hub dataset would hold them (Parquet, the attributes as text columns, no ClassLabel), as
    a local directory in Hub layout: ``--dataset DIR --training_classes`` builds the same concept graph."""
    import datasets

    rows = list(csv.DictReader((folder / "metadata.csv").open()))
    hub = tmp_path / "hub"
    (hub / "data").mkdir(parents=True)
    datasets.Dataset.from_dict({"image": [str(folder / row["file_name"]) for row in rows],
                                "shape": [row["shape"] for row in rows], "color": [row["color"] for row in rows]},
                               features=datasets.Features({"image": datasets.Image(), "shape": datasets.Value("string"),
                                                           "color": datasets.Value("string")})
                               ).to_parquet(str(hub / "data" / "train-00000-of-00001.parquet"))
    from compgen.data.loading import load_concept_dataset

    from_hub = load_concept_dataset(str(hub), training_classes=["00", "01", "10"], cache_dir=str(tmp_path / "cache"))
    from_folder = load_image_folder(folder, ["00", "01", "10"])
    assert from_hub["train"].features == from_folder["train"].features
    assert sorted(from_hub["test"]["concepts"]) == sorted(from_folder["test"]["concepts"])
    reset_accelerate_state()
    with pytest.raises(SystemExit) as exit_info:  # a config's training classes are its own
        load_recipe("tuple-unet").main(["--dataset", "okawa-h32-train1", "--training_classes", "000",
                                        "--output_dir", str(tmp_path / "run")])
    assert exit_info.value.code == 2 and "a config's are its own" in capsys.readouterr().err
