"""The learning-dynamics plots draw what they are given: each test captures the matplotlib Figure as it is saved and
checks its titles, axis labels and scales, its series and legend, and that the plotted values are the input data."""

import json
from pathlib import Path

import matplotlib.colors as mcolors
import matplotlib.pyplot as plt
import numpy as np
import pytest
from PIL import Image

import compgen.evaluation.figure_style as figures_module
import compgen.evaluation.plots as plots_module
from compgen import get_split_preset
from compgen.evaluation.emergence import emergence_report
from compgen.evaluation.figure_style import level_color
from compgen.evaluation.plots import (
    main,
    moving_average,
    plot_concept_accuracy,
    plot_concept_graph,
    plot_learning_dynamics,
    plot_multiplicative_vs_additive,
    plot_sample_grid,
)

GRAPH = get_split_preset("H32-train1").graph()
STEPS = (0, 10, 100, 1000)
BY_LEVEL = sorted(GRAPH.levels, key=lambda name: (GRAPH.levels[name], name))  # the order the plots draw classes in


def _accuracy(step: int, level: int) -> float:
    return min(1.0, step / 1000 / (1 + level))


def _records(steps=STEPS, **extra) -> list[dict]:
    """Tracker records in which every metric and concept has its own values, so that a plot of the wrong one fails."""
    levels, space = GRAPH.levels, GRAPH.space.to_dict()
    records = []
    for step in steps:
        acc = {c: _accuracy(step, lv) for c, lv in levels.items()}
        records.append({
            "step": step, "images_seen": step * 64, "chance": 0.125, "concept_space": space,
            "training_classes": ["000", "001", "010", "100"], "levels": levels, "accuracy": acc,
            "additive_accuracy": {c: (1 + a) / 2 for c, a in acc.items()},
            "prob_product_accuracy": {c: a**2 for c, a in acc.items()},
            "concept_accuracy": {c: {v: a * (k + 1) / len(space) for k, v in enumerate(space)} for c, a in acc.items()},
            "level_accuracy": {str(k): 0.5 for k in set(levels.values())}, **extra,
        })
    return records


def _fake_log(path, steps=STEPS) -> list[dict]:
    records = _records(steps)
    Path(path).write_text("".join(json.dumps(record) + "\n" for record in records))
    return records


def _series(records, metric, name, smoothing=1):
    return moving_average([r[metric][name] for r in records], smoothing)


@pytest.fixture
def saved(monkeypatch):
    """``{file name: Figure}`` of every figure saved while the test runs (still written as a PNG)."""
    figures = {}
    original = figures_module.save_figure

    def capture(fig, path, *args, **kwargs):
        figures[Path(path).name] = fig
        original(fig, path, *args, **kwargs)

    monkeypatch.setattr(plots_module, "save_figure", capture)  # plots.py binds the helper at import
    monkeypatch.setattr(figures_module, "save_figure", capture)  # emergence.py imports it when it plots
    return figures


def _assert_png(path, min_width=300):
    with Image.open(path) as image:
        assert image.format == "PNG" and image.size[0] >= min_width and image.size[1] >= 200


def _legend(ax) -> list[str]:
    return [text.get_text() for text in ax.get_legend().get_texts()]


def _labelled(ax) -> list[str]:
    """Labels of the lines that carry one (matplotlib names the others ``_child<N>``)."""
    return [line.get_label() for line in ax.get_lines() if not line.get_label().startswith("_")]


def _check_learning_dynamics(fig, records, metric, smoothing, x, log_x, x_label):
    (ax,) = fig.axes
    assert ax.get_title() == f"{metric.replace('_', ' ')} per class"
    assert (ax.get_xlabel(), ax.get_ylabel()) == (x_label, metric.replace("_", " "))
    assert ax.get_xscale() == ("log" if log_x else "linear")
    assert ax.get_ylim() == pytest.approx((-0.03, 1.03))
    lines = ax.get_lines()
    assert len(lines) == len(BY_LEVEL) + 1  # one per class, then the chance line
    for line, name in zip(lines, BY_LEVEL, strict=False):
        np.testing.assert_allclose(line.get_xdata(), x)
        np.testing.assert_allclose(line.get_ydata(), _series(records, metric, name, smoothing))
        assert line.get_color() == level_color(GRAPH.levels[name])
    chance = lines[-1]
    assert chance.get_linestyle() == ":" and set(chance.get_ydata()) == {0.125}
    assert _legend(ax) == ["level 0", "level 1", "level 2", "chance"] == _labelled(ax)
    assert sorted(text.get_text() for text in ax.texts) == sorted(BY_LEVEL)  # each curve names its class


def test_cli_writes_every_plot_with_its_data(tmp_path, saved):
    records = _fake_log(tmp_path / "log.jsonl")
    samples = tmp_path / "samples"
    samples.mkdir()
    for step in (0, 10):
        np.savez(samples / f"samples_step{step:08d}.npz", images=np.zeros((8, 28, 28, 3), np.uint8),
                 classes=np.array([GRAPH.format(c) for c in GRAPH.nodes]), step=step)
    main([str(tmp_path / "log.jsonl"), "--output_dir", str(tmp_path / "plots"), "--samples_dir", str(samples),
          "--smoothing", "2"])
    names = sorted(p.name for p in (tmp_path / "plots").iterdir())
    pngs = [
        "concept_accuracy.png", "concept_graph.png", "emergence_order.png", "learning_dynamics.png",
        "learning_dynamics_additive.png", "multiplicative_vs_additive.png", "samples.png"]
    assert names == sorted([*pngs, "emergence.md"])
    assert sorted(saved) == pngs  # every PNG went through the save helper, and is the figure checked here
    for name in pngs:
        _assert_png(tmp_path / "plots" / name, min_width=150)

    # The smoothing reaches the curves, and each learning-dynamics plot plots its own metric.
    _check_learning_dynamics(saved["learning_dynamics.png"], records, "accuracy", 2, STEPS, True, "step")
    _check_learning_dynamics(saved["learning_dynamics_additive.png"], records, "additive_accuracy", 2, STEPS, True,
                             "step")
    (ax,) = saved["multiplicative_vs_additive.png"].axes
    np.testing.assert_allclose(ax.get_lines()[0].get_ydata(), _series(records, "accuracy", "111", 2))

    # The final accuracy colours the concept graph, and the title gives its step.
    graph_ax = saved["concept_graph.png"].axes[0]
    assert graph_ax.get_title() == "final accuracy at step 1000 (squares: training)"
    shown = {text.get_text() for text in graph_ax.texts}
    assert {f"{a:.2f}" for a in records[-1]["accuracy"].values()} <= shown

    # Emergence order: classes by level on x, the first step over the threshold on a log y axis.
    report = emergence_report(records)
    (ax,) = saved["emergence_order.png"].axes
    assert ax.get_yscale() == "log"
    assert ax.get_xlabel() == "class (ordered by level)"
    assert ax.get_ylabel() == "first step with accuracy >= 0.9"
    assert [label.get_text() for label in ax.get_xticklabels()] == BY_LEVEL
    assert _legend(ax) == ["level 0", "level 1", "level 2"]
    never = ax.get_lines()[0].get_ydata()[0]  # the "never" line, twice the latest step known
    known = [row[key] for row in report["classes"].values() for key in ("measured_step", "predicted_step") if row[key]]
    assert never == 2 * max(known)
    measured = [collection.get_offsets()[0] for collection in ax.collections[::2]]
    for x, (point, name) in enumerate(zip(measured, BY_LEVEL, strict=True)):
        assert tuple(point) == (x, report["classes"][name]["measured_step"] or never)

    # The sample grid: one row per class, one column per evaluation step.
    grid = saved["samples.png"]
    assert len(grid.axes) == len(GRAPH.nodes) * 2
    assert [ax.get_title() for ax in grid.axes[:2]] == ["0", "10"]


def test_learning_dynamics_against_images_seen_on_a_linear_axis(tmp_path, saved):
    records = _records()
    plot_learning_dynamics(records, tmp_path / "a.png", log_x=False, x_key="images_seen")
    _assert_png(tmp_path / "a.png")
    _check_learning_dynamics(saved["a.png"], records, "accuracy", 1, [s * 64 for s in STEPS], False, "images seen")


def test_learning_dynamics_of_a_fine_tuning_run_marks_where_it_starts(tmp_path, saved):
    records = _records(phase_start_step=100)
    plot_learning_dynamics(records, tmp_path / "ft.png", metric="prob_product_accuracy", title="fine-tuned")
    (ax,) = saved["ft.png"].axes
    assert ax.get_title() == "fine-tuned" and ax.get_ylabel() == "prob product accuracy"
    assert ax.get_xscale() == "log" and ax.get_xlim()[0] == 10  # starts at the first positive step
    boundary = ax.get_lines()[-1]
    assert boundary.get_label() == "fine-tuning starts" and set(boundary.get_xdata()) == {100}
    assert _legend(ax) == ["level 0", "level 1", "level 2", "chance", "fine-tuning starts"]
    np.testing.assert_allclose(ax.get_lines()[0].get_ydata(), _series(records, "prob_product_accuracy", "000"))


def test_learning_dynamics_refuses_no_records_and_a_missing_x(tmp_path):
    with pytest.raises(ValueError, match="no records"):
        plot_learning_dynamics([], tmp_path / "b.png")
    records = _records()
    del records[1]["images_seen"]
    with pytest.raises(ValueError, match="images_seen"):
        plot_learning_dynamics(records, tmp_path / "b.png", x_key="images_seen")
    assert not (tmp_path / "b.png").exists()


@pytest.mark.parametrize("concept_class", [None, "011"])
def test_multiplicative_vs_additive_plots_the_three_accuracies_of_one_class(tmp_path, saved, concept_class):
    records = _records()
    plot_multiplicative_vs_additive(records, tmp_path / "m.png", concept_class=concept_class, smoothing=3)
    name = concept_class or "111"  # the default: the first class of the highest level
    (ax,) = saved["m.png"].axes
    assert ax.get_title() == f"class {name} (level {GRAPH.levels[name]})"
    assert (ax.get_xlabel(), ax.get_ylabel(), ax.get_xscale()) == ("step", "accuracy", "log")
    assert _legend(ax) == ["multiplicative", "additive", "probability product"] == _labelled(ax)
    lines = ax.get_lines()
    assert [line.get_linestyle() for line in lines] == ["-", "--", ":"]
    for line, metric in zip(lines, ("accuracy", "additive_accuracy", "prob_product_accuracy"), strict=True):
        np.testing.assert_allclose(line.get_xdata(), STEPS)
        np.testing.assert_allclose(line.get_ydata(), _series(records, metric, name, 3))
        assert line.get_color() == level_color(GRAPH.levels[name])
    with pytest.raises(ValueError, match="unknown class"):
        plot_multiplicative_vs_additive(records, tmp_path / "x.png", concept_class="222")


def test_concept_accuracy_has_a_panel_per_class_and_a_curve_per_concept(tmp_path, saved):
    records = _records()
    plot_concept_accuracy(records, tmp_path / "c.png", log_x=False)
    fig = saved["c.png"]
    concepts = list(GRAPH.space.to_dict())
    names = list(GRAPH.levels)
    assert len(fig.axes) == 8  # 2 rows of 4, all used
    for ax, name in zip(fig.axes, names, strict=True):
        assert ax.get_title() == f"{name} (level {GRAPH.levels[name]})"
        assert mcolors.same_color(ax.title.get_color(), level_color(GRAPH.levels[name]))
        assert (ax.get_xlabel(), ax.get_ylabel(), ax.get_xscale()) == ("step", "accuracy", "linear")
        assert _labelled(ax) == concepts
        for line, concept in zip(ax.get_lines(), concepts, strict=True):
            np.testing.assert_allclose(line.get_xdata(), STEPS)
            np.testing.assert_allclose(line.get_ydata(), [r["concept_accuracy"][name][concept] for r in records])
    assert _legend(fig.axes[0]) == concepts
    assert all(ax.get_legend() is None for ax in fig.axes[1:])  # one legend for the figure


def test_concept_accuracy_turns_off_the_unused_panels(tmp_path, saved):
    records = _records()
    for record in records:  # a log of five classes: two rows of four panels, three of them empty
        for key in ("levels", "concept_accuracy"):
            record[key] = {name: record[key][name] for name in BY_LEVEL[:5]}
    plot_concept_accuracy(records, tmp_path / "c.png")
    axes = saved["c.png"].axes
    assert len(axes) == 8
    assert [ax.axison for ax in axes] == [True] * 5 + [False] * 3
    assert [ax.get_title() for ax in axes[:5]] == [f"{n} (level {GRAPH.levels[n]})" for n in BY_LEVEL[:5]]
    assert axes[0].get_xscale() == "log"


def test_concept_graph_draws_every_node_and_edge_coloured_by_accuracy(tmp_path, saved):
    cube4 = get_split_preset("H42-train1").graph()
    names = [cube4.format(c) for c in cube4.nodes]
    accuracy = {name: i / (len(names) - 1) for i, name in enumerate(names)}
    plot_concept_graph(cube4, tmp_path / "cube4.png", accuracy=accuracy)
    _assert_png(tmp_path / "cube4.png")
    fig = saved["cube4.png"]
    ax, colorbar = fig.axes
    assert colorbar.get_ylabel() == "accuracy"
    assert ax.get_title() == "concept graph shape, color, size, background (squares: training)"
    assert len(ax.get_lines()) == len(cube4.edges) == 32
    nodes = ax.collections
    assert len(nodes) == len(names) == 16
    viridis = plt.get_cmap("viridis")
    for collection, node, name in zip(nodes, cube4.nodes, names, strict=True):
        np.testing.assert_allclose(collection.get_facecolors()[0], viridis(accuracy[name]))
        training = node in cube4.training_classes
        assert collection.get_linewidths()[0] == (3.0 if training else 0.8)  # training classes: thick outline
    texts = [text.get_text() for text in ax.texts]
    assert sorted(texts[::2]) == sorted(names)  # each node: its name, then its accuracy
    assert texts[1::2] == [f"{accuracy[name]:.2f}" for name in names]
    # Every edge joins two nodes that differ in one concept: its ends are those nodes' positions.
    positions = {tuple(np.round(collection.get_offsets()[0], 6)) for collection in nodes}
    for line in ax.get_lines():
        assert {tuple(np.round(point, 6)) for point in line.get_xydata()} <= positions


def test_concept_graph_without_accuracy_has_white_nodes_and_no_colour_bar(tmp_path, saved):
    plot_concept_graph(GRAPH, tmp_path / "g.png", title="the graph")
    (ax,) = saved["g.png"].axes
    assert ax.get_title() == "the graph"
    assert len(ax.get_lines()) == len(GRAPH.edges) == 12 and len(ax.collections) == 8
    assert all(mcolors.same_color(c.get_facecolors()[0], "white") for c in ax.collections)
    assert sorted(text.get_text() for text in ax.texts) == sorted(GRAPH.levels)


def test_sample_grid_puts_each_class_in_its_row_and_each_step_in_its_column(tmp_path, saved):
    names = ["000", "011", "111"]
    samples = []
    for column, step in enumerate((0, 10, 20, 30)):
        order = names if column % 2 == 0 else names[::-1]  # a later evaluation may list the classes in another order
        images = np.stack([np.full((4, 4, 3), 10 * column + names.index(n), np.uint8) for n in order])
        samples.append((step, images, np.array(order)))
    plot_sample_grid(samples, tmp_path / "s.png", max_columns=3)
    fig = saved["s.png"]
    kept = [0, 20, 30]  # three columns spread over the four evaluations (linspace 0, 1.5, 3, rounded to even)
    axes = np.array(fig.axes).reshape(len(names), len(kept))
    assert [ax.get_title() for ax in axes[0]] == [str(step) for step in kept]
    assert [ax.get_ylabel() for ax in axes[:, 0]] == names
    for row, name in enumerate(names):
        for column, step in enumerate(kept):
            (image,) = axes[row, column].get_images()
            assert np.all(image.get_array() == 10 * (step // 10) + names.index(name))
    with pytest.raises(ValueError, match="no samples"):
        plot_sample_grid([], tmp_path / "t.png")


def test_moving_average():
    np.testing.assert_allclose(moving_average([0, 2, 4, 6], 2), [0, 1, 3, 5])
    np.testing.assert_allclose(moving_average([1, 2, 3], 1), [1, 2, 3])
    np.testing.assert_allclose(moving_average([3, 6, 9, 12], 3), [3, 4.5, 6, 9])


def test_concept_accuracy_draws_the_pixel_scorers_concepts_dashed_where_logged(tmp_path, saved):
    """Where the pixel scorer logs its per-concept accuracy, its curve goes beside the probes' (dashed), so that a
    class whose shape only one scorer rejects shows which (issue 40, item 2)."""
    records = _records()
    for record in records:
        record["pixel_concept_accuracy"] = {name: {c: 0.5 * v for c, v in values.items()}
                                            for name, values in record["concept_accuracy"].items()}
    plot_concept_accuracy(records, tmp_path / "c.png", log_x=False)
    ax = saved["c.png"].axes[0]
    name, concepts = list(GRAPH.levels)[0], list(GRAPH.space.to_dict())
    dashed = [line for line in ax.get_lines() if line.get_linestyle() == "--"]
    assert len(dashed) == len(concepts)
    np.testing.assert_allclose(dashed[0].get_ydata(), [r["pixel_concept_accuracy"][name][concepts[0]]
                                                       for r in records])
    assert _legend(ax) == [label for c in concepts for label in (c, f"{c} (pixel scorer)")]
