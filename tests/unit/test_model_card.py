"""Model cards: per-level table with the first step reaching 0.9, per-class table, extra sections, Hub metadata."""

import pytest
from huggingface_hub import ModelCard

from compgen.concepts import get_split_preset
from compgen.training.config import TrainingConfig
from compgen.training.model_card import hub_dataset_id, write_model_card

GRAPH = get_split_preset("H32-train1").graph()
LEVEL_2_ACCURACY = {100: 0.0, 200: 0.5, 300: 0.95, 400: 0.85}  # crosses 0.9 at step 300, then falls back


def make_record(step: int) -> dict:
    """An evaluation record as ``EvaluationTracker`` logs it: training classes perfect, level 1 at 0.9 from 200."""
    level_1 = 0.92 if step >= 200 else 0.4
    accuracy = {}
    for name, level in GRAPH.levels.items():
        accuracy[name] = [1.0, level_1, LEVEL_2_ACCURACY[step]][level]
    level_accuracy = {}
    for level in sorted(set(GRAPH.levels.values())):
        values = [accuracy[name] for name, lv in GRAPH.levels.items() if lv == level]
        level_accuracy[str(level)] = sum(values) / len(values)
    return {
        "step": step,
        "num_images_per_class": 8,
        "chance": 0.125,
        "levels": GRAPH.levels,
        "accuracy": accuracy,
        "additive_accuracy": {name: min(1.0, value + 0.05) for name, value in accuracy.items()},
        "level_accuracy": level_accuracy,
    }


RECORDS = [make_record(step) for step in (100, 200, 300, 400)]
DETAILS = {
    "model_name": "TinyMaskGIT",
    "pipeline_class": "MaskGITPipeline",
    "tags": ["maskgit"],
    "hyperparameters": {"hidden_size": 16, "num_layers": 2},
    "sections": [("Tokenizer reconstruction accuracy", "| class | accuracy |\n|---|---|\n| 111 (L2) | 0.750 |\n")],
}


def read_card(tmp_path, records=RECORDS, details=DETAILS, dataset_name="someone/shapes-h32"):
    write_model_card(tmp_path, records, GRAPH, TrainingConfig(output_dir=str(tmp_path)), details, dataset_name)
    return ModelCard.load(tmp_path / "README.md")


def test_results_tables_report_levels_first_step_and_classes(tmp_path):
    card = read_card(tmp_path)
    text = card.text
    assert "of 8 samples per class at step 400; chance level 0.125." in text
    assert "| level | classes | final accuracy | best accuracy | first step >= 0.9 |" in text
    assert "| 0 | 000, 001, 010, 100 | 1.000 | 1.000 | 100 |" in text
    assert "| 1 | 011, 101, 110 | 0.920 | 0.920 | 200 |" in text
    assert "| 2 | 111 | 0.850 | 0.950 | 300 |" in text
    assert "| class | shape | color | size | level | multiplicative | additive |" in text
    assert "| 000 | circle | red | large | 0 | 1.000 | 1.000 |" in text
    assert "| 111 | triangle | blue | small | 2 | 0.850 | 0.900 |" in text
    assert "![learning dynamics](learning_dynamics.png)" in text
    assert (tmp_path / "learning_dynamics.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_level_that_never_reaches_threshold_says_so(tmp_path):
    text = read_card(tmp_path, records=RECORDS[:2]).text
    assert "| 2 | 111 | 0.500 | 0.500 | not reached |" in text


def test_custom_sections_follow_results_and_precede_model(tmp_path):
    text = read_card(tmp_path).text
    headings = ("## Results", "## Tokenizer reconstruction accuracy", "## Model")
    results, section, model = (text.index(heading) for heading in headings)
    assert results < section < model
    table = "| class | accuracy |\n|---|---|\n| 111 (L2) | 0.750 |\n"
    assert f"## Tokenizer reconstruction accuracy\n\n{table}\n## Model" in text
    assert "- hidden_size: `16`" in text and "- num_layers: `2`" in text
    with pytest.raises(ValueError, match=r"\(title, markdown\) pair"):
        read_card(tmp_path, details={**DETAILS, "sections": ["just a title"]})


def test_metadata_names_only_hub_datasets(tmp_path):
    data = read_card(tmp_path).data
    assert data.library_name == "diffusers" and data.license == "apache-2.0"  # shapes data: the code licence
    assert data.datasets == ["someone/shapes-h32"]
    assert "maskgit" in data.tags and "compgen" in data.tags
    local_dir = tmp_path / "data" / "tiny-h32"
    local_dir.mkdir(parents=True)
    for local in ("tiny-h32", str(local_dir), "./data/x", None):
        assert read_card(tmp_path, dataset_name=local).data.datasets is None, local
    assert hub_dataset_id("a/b/c") is None


def test_card_without_evaluations(tmp_path):
    card = read_card(tmp_path, records=[], details={})
    assert "No evaluation was run" in card.text
    assert "# DiffusionPipeline trained with compgen" in card.text
    assert not (tmp_path / "learning_dynamics.png").exists()


def test_card_reports_the_second_scorer_and_where_the_scorers_disagree(tmp_path):
    records = []
    for step in (100, 200, 300, 400):
        record = make_record(step)
        record["object_rate"] = {name: 1.0 for name in record["accuracy"]}
        record["object_failures"] = {name: {} for name in record["accuracy"]}  # the one-object check ran
        record["pixel_accuracy"] = dict(record["accuracy"])
        if step >= 300:  # the pixel statistics see fewer correct 111 samples than the probes do
            record["pixel_accuracy"]["111"] = record["accuracy"]["111"] - 0.3
        record["pixel_level_accuracy"] = {level: value for level, value in record["level_accuracy"].items()}
        record["pixel_level_accuracy"]["2"] = record["pixel_accuracy"]["111"]
        record["scorer_agreement"] = {name: 1.0 for name in record["accuracy"]} | {"111": 0.7}
        record["scorer_disagreements"] = ["111"] if step >= 300 else []
        records.append(record)
    text = read_card(tmp_path, records=records).text
    assert "| level | classes | final accuracy | best accuracy | first step >= 0.9 | pixel scorer final | " \
           "pixel scorer first step >= 0.9 |" in text
    assert "| 2 | 111 | 0.850 | 0.950 | 300 | 0.550 | not reached |" in text
    assert "| 111 | triangle | blue | small | 2 | 0.850 | 0.900 | 1.00 | 0.550 | 0.70 |" in text
    assert "**The two scorers disagree by more than 10 points** at 2 of 4 evaluations (first at step 300: 111)." \
        in text
    assert "At the final step: 111 (probes 0.85, pixel statistics 0.55)." in text


def test_cards_carry_the_licence_of_their_data_and_no_pipeline_tag(tmp_path):
    shapes = read_card(tmp_path)
    assert shapes.data.license == "apache-2.0" and shapes.data.to_dict().get("pipeline_tag") is None
    assert "## License" in shapes.text and "Apache-2.0" in shapes.text
    celeba = read_card(tmp_path, dataset_name="celeba-cpu")
    assert celeba.data.license == "other" and celeba.data.license_name == "celeba-dataset-release-agreement"
    assert "non-commercial research purposes only" in celeba.text


def test_cards_claim_the_one_object_check_and_the_second_scorer_only_where_they_ran(tmp_path):
    probes_only = read_card(tmp_path).text  # CelebA-like records: no object check, no pixel scorer
    assert "one-object" not in probes_only and "Every number comes from the concept probes" in probes_only
    records = [make_record(step) | {"object_failures": {}, "pixel_accuracy": make_record(step)["accuracy"],
                                    "pixel_level_accuracy": make_record(step)["level_accuracy"],
                                    "scorer_agreement": dict.fromkeys(GRAPH.levels, 1.0), "scorer_disagreements": []}
               for step in (100, 200)]
    both = read_card(tmp_path, records=records).text
    assert "(the one-object check)" in both
    assert "the best accuracy, the additive accuracy and the object rate come from the probes only" in both
    assert "Every number is given by two" not in both


def test_the_usage_snippet_is_valid_python_for_a_path_with_quotes(tmp_path):
    """An output directory named with a quote gave a snippet that does not parse; it is a Python literal now."""
    import ast
    import re

    out = tmp_path / "it's \"quoted\""
    out.mkdir()
    write_model_card(out, RECORDS, GRAPH, TrainingConfig(output_dir=str(out)), DETAILS, None)
    text = (out / "README.md").read_text()
    snippet = re.search(r"```python\n(.*?)```", text, re.S).group(1)
    tree = ast.parse(snippet)
    calls = [node for node in ast.walk(tree) if isinstance(node, ast.Call) and getattr(node.func, "attr", "") ==
             "from_pretrained"]
    assert calls[0].args[0].value == str(out)


@pytest.mark.parametrize("row", [pytest.param(row, id=row.id) for row in __import__("model_families").TABLE])
def test_the_model_section_lists_the_exported_config_as_from_pretrained_loads_it(row, tmp_path):
    """The card's model section is read from the export's ``config.json`` (a pipeline's denoiser, a tokenizer's own),
    not copied by hand: every entry but diffusers' ``_`` ones and the concept space appears with its value."""
    import json

    from compgen.training.model_card import CONFIG_LEFT_OUT

    model = row.model()
    (row.pipeline(model) if row.pipeline is not None else model).save_pretrained(tmp_path)
    text = read_card(tmp_path).text
    path = "config.json" if row.pipeline is None else f"{'unet' if 'unet' in row.id else 'transformer'}/config.json"
    config = json.loads((tmp_path / path).read_text())
    assert f"Its config (`{path}`, as `from_pretrained` loads it):" in text
    for key, value in config.items():
        listed = f"- {key}: `{value}`" in text
        assert listed == (not key.startswith("_") and key not in CONFIG_LEFT_OUT), key
    assert "hidden_size: `16`" in text  # the task's own rows (DETAILS) stay above the config
