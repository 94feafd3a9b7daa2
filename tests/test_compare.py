"""Aggregation of several runs' learning-dynamics logs into a comparison report."""

import numpy as np
import pytest
from repo_scripts import load_repo_script

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
    assert level2.final_text() == "0.500 +- 0.200"
    assert level2.first_step_text(0.5) == "200 (1/2 seeds)"
    assert summary[0].first_step_text(0.9) == "100"
    assert summarize_arm([make_run([0.0] * 4)])[2].first_step_text(0.5) == "never"


def test_markdown_has_one_row_per_level_and_arm():
    arms = {"maskgit": [make_run([0.0, 0.1, 0.1, 0.0])], "maskgit+jepa": [make_run([0.0, 0.5, 0.9, 0.8])]}
    text = comparison_markdown(arms, title="t")
    rows = [line for line in text.splitlines() if line.startswith("| 2 |")]
    assert [row.split(" | ")[1] for row in rows] == ["maskgit", "maskgit+jepa"]
    assert "0.800 +- 0.000" in rows[1] and "| 200 | 300 |" in rows[1]


def test_mean_curves_use_common_steps():
    runs = [make_run([0.0, 0.2, 0.4, 0.6]), make_run([0.2, 0.4, 0.6], steps=(100, 200, 300))]
    steps, mean, std = mean_curves(runs, 2)
    np.testing.assert_array_equal(steps, [100, 200, 300])
    np.testing.assert_allclose(mean, [0.1, 0.3, 0.5])
    np.testing.assert_allclose(std, [0.1, 0.1, 0.1])


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



def write_finished_run(run_dir, level2: float) -> None:
    """What the compare script reads of a finished training run: its pipeline index and its log."""
    import json

    run_dir.mkdir(parents=True)
    (run_dir / "model_index.json").write_text("{}")
    records = make_run([0.0, 0.0, 0.0, level2])
    (run_dir / "learning_dynamics.jsonl").write_text("".join(json.dumps(record) + "\n" for record in records))


def level2_rows(report_dir) -> dict[str, str]:
    text = (report_dir / "README.md").read_text()
    return {line.split(" | ")[1]: line for line in text.splitlines() if line.startswith("| 2 |")}


def test_compare_script_reports_ablation_arms(tmp_path):
    """--report_only aggregates the reference arms and every --arm from their run directories (slug-seedS)."""
    script = load_repo_script("examples/compare_maskgit_jepa.py")
    runs = tmp_path / "runs"
    for run_name, level2 in [("maskgit-seed0", 0.1), ("maskgit-seed1", 0.2), ("jepa-seed0", 0.3),
                             ("jepa-seed1", 0.4), ("jepa-layers-3-seed0", 0.9)]:
        write_finished_run(runs / run_name, level2)
    script.main(["--seeds", "2", "--arm_seeds", "1", "--runs_dir", str(runs), "--report_dir", str(tmp_path / "rep"),
                 "--report_only", "--arm", "JEPA layers {3}", "--jepa_layers 3"])
    rows = level2_rows(tmp_path / "rep")
    assert list(rows) == ["MaskGIT", "MaskGIT + JEPA (lambda 0.6)", "JEPA layers {3}"]
    assert "0.150 +- 0.050" in rows["MaskGIT"] and "| 1 |" in rows["JEPA layers {3}"]
    assert "JEPA layers {3}: `--jepa_layers 3`" in (tmp_path / "rep" / "README.md").read_text()
    assert script.arm_slug("JEPA, lambda 0.3") == "jepa-lambda-0.3"
    with pytest.raises(SystemExit, match="run directory name"):
        script.arm_slug("JEPA")


def test_compare_script_with_zero_reference_seeds_reports_the_arms_alone(tmp_path):
    script = load_repo_script("examples/compare_maskgit_jepa.py")
    runs = tmp_path / "runs"
    write_finished_run(runs / "jepa-block-masks-seed0", 0.6)
    script.main(["--seeds", "0", "--arm_seeds", "1", "--runs_dir", str(runs), "--report_dir", str(tmp_path / "rep"),
                 "--report_only", "--arm", "JEPA block masks", "--mask_type block"])
    assert list(level2_rows(tmp_path / "rep")) == ["JEPA block masks"]
    with pytest.raises(SystemExit, match="no runs requested"):
        script.main(["--seeds", "0", "--runs_dir", str(runs), "--report_dir", str(tmp_path / "rep"), "--report_only"])



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
