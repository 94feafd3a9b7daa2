"""The contract every concept-conditioned model family keeps, checked over one table (``FAMILIES``).

Each row builds a tiny model and its pipeline and says how to run one forward pass on fixed inputs; every test is
parametrized over the whole table, so a new family joins all contracts by adding one row:

1. save/load round trip: ``save_pretrained`` -> ``from_pretrained`` gives bit-identical forward outputs and pipeline
   images (fixed generator), and writes weights as safetensors only;
2. concept order: the concept space's variable order survives the config, ``"021"`` means the same classes as the
   array ``[0, 2, 1]``, and a tuple of the wrong length or an unknown value is refused with a ``ValueError`` naming it;
3. guidance equivalence: ``guidance_scale=1`` (the library's "no guidance") is sampling without guidance, and the
   classifier-free mix at weight 1 is the conditional prediction; a row without null concepts says why it is skipped;
4. device placement: built under ``torch.device("meta")`` every parameter and buffer is on ``meta``, and a forward
   pass on ``meta`` inputs gives a ``meta`` output of the right shape.

The space is shape x color (3 values) x size: its variable order is not alphabetical (diffusers writes configs with
sorted keys) and its cardinalities differ, so a permuted order on reload turns ``"021"`` into an out-of-range class.

The DiT has a row per tokenizer kind: a VQ tokenizer (``vqvae``) and a KL one (``vae``, Paper B's continuous
tokenizer); the pipeline saves and reloads either. Per-family behaviour (layouts, conditioning modes, schedulers,
entry files) stays in the per-family test files.
The MaskGIT + JEPA objective has no model class of its own: its pipeline holds the same ``MaskGITTransformer`` (and
its exported target encoder is one), and the JEPA predictor is a training-only module, so the MaskGIT row covers it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pytest
import torch
from device_checks import META, StrictDeviceMode, tensors_off_device
from diffusers import DDPMScheduler
from diffusers.pipelines.pipeline_utils import DiffusionPipeline

from compgen import (
    GIVTPipeline,
    GIVTTransformer,
    MARPipeline,
    MARTransformer,
    MaskGITPipeline,
    MaskGITScheduler,
    MaskGITTransformer,
    TupleConditionedDiT,
    TupleConditionedDiTPipeline,
    TupleConditionedUNet2DModel,
    shapes_space,
)
from compgen.models.kl_tokenizer import build_kl_tokenizer
from compgen.models.vq_tokenizer import build_vq_tokenizer
from compgen.pipelines.concept_inputs import ConceptInputs, prepare_concept_inputs
from compgen.pipelines.tuple_ddpm import TupleConditionedDDPMPipeline
from compgen.shapes import shapes_continuous_concepts

pytestmark = pytest.mark.usefixtures("single_thread")

SPACE = shapes_space(num_colors=3)
PROMPTS = ["021", "110"]
PROMPT_ARRAY = np.array([[0, 2, 1], [1, 1, 0]])
TIMESTEP = 7
CODEBOOK_SIZE = 16
GRID = 7  # the tokenizer's grid for 28 px images


def fixed(shape: tuple[int, ...], device: torch.device, seed: int = 1) -> torch.Tensor:
    """The same standard-normal tensor on every call, on ``device``."""
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed)).to(device)


def doubled(tensor: torch.Tensor, inputs: ConceptInputs) -> torch.Tensor:
    """The model input for ``inputs``: doubled (conditional and null halves) under classifier-free guidance."""
    return torch.cat([tensor, tensor]) if inputs.do_classifier_free_guidance else tensor


def tokenizer():
    return build_vq_tokenizer(28, block_out_channels=(8, 8, 8), num_vq_embeddings=CODEBOOK_SIZE, vq_embed_dim=4,
                              norm_num_groups=4).eval()


# --- the families: a tiny model, its pipeline, one forward pass on fixed inputs ---------------------------------


def unet(**options) -> TupleConditionedUNet2DModel:
    torch.manual_seed(0)
    return TupleConditionedUNet2DModel(SPACE.to_dict(), block_out_channels=(8, 16), norm_num_groups=4,
                                       **options).eval()


def paper_layout_unet() -> TupleConditionedUNet2DModel:
    model = unet(block_type="paper", norm_type="batch")
    with torch.no_grad():  # BatchNorm statistics away from their initial values, so that the round trip checks them
        for module in model.modules():
            if isinstance(module, torch.nn.BatchNorm2d):
                module.running_mean.uniform_(-0.2, 0.2)
                module.running_var.uniform_(0.5, 1.5)
    return model


def unet_pipeline(model: TupleConditionedUNet2DModel) -> DiffusionPipeline:
    return TupleConditionedDDPMPipeline(unet=model, scheduler=DDPMScheduler(num_train_timesteps=50))


def unet_forward(model: TupleConditionedUNet2DModel, inputs: ConceptInputs) -> torch.Tensor:
    sample = doubled(fixed((inputs.batch_size, 3, 28, 28), inputs.concepts.device), inputs)
    return model(sample, TIMESTEP, **inputs.model_kwargs).sample


def maskgit() -> MaskGITTransformer:
    torch.manual_seed(0)
    return MaskGITTransformer(SPACE.to_dict(), codebook_size=CODEBOOK_SIZE, grid_size=GRID, hidden_size=16,
                              num_layers=2, num_heads=2, concept_dropout=0.1).eval()


def maskgit_pipeline(model: MaskGITTransformer) -> DiffusionPipeline:
    return MaskGITPipeline(vqvae=tokenizer(), transformer=model, scheduler=MaskGITScheduler(CODEBOOK_SIZE))


def maskgit_forward(model: MaskGITTransformer, inputs: ConceptInputs) -> torch.Tensor:
    generator = torch.Generator().manual_seed(1)
    tokens = torch.randint(0, CODEBOOK_SIZE + 1, (inputs.batch_size, GRID * GRID), generator=generator)
    return model(doubled(tokens.to(inputs.concepts.device), inputs), **inputs.model_kwargs).logits


def dit() -> TupleConditionedDiT:
    torch.manual_seed(0)
    model = TupleConditionedDiT(SPACE.to_dict(), latent_channels=4, grid_size=GRID, hidden_size=16, num_layers=2,
                                num_heads=2, conditioning="full", continuous_concepts=shapes_continuous_concepts(SPACE),
                                concept_dropout=0.1, latent_mean=[0.1, 0.0, -0.1, 0.2],
                                latent_std=[1.0, 0.5, 2.0, 1.0]).eval()
    with torch.no_grad():  # the output layer starts at zero (DiT), blind to its inputs: give it weights
        model.output_projection.weight.normal_(std=0.1)
    return model


def dit_pipeline(model: TupleConditionedDiT) -> DiffusionPipeline:
    return TupleConditionedDiTPipeline(vqvae=tokenizer(), transformer=model,
                                       scheduler=DDPMScheduler(num_train_timesteps=50, clip_sample=False))


def dit_kl_pipeline(model: TupleConditionedDiT) -> DiffusionPipeline:
    torch.manual_seed(1)
    vae = build_kl_tokenizer(28, block_out_channels=(8, 8, 8), latent_channels=4, norm_num_groups=4).eval()
    return TupleConditionedDiTPipeline(vqvae=None, vae=vae, transformer=model,
                                       scheduler=DDPMScheduler(num_train_timesteps=50, clip_sample=False))


def dit_forward(model: TupleConditionedDiT, inputs: ConceptInputs) -> torch.Tensor:
    latents = doubled(fixed((inputs.batch_size, 4, GRID, GRID), inputs.concepts.device), inputs)
    return model(latents, TIMESTEP, **inputs.model_kwargs).sample


def givt() -> GIVTTransformer:
    torch.manual_seed(0)
    model = GIVTTransformer(SPACE.to_dict(), latent_channels=4, grid_size=GRID, num_mixtures=2, hidden_size=16,
                            num_layers=2, num_heads=2, conditioning="full",
                            continuous_concepts=shapes_continuous_concepts(SPACE), latent_mean=[0.1, 0.0, -0.1, 0.2],
                            latent_std=[1.0, 0.5, 2.0, 1.0], concept_dropout=0.1).eval()
    with torch.no_grad():  # the output head starts at zero, blind to its inputs: give it weights
        model.head.weight.normal_(std=0.1)
    return model


def givt_pipeline(model: GIVTTransformer) -> DiffusionPipeline:
    return GIVTPipeline(vqvae=tokenizer(), transformer=model, scheduler=MaskGITScheduler(0))


def givt_forward(model: GIVTTransformer, inputs: ConceptInputs) -> torch.Tensor:
    device = inputs.concepts.device
    latents = doubled(fixed((inputs.batch_size, 4, GRID, GRID), device), inputs)
    mask = doubled(fixed((inputs.batch_size, GRID * GRID), device, seed=2) > 0, inputs)
    return model(latents, mask, **inputs.model_kwargs).means


def mar() -> MARTransformer:
    torch.manual_seed(0)
    model = MARTransformer(SPACE.to_dict(), latent_channels=4, grid_size=GRID, head_width=16, head_depth=1,
                          hidden_size=16, num_layers=2, num_heads=2, conditioning="full",
                          continuous_concepts=shapes_continuous_concepts(SPACE), latent_mean=[0.1, 0.0, -0.1, 0.2],
                          latent_std=[1.0, 0.5, 2.0, 1.0], concept_dropout=0.1).eval()
    with torch.no_grad():  # the head's adaLN-Zero layers start at zero, blind to the condition: give them weights
        for parameter in model.head.parameters():
            if parameter.device.type == "meta" or not parameter.any():
                parameter.normal_(std=0.1)
    return model


def mar_pipeline(model: MARTransformer) -> DiffusionPipeline:
    return MARPipeline(vqvae=tokenizer(), transformer=model, scheduler=MaskGITScheduler(0),
                       head_scheduler=DDPMScheduler(num_train_timesteps=50, clip_sample=False))


def mar_forward(model: MARTransformer, inputs: ConceptInputs) -> torch.Tensor:
    device = inputs.concepts.device
    latents = doubled(fixed((inputs.batch_size, 4, GRID, GRID), device), inputs)
    mask = doubled(fixed((inputs.batch_size, GRID * GRID), device, seed=2) > 0, inputs)
    return model(latents, mask, **inputs.model_kwargs).conditions


@dataclass(frozen=True)
class Family:
    """One row of the table."""

    model: Callable[[], torch.nn.Module]
    """A tiny model, seeded: the same weights on every call."""
    pipeline: Callable[[torch.nn.Module], DiffusionPipeline]
    """The model's pipeline around it."""
    forward: Callable[[torch.nn.Module, ConceptInputs], torch.Tensor]
    """The model's prediction on fixed inputs for a conditioning batch (doubled under guidance), on its device."""
    no_guidance: str | None = None
    """Why the row has no classifier-free guidance; ``None``: it has null concepts and guides."""


FAMILIES = [
    pytest.param(Family(lambda: unet(conditioning="full", continuous_concepts=shapes_continuous_concepts(SPACE),
                                     concept_dropout=0.1), unet_pipeline, unet_forward), id="tuple-unet"),
    pytest.param(Family(paper_layout_unet, unet_pipeline, unet_forward,
                        no_guidance="Paper A's layout as the paper trains it, without concept dropout: no null "
                                    "concepts, so guidance_scale != 1 is refused"), id="tuple-unet-paper-layout"),
    pytest.param(Family(maskgit, maskgit_pipeline, maskgit_forward), id="maskgit"),
    pytest.param(Family(dit, dit_pipeline, dit_forward), id="tuple-dit"),
    pytest.param(Family(dit, dit_kl_pipeline, dit_forward), id="tuple-dit-kl"),
    pytest.param(Family(givt, givt_pipeline, givt_forward), id="givt"),
    pytest.param(Family(mar, mar_pipeline, mar_forward), id="mar"),
]


def sample(pipe: DiffusionPipeline, prompts=PROMPTS, **kwargs) -> np.ndarray:
    """Two-step samples of ``prompts`` from a fixed generator."""
    pipe.set_progress_bar_config(disable=True)
    return pipe(prompts, num_inference_steps=2, generator=torch.Generator().manual_seed(0), output_type="np",
                **kwargs).images


def predict(family: Family, model: torch.nn.Module, prompts=PROMPTS, **kwargs) -> torch.Tensor:
    with torch.no_grad():
        return family.forward(model, prepare_concept_inputs(model, prompts, **kwargs))


def pipeline_model(pipe: DiffusionPipeline) -> torch.nn.Module:
    """The concept-conditioned model of a pipeline."""
    return pipe.unet if isinstance(pipe, TupleConditionedDDPMPipeline) else pipe.transformer


# --- 1. save/load round trip --------------------------------------------------------------------------------


@pytest.mark.parametrize("family", FAMILIES)
def test_save_load_round_trip_is_bit_identical_and_safetensors_only(family, tmp_path):
    model = family.model()
    model.save_pretrained(tmp_path / "model")
    loaded = type(model).from_pretrained(tmp_path / "model")
    pipe = family.pipeline(model)
    pipe.save_pretrained(tmp_path / "pipeline")
    reloaded = type(pipe).from_pretrained(tmp_path / "pipeline")
    for guidance in ({},) if family.no_guidance else ({}, {"guidance_scale": 4.0}):  # the null concepts too
        assert torch.equal(predict(family, loaded, **guidance), predict(family, model, **guidance))
        np.testing.assert_array_equal(sample(reloaded, **guidance), sample(pipe, **guidance))

    for folder in ("model", "pipeline"):
        files = [path for path in (tmp_path / folder).rglob("*") if path.is_file()]
        assert {path.suffix for path in files} == {".json", ".safetensors"}, files  # no .bin, .pt, pickle
        assert all(path.stat().st_size > 0 for path in files)


# --- 2. concept order -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("family", FAMILIES)
def test_concept_order_survives_the_config_and_strings_mean_the_array_indices(family, tmp_path):
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
    with pytest.raises(ValueError, match=problem):
        sample(family.pipeline(family.model()), prompts)


# --- 3. guidance equivalence ------------------------------------------------------------------------------------


@pytest.mark.parametrize("family", FAMILIES)
def test_guidance_scale_one_is_no_guidance(family):
    pipe = family.pipeline(family.model())
    model = pipeline_model(pipe)
    if family.no_guidance is not None:
        assert not model.has_null_embeddings, "the table says this row cannot guide, but its model has null concepts"
        with pytest.raises(ValueError, match="concept_dropout > 0"):
            sample(pipe, guidance_scale=2.0)
        pytest.skip(family.no_guidance)
    assert model.has_null_embeddings

    unguided = sample(pipe)
    np.testing.assert_array_equal(sample(pipe, guidance_scale=1.0), unguided)
    assert not np.array_equal(sample(pipe, guidance_scale=4.0), unguided)  # guidance does act

    # The guided batch at weight 1, null + 1 * (cond - null), is the conditional prediction.
    cond, null = predict(family, model, guidance_scale=4.0).chunk(2)
    torch.testing.assert_close(null + 1.0 * (cond - null), predict(family, model), rtol=1e-5, atol=1e-5)
    assert not torch.allclose(null, cond)


# --- 4. device placement ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("family", FAMILIES)
def test_a_model_built_on_meta_runs_on_meta(family):
    with torch.device(META):
        model = family.model()
    assert tensors_off_device(model, META) == []
    assert len(list(model.buffers())) > 0  # the non-persistent tables (cardinalities, frequencies) are checked too
    inputs = prepare_concept_inputs(model, PROMPTS, device=META)
    with torch.no_grad(), StrictDeviceMode():
        out = family.forward(model, inputs)
    assert out.device == META
    assert out.shape == predict(family, family.model()).shape
