"""Fine-tuning cells and step counts in studies that really train (issue 42, cases 7, 8 and 9): a fine-tuning graph
with fewer levels than its source's is summarized on its own phase, a source that trains on makes its fine-tuning
cells stale (refused, listed), and a cell trained without evaluation trains on when the study's steps grow."""

import json

import pytest
from conftest import reset_accelerate_state
from test_study_changes import TINY, UNET, spec

from compgen.analysis.results_folder import write_results
from compgen.studies import Study, StudyChangedError, run_study

pytestmark = pytest.mark.usefixtures("single_thread")
EVALUATED = {k: v for k, v in spec()["flags"].items() if k != "no_eval"} | {
    "eval_steps": 2, "eval_images_per_class": 2, "eval_inference_steps": 2, "mixed_precision": "no"}
SEVEN = {"name": "tiny-seven", "training_classes": ["000", "001", "010", "100", "110", "101", "111"],
         "images_per_class": 8, "test_images_per_class": 1}  # 011 held out, one step from 001: levels 0 and 1


def _run(out, **changes):
    reset_accelerate_state()
    return run_study(Study.from_dict(spec(**changes)), out, progress=False)


def test_a_fine_tuning_graph_with_fewer_levels_is_summarized_and_a_grown_source_makes_it_stale(tmp_path):
    models = {"unet": {"script": UNET}, "ft": {"script": UNET, "init_from": "unet", "steps": 2, "datasets": [SEVEN]}}
    summary = _run(tmp_path, flags=EVALUATED, models=models)  # was: KeyError 2, and no summary
    assert [c["status"] for c in summary["cells"]] == ["ok", "ok"]
    arms = {arm: set(stats["probes"]) for arm, stats in summary["arms"].items()}
    assert arms == {"unet (full) on tiny": {"0", "1", "2"}, "ft (full) on tiny-seven": {"0", "1"}}
    folder = write_results([tmp_path], tmp_path / "folder", machine="test")
    assert set(folder["runs"]["ft__full__tiny-seven__seed0"]["levels"]) == {"0", "1"}

    with pytest.raises(StudyChangedError, match="fine-tuned from step 2 of unet/full/tiny/seed0, which now trains "
                                                "to 4"):
        _run(tmp_path, flags=EVALUATED, models=models, steps=4)  # was: the source trained on, ft skipped as finished


def test_a_cell_without_evaluation_trains_on_when_the_steps_grow(tmp_path):
    assert [c["last_step"] for c in _run(tmp_path)["cells"]] == [2]
    grown = _run(tmp_path, steps=4)  # was: "finished before", nothing trained
    assert [(c["status"], c["last_step"]) for c in grown["cells"]] == [("ok", 4)]
    cell = tmp_path / "cells" / "unet__full__tiny__seed0"
    assert json.loads((cell / "export_state.json").read_text()) == {"step": 4, "steps_trained": 4}
    assert TINY["name"] in grown["cells"][0]["dataset"]
