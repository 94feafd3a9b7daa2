"""MaskGITPipeline: outputs, determinism, model index and Hub entry file, guidance and conditioning errors."""

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from diffusers import DiffusionPipeline

from compgen import MaskGITPipeline, MaskGITScheduler, MaskGITTransformer, shapes_space
from compgen.models.vq_tokenizer import build_vq_tokenizer, decode_indices, encode_to_indices, token_grid_size
from compgen.shapes import shapes_continuous_concepts

ENTRY_FILE = Path(__file__).resolve().parents[1] / "custom_pipelines" / "maskgit.py"
SPACE = shapes_space()


def make_pipe(concept_dropout=0.0, codebook_size=32):
    torch.manual_seed(0)
    vqvae = build_vq_tokenizer(28, block_out_channels=(8, 8, 8), num_vq_embeddings=codebook_size, vq_embed_dim=4,
                               norm_num_groups=4)
    transformer = MaskGITTransformer(SPACE.to_dict(), codebook_size=codebook_size, grid_size=token_grid_size(vqvae),
                                     hidden_size=32, num_layers=2, num_heads=2, conditioning="full",
                                     continuous_concepts=shapes_continuous_concepts(SPACE),
                                     concept_dropout=concept_dropout)
    pipe = MaskGITPipeline(vqvae=vqvae.eval(), transformer=transformer.eval(),
                           scheduler=MaskGITScheduler(mask_token_id=codebook_size))
    pipe.set_progress_bar_config(disable=True)
    return pipe


@pytest.fixture(scope="module")
def pipe():
    return make_pipe()


def sample(pipe, concepts, seed=0, **kwargs):
    return pipe(concepts, num_inference_steps=4, generator=torch.Generator().manual_seed(seed), output_type="np",
                **kwargs).images


def test_tokenizer_grid_and_index_round_trip():
    vqvae = make_pipe().vqvae
    images = torch.rand(2, 3, 28, 28) * 2 - 1
    indices = encode_to_indices(vqvae, images)
    assert indices.shape == (2, 7, 7) and token_grid_size(vqvae) == 7
    with torch.no_grad():
        direct = vqvae(images).sample
        torch.testing.assert_close(decode_indices(vqvae, indices), direct)


def test_output_types_and_order(pipe):
    images = sample(pipe, ["011", "111"], num_images_per_prompt=2)
    assert images.shape == (4, 28, 28, 3) and images.min() >= 0 and images.max() <= 1
    pt = pipe("111", num_inference_steps=2, output_type="pt").images
    assert pt.shape == (1, 3, 28, 28)
    pil = pipe("111", num_inference_steps=2).images
    assert pil[0].size == (28, 28)


def test_same_generator_same_images_other_generator_differs(pipe):
    np.testing.assert_array_equal(sample(pipe, ["000", "111"], seed=3), sample(pipe, ["000", "111"], seed=3))
    assert not np.array_equal(sample(pipe, ["000", "111"], seed=3), sample(pipe, ["000", "111"], seed=4))


def test_model_index_and_hub_entry_file(pipe, tmp_path):
    pipe.save_pretrained(tmp_path)
    index = json.loads((tmp_path / "model_index.json").read_text())
    assert index["transformer"] == ["compgen.models.maskgit_transformer", "MaskGITTransformer"]
    assert index["scheduler"] == ["compgen.schedulers.scheduling_maskgit", "MaskGITScheduler"]

    shutil.copy(ENTRY_FILE, tmp_path / "maskgit.py")
    hub_style = DiffusionPipeline.from_pretrained(tmp_path, custom_pipeline="maskgit", trust_remote_code=True)
    assert type(hub_style).__name__ == "MaskGITPipeline"
    hub_style.set_progress_bar_config(disable=True)
    np.testing.assert_array_equal(sample(hub_style, ["011", "111"]), sample(pipe, ["011", "111"]))


def test_guidance_needs_null_concepts_and_changes_samples():
    with pytest.raises(ValueError, match="concept_dropout"):
        sample(make_pipe(), "111", guidance_scale=2.0)
    guided = make_pipe(concept_dropout=0.1)
    assert sample(guided, "111", guidance_scale=3.0).shape == (1, 28, 28, 3)
    assert not np.array_equal(sample(guided, ["111"] * 4, guidance_scale=3.0), sample(guided, ["111"] * 4))


def test_conditioning_errors(pipe):
    with pytest.raises(ValueError, match="no concept prompts"):
        sample(pipe, [])
    with pytest.raises(ValueError, match="output_type"):
        pipe("111", output_type="latents")  # diffusers spells it "latent"
    for steps in (None, 2.5, 0, True):  # refused before any work, as GIVT and MAR refuse them
        with pytest.raises(ValueError, match="num_inference_steps must be a positive integer"):
            pipe("111", num_inference_steps=steps)
    with pytest.raises(ValueError, match="mask_token_id"):
        MaskGITPipeline(vqvae=pipe.vqvae, transformer=pipe.transformer, scheduler=MaskGITScheduler(mask_token_id=7))
