"""Fine-tuning models in a study (``init_from``, a model's own ``datasets`` and ``steps``): each cell starts from its
source cell of the same seed and mode, after it, and a source that failed fails its fine-tuning cells by name."""

import json

import pytest

from compgen.studies import Study, run_study

UNET = "examples/train_tuple_unet.py"
PLUS = {"name": "fail1-plus-101", "training_classes": ["000", "100", "001", "111", "101"]}


def spec(**fine_tune):
    return {"name": "adv", "seeds": [0, 1], "steps": 8, "datasets": ["okawa-fail1"],
            "models": {"unet": {"script": UNET},
                       "ft": {"script": UNET, "init_from": "unet", "steps": 3, "datasets": [PLUS]} | fine_tune}}


def test_fine_tuning_cells_start_from_the_same_seed_of_their_source_after_it(tmp_path):
    study = Study.from_dict(spec(), base_dir=".")
    cells = study.cells(tmp_path)
    assert [(c.model, c.seed, c.dataset, c.steps, c.source) for c in cells] == [
        ("unet", 0, "okawa-fail1", 8, None), ("unet", 1, "okawa-fail1", 8, None),
        ("ft", 0, "fail1-plus-101", 3, "unet/full/okawa-fail1/seed0"),
        ("ft", 1, "fail1-plus-101", 3, "unet/full/okawa-fail1/seed1")]
    argv = list(cells[3].command)
    assert argv[argv.index("--init_from") + 1] == str(cells[1].output_dir)
    assert argv[argv.index("--max_train_steps") + 1] == "3"
    assert argv[argv.index("--dataset") + 1] == str(tmp_path / "data" / "fail1-plus-101")
    assert json.loads(cells[3].identity)["init_from"] == json.loads(cells[1].identity)


@pytest.mark.parametrize("change, message", [
    ({"init_from": "ft"}, "another model"),
    ({"init_from": "nobody"}, "another model"),
    ({"steps": 0}, "steps must be a positive integer"),
    ({"tokens": True}, "cannot use tokens"),
    ({"conditioning": ["quantized"]}, "no cells of conditioning"),
    ({"script": "examples/train_givt.py"}, "fine-tunes weights of its own architecture"),  # issue 42, case 3
])
def test_fine_tuning_models_are_checked_before_any_work(change, message):
    with pytest.raises(ValueError, match=message):
        Study.from_dict(spec(**change), base_dir=".")


def test_a_fine_tuning_model_on_other_tokens_than_its_source_is_refused():
    """Issue 42, case 2: a fine-tuned model keeps its source's tokenizer, so ``tokens`` naming another is refused."""
    givt = "examples/train_givt.py"
    tokenizers = {"vq": {"script": "examples/train_vq_tokenizer.py"},
                  "kl": {"script": "examples/train_vq_tokenizer.py", "flags": {"tokenizer": "kl"}}}
    base = {"name": "t", "seeds": [0], "steps": 4, "datasets": ["okawa-h32-train1"], "tokenizers": tokenizers,
            "models": {"src": {"script": givt, "tokens": "vq"}, "ft": {"script": givt, "init_from": "src"}}}
    Study.from_dict(base, base_dir=".")  # no tokens: the source's
    base["models"]["ft"]["tokens"] = "kl"
    with pytest.raises(ValueError, match="keeps its source's tokenizer"):
        Study.from_dict(base, base_dir=".")


def test_a_source_on_two_datasets_is_refused():
    two = spec()
    two["datasets"] = ["okawa-fail1", "okawa-h32-train1"]
    with pytest.raises(ValueError, match="from scratch on one dataset"):
        Study.from_dict(two, base_dir=".")


class FailingSourcesLauncher:
    """Records the batches it is given (the tokenizers', empty here, then the cells' waves); the unet cells fail."""

    def __init__(self):
        self.batches = []

    def run(self, function, commands, threads, names, statuses, on_done=None):
        self.batches.append(list(names))
        for name in names:
            statuses[name] = {"status": "failed" if name.startswith("unet") else "ok", "seconds": 0.0}


def test_a_failed_source_fails_its_fine_tuning_cells_without_running_them(tmp_path):
    launcher = FailingSourcesLauncher()
    study = Study.from_dict(spec(), base_dir=".")
    study = study.__class__(**{**study.__dict__, "datasets": [{"name": "tiny", "split_preset": "fail1",
                                                              "images_per_class": 4, "test_images_per_class": 1}]})
    study.models["ft"]["datasets"] = [PLUS | {"images_per_class": 4, "test_images_per_class": 1}]
    summary = run_study(study, tmp_path / "study", launcher=launcher, progress=False)
    assert launcher.batches == [[], ["unet/full/tiny/seed0", "unet/full/tiny/seed1"], []]
    statuses = {cell["cell"]: cell for cell in summary["cells"]}
    assert "did not finish" in statuses["ft/full/fail1-plus-101/seed0"]["error"]


def test_one_dataset_name_with_two_definitions_is_refused():
    """Issue 42, case 16: two per-model definitions under one name exported into one folder, and a model trained on
    the other's data while its records named its own."""
    other = PLUS | {"training_classes": ["000", "100", "001", "111", "011"]}
    two = spec()
    two["models"]["ft2"] = {"script": UNET, "init_from": "unet", "steps": 3, "datasets": [other]}
    with pytest.raises(ValueError, match="the dataset name 'fail1-plus-101' has two definitions"):
        Study.from_dict(two, base_dir=".")
    two["models"]["ft2"]["datasets"] = [dict(PLUS)]  # the same definition twice is one dataset
    Study.from_dict(two, base_dir=".")
