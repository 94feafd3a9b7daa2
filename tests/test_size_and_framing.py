"""The size distribution and the pixel budget as data options (issue 52): ``size_ranges`` and ``object_scale`` draw
what they say, travel with the rows, and the scorers judge each framing on its own calibration."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from compgen.concepts import get_split_preset, shapes_space
from compgen.data.concept_graph_builder import build_concept_graph_dataset, concept_graph_builder
from compgen.data.loading import to_tensors
from compgen.evaluation.compare import headline_held, share_interval
from compgen.evaluation.pixel_scorer import measure_objects
from compgen.evaluation.probes import SHIPPED_PROBES_DIR, default_probes_name
from compgen.shapes import SIZE_RANGES, RenderConfig, render_classes

SMALL = {"images_per_class": 40, "test_images_per_class": 4, "tokenizer_images_per_class": 1}


def _build(tmp_path, name, **options):
    return build_concept_graph_dataset(name, cache_dir=str(tmp_path / name), split_preset="H32-train1",
                                       **SMALL, **options)


def test_touching_size_ranges_are_paper_a_uniform_axis_cut_at_its_middle(tmp_path):
    touching = _build(tmp_path, "touching", size_ranges="touching")
    sizes = np.asarray(touching["train"]["size_value"])
    large = np.asarray(touching["train"]["size"]) == 0
    # each half of the axis 1.05-3.25 holds one class, the halves meet at 2.15 and the canonical values are centres
    assert sizes[large].min() >= 2.15 - 1e-6 and sizes[large].max() <= 3.25 + 1e-6
    assert sizes[~large].min() >= 1.05 - 1e-6 and sizes[~large].max() <= 2.15 + 1e-6
    assert SIZE_RANGES["touching"] == pytest.approx((2.7 - 1.6) / 2)
    # the same draw as the jitter it names: runs made with size_jitter 0.55 are runs on this data
    jitter = _build(tmp_path, "jitter", size_jitter=0.55)
    assert [np.asarray(a).tobytes() for a in touching["train"]["image"]] == \
        [np.asarray(b).tobytes() for b in jitter["train"]["image"]]
    assert "size ranges touching" in touching["train"].info.description
    apart = _build(tmp_path, "apart", size_ranges="apart")  # the default data, by name
    default = _build(tmp_path, "default")
    assert apart["train"]["size_value"] == default["train"]["size_value"]


@pytest.mark.parametrize(("options", "message"), [
    ({"size_ranges": "overlapping"}, "size_ranges must be one of"),
    ({"size_ranges": "touching", "size_jitter": 0.2}, "remove size_jitter=0.2"),
    ({"object_scale": 2.0}, "object_scale must be in"),
    ({"object_scale": True}, "object_scale must be in"),
])
def test_bad_size_and_framing_options_are_refused_before_rendering(tmp_path, options, message):
    with pytest.raises(ValueError, match=message):
        _ = concept_graph_builder("bad", cache_dir=str(tmp_path), split_preset="H32-train1", **options).info


def test_object_scale_enlarges_every_object_by_its_square_and_keeps_it_in_the_frame():
    space = shapes_space()
    config = RenderConfig(color_jitter=0.0, size_jitter=0.0, style="shaded", rotate=False, position_range=0.0)
    classes = ["000", "001", "100", "101"] * 10
    base = measure_objects(render_classes(space, classes, seed=1, config=config).images)
    larger = measure_objects(render_classes(space, classes, seed=1, config=replace(config, object_scale=1.3)).images)
    np.testing.assert_allclose(larger.area_fraction / base.area_fraction, 1.3 ** 2, rtol=0.12)
    widest = RenderConfig(size_jitter=0.55, object_scale=1.4, position_range=1.0)  # the largest object it allows
    images = render_classes(space, ["000"] * 50, seed=2, config=widest).images
    border = np.ones((28, 28), dtype=bool)
    border[1:-1, 1:-1] = False
    assert np.all(images[:, border] == 255)
    # 1.0 draws exactly what the renderer drew before the option
    assert render_classes(space, classes, seed=3).images.tobytes() == \
        render_classes(space, classes, seed=3, config=RenderConfig(object_scale=1.0)).images.tobytes()


def test_the_object_scale_travels_with_the_rows_and_picks_the_scorers(tmp_path):
    framed = _build(tmp_path, "framed", object_scale=1.3)
    np.testing.assert_allclose(framed["train"]["object_scale"], 1.3, rtol=1e-6)
    assert to_tensors(framed["test"]).object_scale == pytest.approx(1.3)
    default = _build(tmp_path, "default")
    assert "object_scale" not in default["train"].column_names  # Paper A's framing keeps its columns
    assert to_tensors(default["train"]).object_scale == 1.0
    mixed = framed["train"].map(lambda row, i: {"object_scale": 1.0 + i % 2}, with_indices=True)
    with pytest.raises(ValueError, match="one finite value"):
        to_tensors(mixed)
    space = get_split_preset("H32-train1").space
    name, key = default_probes_name(space)
    assert (SHIPPED_PROBES_DIR / name).is_dir()  # the shipped probes still serve the default framing
    framed_name, framed_key = default_probes_name(space, object_scale=1.3)
    assert "scale1.3" in framed_name and framed_key != key


def _record(step, probes, pixel, fidelity=0.9):
    levels = {"0": 1.0, "1": 1.0, "2": probes}
    return {"step": step, "level_accuracy": levels, "pixel_level_accuracy": {**levels, "2": pixel},
            "fidelity_level": {"0": 0.9, "1": 0.9, "2": fidelity}}


def test_paper_a_probes_only_measure_beside_the_strict_one():
    records = [_record(step, probes=0.95, pixel=0.6, fidelity=0.7) for step in (600, 700, 800)]
    assert not headline_held(records)["held"]
    assert headline_held(records, scorers=("probes",), min_fidelity=None)["held"]
    assert not headline_held(records, scorers=("probes",))["held"]  # the fidelity still counts unless dropped
    with pytest.raises(ValueError, match="scorers must name"):
        headline_held(records, scorers=("eyes",))


def test_share_interval_is_wilsons_and_says_ten_seeds_cannot_tell_3_from_5():
    low3, high3 = share_interval(3, 10)
    low5, high5 = share_interval(5, 10)
    assert (low3, high3) == pytest.approx((0.1078, 0.6032), abs=1e-4)
    assert low5 < high3  # the intervals overlap
    assert share_interval(10, 10) == pytest.approx((0.7225, 1.0), abs=1e-4)
    assert share_interval(0, 10)[0] == 0.0
    for bad in ((11, 10), (-1, 10), (1, 0), (1.5, 10)):
        with pytest.raises(ValueError):
            share_interval(*bad)


def test_the_touching_configs_are_paper_a_splits_with_touching_size_ranges():
    from compgen.data.concept_graph_builder import ConceptGraphShapes

    for number in (1, 2, 3, 4):
        touching = ConceptGraphShapes.builder_configs[f"okawa-h32-train{number}-sizes-touching"]
        default = ConceptGraphShapes.builder_configs[f"okawa-h32-train{number}"]
        assert touching.train_counts == default.train_counts
        assert touching.render_config == replace(default.render_config, size_jitter=SIZE_RANGES["touching"])
