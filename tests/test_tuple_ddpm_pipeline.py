"""TupleConditionedDDPMPipeline: prompts, determinism, round trips, output types, guidance, scheduler swaps."""

import shutil
from pathlib import Path

import numpy as np
import PIL.Image
import pytest
import torch
from diffusers import DDIMScheduler, DDPMScheduler, DiffusionPipeline, EulerDiscreteScheduler

from compgen import shapes_space
from compgen.models.tuple_unet import TupleConditionedUNet2DModel
from compgen.pipelines.concept_inputs import parse_concept_prompts, prepare_concept_inputs
from compgen.pipelines.tuple_ddpm import TupleConditionedDDPMPipeline, paper_ddpm_scheduler
from compgen.shapes import shapes_continuous_concepts

SPACE = shapes_space()
ENTRY_FILE = Path(__file__).resolve().parents[1] / "custom_pipelines" / "tuple_ddpm.py"
STEPS = 4


def make_pipeline(**unet_kwargs) -> TupleConditionedDDPMPipeline:
    torch.manual_seed(0)
    unet = TupleConditionedUNet2DModel(
        SPACE.to_dict(), block_out_channels=(8, 16), layers_per_block=1, **unet_kwargs
    ).eval()
    pipe = TupleConditionedDDPMPipeline(unet=unet, scheduler=paper_ddpm_scheduler())
    pipe.set_progress_bar_config(disable=True)
    return pipe


def sample(pipe, prompts="111", seed=0, **kwargs) -> np.ndarray:
    kwargs = {"num_inference_steps": STEPS, "output_type": "np", **kwargs}
    return pipe(prompts, generator=torch.Generator().manual_seed(seed), **kwargs).images


@pytest.fixture(scope="module")
def pipe():
    return make_pipeline(concept_dropout=0.1)


def test_parse_concept_prompts_forms():
    expected = torch.tensor([[1, 1, 1]])
    for prompt in ("111", (1, 1, 1), [1, 1, 1], ["111"], [(1, 1, 1)], torch.tensor([1, 1, 1]), np.array([[1, 1, 1]])):
        assert torch.equal(parse_concept_prompts(SPACE, prompt), expected), prompt
    assert torch.equal(
        parse_concept_prompts(SPACE.to_dict(), ["000", (1, 0, 1)], num_images_per_prompt=2),
        torch.tensor([[0, 0, 0], [0, 0, 0], [1, 0, 1], [1, 0, 1]]),
    )
    described = {"shape": "triangle", "color": "red", "size": "small"}
    assert parse_concept_prompts(SPACE, described).tolist() == [[1, 0, 1]]
    assert parse_concept_prompts(SPACE, "111").dtype == torch.long
    # Model configs store the space as ordered [name, values] pairs.
    assert parse_concept_prompts(SPACE.to_pairs(), "110").tolist() == [[1, 1, 0]]


def test_conditioning_batch_with_guidance_appends_the_null_half():
    unet = make_pipeline(concept_dropout=0.1, conditioning="full",
                         continuous_concepts=shapes_continuous_concepts(SPACE)).unet
    values = torch.tensor([[0.9, 0.1, 0.1, 2.7], [0.1, 0.1, 0.9, 1.6]])
    plain = prepare_concept_inputs(unet, ["000", "111"], num_images_per_prompt=2, concept_values=values)
    assert plain.batch_size == 4 and not plain.do_classifier_free_guidance
    assert plain.concepts.tolist() == [[0, 0, 0], [0, 0, 0], [1, 1, 1], [1, 1, 1]]
    assert not plain.drop_mask.any()
    torch.testing.assert_close(plain.concept_values, values.repeat_interleave(2, dim=0))

    guided = prepare_concept_inputs(unet, ["000", "111"], 2, guidance_scale=3.0, concept_values=values)
    assert guided.batch_size == 4 and guided.do_classifier_free_guidance
    assert torch.equal(guided.concepts, torch.cat([plain.concepts, plain.concepts]))
    assert guided.drop_mask.tolist() == [[False] * 3] * 4 + [[True] * 3] * 4
    assert torch.equal(guided.concept_values, torch.cat([plain.concept_values, plain.concept_values]))
    assert set(guided.model_kwargs) == {"concepts", "concept_values", "drop_mask"}

    no_null = make_pipeline().unet
    assert prepare_concept_inputs(no_null, "111").drop_mask is None
    with pytest.raises(ValueError, match="concept_dropout > 0"):
        prepare_concept_inputs(no_null, "111", guidance_scale=2.0)


@pytest.mark.parametrize(
    "prompts, match",
    [
        ("11", "has 2 values but the space has 3"),
        ("121", "out of range for concept variable 'color'"),
        ((1, 1, 1, 1), "has 4 values"),
        ([], "no concept prompts"),
        ("1a1", "only digits"),
        (3.5, "cannot interpret"),
    ],
)
def test_parse_concept_prompts_errors(prompts, match):
    with pytest.raises(ValueError, match=match):
        parse_concept_prompts(SPACE, prompts)


def test_pipeline_validates_prompts_and_arguments(pipe):
    with pytest.raises(ValueError, match="num_images_per_prompt"):
        pipe("111", num_images_per_prompt=0, num_inference_steps=STEPS)
    with pytest.raises(ValueError, match="output_type"):
        pipe("111", num_inference_steps=STEPS, output_type="latents")  # diffusers spells it "latent"


def test_output_types_agree(pipe):
    as_np = sample(pipe, ["000", "111"], num_images_per_prompt=2)
    assert as_np.shape == (4, 28, 28, 3) and as_np.dtype == np.float32
    assert 0.0 <= as_np.min() and as_np.max() <= 1.0
    as_pt = sample(pipe, ["000", "111"], num_images_per_prompt=2, output_type="pt")
    assert isinstance(as_pt, torch.Tensor) and as_pt.shape == (4, 3, 28, 28)
    np.testing.assert_allclose(as_pt.permute(0, 2, 3, 1).numpy(), as_np, atol=1e-6)
    as_pil = sample(pipe, ["000", "111"], num_images_per_prompt=2, output_type="pil")
    assert len(as_pil) == 4 and all(isinstance(im, PIL.Image.Image) and im.size == (28, 28) for im in as_pil)
    np.testing.assert_array_equal(np.asarray(as_pil[3]), (as_np[3] * 255).round().astype(np.uint8))
    (tuple_images,) = pipe(
        "111",
        num_inference_steps=STEPS,
        output_type="np",
        return_dict=False,
        generator=torch.Generator().manual_seed(0),
    )
    np.testing.assert_array_equal(tuple_images, sample(pipe, "111"))


def test_determinism_and_conditioning(pipe):
    first = sample(pipe, "111", seed=0)
    np.testing.assert_array_equal(sample(pipe, "111", seed=0), first)
    assert not np.array_equal(sample(pipe, "111", seed=1), first)
    assert not np.array_equal(sample(pipe, "000", seed=0), first)  # same noise, another class


def test_classifier_free_guidance(pipe):
    unguided = sample(pipe, "111")
    guided = sample(pipe, "111", guidance_scale=3.0)
    assert guided.shape == unguided.shape and not np.array_equal(guided, unguided)
    # Guidance 0 samples the unconditional (all-null) model: the requested class no longer matters.
    np.testing.assert_allclose(
        sample(pipe, "111", guidance_scale=0.0), sample(pipe, "000", guidance_scale=0.0), atol=1e-5
    )
    with pytest.raises(ValueError, match="concept_dropout > 0"):
        sample(make_pipeline(), "111", guidance_scale=2.0)


def test_sampling_ignores_training_mode_dropout():
    pipe = make_pipeline(concept_dropout=0.5)
    expected = sample(pipe, ["000", "111"])
    pipe.unet.train()
    np.testing.assert_array_equal(sample(pipe, ["000", "111"]), expected)


def test_full_conditioning_uses_canonical_or_given_values():
    pipe = make_pipeline(conditioning="full", continuous_concepts=shapes_continuous_concepts(SPACE))
    canonical = torch.tensor([[0.1, 0.1, 0.9, 1.6], [0.9, 0.1, 0.1, 2.7]])  # 111 and 000
    default = sample(pipe, ["111", "000"], num_images_per_prompt=2)
    np.testing.assert_allclose(
        sample(pipe, ["111", "000"], num_images_per_prompt=2, concept_values=canonical), default, atol=1e-6
    )
    other = sample(pipe, ["111", "000"], num_images_per_prompt=2, concept_values=canonical.flip(0))
    assert not np.allclose(other, default)


@pytest.mark.parametrize("scheduler_cls", [DDIMScheduler, EulerDiscreteScheduler, DDPMScheduler])
def test_scheduler_swap(pipe, scheduler_cls):
    swapped = TupleConditionedDDPMPipeline(unet=pipe.unet, scheduler=scheduler_cls.from_config(pipe.scheduler.config))
    swapped.set_progress_bar_config(disable=True)
    assert swapped.scheduler.config.num_train_timesteps == 500
    assert swapped.scheduler.config.beta_end == 0.02
    images = sample(swapped, ["000", "111"])
    assert images.shape == (2, 28, 28, 3) and np.isfinite(images).all()
    np.testing.assert_array_equal(sample(swapped, ["000", "111"]), images)


def test_paper_scheduler():
    config = paper_ddpm_scheduler().config
    assert (config.num_train_timesteps, config.beta_start, config.beta_end) == (500, 1e-4, 0.02)
    assert (config.beta_schedule, config.prediction_type) == ("linear", "epsilon")


def test_model_index_records_unet_module_path(pipe, tmp_path):
    pipe.save_pretrained(tmp_path)
    index = (tmp_path / "model_index.json").read_text()
    assert '"compgen.models.tuple_unet"' in index and '"TupleConditionedUNet2DModel"' in index
    assert (tmp_path / "unet" / "diffusion_pytorch_model.safetensors").is_file()


def test_diffusion_pipeline_custom_pipeline_entry_file(pipe, tmp_path):
    pipe.save_pretrained(tmp_path)
    expected = sample(pipe, ["011", "111"])

    # A local path to the entry file.
    loaded = DiffusionPipeline.from_pretrained(tmp_path, custom_pipeline=str(ENTRY_FILE), trust_remote_code=True)
    assert type(loaded).__name__ == "TupleConditionedDDPMPipeline"
    loaded.set_progress_bar_config(disable=True)
    np.testing.assert_array_equal(sample(loaded, ["011", "111"]), expected)

    # Hub layout: the entry file next to model_index.json, named by module.
    shutil.copy(ENTRY_FILE, tmp_path / "tuple_ddpm.py")
    hub_style = DiffusionPipeline.from_pretrained(tmp_path, custom_pipeline="tuple_ddpm", trust_remote_code=True)
    hub_style.set_progress_bar_config(disable=True)
    np.testing.assert_array_equal(sample(hub_style, ["011", "111"]), expected)

    with pytest.raises(ValueError, match="trust_remote_code"):
        DiffusionPipeline.from_pretrained(tmp_path, custom_pipeline="tuple_ddpm")
