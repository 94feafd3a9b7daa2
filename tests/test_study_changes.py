"""A study notices what changed: an edited study file never lists a cell under options it did not train with, a changed
dataset definition is never served from its old export; repeated names, wrong types, empty grids and flags the study
sets itself are refused before any work, naming the key; paths are the study file's."""

import json

import pytest
import yaml
from conftest import reset_accelerate_state
from repo_scripts import REPO_ROOT, load_repo_script

from compgen.studies import Study, run_study

pytestmark = pytest.mark.usefixtures("single_thread")

UNET = str(REPO_ROOT / "examples" / "train_tuple_unet.py")
TINY = {"name": "tiny", "split_preset": "H32-train1", "images_per_class": 8, "test_images_per_class": 1}


def spec(**changes):
    base = {"name": "s", "seeds": [0], "steps": 2, "datasets": [dict(TINY)],
            "flags": {"block_out_channels": "8,16", "layers_per_block": 1, "train_batch_size": 8, "no_eval": True,
                      "learning_rate": 0.001},
            "models": {"unet": {"script": UNET}}}
    return base | changes


def run(out, **changes):
    reset_accelerate_state()
    return run_study(Study.from_dict(spec(**changes)), out, progress=False)


def train_rows(out, name="tiny") -> int:
    import pyarrow.parquet as pq

    return sum(pq.read_metadata(p).num_rows for p in (out / "data" / name).rglob("train-*.parquet"))


# 4. A rerun after editing the study file.
def test_a_changed_cell_is_refused_with_the_list_and_new_cells_still_run(tmp_path):
    first = run(tmp_path)
    assert [c["status"] for c in first["cells"]] == ["ok"]
    summary, export = (tmp_path / "summary.json").read_text(), (tmp_path / "cells").rglob("*.safetensors")
    weights = {p: p.read_bytes() for p in export}

    with pytest.raises(ValueError, match="changed for runs that already trained") as error:
        run(tmp_path, flags=spec()["flags"] | {"learning_rate": 0.0003})
    assert "unet/full/tiny/seed0" in str(error.value) and "learning_rate 0.001 -> 0.0003" in str(error.value)
    assert "remove their directories" in str(error.value)
    with pytest.raises(ValueError, match="dataset definition"):
        run(tmp_path, datasets=[TINY | {"images_per_class": 12}])
    assert (tmp_path / "summary.json").read_text() == summary  # nothing was touched
    assert all(p.read_bytes() == content for p, content in weights.items())
    assert train_rows(tmp_path) == 8 * 4

    # Adding a seed is no change to the cells that trained: the new one runs, the old one is skipped.
    second = run(tmp_path, seeds=[0, 1])
    assert [c["status"] for c in second["cells"]] == ["finished before", "ok"]


def test_a_changed_dataset_no_cell_trained_on_is_exported_again(tmp_path):
    failed = run(tmp_path, flags=spec()["flags"] | {"learning_rate": -1})  # the cell fails before it trains
    assert [c["status"] for c in failed["cells"]] == ["failed"] and train_rows(tmp_path) == 8 * 4
    fixed = run(tmp_path, datasets=[TINY | {"images_per_class": 12}])
    assert [c["status"] for c in fixed["cells"]] == ["ok"]
    assert train_rows(tmp_path) == 12 * 4  # not the old export
    definition = json.loads((tmp_path / "data" / "tiny.definition.json").read_text())
    assert definition["images_per_class"] == 12


def test_a_study_with_only_failed_cells_exits_nonzero(tmp_path, capsys):
    study = tmp_path / "study.yaml"
    study.write_text(yaml.safe_dump(spec(flags=spec()["flags"] | {"learning_rate": -1})))
    reset_accelerate_state()
    with pytest.raises(SystemExit) as exit_info:
        load_repo_script("examples/run_study.py").main(["--study", str(study), "--output_dir", str(tmp_path / "out"),
                                                        "--parallel", "1"])
    assert exit_info.value.code == 1 and "1 of 1 cells failed" in capsys.readouterr().err
    assert json.loads((tmp_path / "out" / "summary.json").read_text())["cells"][0]["status"] == "failed"


# Paths are the study file's.
def test_paths_in_a_study_file_are_resolved_against_its_directory(tmp_path, monkeypatch):
    (tmp_path / "studies").mkdir()
    (tmp_path / "scripts").mkdir()
    (tmp_path / "scripts" / "train.py").write_text("def main(argv):\n    pass\n")
    (tmp_path / "studies" / "s.yaml").write_text(yaml.safe_dump(spec(models={"m": {"script": "../scripts/train.py"}})))
    monkeypatch.chdir(tmp_path / "scripts")  # anywhere but the study's directory
    (cell,) = Study.from_file(tmp_path / "studies" / "s.yaml").cells(tmp_path / "out")
    assert cell.command[0] == str(tmp_path / "scripts" / "train.py")


# 5. Duplicates, and 8. values that would run a wrong or empty grid.
def test_a_model_key_given_twice_is_refused_naming_it(tmp_path):
    (tmp_path / "s.yaml").write_text(f"""
name: s
seeds: [0]
steps: 2
models:
  unet: {{script: {UNET}}}
  unet: {{script: {UNET}, flags: {{learning_rate: 0.01}}}}
""")
    with pytest.raises(ValueError, match="the key 'unet' is given twice"):
        Study.from_file(tmp_path / "s.yaml")


@pytest.mark.parametrize("changes, message", [
    ({"seeds": [0, 1, 0]}, "seeds: 0 given more than once"),
    ({"datasets": ["okawa-h32-train1", "okawa-h32-train1"]}, "datasets: okawa-h32-train1 given more than once"),
    ({"datasets": [TINY, TINY | {"images_per_class": 4}]}, "datasets: tiny given more than once"),
    ({"conditioning": ["full", "quantized", "full"]}, "conditioning: full given more than once"),
    ({"models": {"u x": {"script": UNET}, "u-x": {"script": UNET}}}, "would share the directory"),
    ({"models": {"u": {"script": UNET, "conditioning": ["full", "full"]}}}, "conditioning: full given more"),
    ({"conditioning": []}, "conditioning is empty: the grid would have no cells"),
    ({"seeds": []}, "seeds is empty"),
    ({"datasets": []}, "datasets is empty"),
    ({"models": {}}, "models is empty"),
    ({"flags": {"seed": 3}}, "flags: seed is set by the study .its seeds list."),
    ({"flags": {"max_train_steps": 9}}, "flags: max_train_steps is set by the study .its steps."),
    ({"models": {"u": {"script": UNET, "flags": {"output_dir": "x"}}}}, "output_dir is set by the study"),
    ({"dropout": "0.1"}, "dropout must be a number, got '0.1'"),
    ({"flags": None}, "flags must be a mapping, got None"),
    ({"steps": True}, "steps must be an integer, got True"),
    ({"seeds": [0, True]}, "seeds: entry True must be an integer"),
    ({"datasets": [TINY | {"imags_per_class": 4}]}, r"unknown dataset keys \['imags_per_class'\]"),
    ({"datasets": [TINY | {"images_per_class": "4"}]}, "images_per_class must be an integer, got '4'"),
    ({"models": {"u": {"script": UNET, "tokens": "yes"}}}, "tokens 'yes' names no entry of tokenizers"),
    ({"models": {"u": {"script": UNET, "tokens": 1}}}, "tokens must be true or false or a string"),
    ({"flags": {"block_out_channels": [8, 16]}}, "block_out_channels must be a string"),
    ({"tokenizer": {"script": UNET}, "models": {"m": {"script": UNET, "tokens": True,
                                                      "flags": {"tokenizer_path": "x"}}}}, "tokenizer_path is set by"),
    ({"tokenizer": {"script": UNET}, "models": {"m": {"script": UNET, "tokens": True,
                                                      "flags": {"vqvae_path": "x"}}}}, "vqvae_path is set by"),
])
def test_study_values_are_checked_naming_the_key(changes, message):
    with pytest.raises(ValueError, match=message):
        Study.from_dict(spec(**changes))


def test_a_run_recorded_under_an_option_s_old_name_is_unchanged_under_its_new_name(tmp_path):
    """Issue 43: ``--vq_steps`` is ``--tokenizer_steps`` now; a study run recorded with the old name (a tokenizer run
    with its ``flags``, a cell with a nested tokenizer definition) is the same run when the study file says the new
    one, and a real change under either name is still found."""
    from dataclasses import dataclass
    from pathlib import Path

    from compgen.studies.records import RECORD_NAME, changes

    @dataclass
    class Run:
        name: str
        output_dir: Path
        identity: str

    def identity(flags):
        return json.dumps({"script": "train_vq_tokenizer.py", "flags": flags,
                           "tokenizer": {"flags": flags, "dataset": {"preset": "H32-train1"}}}, sort_keys=True)

    out = tmp_path / "run"
    (out / "checkpoints" / "checkpoint-2").mkdir(parents=True)
    (out / "checkpoints" / "checkpoint-2" / "trainer_state.json").write_text("{}")
    record = {"identity": json.loads(identity({"vq_steps": 100, "vq_crop_size": 0, "codebook_size": 32})),
              "steps": None}
    (out / RECORD_NAME).write_text(json.dumps(record))
    renamed = {"tokenizer_steps": 100, "tokenizer_crop_size": 0, "codebook_size": 32}
    assert changes(Run("tok", out, identity(renamed)), None) == []
    found = changes(Run("tok", out, identity(renamed | {"tokenizer_steps": 200})), None)
    assert "tokenizer_steps 100 -> 200" in found


def test_a_run_recorded_with_an_example_script_is_unchanged_under_its_recipe(tmp_path):
    """Study files name recipes now (``recipe: tuple-unet``); a cell recorded with the example script it ran
    (``script: ../examples/train_tuple_unet.py``) is the same cell and resumes, while another recipe is a change."""
    (tmp_path / "study").mkdir()
    old = spec(models={"unet": {"script": UNET}})
    run(tmp_path / "out", **{k: v for k, v in old.items() if k != "name"})
    first = Study.from_dict(old).cells(tmp_path / "out")[0]
    assert json.loads((first.output_dir / "study_run.json").read_text())["identity"]["script"] == UNET

    summary = run(tmp_path / "out", models={"unet": {"recipe": "tuple-unet"}})
    assert [c["status"] for c in summary["cells"]] == ["finished before"]
    with pytest.raises(ValueError, match="recipe tuple-unet -> tuple-dit"):
        run(tmp_path / "out", models={"unet": {"recipe": "tuple-dit"}})


@pytest.mark.parametrize("model, message", [
    ({"recipe": "unet"}, "unknown recipe 'unet'; the recipes are tuple-unet, maskgit"),
    ({"recipe": "tuple-unet", "script": UNET}, "give its recipe .* or a script path, not both"),
    ({"flags": {}}, "give its recipe .* or a script path, got neither"),
])
def test_a_model_names_one_known_recipe_or_one_script(model, message):
    with pytest.raises(ValueError, match=message):
        Study.from_dict(spec(models={"unet": model}))
