"""Paper A's published layout (CLEVR_<class>_<index>.png + .json under train/ and test/) read by the builder."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from compgen.data.concept_graph_builder import build_concept_graph_dataset
from compgen.data.loading import to_tensors

TRAIN = ("000", "001", "010", "100")
ALL = ("000", "001", "010", "011", "100", "101", "110", "111")


def _write_example(folder: Path, concepts: str, index: int, size_value: float, rgba: list[float], side: int = 32):
    """An RGBA image (transparent background, an opaque square of the colour) and its values file."""
    pixels = np.zeros((side, side, 4), dtype=np.uint8)
    colour = (np.array(rgba[:3]) * 255).round().astype(np.uint8)
    pixels[8:24, 8:24, :3] = colour
    pixels[8:24, 8:24, 3] = 255
    Image.fromarray(pixels, "RGBA").save(folder / f"CLEVR_{concepts}_{index}.png")
    (folder / f"CLEVR_{concepts}_{index}.json").write_text(json.dumps([size_value, rgba, [0.0, 0.0]]))


@pytest.fixture
def paper_dir(tmp_path):
    root = tmp_path / "single-body_2d_3classes"
    for split, classes, count in (("train", TRAIN, 5), ("test", ALL, 3)):
        folder = root / split
        folder.mkdir(parents=True)
        for concepts in classes:
            red = concepts[1] == "0"
            for index in range(count):
                rgba = [0.9, 0.1, 0.1, 1.0] if red else [0.1, 0.1, 0.9, 1.0]
                _write_example(folder, concepts, index, 2.7 - 0.1 * index if concepts[2] == "0" else 1.6, rgba)
    (root / "train" / "notes.txt").write_text("other files are ignored")
    return root


def _build(paper_dir, tmp_path, **overrides):
    options = dict(split_preset="H32-train1", images_per_class=4, test_images_per_class=3, data_dir=str(paper_dir))
    options.update(overrides)
    return build_concept_graph_dataset("paper-a-files", cache_dir=str(tmp_path / "cache"), **options)


def test_rows_come_from_the_files_with_their_values_and_levels(paper_dir, tmp_path):
    dataset = _build(paper_dir, tmp_path)
    train, test = dataset["train"], dataset["test"]
    assert Counter(train["concepts"]) == {c: 4 for c in TRAIN}  # the first 4 of 5 per class, in index order
    assert Counter(test["concepts"]) == {c: 3 for c in ALL}
    assert dict(zip(test["concepts"], test["level"], strict=True))["111"] == 2
    first = train[0]
    assert first["concepts"] == "000" and first["size_value"] == pytest.approx(2.7)
    assert first["color_rgb"] == pytest.approx([0.9, 0.1, 0.1])
    assert np.isnan(first["rotation"]) and all(np.isnan(first["position"]))
    assert [row["size_value"] for row in train if row["concepts"] == "000"] == pytest.approx([2.7, 2.6, 2.5, 2.4])
    image = np.asarray(first["image"])
    assert image.shape == (28, 28, 3)  # resized from 32 px to the config's image size
    assert tuple(image[0, 0]) == (255, 255, 255)  # transparent pixels composited onto white
    assert tuple(image[14, 14]) == (230, 26, 26)
    # Every training script reads the per-image values as the full-information conditioning.
    values = to_tensors(train).concept_values
    assert values.shape == (16, 4) and values[0].tolist() == pytest.approx([0.9, 0.1, 0.1, 2.7])


def test_problems_in_the_directory_are_named(paper_dir, tmp_path):
    with pytest.raises(ValueError, match="holds 5 images of class 000, but the config asks for 6"):
        _build(paper_dir, tmp_path, images_per_class=6)
    (paper_dir / "train" / "CLEVR_001_0.json").unlink()
    with pytest.raises(ValueError, match=r"CLEVR_001_0.png has no values file CLEVR_001_0.json"):
        _build(paper_dir, tmp_path, seed=1)
    _write_example(paper_dir / "train", "001", 0, 1.6, [0.9, 0.1, 0.1, 1.0])
    (paper_dir / "train" / "CLEVR_010_2.png").write_bytes(b"not a png")
    with pytest.raises(ValueError, match=r"cannot decode image .*CLEVR_010_2.png"):
        _build(paper_dir, tmp_path, seed=2)
    _write_example(paper_dir / "train", "010", 2, 2.7, [0.1, 0.1, 0.9, 1.0])
    (paper_dir / "train" / "CLEVR_100_1.json").write_text('{"size": 2.7}')
    with pytest.raises(ValueError, match=r"CLEVR_100_1.json must hold \[size, \[r, g, b, a\]"):
        _build(paper_dir, tmp_path, seed=3)


def test_a_missing_split_folder_is_named_before_anything_is_built(paper_dir, tmp_path):
    for path in (paper_dir / "test").iterdir():
        path.unlink()
    (paper_dir / "test").rmdir()
    with pytest.raises(FileNotFoundError, match=r"single-body_2d_3classes/test does not exist"):
        _build(paper_dir, tmp_path)
    assert not (tmp_path / "cache").exists()


def test_a_studys_data_dir_is_relative_to_the_study_file_not_the_working_directory(paper_dir, tmp_path, monkeypatch):
    """A study defining a dataset on Paper A's folder by a relative ``data_dir`` reads that folder from wherever it is
    run; a same-named folder in the working directory is never read instead."""
    from compgen.studies import Study

    studies = paper_dir.parent / "studies"
    studies.mkdir()
    (studies / "s.yaml").write_text(
        "name: s\nseeds: [0]\nsteps: 2\n"
        f"datasets: [{{name: paper, split_preset: H32-train1, images_per_class: 4, test_images_per_class: 3, "
        f"data_dir: ../{paper_dir.name}}}]\n"
        "models: {u: {script: " + str(Path(__file__).resolve().parents[1] / "examples/train_tuple_unet.py") + "}}\n")
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / paper_dir.name).mkdir(parents=True)  # a decoy of the same name, empty
    monkeypatch.chdir(elsewhere)
    study = Study.from_file(studies / "s.yaml")
    assert study.resolved(study.datasets[0])["data_dir"] == str(paper_dir)
    study.prepare_datasets(tmp_path / "out")
    assert (tmp_path / "out" / "data" / "paper").is_dir()
