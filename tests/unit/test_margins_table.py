"""The margins table (``docs/test_margins.md``) is current and every threshold in it is comfortable.

``benchmarks/learning_margins.py`` measured each ``check_margin`` of the tests that learn over seeds and kernel
paths; this holds its record to the tests as they are now (the same tests, the same checks and thresholds) and to the
rule: the worst value at least twice the spread over runs from its threshold.
"""

import ast
import json

import pytest
from repo_scripts import REPO_ROOT, load_repo_script

RECORD = REPO_ROOT / "benchmarks" / "results" / "test_margins.json"
TABLE = REPO_ROOT / "docs" / "test_margins.md"


@pytest.fixture(scope="module")
def measured():
    return json.loads(RECORD.read_text())


@pytest.fixture(scope="module")
def margins_script():
    return load_repo_script("benchmarks/learning_margins.py")


def test_every_test_that_checks_a_margin_was_measured(measured, margins_script):
    assert sorted(measured["meta"]["tests"]) == sorted(margins_script.margin_tests())
    assert measured["meta"]["seeds"] >= 3 and set(measured["meta"]["variants"]) == {"native", "avx2"}


def test_every_threshold_is_the_tests_and_twice_its_spread_away(measured):
    thresholds = {}
    for path in sorted((REPO_ROOT / "tests").rglob("test_*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "check_margin":
                for keyword in node.keywords:
                    thresholds.setdefault(keyword.arg, set()).add(ast.literal_eval(keyword.value))
    for row in measured["table"]:
        assert row["threshold"] in thresholds[row["direction"]], row["name"]
        assert row["runs"] >= measured["meta"]["seeds"] * len(measured["meta"]["variants"]), row["name"]
        assert row["worst_distance"] > 0 and row["worst_distance"] >= 2 * row["spread"], row
        assert row["comfortable"]


def test_the_table_is_written_from_the_record(measured, margins_script, tmp_path):
    margins_script.write_table(measured["table"], measured["meta"], tmp_path / "table.md")
    assert TABLE.read_text() == (tmp_path / "table.md").read_text()


def test_an_untrained_value_fails_the_rule(margins_script):
    """The rule is not vacuous: a check whose runs straddle their threshold, or sit closer than twice their spread,
    is outside it."""
    records = [dict(name="x", value=v, threshold=0.5, direction="below", variant="native") for v in (0.1, 0.2, 0.45)]
    assert not margins_script.summarise(records)[0]["comfortable"]
    records = [dict(name="x", value=v, threshold=0.5, direction="below", variant="native") for v in (0.1, 0.11, 0.12)]
    assert margins_script.summarise(records)[0]["comfortable"]
