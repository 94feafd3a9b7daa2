"""A study run in parts (``--seeds``, ``--models``; issue 42, case 11): the summary of every part is the whole grid's,
and the results folder merges parts run in different directories into arms over every part's seeds."""

import shutil

import pytest
from conftest import reset_accelerate_state
from test_study_changes import spec

from compgen.analysis.results_folder import write_results
from compgen.studies import Study, run_study

pytestmark = pytest.mark.usefixtures("single_thread")
EVALUATED = {"eval_steps": 2, "eval_images_per_class": 2, "eval_inference_steps": 2,
             "mixed_precision": "no"}


def _run(study, out, seeds):
    reset_accelerate_state()
    return run_study(study, out, progress=False, seeds=seeds)


def _finals(arms):
    (arm,) = arms.values()
    return arm["probes"]["0"]["final"]


def test_parts_by_seed_add_up_in_the_summary_and_in_the_results_folder(tmp_path):
    flags = {k: v for k, v in spec()["flags"].items() if k != "no_eval"} | EVALUATED
    study = Study.from_dict(spec(seeds=[0, 1], flags=flags))
    first = _run(study, tmp_path / "seed0", [0])
    assert [c["status"] for c in first["cells"]] == ["ok", "not run"] and len(_finals(first["arms"])) == 1
    _run(study, tmp_path / "seed1", [1])
    merged = write_results([tmp_path / "seed0", tmp_path / "seed1"], tmp_path / "folder", machine="test")
    assert len(_finals(merged["studies"]["s"]["arms"])) == 2  # was: the last part's seed only

    shutil.copytree(tmp_path / "seed0", tmp_path / "both")
    both = _run(study, tmp_path / "both", [1])
    assert [c["status"] for c in both["cells"]] == ["finished before", "ok"]
    assert len(_finals(both["arms"])) == 2  # was: the summary of seed 1 alone
