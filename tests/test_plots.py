import json

import numpy as np
import pytest
from PIL import Image

from compgen import get_split_preset
from compgen.evaluation.plots import main, moving_average, plot_concept_graph, plot_learning_dynamics

GRAPH = get_split_preset("H32-train1").graph()


def _fake_log(path, steps=(0, 10, 100, 1000)):
    levels = GRAPH.levels
    space = GRAPH.space.to_dict()
    with open(path, "w") as f:
        for step in steps:
            acc = {c: min(1.0, step / 1000 / (1 + lv)) for c, lv in levels.items()}
            f.write(json.dumps({
                "step": step, "images_seen": step * 64, "chance": 0.125, "concept_space": space,
                "training_classes": ["000", "001", "010", "100"], "levels": levels, "accuracy": acc,
                "additive_accuracy": acc, "prob_product_accuracy": acc,
                "concept_accuracy": {c: {v: a for v in space} for c, a in acc.items()},
                "level_accuracy": {str(k): 0.5 for k in set(levels.values())},
            }) + "\n")


def _assert_png(path, min_width=300):
    with Image.open(path) as image:
        assert image.format == "PNG" and image.size[0] >= min_width and image.size[1] >= 200


def test_cli_writes_every_plot(tmp_path):
    log = tmp_path / "log.jsonl"
    _fake_log(log)
    samples = tmp_path / "samples"
    samples.mkdir()
    for step in (0, 10):
        np.savez(samples / f"samples_step{step:08d}.npz", images=np.zeros((8, 28, 28, 3), np.uint8),
                 classes=np.array([GRAPH.format(c) for c in GRAPH.nodes]), step=step)
    main([str(log), "--output-dir", str(tmp_path / "plots"), "--samples-dir", str(samples), "--smoothing", "2"])
    names = sorted(p.name for p in (tmp_path / "plots").iterdir())
    assert names == sorted([
        "concept_accuracy.png", "concept_graph.png", "emergence.md", "emergence_order.png", "learning_dynamics.png",
        "learning_dynamics_additive.png", "multiplicative_vs_additive.png", "samples.png"])
    for name in names:
        if name.endswith(".png"):
            _assert_png(tmp_path / "plots" / name, min_width=150)


def test_individual_plots_and_moving_average(tmp_path):
    np.testing.assert_allclose(moving_average([0, 2, 4, 6], 2), [0, 1, 3, 5])
    log = tmp_path / "log.jsonl"
    _fake_log(log)
    records = [json.loads(line) for line in log.read_text().splitlines()]
    plot_learning_dynamics(records, tmp_path / "a.png", log_x=False, x_key="images_seen")
    _assert_png(tmp_path / "a.png")
    cube4 = get_split_preset("H42-train1").graph()
    plot_concept_graph(cube4, tmp_path / "cube4.png", accuracy={cube4.format(c): 0.5 for c in cube4.nodes})
    _assert_png(tmp_path / "cube4.png")
    with pytest.raises(ValueError, match="no records"):
        plot_learning_dynamics([], tmp_path / "b.png")
