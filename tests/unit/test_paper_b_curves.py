"""Paper B's digitised curves and the overlay of compgen's runs on them (compgen.analysis.paper_b_curves)."""

import json

import numpy as np
import pytest

from compgen.analysis import paper_b_curves as overlay

CLASSES = ["000", "001", "010", "100", "011", "101", "110", "111"]
ALL_SCORES = tuple(overlay.SCORES.values())


def _records(value_of, steps=(250, 500, 1000, 2000, 4000, 8000, 10000), batch=64, keys=ALL_SCORES):
    """Tracker-like records whose every score of class c at step s is ``value_of(c, s)``."""
    return [{"step": s, "images_seen": s * batch,
             **{key: {c: value_of(c, s) for c in CLASSES} for key in keys}} for s in steps]


def test_paper_b_points_are_the_two_figures_as_digitised():
    plain, jepa = overlay.paper_b_curves("maskgit"), overlay.paper_b_curves("maskgit_jepa")
    assert sorted(plain) == sorted(jepa) == sorted(CLASSES)
    assert len(plain["111"]["step"]) == 58 and len(jepa["111"]["step"]) == 48  # 111 in full in both
    assert [len(plain[c]["step"]) for c in ("000", "011")] == [6, 11]
    assert {plain[c]["level"] for c in ("011", "101", "110")} == {1} and plain["111"]["level"] == 2
    for curves in (plain, jepa):
        for entry in curves.values():
            assert np.all(np.diff(entry["step"]) > 0)
            # every reading was snapped to a multiple of 1/64 and rounded to 3 decimals
            assert np.abs(entry["accuracy"] * 64 - np.round(entry["accuracy"] * 64)).max() < 64 * 5e-4 + 1e-9
    assert jepa["111"]["step"][0] == pytest.approx(1600)


def test_agreement_is_zero_on_paper_b_own_curve_and_signed_otherwise():
    paper = overlay.paper_b_curves("maskgit")

    def paper_value(name, step):  # Paper B's curve itself, interpolated in log step as agreement does
        return float(np.interp(np.log(step), np.log(paper[name]["step"]), paper[name]["accuracy"]))

    steps = sorted({float(s) for entry in paper.values() for s in entry["step"]})
    same = overlay.agreement(_records(paper_value, steps=steps), "maskgit", "probes")
    assert all(entry["mean_absolute_difference"] == pytest.approx(0, abs=1e-4) for entry in same.values())
    higher = overlay.agreement(_records(lambda c, s: min(1.0, paper_value(c, s) + 0.1), steps=steps), "maskgit",
                               "lenient")
    assert higher["111"]["mean_difference"] == pytest.approx(0.1, abs=1e-3)  # 111 never reaches 0.9 in Paper B
    assert higher["111"]["points"] == 58
    # only Paper B's steps inside the run's evaluated range are compared
    short = overlay.agreement(_records(lambda c, s: 0.5, steps=(1000, 3000)), "maskgit", "probes")
    assert short["111"]["points"] == 2 and short["111"]["steps"][0] >= 1000


def test_a_log_without_the_lenient_score_is_refused_by_name():
    records = _records(lambda c, s: 1.0, keys=("accuracy", "pixel_accuracy"))
    with pytest.raises(ValueError, match="lenient_accuracy.*rescore"):
        overlay.agreement(records, "maskgit", "lenient")
    with pytest.raises(ValueError, match="unknown score"):
        overlay.run_curve(records, "fid", "111")
    with pytest.raises(ValueError, match="unknown Paper B figure"):
        overlay.paper_b_curves("givt")


def test_the_command_draws_both_axes_and_writes_the_agreement(tmp_path):
    log = tmp_path / "run.jsonl"
    log.write_text("".join(json.dumps(r) + "\n" for r in _records(lambda c, s: 0.25 if c == "111" else 0.9)))
    result = overlay.main([str(log), "--output_dir", str(tmp_path / "figures"), "--paper_batch_size", "32"])
    written = sorted(p.name for p in (tmp_path / "figures").iterdir())
    assert written == ["paper_b_maskgit_agreement.json", "paper_b_maskgit_overlay_images_seen.png",
                       "paper_b_maskgit_overlay_step.png"]
    saved = json.loads((tmp_path / "figures" / "paper_b_maskgit_agreement.json").read_text())
    assert saved["paper_batch_size"] == 32 and saved["runs"] == json.loads(json.dumps(result))
    assert set(result["run"]) == set(overlay.SCORES)
    with pytest.raises(SystemExit):
        overlay.main([str(log), "--output_dir", str(tmp_path / "x"), "--paper_batch_size", "0"])
    with pytest.raises(SystemExit):
        overlay.main([str(tmp_path / "missing.jsonl"), "--output_dir", str(tmp_path / "x")])
    assert not (tmp_path / "x").exists()  # refused before anything was written
