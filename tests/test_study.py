"""The study runner: the smoke grid end to end, finished cells skipped on a rerun, a failing cell reported while the
others run, and study files checked before any work."""

import json
from pathlib import Path

import pytest
from conftest import reset_accelerate_state
from repo_scripts import REPO_ROOT, load_repo_script

from compgen.studies import CONDITIONING_MODES, Study, run_study
from compgen.studies.cells import flags_to_argv

pytestmark = pytest.mark.usefixtures("single_thread")


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    out = tmp_path_factory.mktemp("smoke")
    reset_accelerate_state()
    summary = load_repo_script("examples/run_study.py").main(["--smoke", "--output_dir", str(out), "--parallel", "1"])
    return out, summary


def test_smoke_grid_runs_every_token_model_under_every_conditioning_mode(smoke):
    out, summary = smoke
    cells = summary["cells"]
    assert len(cells) == 12 and all(c["status"] == "ok" for c in cells)
    assert {c["arm"] for c in cells} == {f"{m} ({c}) on smoke-h32" for m in ("maskgit", "maskgit-jepa", "dit")
                                         for c in CONDITIONING_MODES}
    assert all(c["last_step"] == 2 for c in cells)
    text = (out / "summary.md").read_text()
    assert "## probes" in text and "## pixel statistics" in text and "first step >= 0.9" in text
    assert (out / "plots" / "overlay_probes.png").is_file()
    assert set(json.loads((out / "summary.json").read_text())["arms"]) == {c["arm"] for c in cells}
    # One tokenizer, shared: every cell's pipeline decodes through it.
    dropout_cell = next(c for c in cells if c["arm"] == "dit (quantized+dropout) on smoke-h32")
    config = json.loads((Path(dropout_cell["output_dir"]) / "transformer" / "config.json").read_text())
    assert config["conditioning"] == "quantized" and config["concept_dropout"] == 0.1


def test_a_rerun_skips_finished_cells(smoke):
    out, _ = smoke
    study = Study.from_file(REPO_ROOT / "studies" / "smoke.yaml")
    reset_accelerate_state()
    summary = run_study(study, out, progress=False)
    assert all(c["status"] == "finished before" for c in summary["cells"])


def test_a_failing_cell_is_reported_and_the_others_run(tmp_path):
    study = Study.from_dict({
        "name": "one-bad-cell",
        "datasets": [{"name": "tiny", "split_preset": "H32-train1", "images_per_class": 16,
                      "test_images_per_class": 2}],
        "seeds": [0],
        "steps": 2,
        "flags": {"block_out_channels": "8,16", "train_batch_size": 8, "no_eval": True},
        "models": {"unet": {"script": "examples/train_tuple_unet.py"},
                   "unet-bad-lr": {"script": "examples/train_tuple_unet.py", "flags": {"learning_rate": -1}}},
    })
    reset_accelerate_state()
    summary = run_study(study, tmp_path, progress=False)
    status = {c["arm"]: c["status"] for c in summary["cells"]}
    assert status == {"unet (full) on tiny": "ok", "unet-bad-lr (full) on tiny": "failed"}
    assert "failed: `unet-bad-lr/full/tiny/seed0`" in (tmp_path / "summary.md").read_text()


@pytest.mark.parametrize("change, message", [
    ({"conditioning": ["full", "half"]}, "unknown conditioning modes"),
    ({"colour": "red"}, "unknown study keys"),
    ({"models": {"x": {"script": "examples/nope.py"}}}, "no script"),
    ({"models": {"x": {"script": "examples/train_dit.py", "tokens": True}}}, "no tokenizer"),
    ({"steps": 0}, "steps must be a positive integer"),
    ({"datasets": [{"name": "..", "split_preset": "H32-train1"}]}, "give a plain name"),
    ({"datasets": [{"name": ".", "split_preset": "H32-train1"}]}, "give a plain name"),
    ({"datasets": [{"name": "a/b", "split_preset": "H32-train1"}]}, "give a plain name"),
])
def test_study_files_are_checked_before_any_work(change, message):
    spec = {"name": "s", "seeds": [0], "steps": 2, "models": {"u": {"script": "examples/train_tuple_unet.py"}}}
    with pytest.raises(ValueError, match=message):
        Study.from_dict(spec | change)


def test_flags_become_argv():
    assert flags_to_argv({"preset": "cpu-quick", "use_ema": False, "no_eval": True, "x": None}) == [
        "--preset", "cpu-quick", "--no_use_ema", "--no_eval"]


@pytest.mark.parametrize("path", sorted((REPO_ROOT / "studies").glob("*.yaml")), ids=lambda p: p.name)
def test_every_study_file_names_only_options_its_recipes_have(path, tmp_path, capsys):
    """A typo in a study file would fail every cell hours into a run; every flag must be one its recipe's parser
    (and the tokenizer's) knows."""
    from compgen.train import main as train

    study = Study.from_file(path)
    commands = [cell.command for cell in study.cells(tmp_path)] + study.tokenizer_commands(tmp_path)
    assert commands, path
    known: dict[str, str] = {}
    for command in commands:
        script = command[0]
        if script not in known:
            capsys.readouterr()
            with pytest.raises(SystemExit):
                train([script, "--help"])
            known[script] = capsys.readouterr().out
        for token in command[1:]:
            if token.startswith("--"):
                assert f"{token} " in known[script] or f"{token}\n" in known[script] or f"[{token}]" in known[script], (
                    f"{path.name}: {script} has no option {token}")


def test_a_model_may_name_its_own_conditioning_modes(tmp_path):
    """Paper B's two factors in one grid: every objective under full conditioning, one model under all four modes."""
    study = Study.from_dict({
        "name": "factors", "seeds": [0, 1], "steps": 2, "conditioning": ["full"],
        "models": {"unet": {"script": "examples/train_tuple_unet.py"},
                   "unet-grid": {"script": "examples/train_tuple_unet.py", "conditioning": list(CONDITIONING_MODES)}},
    })
    cells = study.cells(tmp_path)
    on = " on okawa-h32-train1"
    assert sorted({c.arm for c in cells}) == sorted(
        [f"unet (full){on}"] + [f"unet-grid ({m}){on}" for m in CONDITIONING_MODES])
    assert len(cells) == 2 * (1 + 4)
    dropped = next(c for c in cells if c.arm == f"unet-grid (quantized+dropout){on}").command
    assert dropped[dropped.index("--conditioning") + 1] == "quantized"
    assert float(dropped[dropped.index("--concept_dropout") + 1]) == study.dropout
    with pytest.raises(ValueError, match="unknown conditioning modes"):
        Study.from_dict({"name": "x", "seeds": [0], "steps": 1,
                         "models": {"u": {"script": "examples/train_tuple_unet.py", "conditioning": ["partial"]}}})


def test_a_study_tokenizer_may_train_on_a_dataset_of_its_own(tmp_path):
    """One tokenizer for every cell, trained on a dataset the study defines (e.g. all eight classes), exported once
    next to the study's datasets; each token cell decodes through it."""
    all_classes = [f"{s}{c}{z}" for s in "01" for c in "01" for z in "01"]
    study = Study.from_dict({
        "name": "shared-tokenizer", "seeds": [0], "steps": 2, "datasets": ["okawa-h32-train1"],
        "tokenizer": {"script": "examples/train_vq_tokenizer.py",
                      "dataset": {"name": "h32-all-classes", "split_preset": "H32-train1",
                                  "training_classes": all_classes}},
        "models": {"maskgit": {"script": "examples/train_maskgit_jepa.py", "tokens": True}},
    })
    (command,) = study.tokenizer_commands(tmp_path)
    assert command[command.index("--dataset") + 1] == str(tmp_path / "data" / "h32-all-classes")
    assert command[command.index("--dataset_config") + 1] == "h32-all-classes"
    (cell,) = study.cells(tmp_path)
    assert cell.command[cell.command.index("--dataset") + 1] == "okawa-h32-train1"
    assert cell.command[cell.command.index("--tokenizer_path") + 1] == command[command.index("--output_dir") + 1]
    with pytest.raises(ValueError, match="tokenizer has unknown keys"):
        Study.from_dict({"name": "x", "seeds": [0], "steps": 1, "tokenizer": {"script": "s", "data": "d"},
                         "models": {"u": {"script": "examples/train_tuple_unet.py"}}})


def test_named_tokenizers_each_train_once_and_serve_the_models_that_name_them(tmp_path):
    """``tokenizers:`` holds several tokenizers (e.g. VQ and KL on every class, VQ on the training classes); a model's
    ``tokens: <name>`` decodes through that one, each trained once per dataset into its own directory."""
    study = Study.from_dict({
        "name": "three-tokenizers", "seeds": [0, 1], "steps": 2, "datasets": ["okawa-h32-train1"],
        "tokenizers": {"vq": {"script": "examples/train_vq_tokenizer.py"},
                       "kl": {"script": "examples/train_vq_tokenizer.py", "flags": {"tokenizer": "kl"}},
                       "vq-train": {"script": "examples/train_vq_tokenizer.py",
                                    "flags": {"tokenizer_data": "training-classes"}}},
        "models": {"maskgit": {"script": "examples/train_maskgit_jepa.py", "tokens": "vq"},
                   "dit-kl": {"script": "examples/train_dit.py", "tokens": "kl", "flags": {"tokenizer": "kl"}},
                   "dit-cap": {"script": "examples/train_dit.py", "tokens": "vq-train"}},
    })
    runs = {run.tokenizer: run for run in study.tokenizer_runs(tmp_path)}
    assert sorted(runs) == ["kl", "vq", "vq-train"]
    assert len({run.output_dir for run in runs.values()}) == 3
    assert runs["kl"].command[runs["kl"].command.index("--tokenizer") + 1] == "kl"
    assert "--tokenizer_data" in runs["vq-train"].command
    assert runs["vq-train"].name == "tokenizer vq-train okawa-h32-train1"
    for cell in study.cells(tmp_path):
        tokenizer = {"maskgit": "vq", "dit-kl": "kl", "dit-cap": "vq-train"}[cell.model]
        assert cell.command[cell.command.index("--tokenizer_path") + 1] == str(runs[tokenizer].output_dir)
        assert json.loads(cell.identity)["tokenizer"]["flags"] == study.tokenizers[tokenizer].get("flags", {})


def test_the_paper_b_grid_has_a_smoke_version_of_the_same_arms():
    """``run_study.py --study studies/paper_b_grid.yaml --smoke``: the grid's arms and tokenizers, tiny, one seed."""
    from compgen.studies.smoke import smoke_study

    grid = Study.from_file(REPO_ROOT / "studies" / "paper_b_grid.yaml")
    smoke = smoke_study(grid)
    smoke.validate("smoke")
    assert grid.seeds == [0, 1, 2] and smoke.seeds == [0] and smoke.steps == 2
    assert [c.arm.split(" on ")[0] for c in smoke.cells(Path("x"))] == [c.arm.split(" on ")[0]
                                                                         for c in grid.cells(Path("x"))][::3]
    assert sorted(run.tokenizer for run in smoke.tokenizer_runs(Path("x"))) == ["kl", "vq", "vq-training-classes"]
    assert smoke.datasets == [{"split_preset": "H32-train1", "images_per_class": 16, "test_images_per_class": 2,
                               "tokenizer_images_per_class": 16, "name": "smoke-okawa-h32-train1"}]


def test_a_two_cell_study_with_two_tokenizers_runs_end_to_end(tmp_path):
    """The DiT over a KL tokenizer of every class and MaskGIT over a training-classes VQ tokenizer: each cell decodes
    through its own tokenizer, and the summary reports both tokenizers per class by both scorers with their data."""
    from compgen.studies.smoke import smoke_study

    study = smoke_study(Study.from_dict({
        "name": "two", "seeds": [0], "steps": 2, "datasets": ["okawa-h32-train1"],
        "tokenizers": {"kl": {"script": "../examples/train_vq_tokenizer.py", "flags": {"tokenizer": "kl"}},
                       "vq-train": {"script": "../examples/train_vq_tokenizer.py",
                                    "flags": {"tokenizer_data": "training-classes"}}},
        "models": {"dit-kl": {"script": "../examples/train_dit.py", "tokens": "kl", "flags": {"tokenizer": "kl"}},
                   "maskgit-cap": {"script": "../examples/train_maskgit_jepa.py", "tokens": "vq-train",
                                   "flags": {"jepa_weight": 0}}},
    }, base_dir=REPO_ROOT / "studies"))
    reset_accelerate_state()
    part = run_study(study, tmp_path / "study", progress=False, models=["dit-kl"])  # trains the KL tokenizer alone
    assert [c["status"] for c in part["cells"]] == ["ok", "not run"] and list(part["tokenizers"]) == [
        "tokenizer kl smoke-okawa-h32-train1"]
    reset_accelerate_state()
    summary = run_study(study, tmp_path / "study", progress=False)
    assert [c["status"] for c in summary["cells"]] == ["finished before", "ok"]
    tokenizers = summary["tokenizers"]
    assert {name: entry["tokenizer_data"] for name, entry in tokenizers.items()} == {
        "tokenizer kl smoke-okawa-h32-train1": "all-classes",
        "tokenizer vq-train smoke-okawa-h32-train1": "training-classes"}
    assert all(set(entry["classes"]["111"]) == {"probes", "pixel scorer"} for entry in tokenizers.values())
    dit, maskgit = (Path(c["output_dir"]) for c in summary["cells"])
    assert json.loads((dit / "model_index.json").read_text())["vae"][1] == "AutoencoderKL"
    assert "Trained on: training-classes" in (maskgit / "README.md").read_text()
    assert "## Reconstruction accuracy of tokenizer kl" in (tmp_path / "study" / "summary.md").read_text()


def test_a_part_of_the_grid_runs_only_the_models_and_seeds_named():
    """``run_study.py --models ... --seeds ...``: the cells of those only; a name or seed the study lacks is refused."""
    from compgen.studies.orchestration import part_cells

    spec = {"name": "s", "seeds": [0, 1, 2], "steps": 2, "models": {
        "u": {"script": "examples/train_tuple_unet.py"}, "v": {"script": "examples/train_tuple_unet.py"}}}
    study = Study.from_dict(spec)
    out = Path("out")
    assert sorted({(c.model, c.seed) for c in part_cells(study, out, ["v"], [2, 1])}) == [("v", 1), ("v", 2)]
    assert part_cells(study, out) == study.cells(out)
    with pytest.raises(ValueError, match=r"--seeds \[5\]: not seeds of the study"):
        part_cells(study, out, seeds=[5])
    with pytest.raises(ValueError, match=r"--models \['w'\]: not models"):
        part_cells(study, out, models=["w"])
    # Issue 42, case 6: a fine-tuning model alone brings its source (skipped once finished), not a StopIteration.
    spec["models"]["ft"] = {"script": "examples/train_tuple_unet.py", "init_from": "u", "steps": 2}
    study = Study.from_dict(spec)
    assert [(c.model, c.seed) for c in part_cells(study, out, ["ft"], [1])] == [("u", 1), ("ft", 1)]
