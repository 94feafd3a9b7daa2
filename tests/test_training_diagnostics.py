"""A run's training scalars beneath its accuracy (compgen.analysis.training_diagnostics)."""

from __future__ import annotations

import json

import pytest

from compgen.analysis import training_diagnostics
from compgen.analysis.training_diagnostics import layer_keys, plot_training_diagnostics, summarize_diagnostics


def scalars():
    return [{"step": step, "loss": 5.0 / step, "ce": 4.0 / step, "jepa": 1.0, "jepa_layer_2": 1.0,
             "jepa_layer_10": 1.0, **({"grad_norm_ratio": 0.01 * step, "jepa_target_spread_2": 0.9,
                                      "jepa_target_spread_10": 0.5 + 0.01 * step} if step % 20 == 0 else {})}
            for step in range(10, 101, 10)]


def test_layer_keys_sort_by_layer_and_windows_take_medians():
    assert layer_keys(scalars(), "jepa_layer_") == ["jepa_layer_2", "jepa_layer_10"]
    rows = summarize_diagnostics(scalars(), [(1, 50), (51, 100)])
    assert rows[0]["records"] == 5 and rows[0]["grad_norm_ratio"] == pytest.approx(0.3)  # steps 20, 40
    assert rows[0]["ce"] == pytest.approx(4.0 / 30, abs=1e-6)  # rounded to six decimals
    assert rows[1]["min_target_spread"] == pytest.approx(0.9)  # min over layers (0.9 vs 1.1-1.5), median over steps
    assert summarize_diagnostics(scalars(), [(200, 300)]) == [{"steps": [200, 300], "records": 0}]


def test_plot_and_command(tmp_path):
    record = {"step": 50, "level_accuracy": {"0": 1.0, "1": 0.5, "2": 0.0},
              "pixel_level_accuracy": {"0": 1.0, "1": 0.4, "2": 0.0}}
    plot_training_diagnostics([record], scalars(), tmp_path / "d.png", title="t")
    assert (tmp_path / "d.png").stat().st_size > 0
    with pytest.raises(ValueError, match="no training scalars"):
        plot_training_diagnostics([record], [], tmp_path / "e.png")
    run = tmp_path / "run"
    run.mkdir()
    with pytest.raises(SystemExit):  # no training log: named
        training_diagnostics.main([str(run), "--output", str(tmp_path / "f.png")])
    (run / "training_log.jsonl").write_text("".join(json.dumps(r) + "\n" for r in scalars()))
    training_diagnostics.main([str(run), "--output", str(tmp_path / "f.png")])  # no evaluations: losses alone
    assert (tmp_path / "f.png").stat().st_size > 0


def test_a_weighted_cross_entropy_gives_the_ratio_the_optimizer_sees():
    """With ``--cross_entropy_warmup_steps`` the log holds ``ce_weight``; the JEPA term's gradient against the weighted
    cross-entropy's is the logged ratio over the weight (at weight 0.1, ten times the logged ratio)."""
    from compgen.analysis.training_diagnostics import effective_ratio

    weighted = [row | {"ce_weight": 0.1} for row in scalars()]
    rows = summarize_diagnostics(weighted, [(1, 50)])
    assert rows[0]["effective_grad_norm_ratio"] == pytest.approx(3.0) and rows[0]["grad_norm_ratio"] == 0.3
    assert "effective_grad_norm_ratio" not in summarize_diagnostics(scalars(), [(1, 50)])[0]
    assert effective_ratio({"grad_norm_ratio": 0.2, "ce_weight": 0.0}) == float("inf")
    assert effective_ratio({"ce": 1.0}) is None
    # With the cross-entropy off (``--cross_entropy_delay_steps``) there is no ratio: such records are counted.
    delayed = [row | {"ce_weight": 0.0 if row["step"] <= 20 else 0.1} for row in scalars()]
    row = summarize_diagnostics(delayed, [(1, 50)])[0]
    assert row["cross_entropy_off_records"] == 1  # step 20; step 40's ratio 0.4 at weight 0.1 is the median
    assert row["effective_grad_norm_ratio"] == pytest.approx(4.0)
