"""What a broken, odd or edited Paper A folder (the builder's ``data_dir``) does: every refusal names the file."""

from __future__ import annotations

import json
import os
import struct
import zlib
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from compgen.data.concept_graph_builder import build_concept_graph_dataset, concept_graph_builder

TRAIN = ("000", "001", "010", "100")
ALL = ("000", "001", "010", "011", "100", "101", "110", "111")


def _values(concepts: str, index: int = 0) -> list:
    """Paper A's values of a class: [size, [r, g, b, a], ...] (red or blue; large 2.7 or small 1.6)."""
    rgba = [0.9, 0.1, 0.1, 1.0] if concepts[1] == "0" else [0.1, 0.1, 0.9, 1.0]
    return [2.7 - 0.1 * index if concepts[2] == "0" else 1.6, rgba, [0.0, 0.0]]


def _write_example(folder: Path, name: str, values: list, side: int = 28, grey: int | None = None):
    """An RGBA image (transparent background, an opaque square of the colour, or ``grey``) and its values file."""
    pixels = np.zeros((side, side, 4), dtype=np.uint8)
    pixels[8:20, 8:20, :3] = (np.array(values[1][:3]) * 255).round() if grey is None else grey
    pixels[8:20, 8:20, 3] = 255
    Image.fromarray(pixels, "RGBA").save(folder / f"{name}.png")
    (folder / f"{name}.json").write_text(json.dumps(values))


@pytest.fixture
def paper_dir(tmp_path):
    root = tmp_path / "single-body_2d_3classes"
    for split, classes, count in (("train", TRAIN, 5), ("test", ALL, 2)):
        (root / split).mkdir(parents=True)
        for concepts in classes:
            for index in range(count):
                _write_example(root / split, f"CLEVR_{concepts}_{index}", _values(concepts, index))
    return root


def _build(data_dir, cache: Path, **overrides):
    options = dict(split_preset="H32-train1", images_per_class=4, test_images_per_class=2, data_dir=str(data_dir))
    options.update(overrides)
    return build_concept_graph_dataset("paper-a-faults", cache_dir=str(cache), **options)


def _bump_mtime(path: Path) -> None:
    info = path.stat()
    os.utime(path, ns=(info.st_atime_ns, info.st_mtime_ns + 5_000_000_000))


def test_case1_edited_files_and_another_working_directory_are_read_anew(paper_dir, tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    assert _build(paper_dir, cache)["train"][0]["size_value"] == pytest.approx(2.7)
    values_path = paper_dir / "train" / "CLEVR_000_0.json"
    values_path.write_text(json.dumps([2.5, [0.8, 0.2, 0.1, 1.0], [0.0, 0.0]]))
    _bump_mtime(values_path)
    first = _build(paper_dir, cache)["train"][0]
    assert first["size_value"] == pytest.approx(2.5) and first["color_rgb"] == pytest.approx([0.8, 0.2, 0.1])
    image_path = paper_dir / "train" / "CLEVR_000_0.png"
    _write_example(paper_dir / "train", "CLEVR_000_0", [2.5, [0.8, 0.2, 0.1, 1.0]], grey=0)
    _bump_mtime(image_path)
    _bump_mtime(values_path)
    assert tuple(np.asarray(_build(paper_dir, cache)["train"][0]["image"])[14, 14]) == (0, 0, 0)
    # One relative data_dir from two working directories: two folders, two datasets.
    for place, size in (("a", 2.6), ("b", 2.4)):
        folder = tmp_path / place / "paper"
        for split, classes in (("train", TRAIN), ("test", ALL)):
            (folder / split).mkdir(parents=True)
            for concepts in classes:
                for index in range(5 if split == "train" else 2):
                    values = _values(concepts, index)
                    values[0] = size if concepts == "000" else values[0]
                    _write_example(folder / split, f"CLEVR_{concepts}_{index}", values)
        monkeypatch.chdir(tmp_path / place)
        assert _build("paper", cache)["train"][0]["size_value"] == pytest.approx(size)


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ([2.7, [230, 26, 26, 255]], r"CLEVR_000_1.json: colour r \(entry 1\[0\]\) is 230.0, outside \[0, 1\]"),
        ([-2.7, [0.9, 0.1, 0.1, 1.0]], r"CLEVR_000_1.json: size \(entry 0\) is -2.7, but sizes are positive"),
        ([True, [0.9, 0.1, 0.1, 1.0]], r"CLEVR_000_1.json: size \(entry 0\) must be a number, got True"),
        ([2.7, [0.9, False, 0.1, 1.0]], r"CLEVR_000_1.json: colour g \(entry 1\[1\]\) must be a number, got False"),
    ],
)
def test_case3_values_out_of_range_or_boolean_are_refused_naming_file_and_field(paper_dir, tmp_path, values, message):
    (paper_dir / "train" / "CLEVR_000_1.json").write_text(json.dumps(values))
    with pytest.raises(ValueError, match=message):
        _build(paper_dir, tmp_path / "cache")


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ([2.7, [0.9, 0.1, 0.1, 1.0]], r"CLEVR_001_2.json holds another class's values .* size large, .* size small"),
        ([1.6, [0.1, 0.1, 0.9, 1.0]], r"CLEVR_001_2.json holds another class's values .* color blue, .* color red"),
    ],
)
def test_case4_values_of_another_class_are_refused_naming_the_file(paper_dir, tmp_path, values, message):
    (paper_dir / "train" / "CLEVR_001_2.json").write_text(json.dumps(values))  # 001: red and small
    with pytest.raises(ValueError, match=message):
        _build(paper_dir, tmp_path / "cache")


def test_case5_a_sixteen_bit_greyscale_image_is_scaled_to_eight_bits(paper_dir, tmp_path):
    levels = np.full((28, 28), 65535, dtype=np.uint16)
    levels[8:20, 8:20] = 8192  # 32 of 255
    Image.fromarray(levels).save(paper_dir / "train" / "CLEVR_000_0.png")
    assert Image.open(paper_dir / "train" / "CLEVR_000_0.png").mode == "I;16"
    image = np.asarray(_build(paper_dir, tmp_path / "cache")["train"][0]["image"])
    assert tuple(image[0, 0]) == (255, 255, 255) and tuple(image[14, 14]) == (32, 32, 32)


def test_case6_two_names_for_one_index_are_refused_naming_them(paper_dir, tmp_path):
    for name in ("CLEVR_000_01", "CLEVR_000_001"):
        _write_example(paper_dir / "train", name, _values("000", 1))
    with pytest.raises(ValueError, match=r"CLEVR_000_001.png and CLEVR_000_01.png and CLEVR_000_1.png"):
        _build(paper_dir, tmp_path / "cache")
    assert not (tmp_path / "cache").exists()


def _bomb_png(side: int) -> bytes:
    """A 1-bit greyscale PNG whose header claims ``side`` x ``side`` pixels (a few bytes of data)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = chunk(b"IHDR", struct.pack(">IIBBBBB", side, side, 1, 0, 0, 0, 0))
    return b"\x89PNG\r\n\x1a\n" + header + chunk(b"IDAT", zlib.compress(bytes(1024))) + chunk(b"IEND", b"")


def test_case11_a_decompression_bomb_or_a_deeply_nested_values_file_is_named(paper_dir, tmp_path):
    (paper_dir / "train" / "CLEVR_010_3.png").write_bytes(_bomb_png(20000))
    with pytest.raises(ValueError, match=r"CLEVR_010_3.png"):
        _build(paper_dir, tmp_path / "cache")
    _write_example(paper_dir / "train", "CLEVR_010_3", _values("010", 3))
    (paper_dir / "train" / "CLEVR_100_2.json").write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(ValueError, match=r"CLEVR_100_2.json is nested too deeply"):
        _build(paper_dir, tmp_path / "cache")


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_case12_a_fifo_is_refused_without_being_opened(paper_dir, tmp_path):
    os.mkfifo(paper_dir / "train" / "CLEVR_000_7.png")  # not even among the images asked for
    with pytest.raises(ValueError, match=r"CLEVR_000_7.png is not a regular file"):
        _build(paper_dir, tmp_path / "cache")
    assert not (tmp_path / "cache").exists()
    (paper_dir / "train" / "CLEVR_000_7.png").unlink()
    (paper_dir / "train" / "CLEVR_010_1.json").unlink()
    os.mkfifo(paper_dir / "train" / "CLEVR_010_1.json")
    with pytest.raises(ValueError, match=r"values file .*CLEVR_010_1.json is not a regular file"):
        _build(paper_dir, tmp_path / "cache")
    # The reader itself never blocks on a FIFO that took an image's place after the folder was listed.
    from compgen.data.paper_a_files import read_paper_image

    os.mkfifo(tmp_path / "CLEVR_000_9.png")
    with pytest.raises(ValueError, match=r"image .*CLEVR_000_9.png is not a regular file"):
        read_paper_image(tmp_path / "CLEVR_000_9.png", 28)


@pytest.mark.parametrize("image_size", [0, -28, 513, 10_000, True, 28.0])
def test_case16_image_size_is_checked_before_any_work(paper_dir, tmp_path, image_size):
    with pytest.raises(ValueError, match=r"image_size must be an int in \[1, 512\] with data_dir"):
        _build(paper_dir, tmp_path / "cache", image_size=image_size)
    assert not (tmp_path / "cache").exists()


def test_case17_a_negative_zero_jitter_is_read_as_zero(tmp_path):
    options = dict(split_preset="H32-train1", images_per_class=1, test_images_per_class=1, color_jitter=-0.0)
    builder = concept_graph_builder("negative-zero", cache_dir=str(tmp_path), size_jitter=-0.0, **options)
    assert not np.signbit(builder.config.color_jitter) and not np.signbit(builder.config.size_jitter)
    dataset = build_concept_graph_dataset("negative-zero", cache_dir=str(tmp_path), size_jitter=-0.0, **options)
    assert dataset["train"][0]["color_rgb"] == pytest.approx([0.9, 0.1, 0.1])  # no jitter: the class colour
