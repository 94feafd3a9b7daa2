"""Aggregation of several runs' learning-dynamics logs into a comparison report."""

import numpy as np
import pytest

from compgen.evaluation.compare import comparison_markdown, mean_curves, summarize_arm, write_comparison_report


def make_run(level2: list[float], steps=(100, 200, 300, 400)) -> list[dict]:
    """Hand-made records: level 0 always 1.0, level 2 as given (JSON-style string keys)."""
    return [{"step": s, "level_accuracy": {"0": 1.0, "2": v}} for s, v in zip(steps, level2, strict=True)]


def test_summary_final_best_and_first_steps():
    runs = [make_run([0.0, 0.6, 0.95, 0.7]), make_run([0.1, 0.2, 0.4, 0.3])]
    summary = summarize_arm(runs, thresholds=(0.5, 0.9))
    level2 = summary[2]
    assert level2.final == [0.7, 0.3]
    assert level2.best == [0.95, 0.4]
    assert level2.first_step[0.5] == [200, None]
    assert level2.first_step[0.9] == [300, None]
    assert level2.final_text() == "0.500 +- 0.283"  # sample standard deviation over the two seeds
    assert level2.first_step_text(0.5) == "200 / never"  # each seed's evaluation step, never an average of them
    assert summary[0].first_step_text(0.9) == "100 / 100"
    assert summarize_arm([make_run([0.0] * 4)])[2].first_step_text(0.5) == "never"
    assert summarize_arm([make_run([0.2] * 4)])[2].final_text() == "0.200"  # one seed: its value


def test_a_level_that_rose_then_collapsed_is_flagged_per_seed():
    """The H100 curve of 111 on compgen's earlier data: drawn for a while, then blank (peak and final apart)."""
    runs = [make_run([0.0, 0.66, 0.3, 0.0]), make_run([0.0, 0.6, 0.9, 0.95]), make_run([0.0, 0.1, 0.4, 0.0])]
    summary = summarize_arm(runs)[2]
    assert summary.collapsed == [True, False, False]  # the third never reached the 0.5 peak of a collapse
    assert summary.collapse_text() == "1/3"
    row = next(line for line in comparison_markdown({"arm": runs}).splitlines() if line.startswith("| 2 |"))
    assert row.endswith("| 1/3 |")


def test_markdown_has_one_row_per_level_and_arm():
    arms = {"maskgit": [make_run([0.0, 0.1, 0.1, 0.0])], "maskgit+jepa": [make_run([0.0, 0.5, 0.9, 0.8])]}
    text = comparison_markdown(arms, title="t")
    rows = [line for line in text.splitlines() if line.startswith("| 2 |")]
    assert [row.split(" | ")[1] for row in rows] == ["maskgit", "maskgit+jepa"]
    assert "| 0.800 |" in rows[1] and "| 200 | 300 |" in rows[1]


def test_mean_curves_use_common_steps():
    runs = [make_run([0.0, 0.2, 0.4, 0.6]), make_run([0.2, 0.4, 0.6], steps=(100, 200, 300))]
    steps, mean, std = mean_curves(runs, 2)
    np.testing.assert_array_equal(steps, [100, 200, 300])
    np.testing.assert_allclose(mean, [0.1, 0.3, 0.5])
    np.testing.assert_allclose(std, [0.1 * np.sqrt(2)] * 3)  # sample standard deviation of two runs


def test_report_files(tmp_path):
    arms = {"a": [make_run([0.0, 0.5, 1.0, 1.0])], "b": [make_run([0.0, 0.0, 0.5, 0.5])] * 2}
    text = write_comparison_report(arms, tmp_path / "report", title="A vs B", notes="note here")
    assert (tmp_path / "report" / "README.md").read_text() == text
    assert (tmp_path / "report" / "learning_dynamics.png").stat().st_size > 1000
    assert "note here" in text


def test_empty_inputs_are_errors():
    with pytest.raises(ValueError, match="at least one run"):
        summarize_arm([])
    with pytest.raises(ValueError, match="no evaluation records"):
        summarize_arm([[]])


def test_many_arms_wrap_into_rows(tmp_path, monkeypatch):
    """Five arms with at most four columns give a 2 x 4 grid whose three unused panels are hidden."""
    from matplotlib import pyplot

    from compgen.evaluation.compare import plot_comparison

    created = []
    original = pyplot.subplots

    def recording_subplots(*args, **kwargs):
        fig, axes = original(*args, **kwargs)
        created.append(axes)
        return fig, axes

    monkeypatch.setattr(pyplot, "subplots", recording_subplots)
    arms = {f"arm {i}": [make_run([0.0, 0.1 * i, 0.2, 0.3])] for i in range(5)}
    plot_comparison(arms, tmp_path / "grid.png", max_columns=4)
    assert (tmp_path / "grid.png").stat().st_size > 1000
    (axes,) = created
    assert axes.shape == (2, 4)
    assert [ax.get_visible() for ax in axes.ravel()] == [True] * 5 + [False] * 3
    assert axes[1][0].get_title() == "arm 4 (1 seed)"


def test_every_summary_reads_the_first_step_at_a_threshold_the_same_way():
    """One helper (``compgen.evaluation.curves.first_step_at``) behind model cards, study comparisons, results
    folders and the toy model: the first step at or above the threshold, a later dip does not matter."""
    from compgen.evaluation.curves import first_step_at
    from compgen.evaluation.emergence import first_crossing

    steps, values = [0, 250, 500, 750], [0.2, 0.9, 0.5, 1.0]
    assert first_step_at(steps, values, 0.9) == 250 and first_step_at(steps, values, 1.01) is None
    assert first_crossing(steps, values, 0.9) == 250.0
    with pytest.raises(ValueError, match="one value per step"):
        first_step_at(steps, values[:2], 0.5)


def test_fisher_exact_p_and_the_headline_measures():
    """Ten seeds cannot tell 3 held from 1 (p 0.582); a run's headline read with and without the fidelity."""
    from compgen.evaluation.compare import fisher_exact_p, headline_measures

    assert fisher_exact_p(3, 10, 1, 10) == 0.582 and fisher_exact_p(10, 10, 0, 10) < 0.001
    record = {"step": 800, "level_accuracy": {"0": 1.0, "2": 1.0}, "pixel_level_accuracy": {"0": 1.0, "2": 0.95},
              "fidelity_level": {"0": 0.86, "2": 0.73}}
    measures = headline_measures([record | {"step": s} for s in (600, 700, 800)])
    assert measures["held"] is False and measures["held_without_fidelity"] is True
    assert measures["held_by_probes_only"] is True and measures["steps"] == [600, 700, 800]
    no_fidelity = {k: v for k, v in record.items() if k != "fidelity_level"}
    assert headline_measures([no_fidelity] * 3)["held"] is None


def test_holm_adjusts_a_folders_family_of_comparisons():
    """Issue 77, item 3: one comparison at p 0.0198 among eleven is about 0.22 after Holm's step-down correction;
    adjusted p-values keep their keys or order, stay monotone in the raw ones and never exceed 1."""
    from compgen.evaluation.statistics import holm_adjusted

    family = [0.0198] + [0.5] * 10
    assert holm_adjusted(family)[0] == 0.2178 and holm_adjusted(family)[1:] == [1.0] * 10
    assert holm_adjusted({"a": 0.01, "b": 0.04, "c": 0.03}) == {"a": 0.03, "b": 0.06, "c": 0.06}
    assert holm_adjusted([0.2]) == [0.2] and holm_adjusted([]) == []
    with pytest.raises(ValueError, match=r"in \[0, 1\]"):
        holm_adjusted([0.1, float("nan")])


def test_a_verdict_within_the_measured_spread_of_its_bar_is_on_the_bar():
    from compgen.evaluation.statistics import BAR_VERDICTS, bar_verdict

    assert bar_verdict(0.754, 0.75, spread=0.005) == "on the bar"  # a value inside its measured spread
    assert bar_verdict(0.80, 0.75, spread=0.005) == "holds" and bar_verdict(0.70, 0.75, spread=0.005) == "fails"
    assert bar_verdict(0.2, 0.25, spread=0.01, above=False) == "holds"
    assert {bar_verdict(v, 0.5, 0.1) for v in (0.0, 0.5, 1.0)} == set(BAR_VERDICTS)
    with pytest.raises(ValueError, match="spread >= 0"):
        bar_verdict(0.5, 0.5, spread=-0.1)
