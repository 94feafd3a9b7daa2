"""The family table (``compgen.families``) is the one list of generator families: what is derived from it covers every
row, and every hand-kept place a family must appear in is held to it."""

from __future__ import annotations

import importlib
import inspect
from pathlib import Path

import pytest

import compgen
from compgen.families import FAMILIES, ModelFamily, recipes

REPO = Path(__file__).resolve().parents[2]


def load(path: str):
    module, name = ModelFamily.split(path)
    return getattr(importlib.import_module(module), name)


@pytest.mark.parametrize("family", FAMILIES, ids=[f.name for f in FAMILIES])
def test_every_part_of_a_family_exists_and_fits(family: ModelFamily):
    from diffusers import DiffusionPipeline, ModelMixin

    from compgen.analysis.rescore import PIPELINES
    from compgen.training import tasks

    model, pipeline, task = load(family.model), load(family.pipeline), load(family.task)
    assert issubclass(model, ModelMixin) and issubclass(pipeline, DiffusionPipeline)
    assert family.denoiser in inspect.signature(pipeline.__init__).parameters
    # derived from the table
    assert getattr(compgen, model.__name__) is model and getattr(compgen, pipeline.__name__) is pipeline
    assert PIPELINES[pipeline.__name__] == (pipeline.__module__, family.denoiser)
    # held to it
    assert task.__name__ in tasks.__all__ and getattr(tasks, task.__name__) is task
    assert (REPO / family.script).is_file()
    entry = (REPO / family.hub_entry).read_text()
    assert f"from {pipeline.__module__} import {pipeline.__name__}" in entry
    architecture = (REPO / "ARCHITECTURE.md").read_text()
    assert f"`{Path(pipeline.__module__.replace('.', '/')).name}.py`" in architecture


def test_the_contract_tests_cover_every_family():
    """``tests/model_families.py``'s rows build every family's model and pipeline (the contract tests run on them)."""
    from model_families import TABLE as ROWS

    pipelines = {type(row.pipeline(row.model())).__name__ for row in ROWS if row.pipeline is not None}
    models = {row.model_class.__name__ for row in ROWS}
    for family in FAMILIES:
        assert ModelFamily.split(family.pipeline)[1] in pipelines, family.name
        assert ModelFamily.split(family.model)[1] in models, family.name


def test_every_hub_entry_file_and_example_belongs_to_a_family():
    entries = {str(path.relative_to(REPO)) for path in (REPO / "custom_pipelines").glob("*.py")}
    assert entries == {family.hub_entry for family in FAMILIES}
    scripts = {f"examples/{path.name}" for path in (REPO / "examples").glob("train_*.py")}
    assert scripts == {recipe.script for recipe in recipes().values()}


@pytest.mark.parametrize("family", FAMILIES, ids=[f.name for f in FAMILIES])
def test_every_family_trains_by_its_recipe_and_its_example_is_the_recipe(family: ModelFamily):
    """A family's recipe (``compgen.recipes.<name>``) builds its model and task; its example script only runs it."""
    recipe = importlib.import_module(family.recipe)
    assert callable(recipe.main) and callable(recipe.check_arguments) and isinstance(recipe.PRESETS, dict)
    source = inspect.getsource(recipe)
    for path in (family.model, family.task):
        assert ModelFamily.split(path)[1] in source, f"{family.recipe} does not build {path}"
    example = (REPO / family.script).read_text()
    assert f"from {family.recipe} import main" in example and len(example.splitlines()) <= 15


def test_the_recipes_are_the_table_s_and_each_runs_by_name(capsys):
    from compgen.recipes import load_recipe
    from compgen.train import main

    modules = {f"compgen.recipes.{path.stem}" for path in (REPO / "src/compgen/recipes").glob("[!_]*.py")}
    assert modules == {recipe.module for recipe in recipes().values()}
    for name in recipes():
        with pytest.raises(SystemExit) as exit_info:
            main([name, "--help"])
        assert exit_info.value.code == 0 and f"usage: python -m compgen.train {name}" in capsys.readouterr().out
    for argv in (["unet"], []):
        with pytest.raises(SystemExit) as exit_info:
            main(argv)
        assert exit_info.value.code == 2 and "tuple-unet, maskgit" in capsys.readouterr().err.replace("'", "")
    with pytest.raises(ValueError, match="unknown recipe 'dit'; the recipes are tuple-unet"):
        load_recipe("dit")


def test_study_files_name_recipes_not_scripts():
    import yaml

    for path in sorted((REPO / "studies").glob("*.yaml")):
        study = yaml.safe_load(path.read_text())
        specs = [*study["models"].values(), *([study["tokenizer"]] if study.get("tokenizer") else []),
                 *(study.get("tokenizers") or {}).values()]
        assert all(spec.get("recipe") in recipes() and "script" not in spec for spec in specs), path.name
