"""TupleConditionedDiT and its pipeline (Paper B's continuous counterpart), and the conditioning modes' semantics,
which are the same for every model (U-Net, MaskGIT, DiT)."""

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from diffusers import DDIMScheduler, DDPMScheduler, DiffusionPipeline

from compgen import (
    MaskGITScheduler,
    MaskGITTransformer,
    TupleConditionedDiT,
    TupleConditionedDiTPipeline,
    TupleConditionedUNet2DModel,
    shapes_space,
)
from compgen.images import uint8_to_signed
from compgen.models.vq_tokenizer import build_vq_tokenizer
from compgen.shapes import shapes_continuous_concepts
from compgen.training.tasks.ddpm import DDPMTask
from compgen.training.tasks.dit import DiTTask
from compgen.training.tasks.latent_tokenizer import latent_statistics, precompute_latents
from compgen.training.tasks.maskgit import MaskGITTask, precompute_tokens

pytestmark = pytest.mark.usefixtures("single_thread")

SPACE = shapes_space()
ENTRY_FILE = Path(__file__).resolve().parents[1] / "custom_pipelines" / "tuple_dit.py"


def make_dit(conditioning="full", concept_dropout=0.0, **stats):
    torch.manual_seed(0)
    return TupleConditionedDiT(SPACE.to_dict(), latent_channels=4, grid_size=7, hidden_size=32, num_layers=2,
                               num_heads=2, conditioning=conditioning,
                               continuous_concepts=shapes_continuous_concepts(SPACE) if conditioning == "full" else {},
                               concept_dropout=concept_dropout, **stats)


def make_pipe(concept_dropout=0.0):
    torch.manual_seed(0)
    vqvae = build_vq_tokenizer(28, block_out_channels=(8, 8, 8), num_vq_embeddings=32, vq_embed_dim=4,
                               norm_num_groups=4).eval()
    pipe = TupleConditionedDiTPipeline(vqvae=vqvae, transformer=make_dit(concept_dropout=concept_dropout).eval(),
                                       scheduler=DDPMScheduler(num_train_timesteps=50, clip_sample=False))
    pipe.set_progress_bar_config(disable=True)
    return pipe


def test_dit_predicts_one_vector_per_latent_and_every_concept_matters():
    dit = make_dit().eval()
    latents = torch.randn(3, 4, 7, 7)
    out = dit(latents, torch.tensor([1, 10, 40]), torch.tensor([[0, 0, 0], [1, 1, 1], [1, 0, 1]])).sample
    assert out.shape == latents.shape
    with torch.no_grad():  # the output layer starts at zero (DiT): give it weights to see the conditioning
        dit.output_projection.weight.normal_()
    concepts = torch.tensor([[0, 0, 0]] * 3)
    base = dit(latents, 5, concepts).sample
    for variable in range(3):
        changed = concepts.clone()
        changed[:, variable] = 1
        assert not torch.allclose(dit(latents, 5, changed).sample, base)
    with pytest.raises(ValueError, match="latents"):
        dit(torch.randn(1, 3, 7, 7), 5, concepts[:1])
    with pytest.raises(ValueError, match="latent_std"):
        make_dit(latent_std=[1.0, 2.0])


def test_latent_standardization_round_trips():
    dit = make_dit(latent_mean=[0.1, -0.2, 0.3, 0.0], latent_std=[0.5, 2.0, 1.0, 0.25])
    latents = torch.randn(2, 4, 7, 7)
    torch.testing.assert_close(dit.denormalize_latents(dit.normalize_latents(latents)), latents)
    vqvae = build_vq_tokenizer(28, block_out_channels=(8, 8, 8), num_vq_embeddings=32, vq_embed_dim=4,
                               norm_num_groups=4)
    images = torch.randint(0, 256, (6, 28, 28, 3), dtype=torch.uint8)
    encoded = precompute_latents(vqvae, images)
    mean, std = latent_statistics(encoded)
    standardized = make_dit(latent_mean=mean, latent_std=std).normalize_latents(encoded)
    torch.testing.assert_close(standardized.mean(dim=(0, 2, 3)), torch.zeros(4), atol=1e-4, rtol=0)
    torch.testing.assert_close(standardized.std(dim=(0, 2, 3)), torch.ones(4), atol=1e-3, rtol=0)


def test_decoding_the_standardized_training_latents_gives_the_tokenizers_reconstructions():
    # What the DiT learns to produce (the task's standardized training latents), decoded as the pipeline decodes its
    # samples, must be exactly the tokenizer's own reconstruction of the training images: a wrong inverse
    # standardization (or decoding path) would make even a perfect denoiser draw wrong images.
    pipe = make_pipe()
    torch.manual_seed(1)
    with torch.no_grad():  # a tokenizer whose latents are far from zero mean / unit scale, per channel
        pipe.vqvae.quant_conv.weight.mul_(torch.tensor([3.0, 0.2, 1.0, 5.0]).view(-1, 1, 1, 1))
        pipe.vqvae.quant_conv.bias.copy_(torch.tensor([2.0, -1.0, 0.5, -4.0]))
        pipe.vqvae.quantize.embedding.weight.copy_(
            precompute_latents(pipe.vqvae, torch.randint(0, 256, (1, 28, 28, 3), dtype=torch.uint8))
            .permute(0, 2, 3, 1).reshape(-1, 4)[:32])
    images = torch.randint(0, 256, (5, 28, 28, 3), dtype=torch.uint8)
    latents = precompute_latents(pipe.vqvae, images)
    mean, std = latent_statistics(latents)
    assert max(abs(m) for m in mean) > 0.5 and max(std) / min(std) > 2
    pipe.transformer.register_to_config(latent_mean=mean, latent_std=std)
    task = DiTTask(pipe.transformer, pipe.vqvae, pipe.scheduler, latents)
    assert task.train_latents.std() == pytest.approx(1.0, abs=0.05)
    with torch.no_grad():
        reconstruction = pipe.vqvae(uint8_to_signed(images)).sample
        decoded = pipe.decode_latents(task.train_latents, output_type="pt")
        unquantized = pipe.decode_latents(task.train_latents, quantize=False, output_type="pt")
        plain = pipe.vqvae.decoder(pipe.vqvae.post_quant_conv(latents))
    expected = pipe.image_processor.postprocess(reconstruction, output_type="pt")
    torch.testing.assert_close(decoded, expected, atol=1e-5, rtol=0)
    torch.testing.assert_close(unquantized, pipe.image_processor.postprocess(plain, output_type="pt"),
                               atol=1e-5, rtol=0)


def test_position_embedding_scale_is_a_config_option_with_the_old_default(tmp_path):
    rms = lambda model: float(model.position_embedding.detach().pow(2).mean().sqrt())  # noqa: E731
    default = make_dit()
    assert rms(default) == pytest.approx(0.02, rel=0.1)
    wide = make_dit(position_embedding_std=1.0)
    assert rms(wide) == pytest.approx(0.88, abs=0.05) and float(wide.position_embedding.detach().abs().max()) <= 2
    wide.save_pretrained(tmp_path / "dit")
    assert TupleConditionedDiT.from_pretrained(tmp_path / "dit").config.position_embedding_std == 1.0
    with pytest.raises(ValueError, match="position_embedding_std"):
        make_dit(position_embedding_std=0.0)


def test_pipeline_is_deterministic_and_loads_through_the_hub_entry_file(tmp_path):
    pipe = make_pipe()
    first = pipe(["111", "000"], num_inference_steps=3, generator=torch.Generator().manual_seed(1),
                 output_type="np").images
    assert first.shape == (2, 28, 28, 3) and 0 <= first.min() and first.max() <= 1
    again = pipe(["111", "000"], num_inference_steps=3, generator=torch.Generator().manual_seed(1),
                 output_type="np").images
    np.testing.assert_array_equal(first, again)
    pipe.save_pretrained(tmp_path / "dit")
    index = json.loads((tmp_path / "dit" / "model_index.json").read_text())
    assert index["transformer"] == ["compgen.models.tuple_dit", "TupleConditionedDiT"]
    # Plain diffusers through the Hub entry file, and a swapped scheduler.
    generic = DiffusionPipeline.from_pretrained(tmp_path / "dit", custom_pipeline=str(ENTRY_FILE),
                                                trust_remote_code=True)
    generic.set_progress_bar_config(disable=True)
    generic.scheduler = DDIMScheduler.from_config(generic.scheduler.config)
    assert generic("011", num_inference_steps=2, output_type="np").images.shape == (1, 28, 28, 3)


def test_sampling_keeps_latents_beyond_the_unit_range_and_refuses_a_clipping_scheduler(monkeypatch):
    # Standardized latents range beyond [-1, 1]; a scheduler that clips its clean-sample estimate would corrupt them
    # (every sample of a trained DiT came out as a blue smear). With a denoiser that always predicts the same clean
    # latents, DDIM must end exactly on them.
    from diffusers.models.unets.unet_2d import UNet2DOutput

    pipe = make_pipe()
    config = pipe.transformer.config
    target = 3 * torch.randn(1, config.latent_channels, config.grid_size, config.grid_size,
                             generator=torch.Generator().manual_seed(0))
    assert target.abs().max() > 1
    monkeypatch.setattr(pipe.transformer, "forward",
                        lambda sample, *args, **kwargs: UNet2DOutput(sample=target.expand_as(sample)))
    pipe.scheduler = DDIMScheduler.from_config(pipe.scheduler.config, prediction_type="sample")
    images = pipe("000", num_inference_steps=4, generator=torch.Generator().manual_seed(0), output_type="pt").images
    quantized, _, _ = pipe.vqvae.quantize(pipe.transformer.denormalize_latents(target))
    expected = pipe.image_processor.postprocess(pipe.vqvae.decoder(pipe.vqvae.post_quant_conv(quantized)),
                                                output_type="pt")
    torch.testing.assert_close(images, expected)
    # Without the refusal, the clipped sampler would end elsewhere.
    pipe.scheduler = DDIMScheduler.from_config(pipe.scheduler.config, prediction_type="sample", clip_sample=True)
    with pytest.raises(ValueError, match="clip_sample=True"):
        pipe("000", num_inference_steps=4)
    with pytest.raises(ValueError, match="clip_sample=True"):
        TupleConditionedDiTPipeline(vqvae=pipe.vqvae, transformer=pipe.transformer,
                                    scheduler=DDPMScheduler(num_train_timesteps=50))
    with pytest.raises(ValueError, match="clip_sample=True"):
        DiTTask(pipe.transformer, pipe.vqvae, DDPMScheduler(num_train_timesteps=50),
                torch.zeros(2, config.latent_channels, config.grid_size, config.grid_size))
    # Dynamic thresholding bounds the latents too (to sample_max_value, 1 by default): refused the same way.
    pipe.scheduler = DDIMScheduler.from_config(pipe.scheduler.config, prediction_type="sample", clip_sample=False,
                                               thresholding=True)
    with pytest.raises(ValueError, match="thresholding=True"):
        pipe("000", num_inference_steps=4)
    with pytest.raises(ValueError, match="thresholding=True"):
        DiTTask(pipe.transformer, pipe.vqvae, DDPMScheduler(num_train_timesteps=50, clip_sample=False,
                                                            thresholding=True),
                torch.zeros(2, config.latent_channels, config.grid_size, config.grid_size))


def test_guidance_needs_null_concepts_and_changes_the_samples():
    with pytest.raises(ValueError, match="concept_dropout > 0"):
        make_pipe()("111", guidance_scale=3.0, num_inference_steps=2)
    pipe = make_pipe(concept_dropout=0.1)
    with torch.no_grad():
        pipe.transformer.output_projection.weight.normal_(std=0.1)
    plain = pipe("111", num_inference_steps=3, generator=torch.Generator().manual_seed(0), output_type="np").images
    guided = pipe("111", num_inference_steps=3, guidance_scale=4.0, generator=torch.Generator().manual_seed(0),
                  output_type="np").images
    assert not np.array_equal(plain, guided)
    with pytest.raises(ValueError, match="num_inference_steps"):
        pipe("111", num_inference_steps=0)


# --- the conditioning modes (full, quantized, +dropout) mean the same for every model --------------------------


def _batch(n=256):
    generator = torch.Generator().manual_seed(0)
    concepts = torch.randint(0, 2, (n, 3), generator=generator)
    rgb, size = torch.rand(n, 3, generator=generator), 1.5 + torch.rand(n, 1, generator=generator)
    images = torch.rand(n, 3, 28, 28, generator=generator) * 2 - 1
    return {"images": images, "concepts": concepts, "concept_values": torch.cat([rgb, size], 1),
            "index": torch.arange(n)}


def _tasks(conditioning: str, concept_dropout: float):
    """The U-Net, MaskGIT and DiT tasks, each with its model in the given conditioning mode."""
    continuous = shapes_continuous_concepts(SPACE) if conditioning == "full" else {}
    torch.manual_seed(0)
    unet = TupleConditionedUNet2DModel(SPACE.to_dict(), block_out_channels=(8, 16), norm_num_groups=4,
                                       conditioning=conditioning, continuous_concepts=continuous,
                                       concept_dropout=concept_dropout)
    vqvae = build_vq_tokenizer(28, block_out_channels=(8, 8, 8), num_vq_embeddings=16, vq_embed_dim=4,
                               norm_num_groups=4)
    images = torch.randint(0, 256, (256, 28, 28, 3), dtype=torch.uint8)
    transformer = MaskGITTransformer(SPACE.to_dict(), codebook_size=16, grid_size=7, hidden_size=16, num_layers=1,
                                     num_heads=2, conditioning=conditioning, continuous_concepts=continuous,
                                     concept_dropout=concept_dropout)
    dit = make_dit(conditioning, concept_dropout)
    return {
        "unet": DDPMTask(unet, DDPMScheduler(num_train_timesteps=50)),
        "maskgit": MaskGITTask(transformer, vqvae, MaskGITScheduler(mask_token_id=16),
                               precompute_tokens(vqvae, images), jepa_weight=0.0),
        "dit": DiTTask(dit, vqvae, DDPMScheduler(num_train_timesteps=50, clip_sample=False),
                       precompute_latents(vqvae, images)),
    }


@pytest.mark.parametrize("name", ["unet", "maskgit", "dit"])
def test_quantized_conditioning_ignores_the_continuous_values(name):
    task = _tasks("quantized", 0.0)[name]
    batch = _batch()
    without = {k: v for k, v in batch.items() if k != "concept_values"}
    loss, _ = task.compute_loss(task.model, batch, torch.Generator().manual_seed(3), 0)
    reference, _ = task.compute_loss(task.model, without, torch.Generator().manual_seed(3), 0)
    torch.testing.assert_close(loss, reference, rtol=0, atol=0)
    # In full mode the per-image values reach the model.
    full = _tasks("full", 0.0)[name]
    if name == "dit":
        with torch.no_grad():  # the DiT's output layer starts at zero, blind to its inputs
            full.model.output_projection.weight.normal_()
    changed = dict(batch, concept_values=batch["concept_values"] * 0.5)
    a, _ = full.compute_loss(full.model, batch, torch.Generator().manual_seed(3), 0)
    b, _ = full.compute_loss(full.model, changed, torch.Generator().manual_seed(3), 0)
    assert not torch.equal(a, b)


@pytest.mark.parametrize("name", ["unet", "maskgit", "dit"])
def test_concept_dropout_uses_the_null_embedding_at_the_given_rate(name, monkeypatch):
    task = _tasks("full", 0.25)[name]
    model = task.model.transformer if name == "maskgit" else task.model
    embedding = model.concept_embedding
    seen = []

    def recording_forward(concepts, concept_values=None, drop_mask=None, _original=embedding.forward, **options):
        seen.append(drop_mask.clone())
        out = _original(concepts, concept_values, drop_mask, **options)
        null = embedding.null_embedding.expand_as(out)
        assert torch.equal(out[drop_mask], null[drop_mask])  # a dropped concept is exactly its null embedding
        return out

    monkeypatch.setattr(embedding, "forward", recording_forward)
    for step in range(4):
        task.compute_loss(task.model, _batch(), torch.Generator().manual_seed(step), step)
    rate = torch.cat(seen).float().mean().item()
    assert 0.2 < rate < 0.3, rate  # 4 x 256 x 3 draws at 0.25
