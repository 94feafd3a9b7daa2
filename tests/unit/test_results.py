"""Results folders hold their claims to their data: every number a results README quotes is in its summary.json, and
every file it names exists."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from compgen.analysis.results_folder import run_summary, unbacked_numbers

REPO = Path(__file__).resolve().parents[2]
RESULTS = sorted(path.parent for path in (REPO / "results").glob("*/README.md"))
PATH_ROOTS = ("examples/", "studies/", "src/", "results/", "docs/", "benchmarks/", "dataset_scripts/", "pipelines/",
              "tests/", "figures/", "logs/", "samples/")


def _records(level2: list[float], pixel2: list[float] | None = None) -> list[dict]:
    pixel2 = pixel2 or level2
    return [{"step": 100 * (i + 1), "level_accuracy": {"0": 1.0, "2": a}, "pixel_level_accuracy": {"0": 1.0, "2": b},
             "accuracy": {"000": 1.0, "111": a}, "pixel_accuracy": {"000": 1.0, "111": b},
             "levels": {"000": 0, "111": 2}, "wall_clock_s": 10.0 * (i + 1)}
            for i, (a, b) in enumerate(zip(level2, pixel2, strict=True))]


def test_a_run_summary_gives_final_best_first_step_and_the_collapse_by_both_scorers():
    summary = run_summary(_records([0.2, 0.95, 0.5, 0.1], pixel2=[0.0, 0.4, 0.3, 0.1]))
    probes, pixel = summary["levels"]["2"]["probes"], summary["levels"]["2"]["pixel statistics"]
    assert probes == {"final": 0.1, "best": 0.95, "best_step": 200, "first_step_0.9": 200, "rose_then_collapsed": True}
    assert pixel["first_step_0.9"] is None and pixel["rose_then_collapsed"] is False  # never rose to 0.5
    assert summary["final_per_class"]["111"] == {"probes": 0.1, "pixel statistics": 0.1, "level": 2}
    assert summary["last_step"] == 400 and summary["wall_clock_s"] == 40.0
    assert summary["first_evaluation_step"] == 100


def test_a_run_trained_in_parts_whose_clock_restarted_reports_the_sum_of_its_parts():
    """Checkpoints written before they carried the wall clock resume it at 0: the summary adds the parts up."""
    records = _records([0.2, 0.5, 0.9, 1.0, 1.0])
    for record, clock in zip(records, (10.0, 20.0, 5.0, 15.0, 25.0), strict=True):
        record["wall_clock_s"] = clock
    summary = run_summary(records)
    assert (summary["wall_clock_s"], summary["wall_clock_parts"]) == (45.0, 2)
    assert "wall_clock_parts" not in run_summary(_records([0.2, 1.0]))


def test_a_run_evaluated_from_a_late_step_says_where_its_evaluations_start():
    """A run with ``--eval_start_step 600``: its first step at 0.9 is its first evaluation, and the summary says that
    nothing before it is known."""
    records = _records([1.0, 1.0, 1.0])
    for record, step in zip(records, (600, 700, 800), strict=True):
        record["step"] = step
    summary = run_summary(records)
    assert summary["levels"]["2"]["probes"]["first_step_0.9"] == summary["first_evaluation_step"] == 600


def test_numbers_a_readme_quotes_must_be_in_the_summary_at_their_precision():
    summary = {"runs": {"a": {"final": 0.6267, "steps": 2000, "command": "train.py --max_train_steps 7800"}}}
    assert unbacked_numbers("final 0.63 (0.6267) after 2000 steps; 7800 in the command", summary) == []
    # A mean over seeds the summary does not hold, and a figure from elsewhere, are caught.
    assert unbacked_numbers("mean 0.47, first step 833, level 2 at 0.62", summary) == ["0.47", "833", "0.62"]
    assert unbacked_numbers("dates and ids: 2026-11-26, commit d7f9416, widths (32, 64)", {"date": "2026-11-26"}) == []


@pytest.mark.parametrize("folder", RESULTS, ids=[path.name for path in RESULTS])
def test_every_results_readme_is_backed_by_its_summary_and_names_existing_files(folder):
    readme = (folder / "README.md").read_text()
    # summary.json and the other data the folder ships as JSON (e.g. the rows of a sweep).
    data = {str(path.relative_to(folder)): json.loads(path.read_text()) for path in sorted(folder.rglob("*.json"))}
    assert "summary.json" in data
    assert unbacked_numbers(readme, data) == []
    for path in re.findall(r"`([\w./-]+)`", readme):
        if path.startswith(PATH_ROOTS) and not any(c in path for c in "*<>"):
            assert (REPO / path).exists() or (folder / path).exists(), f"{folder.name}/README.md names {path}"


def test_the_check_would_have_caught_the_misstated_paper_b_statistics_and_pointers():
    """What the Paper B page once said: a mean of per-seed first steps (833), population standard deviations
    (0.058 for MaskGIT's level 0), and a rerun command naming a deleted script."""
    folder = REPO / "results" / "paper-b-h32"
    summary = json.loads((folder / "summary.json").read_text())
    assert unbacked_numbers("first step >= 0.5: 833; 0.591 +- 0.058", summary) == ["833", "0.058"]
    assert unbacked_numbers("0.591 +- 0.071, first steps 750 / 750 / 1000", summary) == []
    assert not (REPO / "examples" / "compare_maskgit_jepa.py").exists()  # a README naming it fails the path check


def test_a_study_directory_copied_from_where_it_ran_still_yields_its_cells(tmp_path):
    """A study's summary names each cell by the absolute path it ran in (a cluster's or a GPU machine's /tmp); a copy
    of the study directory elsewhere finds its cells under its own ``cells/``."""
    from compgen.analysis.results_folder import collect_runs

    study = tmp_path / "copied-study"
    cell = study / "cells" / "dit__full__h32__seed0"
    cell.mkdir(parents=True)
    (cell / "learning_dynamics.jsonl").write_text("\n".join(json.dumps(r) for r in _records([0.2, 1.0])) + "\n")
    gone = "/nonexistent/where-it-ran/cells/dit__full__h32__seed0"
    (study / "summary.json").write_text(json.dumps({"cells": [{"output_dir": gone, "command": "train.py"}]}))
    runs = collect_runs([study])
    assert runs == {"dit__full__h32__seed0": {"log": cell / "learning_dynamics.jsonl", "samples": cell / "samples",
                                              "command": "train.py"}}


def test_two_runs_of_one_name_are_refused_and_a_study_name_cannot_leave_the_folder(tmp_path):
    """Two studies whose cells share a name would give one results-folder log for two runs; a study named like a path
    would write its overlays outside ``--output``. Both are refused, naming the problem."""
    from compgen.analysis.results_folder import collect_runs, write_results

    def study(directory: Path, name: str) -> Path:
        cell = directory / "cells" / "dit__full__h32__seed0"
        cell.mkdir(parents=True)
        (cell / "learning_dynamics.jsonl").write_text("\n".join(json.dumps(r) for r in _records([0.2, 1.0])) + "\n")
        (directory / "plots").mkdir()
        (directory / "plots" / "overlay_probes.png").write_bytes(b"png")
        (directory / "summary.json").write_text(json.dumps({"study": name, "steps": 2, "arms": {}, "cells": [
            {"output_dir": str(cell), "command": "train.py"}]}))
        return directory

    first, second = study(tmp_path / "a", "one"), study(tmp_path / "b", "two")
    with pytest.raises(ValueError, match="two runs are named 'dit__full__h32__seed0'"):
        collect_runs([first, second])
    assert len(collect_runs([first, first])) == 1  # the same run given twice is one run
    escaping = study(tmp_path / "c", "../../escaped")
    with pytest.raises(ValueError, match="cannot name files in a results folder"):
        write_results([escaping], tmp_path / "out" / "folder", machine="test")
    assert not (tmp_path / "escaped_overlay_probes.png").exists() and not (tmp_path / "out").exists()


@pytest.mark.parametrize("content", ['{"a": 1}\n', "{torn\n{}\n", "[1]\n"])
def test_a_foreign_or_torn_log_is_a_usage_error_before_anything_is_written(tmp_path, capsys, content):
    """A sibling of issue 42, case 18, in the results-folder command: a traceback after ``logs/`` was made."""
    from compgen.analysis.results_folder import main

    log = tmp_path / "run.jsonl"
    log.write_text(content)
    with pytest.raises(SystemExit) as exit_info:
        main([str(log), "--output", str(tmp_path / "folder"), "--machine", "test"])
    assert exit_info.value.code == 2 and "not a compgen learning-dynamics log" in capsys.readouterr().err
    assert not (tmp_path / "folder").exists()


def test_an_arm_with_no_run_or_a_run_named_twice_is_refused_before_anything_is_written(tmp_path, capsys):
    """``--arm A r r`` would count one run as two seeds (spread 0); ``--arm A`` alone failed after ``logs/``."""
    from compgen.analysis.results_folder import main

    log = tmp_path / "run.jsonl"
    log.write_text(json.dumps(_records([1.0])[0]) + "\n")
    for arm, message in ((["A"], "name its runs"), (["A", "run", "run"], "named twice")):
        with pytest.raises(SystemExit) as exit_info:
            main([str(log), "--output", str(tmp_path / "folder"), "--machine", "test", "--arm", *arm])
        assert exit_info.value.code == 2 and message in capsys.readouterr().err
        assert not (tmp_path / "folder").exists()


def test_paper_a_headline_needs_both_scorers_at_the_last_three_evaluations_and_drawn_objects():
    """Issue 40's criterion: every level >= 0.9 by both scorers at each of the last three evaluations and every
    level's fidelity >= 0.75 at the last; a ghosted level fails it, so does one low evaluation or one scorer."""
    from compgen.evaluation.compare import headline_held

    def record(step, probes=1.0, pixel=1.0, fidelity=0.8):
        return {"step": step, "level_accuracy": {"0": 1.0, "2": probes}, "pixel_level_accuracy": {"0": 1.0, "2": pixel},
                "fidelity_level": {"0": 0.85, "2": fidelity}}

    assert headline_held([record(s) for s in (100, 200, 300, 400)])["held"]
    assert not headline_held([record(100), record(200), record(300)][:2])["held"]  # fewer than three evaluations
    early = headline_held([record(100, pixel=0.2), record(200), record(300), record(400)])  # before the last three
    assert early["held"] and early["steps"] == [200, 300, 400]
    assert not headline_held([record(200, pixel=0.88), record(300), record(400)])["held"]
    ghost = headline_held([record(s, fidelity=0.55) for s in (100, 200, 300)])
    assert not ghost["held"] and ghost["fidelity"]["2"] == 0.55 and ghost["lowest_accuracy"]["2"] == 1.0


EVERY_README = sorted(path.parent for path in (REPO / "results").rglob("README.md"))


@pytest.mark.parametrize("folder", EVERY_README, ids=[str(path.relative_to(REPO / "results")) for path in EVERY_README])
def test_every_count_a_results_readme_states_is_the_count_its_data_give(folder):
    """Each "k of n" in a folder README is covered by a claim in its claims.json whose pointers give k and n."""
    from compgen.analysis.claims import CLAIMS_FILE, claim_problems, load_claims

    readme = (folder / "README.md").read_text()
    assert claim_problems(readme, load_claims(folder / CLAIMS_FILE), folder, REPO) == []


@pytest.mark.parametrize("document", ["README.md", "results/INDEX.md"])
def test_every_count_the_readme_and_the_index_state_is_the_count_a_folder_gives(document):
    from compgen.analysis.claims import claim_problems

    claims = json.loads((REPO / "results" / "claims.json").read_text())["documents"][document]
    assert claim_problems((REPO / document).read_text(), claims, REPO, REPO) == []


def test_a_count_changed_in_a_readme_fails_until_its_data_change(tmp_path):
    from compgen.analysis.claims import claim_problems

    (tmp_path / "distribution.json").write_text(json.dumps({"touching": {"held": {"0": False, "1": True, "2": True},
                                                                         "seeds": [0, 1, 2]}}))
    claims = [{"context": "touching sizes hold 2 of 3",
               "counts": [{"text": "2 of 3", "count": ["distribution.json", "touching", "held"],
                           "of": ["distribution.json", "touching", "seeds"]}]},
              {"context": "{7, 9, 11} of 12", "not_data": "Paper B's layers"}]
    readme = "The touching sizes hold\n2 of 3 seeds. Paper B aligns {7, 9, 11} of 12 layers."
    assert claim_problems(readme, claims, tmp_path, tmp_path) == []
    changed = claim_problems(readme.replace("2 of 3", "3 of 3"), claims, tmp_path, tmp_path)
    assert any("claim context not in the README" in p for p in changed)
    assert any("'3 of 3' has no claim" in p for p in changed)
    claims[0]["context"] = claims[0]["counts"][0]["text"] = "3 of 3"
    assert claim_problems(readme.replace("2 of 3", "3 of 3"), claims, tmp_path, tmp_path) == [
        "'3 of 3' in '3 of 3': the data give 2 of 3"]
    extra = claim_problems(readme + " Another arm holds 1 of 3.", claims[1:], tmp_path, tmp_path)
    assert any("'1 of 3' has no claim" in p for p in extra)


def test_a_decimal_before_of_is_not_a_count():
    from compgen.analysis.claims import COUNT_PATTERN

    assert [m.group(0) for m in COUNT_PATTERN.finditer("up to 0.06 of 50, and 3 of 10, 13 seeds of 20")] == [
        "3 of 10", "13 seeds of 20"]


def test_a_count_with_the_before_its_total_is_read_and_held(tmp_path):
    """Issue 76, case 13: "9 of the 27 cells" edited to "10 of the 27" passed the claims check unread."""
    from compgen.analysis.claims import COUNT_PATTERN, claim_problems

    assert [m.groups() for m in COUNT_PATTERN.finditer("9 of the 27 cells, 3 runs of the 5")] == [
        ("9", "27"), ("3", "5")]
    (tmp_path / "summary.json").write_text(json.dumps({"cpu": list(range(9)), "all": list(range(27))}))
    claims = [{"context": "9 of the 27 cells", "counts": [{"text": "9 of the 27", "count": ["summary.json", "cpu"],
                                                            "of": ["summary.json", "all"]}]}]
    readme = "The CPU has run 9 of the 27 cells."
    assert claim_problems(readme, claims, tmp_path, tmp_path) == []
    assert any("'10 of the 27' has no claim" in problem
               for problem in claim_problems(readme.replace("9 of", "10 of"), claims, tmp_path, tmp_path))


def _folder_data(folder: Path) -> dict:
    return {str(path.relative_to(folder)): json.loads(path.read_text()) for path in sorted(folder.rglob("*.json"))}


def guard_problems(repo: Path) -> list[str]:
    """Every check of what the documents under ``repo`` state: each results README's numbers (present, and the
    run's or arm's its row names), counts ("k of n" and counts in words), Status verdict and summary freshness;
    README.md, results/INDEX.md and docs/ against the folders they cite."""
    from compgen.analysis.attribution import misattributed_numbers
    from compgen.analysis.citations import document_problems, documents, status_problems
    from compgen.analysis.claims import CLAIMS_FILE, claim_problems, load_claims, word_count_problems
    from compgen.analysis.results_folder import stale_runs

    problems = []
    for folder in sorted(path.parent for path in (repo / "results").rglob("README.md")):
        readme, data = (folder / "README.md").read_text(), _folder_data(folder)
        claims = load_claims(folder / CLAIMS_FILE)
        problems += unbacked_numbers(readme, data) if folder.parent.name == "results" else []
        problems += misattributed_numbers(readme, data, folder) + claim_problems(readme, claims, folder, repo)
        problems += word_count_problems(readme, claims, folder, repo) + stale_runs(folder)
        problems += status_problems(folder) if folder.parent.name == "results" else []
    for document in documents(repo):
        problems += document_problems(document, repo)
    return problems


def test_every_number_count_verdict_and_machine_the_documents_state_is_what_their_data_give():
    assert guard_problems(REPO) == []


def _copy_for(tmp_path: Path, mutated: str, old: str, new: str, folders: tuple[str, ...]) -> Path:
    """A repository of ``folders`` (links to the real ones, the mutated file's folder copied) with ``old`` changed
    to ``new`` in ``mutated``."""
    import shutil

    (tmp_path / "results").mkdir(parents=True)
    (tmp_path / "docs").mkdir()
    target = tmp_path / mutated
    for name in folders:
        source = REPO / "results" / name
        if mutated.startswith(f"results/{name}/"):
            shutil.copytree(source, tmp_path / "results" / name, ignore=shutil.ignore_patterns("*.png", "*.gif"))
        else:
            (tmp_path / "results" / name).symlink_to(source)
    if not target.exists():
        shutil.copyfile(REPO / mutated, target)
    text = target.read_text()
    assert old in text, f"{old!r} is no longer in {mutated}: choose another mutation"
    target.write_text(text.replace(old, new, 1))
    return tmp_path


MUTATIONS = {
    # an arm's (here a seed's) numbers swapped for another's of the same JSON
    "swapped row": ("results/paper-b-maskgit-baseline-carried/README.md", "| 0 | 0.58 / 0.54 / 0.8096",
                    "| 0 | 0.26 / 0.24 / 0.8096", ("paper-b-maskgit-baseline-carried",)),
    "p-value": ("results/paper-a-seeds/README.md", "Fisher p 0.6499", "Fisher p 0.0649", ("paper-a-seeds",)),
    "interval in README.md": ("README.md", "a share of 0.31-0.83 at 95%", "a share of 0.41-0.83 at 95%",
                              ("paper-a-sizes",)),
    "verdict word": ("README.md", "misgeneralization not reproduced", "misgeneralization reproduced",
                     ("paper-a-adversarial",)),
    "verdict in a folder": ("results/paper-b-video/README.md", "bf16: not answered", "bf16: answered",
                            ("paper-b-video",)),
    "count in words": ("results/paper-a-h42/README.md", "**Status, three seeds,", "**Status, five seeds,",
                       ("paper-a-h42",)),
    "machine column": ("README.md", "not reproduced: level 2 gradual, the runs jump | EPYC, bf16",
                       "not reproduced: level 2 gradual, the runs jump | Xeon, bf16", ("paper-a-toy-model",)),
    "machine without precision": ("README.md", "the runs jump | EPYC, bf16", "the runs jump | EPYC",
                                  ("paper-a-toy-model",)),
    "docs decimal": ("docs/performance.md", "148.8 s of sampling", "158.8 s of sampling",
                     ("paper-a-quick", "paper-a-cpu-flat-rotated-superseded", "paper-b-h32")),
    "stale summary": ("results/paper-b-maskgit-baseline-carried/summary.json", '"last_step": 20000',
                      '"last_step": 19000', ("paper-b-maskgit-baseline-carried",)),
}


@pytest.mark.parametrize("kind", sorted(MUTATIONS))
def test_each_kind_of_misstatement_made_in_a_copy_fails_the_guard(tmp_path, kind):
    """Issue 77's mutations: each made in a copy of the documents and the data they cite is caught; the same copy
    unchanged passes."""
    mutated, old, new, folders = MUTATIONS[kind]
    assert guard_problems(_copy_for(tmp_path / "unchanged", mutated, old, old, folders)) == []
    assert guard_problems(_copy_for(tmp_path / "mutated", mutated, old, new, folders)) != []
