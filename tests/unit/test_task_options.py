"""Each task's own options are one object (``Task.Options``, a frozen dataclass): declared once with their defaults,
checked once when built, read from a recipe's flags by name, listed on the model card."""

from __future__ import annotations

import argparse
import dataclasses
import importlib

import pytest

from compgen.families import FAMILIES, ModelFamily
from compgen.training import tasks
from compgen.training.tasks.base import TaskOptions

TASKS = [getattr(importlib.import_module(ModelFamily.split(f.task)[0]), ModelFamily.split(f.task)[1]) for f in FAMILIES]
TASKS += [tasks.VQTask, tasks.KLTask]


@pytest.mark.parametrize("task", TASKS, ids=lambda task: task.__name__)
def test_every_task_has_one_options_object_read_from_the_flags_by_name(task):
    options = task.Options
    assert issubclass(options, TaskOptions) and dataclasses.is_dataclass(options)
    defaults = options()
    assert set(defaults.card_rows()) == {field.name for field in dataclasses.fields(options)}
    first = dataclasses.fields(options)[0]
    args = argparse.Namespace(**{first.name: defaults.card_rows()[first.name]}, unrelated_flag=1)
    assert options.from_args(args) == defaults
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(defaults, first.name, None)


@pytest.mark.parametrize("task, values, message", [
    (tasks.DDPMTask, {"eval_inference_steps": 0}, "eval_inference_steps must be an integer of at least 1, got 0"),
    (tasks.DDPMTask, {"eval_guidance_scale": float("nan")}, "eval_guidance_scale must be a finite number >= 0"),
    (tasks.FlowMatchingDiTTask, {"weighting_scheme": "cosine"}, "unsupported weighting_scheme 'cosine'"),
    (tasks.GIVTTask, {"eval_temperature": float("inf")}, "eval_temperature must be a finite number >= 0"),
    (tasks.MARTask, {"eval_head_steps": 0}, "eval_head_steps must be an integer of at least 1"),
    (tasks.MaskGITTask, {"jepa_weight": -1.0}, "jepa_weight must be a finite number >= 0"),
    (tasks.MaskGITTask, {"mask_type": "stripes"}, "mask_type must be one of"),
    (tasks.MaskGITTask, {"label_smoothing": 1.0}, r"label_smoothing must be in \[0, 1\)"),
    (tasks.MaskGITTask, {"jepa_momentum_schedule": "cosine"}, "jepa_momentum_schedule must be one of"),
    (tasks.VQTask, {"commitment_cost": -0.1}, "commitment_cost must be a finite number >= 0"),
    (tasks.KLTask, {"kl_weight": float("inf")}, "kl_weight must be a finite number >= 0"),
])
def test_an_option_is_refused_by_its_task_s_options_naming_it(task, values, message):
    with pytest.raises(ValueError, match=message):
        task.Options(**values)
    with pytest.raises(ValueError, match=message):  # a recipe's flags reach the same check
        task.Options.from_args(argparse.Namespace(**values))


def test_a_task_reads_its_options_as_attributes_and_the_card_lists_them_once():
    from model_families import ddpm_task, full_unet

    from compgen.training.export import card_details

    task = ddpm_task(full_unet(), None)
    assert task.eval_inference_steps == task.options.eval_inference_steps
    with pytest.raises(AttributeError, match="has no attribute 'no_such_option'"):
        _ = task.no_such_option
    rows = card_details(task)["hyperparameters"]
    assert {name: rows[name] for name in task.options.card_rows()} == task.options.card_rows()
    assert rows["eval_sampler"].startswith("DDIM")  # the task's own description stays beside them
