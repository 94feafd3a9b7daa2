"""The toy model fitted to learning dynamics (Paper A, Sec. 4, Fig. 7): known rates are recovered from curves simulated
with them, and a run whose classes are products of their concept curves is predicted exactly."""

import json

import numpy as np
import pytest

from compgen.analysis.toy_model_fit import main, toy_model_fit
from compgen.evaluation.emergence import concept_curve

SPACE = {"shape": ["circle", "triangle"], "color": ["red", "blue"], "size": ["large", "small"]}
LEVELS = {"000": 0, "001": 0, "010": 0, "100": 0, "011": 1, "101": 1, "110": 1, "111": 2}


def simulated_records(rates: dict[str, dict[str, float]], steps=range(50, 2001, 50)) -> list[dict]:
    """Tracker records whose per-concept accuracy follows the toy model with ``rates`` and whose multiplicative
    accuracy is the product of those curves (concepts learned independently)."""
    records = []
    for step in steps:
        concept = {name: {c: float(concept_curve(np.array([step]), rates[name][c], 0.5)[0]) for c in SPACE}
                   for name in LEVELS}
        accuracy = {name: float(np.prod(list(values.values()))) for name, values in concept.items()}
        records.append({"step": step, "concept_space": SPACE, "levels": LEVELS, "concept_accuracy": concept,
                        "accuracy": accuracy})
    return records


def test_known_rates_are_recovered_and_the_product_is_predicted_exactly():
    rng = np.random.default_rng(0)
    rates = {name: {c: float(10 ** rng.uniform(-3.5, -1.5)) for c in SPACE} for name in LEVELS}
    fit = toy_model_fit(simulated_records(rates))
    for name in LEVELS:
        for concept in SPACE:
            assert fit["rates"][name][concept] == pytest.approx(rates[name][concept], rel=0.03)
    for row in fit["levels"].values():
        assert row["rmse"] < 0.01
    assert fit["levels"]["2"]["classes"] == ["111"] and fit["steps"][0] == 50


def test_a_rise_the_concept_curves_do_not_explain_shows_as_error():
    """Concept curves that stay at chance while the class is drawn right: the prediction misses by the gap."""
    records = simulated_records({name: dict.fromkeys(SPACE, 1e-6) for name in LEVELS})
    for record in records:
        record["accuracy"]["111"] = 1.0
    assert toy_model_fit(records)["levels"]["2"]["rmse"] == pytest.approx(1 - 0.125, abs=0.01)


def test_the_command_writes_the_fit_and_refuses_what_is_no_log(tmp_path):
    log = tmp_path / "learning_dynamics.jsonl"
    log.write_text("".join(json.dumps(r) + "\n" for r in simulated_records(
        {name: dict.fromkeys(SPACE, 0.01) for name in LEVELS})))
    fits = main([str(log), "--output", str(tmp_path / "out")])
    assert set(fits) == {tmp_path.name}
    assert json.loads((tmp_path / "out" / "toy_model_fit.json").read_text()) == fits
    assert (tmp_path / "out" / f"toy_model_fit_{tmp_path.name}.png").stat().st_size > 1000
    with pytest.raises(SystemExit):
        main([str(tmp_path / "missing.jsonl"), "--output", str(tmp_path / "out")])
    with pytest.raises(ValueError, match="per-concept"):
        toy_model_fit([{"step": 1, "levels": LEVELS, "concept_space": SPACE, "accuracy": {}}])


def test_the_prediction_is_also_held_against_the_pixel_scorer_where_the_log_has_it():
    """The rates come from the probes' concept curves; the predicted level curve is compared with both scorers'
    measured accuracy, so a pixel scorer that disagrees shows as its own error."""
    records = simulated_records({name: dict.fromkeys(SPACE, 0.01) for name in LEVELS})
    assert "rmse_pixel" not in toy_model_fit(records)["levels"]["2"]
    for record in records:
        record["pixel_accuracy"] = dict(record["accuracy"]) | {"111": 0.0}
    level = toy_model_fit(records)["levels"]["2"]
    assert level["rmse"] < 0.01 and level["measured_pixel"] == [0.0] * len(records)
    assert level["rmse_pixel"] == pytest.approx(np.sqrt(np.mean(np.square(level["predicted"]))), abs=1e-3)
    assert level["final_error_pixel"] == pytest.approx(level["predicted"][-1], abs=1e-4)


@pytest.mark.parametrize("content", ["", "{not json\n", "[1, 2]\n", '{"step": 1}\n', "{torn\n" + "{}\n"])
def test_an_empty_torn_or_foreign_log_is_refused_before_any_output(tmp_path, capsys, content):
    """Issue 42, case 18: tracebacks after the output folder was made; now a usage error naming the log."""
    log = tmp_path / "run" / "learning_dynamics.jsonl"
    log.parent.mkdir()
    log.write_text(content)
    with pytest.raises(SystemExit) as exit_info:
        main([str(log), "--output", str(tmp_path / "out")])
    assert exit_info.value.code == 2 and str(log) in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_two_logs_of_one_name_are_refused_not_overwritten(tmp_path, capsys):
    """Issue 42, case 19: ``a/run/learning_dynamics.jsonl`` and ``b/run/...`` were fitted under one name."""
    lines = "".join(json.dumps(r) + "\n" for r in simulated_records({n: dict.fromkeys(SPACE, 0.01) for n in LEVELS}))
    for parent in ("a", "b"):
        (tmp_path / parent / "run").mkdir(parents=True)
        (tmp_path / parent / "run" / "learning_dynamics.jsonl").write_text(lines)
    with pytest.raises(SystemExit):
        main([str(tmp_path / p / "run" / "learning_dynamics.jsonl") for p in ("a", "b")]
             + ["--output", str(tmp_path / "out")])
    assert "two logs would be fitted under one name, 'run'" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_a_fine_tuning_log_is_fitted_on_its_own_phase():
    """Issue 42, case 7: the source's records (another graph's levels) are not mixed into the fit."""
    source = [r | {"phase": "source", "levels": {**LEVELS, "111": 1}} for r in simulated_records(
        {n: dict.fromkeys(SPACE, 1e-6) for n in LEVELS}, steps=range(10, 41, 10))]
    own = [r | {"phase": "fine-tune", "phase_start_step": 40} for r in simulated_records(
        {n: dict.fromkeys(SPACE, 0.01) for n in LEVELS}, steps=range(50, 2001, 50))]
    fit = toy_model_fit(source + own)
    assert fit["steps"][0] == 50 and fit["levels"]["2"]["rmse"] < 0.01
