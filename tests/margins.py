"""The margins of the tests that train something and check that it learned (``docs/test_margins.md``).

A check of "a tiny model learns" asserts a threshold on a trained quantity (a loss, an error, an accuracy). The value
it meets depends on the seed and on the machine's rounding (an AMD EPYC and an Intel Xeon take other kernels and so
other trajectories), so every such threshold is measured: :func:`check_margin` asserts it and, when
``COMPGEN_MARGIN_LOG`` names a file, appends the value there; :func:`margin_seed` lets
``benchmarks/learning_margins.py`` run each test with other seeds (``COMPGEN_MARGIN_SEED``, an offset added to the
test's own seed; 0, the default, is the test as it always runs). ``tests/unit/test_margins_table.py`` holds the
recorded table to the rule: the worst seed at least twice the spread over seeds away from its threshold.
"""

from __future__ import annotations

import json
import os

MARGIN_LOG = "COMPGEN_MARGIN_LOG"
MARGIN_SEED = "COMPGEN_MARGIN_SEED"


def margin_seed(seed: int = 0) -> int:
    """The test's seed ``seed``, offset by ``COMPGEN_MARGIN_SEED`` when the margins are being measured."""
    return seed + int(os.environ.get(MARGIN_SEED, "0"))


def check_margin(name: str, value: float, *, below: float | None = None, above: float | None = None) -> None:
    """Assert ``value < below`` (or ``value > above``) and record it under ``name`` when margins are measured."""
    if (below is None) == (above is None):
        raise ValueError("check_margin takes exactly one of below= and above=")
    path = os.environ.get(MARGIN_LOG)
    if path:
        threshold, direction = (below, "below") if below is not None else (above, "above")
        record = dict(name=name, value=float(value), threshold=threshold, direction=direction,
                      seed_offset=int(os.environ.get(MARGIN_SEED, "0")),
                      variant=os.environ.get("COMPGEN_MARGIN_VARIANT", "native"))
        with open(path, "a") as log:
            log.write(json.dumps(record) + "\n")
    if below is not None:
        assert value < below, f"{name}: {value} is not below {below}"
    else:
        assert value > above, f"{name}: {value} is not above {above}"
