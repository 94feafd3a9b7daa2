import json

import numpy as np
import pytest
import torch
from margins import check_margin, margin_seed

from compgen import get_split_preset
from compgen.data.concept_graph_builder import ConceptGraphShapes
from compgen.evaluation import probes as probes_module
from compgen.evaluation.corruptions import ProbeAugmentation
from compgen.evaluation.preprocessing import center_objects
from compgen.evaluation.probes import (
    SHIPPED_PROBES_DIR,
    ConceptProbes,
    default_probes_cache,
    default_probes_name,
    default_shapes_probes,
    fit_probes,
    render_probe_data,
)
from compgen.evaluation.tracker import renderer_generator

GRAPH = get_split_preset("H32-train1").graph()


pytestmark = pytest.mark.usefixtures("single_thread")


@pytest.fixture(scope="module")
def linear_probes():
    torch.manual_seed(margin_seed(0))
    probes = ConceptProbes(GRAPH.space.to_dict(), image_size=28, probe_type="linear")
    data = render_probe_data(GRAPH, images_per_class=600, seed=margin_seed(1))
    validation = fit_probes(probes, data.images, data.concepts, seed=margin_seed(0))
    return probes, validation


def test_centering_moves_ink_centroid_to_center():
    data = render_probe_data(GRAPH, images_per_class=4, seed=3)
    centered = center_objects(data.images)
    assert centered.shape == (32, 3, 28, 28)
    ink = (1.0 - centered).mean(dim=1)
    grid = torch.arange(28) + 0.5
    cy = (ink.sum(2) * grid).sum(1) / ink.sum((1, 2))
    cx = (ink.sum(1) * grid).sum(1) / ink.sum((1, 2))
    assert torch.allclose(cx, torch.full_like(cx, 14.0), atol=0.3)
    assert torch.allclose(cy, torch.full_like(cy, 14.0), atol=0.3)
    # uint8 NHWC and float NCHW inputs give the same result
    as_float = torch.from_numpy(data.images).permute(0, 3, 1, 2).float() / 255
    assert torch.allclose(center_objects(as_float), centered)


def test_linear_probes_recognise_every_class_of_held_out_real_images(linear_probes):
    probes, validation = linear_probes
    check_margin("linear probes: lowest validation accuracy", min(validation.values()), above=0.99)
    held_out = render_probe_data(GRAPH, images_per_class=100, seed=margin_seed(1234))
    predictions = probes.predict(held_out.images).numpy()
    check_margin("linear probes: lowest held-out accuracy", (predictions == held_out.concepts).mean(axis=0).min(),
                 above=0.99)
    # Generation targets the canonical class values: there every class of the cube is recognised perfectly.
    names = [GRAPH.format(c) for c in GRAPH.nodes for _ in range(50)]
    canonical = renderer_generator(GRAPH.space)(names, 7)
    expected = np.array([GRAPH.space.parse(n) for n in names])
    assert (probes.predict(canonical).numpy() == expected).all()


def test_save_load_round_trip_gives_identical_predictions(linear_probes, tmp_path):
    probes, _ = linear_probes
    probes.save_pretrained(tmp_path / "probes")
    assert (tmp_path / "probes" / "diffusion_pytorch_model.safetensors").exists()
    loaded = ConceptProbes.from_pretrained(tmp_path / "probes")
    assert loaded.space == GRAPH.space  # variable order survives the sorted-keys config file
    images = render_probe_data(GRAPH, images_per_class=10, seed=5).images
    assert torch.equal(loaded.predict(images), probes.predict(images))
    for a, b in zip(loaded.predict_proba(images), probes.predict_proba(images), strict=True):
        assert torch.allclose(a, b)


def test_cnn_probe_trains_on_a_small_set():
    torch.manual_seed(margin_seed(0))
    probes = ConceptProbes(GRAPH.space.to_dict(), probe_type="cnn", cnn_channels=8)
    data = render_probe_data(GRAPH, images_per_class=100, seed=margin_seed(2))
    # 40 epochs: at 8, the shape's validation accuracy ranged 0.51-0.78 over seeds (chance 0.5; docs/test_margins.md)
    validation = fit_probes(probes, data.images, data.concepts, epochs=40, lr=3e-3, val_fraction=0.2,
                            seed=margin_seed(0))
    check_margin("small CNN probes: colour validation accuracy", validation["color"], above=0.95)
    check_margin("small CNN probes: size validation accuracy", validation["size"], above=0.9)
    check_margin("small CNN probes: shape validation accuracy", validation["shape"], above=0.75)
    logits = probes(torch.rand(2, 3, 28, 28))
    assert [tuple(v.shape) for v in logits.values()] == [(2, 2), (2, 2), (2, 2)]


def test_default_probes_ship_with_compgen_and_judge_real_images(monkeypatch):
    def no_training(*args, **kwargs):
        raise AssertionError("the default probes of a shipped concept space were trained instead of loaded")

    monkeypatch.setattr(probes_module, "fit_probes", no_training)
    probes = default_shapes_probes(GRAPH.space)
    assert probes.config.probe_type == "cnn" and probes.config.subtract_background and probes.config.isolate_object
    names = [GRAPH.format(c) for c in GRAPH.nodes for _ in range(20)]
    images = renderer_generator(GRAPH.space)(names, 11)
    expected = np.array([GRAPH.space.parse(n) for n in names])
    assert (probes.predict(images).numpy() == expected).all()
    assert not list(default_probes_cache().glob("shapes-cnn-28px-seed0-*"))  # loaded in place, not copied


@pytest.mark.parametrize("config", sorted(ConceptGraphShapes.builder_configs))
def test_every_shapes_config_has_shipped_probes_of_the_current_recipe(config):
    """A changed recipe (or a new concept space) must ship retrained probes (default_probes/README.md says how)."""
    builder_config = ConceptGraphShapes.builder_configs[config]
    space = get_split_preset(builder_config.split_preset).space
    name, key = default_probes_name(space, image_size=builder_config.image_size)
    record = SHIPPED_PROBES_DIR / name / "probe_training.json"
    assert record.is_file(), f"no shipped default probes for {config} ({name})"
    assert json.loads(record.read_text())["key"] == key
    assert min(json.loads(record.read_text())["validation_accuracy"].values()) == 1.0


def test_other_default_probes_are_trained_once_and_cached(tmp_path):
    probes = default_shapes_probes(GRAPH.space, probe_type="linear", cache_dir=tmp_path)
    cached = list(tmp_path.glob("shapes-linear-28px-seed0-*"))
    assert len(cached) == 1 and (cached[0] / "diffusion_pytorch_model.safetensors").is_file()
    again = default_shapes_probes(GRAPH.space, probe_type="linear", cache_dir=tmp_path)
    for a, b in zip(again.state_dict().values(), probes.state_dict().values(), strict=True):
        assert torch.equal(a, b)


def test_probe_input_errors(tmp_path):
    probes = default_shapes_probes(GRAPH.space)
    with pytest.raises(ValueError, match="expect 28x28"):
        probes.predict(np.zeros((1, 32, 32, 3), dtype=np.uint8))
    with pytest.raises(ValueError, match="probe_type"):
        ConceptProbes(GRAPH.space.to_dict(), probe_type="mlp")
    with pytest.raises(ValueError, match="probe_type"):
        default_shapes_probes(GRAPH.space, probe_type="mlp", cache_dir=tmp_path)


def test_background_subtraction_and_isolation_survive_save_and_load(tmp_path):
    torch.manual_seed(0)
    probes = ConceptProbes(GRAPH.space.to_dict(), probe_type="cnn", cnn_channels=8, subtract_background=True,
                           isolate_object=True)
    data = render_probe_data(GRAPH, images_per_class=20, seed=2)
    fit_probes(probes, data.images, data.concepts, epochs=2, augmentation=ProbeAugmentation())
    probes.save_pretrained(tmp_path / "probes")
    loaded = ConceptProbes.from_pretrained(tmp_path / "probes")
    assert loaded.config.subtract_background and loaded.config.isolate_object
    assert torch.equal(loaded.predict(data.images), probes.predict(data.images))
    # Isolation: a speck far from the object does not move what the classifier sees.
    far = np.hypot(data.position[:, 0] - 3.5, data.position[:, 1] - 2.5) > 12
    speckled = data.images[far].copy()
    speckled[:, 2, 3] = (0, 200, 0)
    assert torch.allclose(probes.preprocess(speckled), probes.preprocess(data.images[far]), atol=1e-6)


def test_augmentation_is_seeded_and_keeps_images_in_range():
    images = torch.from_numpy(render_probe_data(GRAPH, images_per_class=4, seed=1).images).permute(0, 3, 1, 2) / 255
    for augmentation in (ProbeAugmentation(), ProbeAugmentation(layered=False)):
        first = augmentation(images, torch.Generator().manual_seed(3))
        second = augmentation(images, torch.Generator().manual_seed(3))
        assert torch.equal(first, second) and first.shape == images.shape
        assert first.min() >= 0 and first.max() <= 1 and not torch.equal(first, images)


def test_a_damaged_cached_copy_neither_shadows_the_shipped_probes_nor_stops_a_run(tmp_path, caplog):
    """Issue 42, case 20: a torn cached copy of shipped probes took precedence and every evaluated run died with an
    OSError; the shipped probes now come first, and a damaged cache of other probes is named and trained again."""
    from compgen.evaluation.probes import SHIPPED_PROBES_DIR, default_probes_name

    for probe_type in ("cnn", "linear"):
        name, key = default_probes_name(GRAPH.space, probe_type=probe_type)
        damaged = tmp_path / name
        damaged.mkdir()
        (damaged / "config.json").write_text((SHIPPED_PROBES_DIR / default_probes_name(GRAPH.space)[0]
                                              / "config.json").read_text())
        (damaged / "probe_training.json").write_text(json.dumps({"key": key}))
        (damaged / "diffusion_pytorch_model.safetensors").write_bytes(b"torn")
    shipped = default_shapes_probes(GRAPH.space, cache_dir=tmp_path)
    reference = default_shapes_probes(GRAPH.space)
    assert all(torch.equal(a, b) for a, b in zip(shipped.state_dict().values(), reference.state_dict().values(),
                                                  strict=True))
    retrained = default_shapes_probes(GRAPH.space, probe_type="linear", cache_dir=tmp_path)
    assert "are unreadable" in caplog.text and retrained is not None
    again = default_shapes_probes(GRAPH.space, probe_type="linear", cache_dir=tmp_path)  # the new cached copy
    assert all(torch.equal(a, b) for a, b in zip(again.state_dict().values(), retrained.state_dict().values(),
                                                  strict=True))


def test_the_default_probes_are_chosen_by_what_the_data_contain():
    """Issue 74, item 2: the default shapes probes serve a space the renderer draws and data it rendered; images that
    only share its variable names (noise here) and values it cannot draw are refused before training, naming why."""
    from compgen.concepts import ConceptSpace, ConceptVariable, shapes_space
    from compgen.data.loading import ConceptImageData
    from compgen.launch.run_probes import load_probes
    from compgen.shapes import render_classes

    space = shapes_space()
    batch = render_classes(space, [c for c in space.all_classes() for _ in range(8)], seed=0)
    rendered = ConceptImageData(space, torch.from_numpy(batch.images), torch.from_numpy(batch.concepts), None)
    assert load_probes(None, rendered, seed=0).space == space
    noise = torch.from_numpy(np.random.default_rng(0).integers(0, 256, batch.images.shape, dtype=np.uint8))
    with pytest.raises(ValueError, match="not the shapes renderer's images"):
        load_probes(None, ConceptImageData(space, noise, rendered.concepts, None), seed=0)
    hexagons = ConceptSpace((ConceptVariable("shape", ("circle", "hexagon")), *space.variables[1:]))
    with pytest.raises(ValueError, match="no probes for concept variables"):
        load_probes(None, ConceptImageData(hexagons, rendered.images, rendered.concepts, None), seed=0)
