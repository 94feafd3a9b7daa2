"""The concept-graph datasets builder: configs, features, split membership and levels, counts, determinism."""

from __future__ import annotations

import io
from collections import Counter

import datasets
import numpy as np
import pytest
from PIL import Image

from compgen.data.concept_graph_builder import (
    ConceptGraphShapes,
    ConceptGraphShapesConfig,
    build_concept_graph_dataset,
    concept_graph_builder,
    encode_png,
)
from compgen.shapes import COLOR_RGB
from compgen.solids import AMBIENT

SMALL = {"images_per_class": 6, "test_images_per_class": 3}


def _rows_by_class(split: datasets.Dataset) -> dict[str, list[dict]]:
    """Rows grouped by class with the image as PNG bytes (comparable byte for byte)."""
    rows: dict[str, list[dict]] = {}
    for row in split.cast_column("image", datasets.Image(decode=False)):
        rows.setdefault(row["concepts"], []).append(row)
    return rows


def test_predefined_configs():
    names = [config.name for config in ConceptGraphShapes.BUILDER_CONFIGS]
    assert names == ["okawa-h32-train1", "okawa-h32-train2", "okawa-h32-train3", "okawa-h32-train4",
                     "okawa-h32-train1-sizes-touching", "okawa-h32-train2-sizes-touching",
                     "okawa-h32-train3-sizes-touching", "okawa-h32-train4-sizes-touching",
                     "okawa-h32-train1-flat", "okawa-h32-train1-anywhere", "okawa-fail1", "okawa-h42-train1"]
    assert ConceptGraphShapes.DEFAULT_CONFIG_NAME == "okawa-h32-train1"
    for config in ConceptGraphShapes.BUILDER_CONFIGS:
        assert sum(config.train_counts.values()) == 5000
        assert config.image_size == 28


def test_the_anywhere_config_moves_the_objects_off_centre_and_nothing_else(tmp_path):
    """``okawa-h32-train1-anywhere``: the headline split's classes and counts, the same shaded solids, centres spread
    over the frame (the default config keeps every object at the centre)."""
    anywhere = build_concept_graph_dataset("okawa-h32-train1-anywhere", cache_dir=str(tmp_path))["test"]
    centred = build_concept_graph_dataset("okawa-h32-train1", cache_dir=str(tmp_path))["test"]
    assert Counter(anywhere["concepts"]) == Counter(centred["concepts"])
    assert np.ptp(np.asarray(centred["position"]), axis=0).max() < 1.0
    assert np.ptp(np.asarray(anywhere["position"]), axis=0).min() > 5.0


def test_okawa_h32_train1_is_papers_headline_split(tmp_path):
    dataset = build_concept_graph_dataset("okawa-h32-train1", cache_dir=str(tmp_path))
    train, test = dataset["train"], dataset["test"]
    assert set(dataset) == {"train", "test", "tokenizer"}
    assert Counter(train["concepts"]) == {"000": 1250, "001": 1250, "010": 1250, "100": 1250}
    # The tokenizer split: every class, from its own stream (no image shared with train or test).
    assert Counter(dataset["tokenizer"]["concepts"]) == {c: 1250 for c in ("000", "001", "010", "011", "100", "101",
                                                                           "110", "111")}
    drawn = {split: set(zip(dataset[split]["concepts"], map(tuple, dataset[split]["color_rgb"]),
                            dataset[split]["size_value"], strict=True))
             for split in dataset}  # each image's class and draws (small 8-bit renders can coincide by chance)
    assert not drawn["tokenizer"] & (drawn["train"] | drawn["test"])
    assert set(train["level"]) == {0}
    assert dict(Counter(zip(test["concepts"], test["level"], strict=True))) == {
        ("000", 0): 100, ("001", 0): 100, ("010", 0): 100, ("100", 0): 100,
        ("011", 1): 100, ("101", 1): 100, ("110", 1): 100, ("111", 2): 100,
    }  # fmt: skip

    features = train.features
    assert list(features) == [
        "image", "concepts", "level", "shape", "color", "size", "color_rgb", "size_value", "position", "rotation",
    ]  # fmt: skip
    assert isinstance(features["image"], datasets.Image)
    assert features["level"] == datasets.Value("int32")
    assert features["shape"].names == ["circle", "triangle"]
    assert features["color"].names == ["red", "blue"]
    assert features["size"].names == ["large", "small"]
    assert features["color_rgb"].length == 3 and features["position"].length == 2

    row = test[len(test) - 1]
    assert row["concepts"] == "111" and (row["shape"], row["color"], row["size"]) == (1, 1, 1)
    assert row["image"].size == (28, 28) and row["image"].mode == "RGB"
    assert np.allclose(row["color_rgb"], COLOR_RGB["blue"], atol=0.35 + 1e-6)
    assert abs(row["size_value"] - 1.6) <= 0.45 + 1e-6


@pytest.mark.parametrize("style", ["flat", "shaded"])
def test_columns_agree_with_the_image_and_the_class(tmp_path, style):
    dataset = build_concept_graph_dataset(f"small-{style}", cache_dir=str(tmp_path), split_preset="fail1",
                                          style=style, rotate=False, **SMALL)
    for row in dataset["test"]:
        digits = tuple(int(d) for d in row["concepts"])
        assert (row["shape"], row["color"], row["size"]) == digits
        pixels = np.asarray(row["image"], dtype=float).reshape(-1, 3)
        colour = np.array(row["color_rgb"]) * 255
        if style == "flat":  # one flat colour: the object's pixels are its colour
            distance = np.abs(pixels - 255).sum(1)
            interior = pixels[distance >= 0.98 * distance.max()]
            np.testing.assert_allclose(interior.mean(0), colour, atol=3)
        else:
            # Shaded: every pixel is white mixed with the colour times a shade in [AMBIENT, 1], p = 255 + a (s c - 255)
            # (coverage a; anti-aliased edges mix shades, whose mean is again such a shade). Fit a for each shade s.
            shades = np.linspace(AMBIENT, 1.0, 111)
            span = shades[:, None] * colour[None] - 255.0  # (S, 3)
            coverage = np.clip((pixels - 255.0) @ span.T / (span * span).sum(1), 0.0, 1.0)  # (P, S)
            model = 255.0 + coverage[..., None] * span[None]
            residual = np.abs(model - pixels[:, None]).max(axis=2)
            best = residual.argmin(axis=1)
            assert residual.min(axis=1).max() <= 3.0
            assert coverage[np.arange(len(pixels)), best].max() > 0.99  # the object's inside is fully covered


def test_four_variable_config_has_a_background_column_and_level_3(tmp_path):
    dataset = build_concept_graph_dataset("okawa-h42-train1", cache_dir=str(tmp_path), **SMALL)
    assert dataset["train"].features["background"].names == ["white", "black"]
    assert Counter(dataset["train"]["concepts"]) == {c: 6 for c in ("0000", "1000", "0100", "0010", "0001")}
    levels = dict(zip(dataset["test"]["concepts"], dataset["test"]["level"], strict=True))
    assert len(levels) == 16 and levels["1111"] == 3 and levels["0011"] == 1
    assert len(dataset["test"]) == 16 * 3


def test_user_defined_config_in_a_larger_space(tmp_path):
    dataset = build_concept_graph_dataset(
        "three-colors",
        cache_dir=str(tmp_path),
        num_colors=3,
        training_classes=["000", "010", "020", "001", "100"],
        image_size=32,
        **SMALL,
    )
    assert dataset["train"].features["color"].names == ["red", "blue", "green"]
    assert len(dataset["train"]) == 5 * 6
    levels = dict(zip(dataset["test"]["concepts"], dataset["test"]["level"], strict=True))
    assert len(levels) == 12
    assert levels["121"] == 2 and levels["021"] == 1 and levels["020"] == 0
    assert dataset["test"][0]["image"].size == (32, 32)


def test_config_object_and_overrides(tmp_path):
    config = ConceptGraphShapesConfig(name="from-object", split_preset="H32-train1", **SMALL)
    dataset = build_concept_graph_dataset(config, cache_dir=str(tmp_path))
    assert len(dataset["train"]) == 24
    overridden = build_concept_graph_dataset(config, cache_dir=str(tmp_path), images_per_class=2)
    assert len(overridden["train"]) == 8
    preset = concept_graph_builder("okawa-fail1", cache_dir=str(tmp_path), images_per_class=2)
    assert preset.config.split_preset == "fail1" and preset.config.images_per_class == 2


def test_class_count_override_keeps_every_other_class_identical(tmp_path):
    base = build_concept_graph_dataset("base", cache_dir=str(tmp_path), split_preset="H32-train1", **SMALL)
    fewer = build_concept_graph_dataset(
        "fewer", cache_dir=str(tmp_path), split_preset="H32-train1", class_counts={"001": 2}, **SMALL
    )
    absent = build_concept_graph_dataset(
        "absent", cache_dir=str(tmp_path), split_preset="H32-train1", class_counts={"001": 0}, **SMALL
    )
    base_train, fewer_train, absent_train = (_rows_by_class(d["train"]) for d in (base, fewer, absent))
    assert {c: len(r) for c, r in fewer_train.items()} == {"000": 6, "001": 2, "010": 6, "100": 6}
    assert set(absent_train) == {"000", "010", "100"}
    for concept in ("000", "010", "100"):
        assert fewer_train[concept] == base_train[concept]
        assert absent_train[concept] == base_train[concept]
    # The test split is unchanged, except that an absent class is no longer a training class (level 1).
    base_test, absent_test = _rows_by_class(base["test"]), _rows_by_class(absent["test"])
    for concept, rows in base_test.items():
        expected_level = 1 if concept == "001" else rows[0]["level"]
        for row, other in zip(rows, absent_test[concept], strict=True):
            assert other == {**row, "level": expected_level}


def test_building_is_deterministic_and_seeded(tmp_path):
    kwargs = {"split_preset": "H32-train1", **SMALL}
    first = build_concept_graph_dataset("det", cache_dir=str(tmp_path / "a"), **kwargs)
    second = build_concept_graph_dataset("det", cache_dir=str(tmp_path / "b"), **kwargs)
    reseeded = build_concept_graph_dataset("det", cache_dir=str(tmp_path / "a"), seed=1, **kwargs)
    for split in ("train", "test"):
        assert _rows_by_class(first[split]) == _rows_by_class(second[split])
        assert first[split]["concepts"] == sorted(first[split]["concepts"])  # rows ordered by class
    assert _rows_by_class(first["train"])["000"] != _rows_by_class(reseeded["train"])["000"]
    # Train and test images come from different random streams.
    train_png = {r["image"]["bytes"] for r in _rows_by_class(first["train"])["000"]}
    assert not train_png & {r["image"]["bytes"] for r in _rows_by_class(first["test"])["000"]}


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({}, "needs a split_preset or a list of training_classes"),
        ({"split_preset": "nope"}, "unknown split preset"),
        ({"split_preset": "H32-train1", "background": True}, "fixes the concept space"),
        ({"training_classes": ["0001"]}, "has 4 values"),
        ({"training_classes": []}, "training_classes is empty"),
        ({"training_classes": "000"}, "must be a list"),
        ({"training_classes": ["000"], "class_counts": {"111": 3}}, "not a training class"),
        ({"training_classes": ["000"], "class_counts": {"000": 0}}, "every training class has 0 images"),
        ({"training_classes": ["000"], "images_per_class": -1}, "images_per_class must be a non-negative int"),
        ({"training_classes": ["000"], "test_images_per_class": 1.5}, "test_images_per_class"),
        ({"training_classes": ["000"], "test_images_per_class": 0}, "test_images_per_class must be a positive int"),
        ({"training_classes": ["000"], "tokenizer_images_per_class": 0}, "tokenizer_images_per_class must be a pos"),
        ({"training_classes": ["000"], "image_size": 8}, "image_size"),
        ({"training_classes": ["000"], "seed": -3}, "seed"),
    ],
)
def test_invalid_configs_raise_clear_errors(tmp_path, kwargs, message):
    with pytest.raises(ValueError, match=message):
        concept_graph_builder("bad", cache_dir=str(tmp_path), **kwargs)


def test_encode_png_round_trips_through_pil():
    images = np.random.default_rng(0).integers(0, 256, size=(3, 28, 30, 3), dtype=np.uint8)
    for png, image in zip(encode_png(images), images, strict=True):
        decoded = Image.open(io.BytesIO(png))
        assert decoded.mode == "RGB"
        np.testing.assert_array_equal(np.asarray(decoded), image)
    with pytest.raises(ValueError, match="expected"):
        encode_png(images[..., 0])
