"""The contract every model family keeps, checked over the one table of families (``model_families.TABLE``).

Every test is parametrized over the whole table, so a new family joins all contracts by adding one row there:

1. save/load round trip: ``save_pretrained`` -> ``from_pretrained`` gives bit-identical forward outputs and pipeline
   images (fixed generator), and writes weights as safetensors only;
2. concept order: the concept space's variable order survives the config, ``"021"`` means the same classes as the
   array ``[0, 2, 1]``, and a tuple of the wrong length or an unknown value is refused with a ``ValueError`` naming it;
3. guidance equivalence: ``guidance_scale=1`` (the library's "no guidance") is sampling without guidance, and the
   classifier-free mix at weight 1 is the conditional prediction; a row without null concepts says why it is skipped;
4. device placement: built under ``torch.device("meta")`` every parameter and buffer is on ``meta``, and a forward
   pass on ``meta`` inputs gives a ``meta`` output of the right shape;
5. the table itself: every ``ModelMixin`` class ``compgen.models`` exports has a row, and every exclusion is listed
   with its reason.

Per-family behaviour (layouts, conditioning modes, schedulers, entry files) stays in the per-family test files.
The MaskGIT + JEPA objective has no model class of its own: its pipeline holds the same ``MaskGITTransformer`` (and
its exported target encoder is one), and the JEPA predictor is a training-only module, so the MaskGIT row covers it
(its task is the row's ``jepa`` task variant).
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import typing

import numpy as np
import pytest
import torch
from device_checks import META, StrictDeviceMode, tensors_off_device
from diffusers.models.modeling_utils import ModelMixin
from diffusers.pipelines.pipeline_utils import DiffusionPipeline
from model_families import (
    BASE_CLASSES,
    CONTRACTS,
    FAMILIES,
    PIPELINE_CONTRACTS,
    PROMPTS,
    SPACE,
    TABLE,
    Family,
    pipeline_model,
    predict,
    require,
)

import compgen.models
from compgen.pipelines.concept_inputs import prepare_concept_inputs

pytestmark = pytest.mark.usefixtures("single_thread")

PROMPT_ARRAY = np.array([[0, 2, 1], [1, 1, 0]])


def sample(pipe: DiffusionPipeline, prompts=PROMPTS, **kwargs) -> np.ndarray:
    """Two-step samples of ``prompts`` from a fixed generator."""
    pipe.set_progress_bar_config(disable=True)
    return pipe(prompts, num_inference_steps=2, generator=torch.Generator().manual_seed(0), output_type="np",
                return_dict=False, **kwargs)[0]  # images, or a video pipeline's frames


def last_latents(pipe: DiffusionPipeline, **kwargs) -> torch.Tensor:
    """The latents (or tokens) after the last step of :func:`sample`, as a step callback sees them."""
    seen = {}

    def keep(pipeline, step_index, timestep, callback_kwargs):
        seen["latents"] = callback_kwargs["latents"].clone()
        return {}

    sample(pipe, callback_on_step_end=keep, **kwargs)
    return seen["latents"]


# --- 1. save/load round trip --------------------------------------------------------------------------------


def guidance_options(family: Family) -> tuple[dict, ...]:
    """The sampling options a row is checked under: with guidance too where it has null concepts."""
    if not family.conditioned or "guidance" in family.excluded:
        return ({},)
    return ({}, {"guidance_scale": 4.0})


def assert_safetensors_only(folder) -> None:
    files = [path for path in folder.rglob("*") if path.is_file()]
    assert {path.suffix for path in files} == {".json", ".safetensors"}, files  # no .bin, .pt, pickle
    assert all(path.stat().st_size > 0 for path in files)


@pytest.mark.parametrize("family", FAMILIES)
def test_save_load_round_trip_is_bit_identical_and_safetensors_only(family, tmp_path):
    require(family, "save-load")
    model = family.model()
    model.save_pretrained(tmp_path / "model")
    loaded = type(model).from_pretrained(tmp_path / "model")
    for options in guidance_options(family):  # the null concepts too
        assert torch.equal(predict(family, loaded, **options), predict(family, model, **options))
    assert_safetensors_only(tmp_path / "model")


@pytest.mark.parametrize("family", FAMILIES)
def test_pipeline_round_trip_is_bit_identical_and_safetensors_only(family, tmp_path):
    require(family, "pipeline-save-load")
    pipe = family.pipeline(family.model())
    pipe.save_pretrained(tmp_path / "pipeline")
    reloaded = type(pipe).from_pretrained(tmp_path / "pipeline")
    for options in guidance_options(family):
        np.testing.assert_array_equal(sample(reloaded, **options), sample(pipe, **options))
    assert_safetensors_only(tmp_path / "pipeline")


# --- 2. concept order -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("family", FAMILIES)
def test_concept_order_survives_the_config_and_strings_mean_the_array_indices(family, tmp_path):
    require(family, "concept-order")
    pipe = family.pipeline(family.model())
    pipe.save_pretrained(tmp_path)
    reloaded = type(pipe).from_pretrained(tmp_path)
    model = pipeline_model(reloaded)
    assert model.concept_space == SPACE
    assert model.config.concept_space == [["shape", ["circle", "triangle"]], ["color", ["red", "blue", "green"]],
                                          ["size", ["large", "small"]]]

    assert prepare_concept_inputs(model, PROMPTS).concepts.tolist() == PROMPT_ARRAY.tolist()
    assert torch.equal(predict(family, model, PROMPTS), predict(family, model, PROMPT_ARRAY))
    np.testing.assert_array_equal(sample(reloaded, PROMPTS), sample(reloaded, PROMPT_ARRAY))
    np.testing.assert_array_equal(sample(reloaded, PROMPTS), sample(pipe, torch.from_numpy(PROMPT_ARRAY)))


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("prompts, problem", [
    ("02", "'02' has 2 values but the space has 3 variables"),
    (np.array([0, 2, 1, 0]), "has 4 values but the space has 3 variables"),
    ("031", "out of range for concept variable 'color'"),
    ({"shape": "square", "color": "red", "size": "small"}, "'square'"),
])
def test_a_malformed_tuple_is_refused_naming_the_problem(family, prompts, problem):
    require(family, "concept-order")
    with pytest.raises(ValueError, match=problem):
        sample(family.pipeline(family.model()), prompts)


# --- 3. guidance equivalence ------------------------------------------------------------------------------------


@pytest.mark.parametrize("family", FAMILIES)
def test_guidance_scale_one_is_no_guidance(family):
    if family.pipeline is not None and "guidance" in family.excluded:
        model = pipeline_model(pipe := family.pipeline(family.model()))
        assert not model.has_null_embeddings, "the table says this row cannot guide, but its model has null concepts"
        with pytest.raises(ValueError, match="concept_dropout > 0"):
            sample(pipe, guidance_scale=2.0)
    require(family, "guidance")
    pipe = family.pipeline(family.model())
    model = pipeline_model(pipe)
    assert model.has_null_embeddings

    unguided = sample(pipe)
    np.testing.assert_array_equal(sample(pipe, guidance_scale=1.0), unguided)
    # guidance does act, on the sampled latents (a tiny VQ codebook may snap both to the same codes and images)
    assert not torch.equal(last_latents(pipe, guidance_scale=4.0), last_latents(pipe))

    # The guided batch at weight 1, null + 1 * (cond - null), is the conditional prediction.
    cond, null = predict(family, model, guidance_scale=4.0).chunk(2)
    torch.testing.assert_close(null + 1.0 * (cond - null), predict(family, model), rtol=1e-5, atol=1e-5)
    assert not torch.allclose(null, cond)


# --- 4. device placement ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("family", FAMILIES)
def test_a_model_built_on_meta_runs_on_meta(family):
    require(family, "meta-device")
    with torch.device(META):
        model = family.model()
    assert tensors_off_device(model, META) == []
    if family.conditioned:  # the non-persistent tables (cardinalities, frequencies) are checked too
        assert len(list(model.buffers())) > 0
    inputs = family.inputs(model, PROMPTS, device=META)
    with torch.no_grad(), StrictDeviceMode():
        out = family.forward(model, inputs)
    assert out.device == META
    assert out.shape == predict(family, family.model()).shape


# --- 5. the table -----------------------------------------------------------------------------------------------


def exported_model_classes() -> set[type]:
    """The ``ModelMixin`` classes of ``compgen.models``: those its modules define, and those its ``build_*``
    functions return (the tokenizers are diffusers' own classes, built to compgen's sizes)."""
    classes = set()
    for info in pkgutil.iter_modules(compgen.models.__path__):
        module = importlib.import_module(f"compgen.models.{info.name}")
        for name, value in vars(module).items():
            if inspect.isclass(value) and issubclass(value, ModelMixin) and value.__module__ == module.__name__:
                classes.add(value)
            elif inspect.isfunction(value) and name.startswith("build_") and value.__module__ == module.__name__:
                returned = typing.get_type_hints(value).get("return")
                if inspect.isclass(returned) and issubclass(returned, ModelMixin):
                    classes.add(returned)
    return classes


def test_every_exported_model_class_has_a_row():
    exported = exported_model_classes()
    assert len(exported) >= 7  # U-Net, MaskGIT, DiT, GIVT, MAR, the VQ and KL tokenizers (and bases)
    covered = {family.model_class for family in TABLE} | set(BASE_CLASSES)
    assert exported - covered == set(), "a model class without a row in tests/model_families.py"
    assert covered - exported == set(), "a row for a class compgen.models does not export"
    for family in TABLE:
        assert isinstance(family.model(), family.model_class), family.id


def test_every_exclusion_is_a_known_contract_with_its_reason():
    assert len({family.id for family in TABLE}) == len(TABLE)
    for family in TABLE:
        for contract, reason in family.excluded.items():
            assert contract in CONTRACTS, (family.id, contract)
            assert len(reason) > 20, (family.id, contract)  # a reason, not a placeholder
        if family.pipeline is None:  # no pipeline: every contract that needs one is excluded, by name
            assert set(PIPELINE_CONTRACTS) <= set(family.excluded), family.id
        assert family.tasks, family.id  # every family trains
        assert "save-load" not in family.excluded and "meta-device" not in family.excluded, family.id
    assert {"training-step-on-device", "training-step-compiles"}.isdisjoint(
        contract for family in TABLE for contract in family.excluded)
