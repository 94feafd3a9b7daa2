import math

import numpy as np
import pytest

from compgen.evaluation.emergence import (
    critical_time,
    emergence_probability,
    emergence_report,
    fit_rate,
    plot_toy_model,
)


def test_critical_time_is_first_step_above_threshold():
    for n in (1, 2, 3, 5):
        t_star = critical_time(n, 0.01, 0.9)
        assert emergence_probability(n, t_star, 0.01) >= 0.9
        assert emergence_probability(n, t_star - 1, 0.01) < 0.9
    # more composed concepts emerge later, logarithmically
    times = [critical_time(n, 0.01) for n in range(1, 6)]
    assert times == sorted(times) and times[-1] - times[-2] < times[1] - times[0]
    assert critical_time(1, 0.5, 0.75) == math.ceil(math.log(0.25) / math.log(0.5))


def test_fit_rate_recovers_p():
    steps = np.arange(0, 2000, 50)
    curve = 0.5 + 0.5 * (1 - (1 - 0.003) ** steps)
    assert fit_rate(steps, curve, chance=0.5) == pytest.approx(0.003, rel=0.02)


def _record(step, rates):
    levels = {"00": 0, "01": 1, "10": 0, "11": 1}
    space = {"a": ["x", "y"], "b": ["x", "y"]}
    concept = {c: {v: 0.5 + 0.5 * (1 - (1 - rates[c][v]) ** step) for v in space} for c in levels}
    accuracy = {c: concept[c]["a"] * concept[c]["b"] for c in levels}
    return {"step": step, "concept_space": space, "training_classes": ["00", "10"], "levels": levels,
            "concept_accuracy": concept, "accuracy": accuracy,
            "level_accuracy": {"0": (accuracy["00"] + accuracy["10"]) / 2, "1": (accuracy["01"] + accuracy["11"]) / 2}}


def test_emergence_report_predicts_measured_steps():
    rates = {"00": {"a": 0.05, "b": 0.05}, "10": {"a": 0.05, "b": 0.05},
             "01": {"a": 0.05, "b": 0.005}, "11": {"a": 0.05, "b": 0.005}}
    records = [_record(step, rates) for step in range(0, 2001, 10)]
    report = emergence_report(records, threshold=0.9)
    for level in ("0", "1"):
        predicted, measured = report["levels"][level]["predicted_step"], report["levels"][level]["measured_step"]
        assert predicted is not None and abs(predicted - measured) <= 10
    assert report["levels"]["1"]["measured_step"] > report["levels"]["0"]["measured_step"]


def test_emergence_order_plot_marks_classes_that_never_got_there(tmp_path):
    from PIL import Image

    from compgen.evaluation.emergence import plot_emergence_order

    rates = {"00": {"a": 0.05, "b": 0.05}, "10": {"a": 0.05, "b": 0.05},
             "01": {"a": 0.05, "b": 0.0}, "11": {"a": 0.05, "b": 0.0}}
    report = emergence_report([_record(step, rates) for step in range(0, 501, 10)], threshold=0.9)
    assert report["classes"]["11"]["measured_step"] is None and report["classes"]["00"]["measured_step"] is not None
    plot_emergence_order(report, tmp_path / "order.png")
    with Image.open(tmp_path / "order.png") as image:
        assert image.format == "PNG" and image.size[0] > 200


def test_toy_plot_is_png(tmp_path):
    from PIL import Image

    plot_toy_model(tmp_path / "toy.png")
    with Image.open(tmp_path / "toy.png") as image:
        assert image.format == "PNG" and image.size[0] > 500
