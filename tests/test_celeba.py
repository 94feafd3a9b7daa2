"""CelebA concept splits on miniature copies in the official and Hub Parquet layouts."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import datasets
import numpy as np
import pytest
from celeba_fixtures import (
    HUB_BOOL_CONFIG,
    make_mini_celeba,
    write_hub_bool_layout,
    write_hub_pm1_layout,
    write_official_tree,
)
from datasets.exceptions import DatasetGenerationError
from huggingface_hub import DatasetCard
from margins import check_margin, margin_seed
from repo_scripts import load_repo_script

from compgen.data.celeba import (
    CELEBA_ATTRIBUTES,
    CelebAConcepts,
    concept_table,
    normalize_image_id,
    read_attribute_table,
    read_official_annotations,
    read_parquet_annotations,
)
from compgen.data.celeba.publish import (
    CELEBA_LICENSE_SUMMARY,
    compute_split_definitions,
    materialize_split_definitions,
    save_split_definitions,
)

CAPS = {"max_train_per_class": 5, "max_test_per_class": 2, "max_probe_train_per_class": 3, "max_probe_val_per_class": 3}
LEVELS = {"000": 0, "001": 0, "010": 0, "100": 0, "011": 1, "101": 1, "110": 1, "111": 2}


@pytest.fixture(scope="module")
def mini():
    return make_mini_celeba()


@pytest.fixture(scope="module")
def sources(mini, tmp_path_factory):
    root = tmp_path_factory.mktemp("celeba")
    return {
        "official": {"data_dir": str(write_official_tree(root / "official", mini))},
        "hub_bool": {"parquet": str(write_hub_bool_layout(root / "hub_bool", mini)), "parquet_config": HUB_BOOL_CONFIG},
        "hub_pm1": {"parquet": str(write_hub_pm1_layout(root / "hub_pm1", mini))},
    }


def build(tmp_path: Path, image_size: int = 16, **kwargs) -> tuple[datasets.DatasetDict, CelebAConcepts]:
    builder = CelebAConcepts(cache_dir=str(tmp_path / "cache"), image_size=image_size, **{**CAPS, **kwargs})
    builder.download_and_prepare()
    return builder.as_dataset(), builder


def class_counts(mini, partition: int) -> dict[str, int]:
    classes = [mini.class_of(i) for i in np.flatnonzero(mini.partitions == partition)]
    return {c: classes.count(c) for c in LEVELS}


# --- parsing ---------------------------------------------------------------------------------------------------


def test_official_attribute_table_is_parsed(mini, sources):
    ids, names, values = read_attribute_table(Path(sources["official"]["data_dir"]) / "list_attr_celeba.txt")
    assert ids == mini.image_ids
    assert names == CELEBA_ATTRIBUTES
    np.testing.assert_array_equal(values, mini.attributes == 1)


@pytest.mark.parametrize("layout", ["hub_bool", "hub_pm1"])
def test_parquet_encodings_match_official_annotations(mini, sources, layout):
    source = sources[layout]
    annotations, _ = read_parquet_annotations(source["parquet"], source.get("parquet_config"))
    order = np.argsort(annotations.image_ids)
    assert [annotations.image_ids[i] for i in order] == mini.image_ids  # ids from image_id or image file names
    np.testing.assert_array_equal(annotations.attributes[order], mini.attributes == 1)
    np.testing.assert_array_equal(annotations.partitions[order], mini.partitions)
    assert annotations.attribute_names == CELEBA_ATTRIBUTES


def test_zero_one_integers_are_detected(mini, tmp_path):
    path = tmp_path / "zero_one.parquet"
    data = {"image_id": mini.image_ids, "partition": mini.partitions.tolist()}
    data.update({n: (mini.column(n) == 1).astype(int).tolist() for n in CELEBA_ATTRIBUTES})
    datasets.Dataset.from_dict(data).to_parquet(str(path))
    annotations, _ = read_parquet_annotations(str(path))
    np.testing.assert_array_equal(annotations.attributes, mini.attributes == 1)


@pytest.mark.parametrize(
    ("value", "expected"), [(1, "000001.jpg"), ("000123", "000123.jpg"), ("img_align_celeba/000007.jpg", "000007.jpg")]
)
def test_image_ids_are_normalized_to_official_names(value, expected):
    assert normalize_image_id(value) == expected


def test_ambiguous_hair_is_excluded_and_logged(mini, sources, caplog):
    with caplog.at_level(logging.INFO, logger="compgen.data.celeba"):
        table = concept_table(read_official_annotations(sources["official"]["data_dir"]))
    black, blond = mini.column("Black_Hair") == 1, mini.column("Blond_Hair") == 1
    assert (table.num_excluded_both_hair, table.num_excluded_neither_hair) == (3, 2)
    assert (int((black & blond).sum()), int((~black & ~blond).sum())) == (3, 2)
    assert "excluded 3 with both Black_Hair and Blond_Hair and 2 with neither" in caplog.text
    ambiguous = {i for k, i in enumerate(mini.image_ids) if mini.class_of(k) is None}
    assert len(ambiguous) == 5 and not ambiguous & set(table.image_ids)
    expected = {i: mini.class_of(k) for k, i in enumerate(mini.image_ids) if mini.class_of(k)}
    assert {i: "".join(map(str, c)) for i, c in zip(table.image_ids, table.concepts.tolist(), strict=True)} == expected


# --- splits ----------------------------------------------------------------------------------------------------


def test_split_membership_levels_caps_and_partitions(mini, sources, tmp_path):
    splits, builder = build(tmp_path, **sources["official"])
    partition_of = dict(zip(mini.image_ids, mini.partitions.tolist(), strict=True))
    class_of = {i: mini.class_of(k) for k, i in enumerate(mini.image_ids)}
    for split, partition, cap, classes in (
        ("train", 0, 5, {"000", "001", "010", "100"}),
        ("probe_train", 0, 3, set(LEVELS)),
        ("probe_val", 1, 3, set(LEVELS)),
        ("test", 2, 2, set(LEVELS)),
    ):
        ds = splits[split]
        assert set(ds["concepts"]) == classes
        assert {partition_of[i] for i in ds["image_id"]} == {partition}
        assert all(class_of[i] == c for i, c in zip(ds["image_id"], ds["concepts"], strict=True))
        assert all(LEVELS[c] == lv for c, lv in zip(ds["concepts"], ds["level"], strict=True))
        available = class_counts(mini, partition)
        assert {c: ds["concepts"].count(c) for c in classes} == {c: min(cap, available[c]) for c in classes}
        assert len(set(ds["image_id"])) == len(ds)
    first = splits["train"][0]
    assert first["image"].size == (16, 16) and first["image"].mode == "RGB"
    assert [first["gender"], first["smile"], first["hair"]] == [int(ch) for ch in first["concepts"]]
    assert splits["train"].features["smile"].names == ["smiling", "not_smiling"]
    assert builder.report["excluded_both_hair"] == 3 and builder.report["skipped_train"] == 0


def test_center_crop_keeps_the_center(mini, sources, tmp_path):
    splits, _ = build(tmp_path, image_size=8, max_train_per_class=1, **sources["official"])
    image = np.asarray(splits["train"][0]["image"], dtype=np.float64)
    assert image.shape == (8, 8, 3)
    # The fixture paints class 000 (female, smiling, black hair) with mean color (50, 50, 50) plus noise.
    assert splits["train"][0]["concepts"] == "000" and abs(image.mean() - 50) < 25


def test_selection_is_deterministic_and_seeded(sources):
    official = sources["official"]
    first = compute_split_definitions(**official, **CAPS)
    assert compute_split_definitions(**official, **CAPS) == first
    other = compute_split_definitions(**official, **CAPS, seed=1)
    ids = [r.image_id for r in first["train"] if r.concepts == "000"]
    assert ids == sorted(ids) and len(ids) == 5
    assert ids != [r.image_id for r in other["train"] if r.concepts == "000"]  # 5 of 10 drawn differently


def test_user_defined_training_classes(sources):
    adversarial = ("000", "100", "001", "111")
    definitions = compute_split_definitions(**sources["official"], **CAPS, training_classes=adversarial)
    assert {r.concepts for r in definitions["train"]} == {"000", "100", "001", "111"}
    levels = {r.concepts: r.level for r in definitions["test"]}
    assert levels == {"000": 0, "100": 0, "001": 0, "111": 0, "010": 1, "011": 1, "101": 1, "110": 1}


def test_all_sources_give_identical_splits(sources, tmp_path):
    built = {name: build(tmp_path / name, **source)[0] for name, source in sources.items()}
    reference = built.pop("official")
    for splits in built.values():
        for split in ("train", "test", "probe_train", "probe_val"):
            columns = ["image_id", "concepts", "level", "gender", "smile", "hair"]
            assert splits[split].select_columns(columns).to_list() == reference[split].select_columns(columns).to_list()
            for a, b in zip(splits[split]["image"][:4], reference[split]["image"][:4], strict=True):
                np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


# --- errors ----------------------------------------------------------------------------------------------------


@pytest.fixture
def official_copy(sources, tmp_path):
    return Path(shutil.copytree(sources["official"]["data_dir"], tmp_path / "celeba"))


def test_missing_files_raise(official_copy, tmp_path):
    (official_copy / "list_eval_partition.txt").unlink()
    with pytest.raises(FileNotFoundError, match="partition file"):
        read_official_annotations(official_copy)
    with pytest.raises(FileNotFoundError, match="data_dir"):
        compute_split_definitions(data_dir=str(tmp_path / "absent"))
    with pytest.raises(ValueError, match="exactly one CelebA source"):
        compute_split_definitions()


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda lines: lines[:2] + [lines[2].rsplit(" ", 1)[0]] + lines[3:], r"line 3: expected an image name and 40"),
        (lambda lines: lines[:3] + [lines[3].replace("-1", "0", 1)] + lines[4:], r"line 4: attribute values must be"),
        (lambda lines: lines[1:], "first line must be the image count"),
        (lambda lines: ["999"] + lines[1:], "announces 999 images"),
    ],
    ids=["column-count", "value", "header", "row-count"],
)
def test_malformed_attribute_table_raises(official_copy, edit, message):
    path = official_copy / "list_attr_celeba.txt"
    path.write_text("\n".join(edit(path.read_text().splitlines())) + "\n")
    with pytest.raises(ValueError, match=message):
        read_attribute_table(path)


def test_undecodable_image_raises_or_is_skipped(official_copy, tmp_path):
    definitions = compute_split_definitions(data_dir=str(official_copy), **CAPS)
    broken = definitions["test"][0].image_id
    (official_copy / "img_align_celeba" / broken).write_bytes(b"not a jpeg")
    # datasets wraps errors raised while generating; the cause names the image.
    with pytest.raises(DatasetGenerationError) as error:
        build(tmp_path / "raise", data_dir=str(official_copy))
    assert isinstance(error.value.__cause__, ValueError) and f"'{broken}' could not be decoded" in str(
        error.value.__cause__
    )
    splits, builder = build(tmp_path / "skip", data_dir=str(official_copy), on_bad_image="skip")
    assert builder.report["skipped_test"] == 1 and builder.report["skipped_train"] == 0
    assert broken not in splits["test"]["image_id"] and len(splits["test"]) == len(definitions["test"]) - 1
    (official_copy / "img_align_celeba" / broken).unlink()
    with pytest.raises(DatasetGenerationError) as error:
        build(tmp_path / "missing", data_dir=str(official_copy))
    assert f"'{broken}' not found" in str(error.value.__cause__)


def test_class_without_images_raises(mini, tmp_path):
    mini = make_mini_celeba()
    keep = [k for k in range(len(mini.image_ids)) if not (mini.class_of(k) == "111" and mini.partitions[k] == 1)]
    mini.image_ids = [mini.image_ids[k] for k in keep]
    mini.attributes, mini.partitions = mini.attributes[keep], mini.partitions[keep]
    mini.jpegs = [mini.jpegs[k] for k in keep]
    root = write_official_tree(tmp_path / "celeba", mini)
    with pytest.raises(ValueError, match=r"class 111 .* no images in official partition 1 \(val\).*'probe_val'"):
        compute_split_definitions(data_dir=str(root))


def test_parquet_without_partition_information_raises(mini, tmp_path):
    path = tmp_path / "all.parquet"
    data = {"image_id": mini.image_ids, **{n: mini.column(n).tolist() for n in CELEBA_ATTRIBUTES}}
    datasets.Dataset.from_dict(data).to_parquet(str(path))
    with pytest.raises(ValueError, match="cannot tell the official partition"):
        read_parquet_annotations(str(path))
    partition_file = tmp_path / "list_eval_partition.txt"
    partition_file.write_text("".join(f"{i} {p}\n" for i, p in zip(mini.image_ids, mini.partitions, strict=True)))
    annotations, _ = read_parquet_annotations(str(path), partition_file=str(partition_file))
    np.testing.assert_array_equal(annotations.partitions, mini.partitions)


# --- publishing ------------------------------------------------------------------------------------------------


def test_published_definitions_round_trip_and_materialize(sources, tmp_path):
    definitions = compute_split_definitions(**sources["official"], **CAPS)
    out = save_split_definitions(definitions, tmp_path / "published")
    adversarial = compute_split_definitions(**sources["official"], training_classes=("000", "100", "001", "111"))
    save_split_definitions(adversarial, out, config_name="fail1")
    assert sorted(p.relative_to(out).as_posix() for p in out.rglob("*.parquet")) == sorted(
        f"{folder}/{split}-00000-of-00001.parquet"
        for folder in ("data", "fail1")
        for split in ("train", "test", "probe_train", "probe_val")
    )
    card = DatasetCard.load(out / "README.md")
    assert [c["config_name"] for c in card.data.configs] == ["default", "fail1"]
    assert card.data.license_name == "celeba-dataset-release-agreement" and "NON-COMMERCIAL" in card.text

    for config, expected in (("default", definitions), ("fail1", adversarial)):
        loaded = datasets.load_dataset(str(out), config)
        assert set(loaded) == set(expected)
        for split, rows in expected.items():
            assert loaded[split]["image_id"] == [r.image_id for r in rows]
            assert loaded[split]["concepts"] == [r.concepts for r in rows]
            assert loaded[split]["level"] == [r.level for r in rows]
            assert set(loaded[split]["split"]) == {split}

    # Another copy of CelebA (the bool Parquet mirror) materializes exactly the published images.
    splits = materialize_split_definitions(out, **sources["hub_bool"], cache_dir=str(tmp_path / "cache"), image_size=16)
    for split, rows in definitions.items():
        assert splits[split]["image_id"] == [r.image_id for r in rows]
        assert splits[split]["level"] == [r.level for r in rows]


def test_materialize_rejects_definitions_that_disagree_with_the_local_copy(mini, sources, tmp_path):
    definitions = compute_split_definitions(**sources["official"], **CAPS)
    changed = definitions["test"][0].image_id
    relabeled = make_mini_celeba()
    row = relabeled.image_ids.index(changed)
    relabeled.attributes[row, CELEBA_ATTRIBUTES.index("Male")] *= -1
    root = write_official_tree(tmp_path / "relabeled", relabeled)
    out = save_split_definitions(definitions, tmp_path / "published")
    with pytest.raises(ValueError, match=f"other concepts locally.*{changed}"):
        materialize_split_definitions(out, data_dir=str(root), cache_dir=str(tmp_path / "cache"))


def test_publish_script_writes_definitions_and_guards_images(sources, tmp_path, capsys):
    script = load_repo_script("dataset_scripts/publish_celeba_splits.py")
    out = tmp_path / "out"
    data_dir = sources["official"]["data_dir"]
    assert script.main(["--data_dir", data_dir, "--output_dir", str(out), "--max_train_per_class", "5"]) == 0
    assert datasets.load_dataset(str(out), "default")["train"].num_rows == 5 + 4 + 4 + 4
    assert script.main(["--data_dir", data_dir, "--output_dir", str(tmp_path / "img"), "--include_images"]) == 2
    captured = capsys.readouterr()
    assert CELEBA_LICENSE_SUMMARY in captured.out and "--accept_celeba_license" in captured.err
    assert not (tmp_path / "img").exists()


# --- probes ----------------------------------------------------------------------------------------------------


def test_cnn_probes_learn_the_concepts_from_probe_train(sources, tmp_path):
    import torch

    probes_module = pytest.importorskip("compgen.evaluation.probes")
    splits, _ = build(tmp_path, max_probe_train_per_class=100, max_probe_val_per_class=100, **sources["official"])

    def arrays(split: str) -> tuple[np.ndarray, np.ndarray]:
        ds = splits[split]
        images = np.stack([np.asarray(image) for image in ds["image"]])
        return images, np.stack([ds["gender"], ds["smile"], ds["hair"]], axis=1)

    train_images, train_concepts = arrays("probe_train")
    val_images, val_concepts = arrays("probe_val")
    assert train_images.shape == (len(splits["probe_train"]), 16, 16, 3) and train_images.dtype == np.uint8
    torch.manual_seed(margin_seed(0))
    probes = probes_module.ConceptProbes(
        {"gender": ["female", "male"], "smile": ["smiling", "not_smiling"], "hair": ["black", "blond"]},
        image_size=16,
        probe_type="cnn",
        center_objects=False,
        cnn_channels=8,
    )
    probes_module.fit_probes(probes, train_images, train_concepts, epochs=15, lr=1e-2, batch_size=32,
                             seed=margin_seed(0))
    accuracy = (probes.predict(val_images).numpy() == val_concepts).mean(axis=0)
    # Chance is 0.5 per concept; the fixture's colors make every concept learnable.
    check_margin("CelebA CNN probes: lowest probe_val accuracy", accuracy.min(), above=0.9)
