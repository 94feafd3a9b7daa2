"""MAR's transformer and its per-token diffusion head: shapes, a head that learns to denoise a fixed target and samples
it with a diffusers scheduler, save/load round trips and refused input."""

import json
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from diffusers import DDIMScheduler, DDPMScheduler, DiffusionPipeline
from margins import check_margin, margin_seed

from compgen import MARPipeline, MaskGITScheduler
from compgen.concepts import shapes_space
from compgen.models.mar_transformer import DiffusionHead, MARTransformer
from compgen.recipes import load_recipe

pytestmark = pytest.mark.usefixtures("single_thread")

SPACE = shapes_space()
ENTRY_FILE = Path(__file__).resolve().parents[1] / "custom_pipelines" / "mar.py"


def _model(**kwargs) -> MARTransformer:
    torch.manual_seed(0)
    options = dict(concept_space=SPACE.to_pairs(), latent_channels=3, grid_size=2, head_width=32, head_depth=2,
                   hidden_size=32, num_layers=1, num_heads=2)
    return MARTransformer(**(options | kwargs))


def test_the_transformer_conditions_every_token_and_the_head_starts_at_zero():
    model = _model()
    latents, mask = torch.randn(4, 3, 2, 2), torch.rand(4, 4) < 0.5
    conditions = model(latents, mask, torch.zeros(4, 3, dtype=torch.long)).conditions
    assert conditions.shape == (4, 4, 32)
    flat = conditions.reshape(-1, 32)
    prediction = model.denoise(torch.randn(16, 3), torch.arange(16), flat)
    assert prediction.shape == (16, 3) and float(prediction.abs().max()) == 0.0
    # Visible tokens are read, masked ones are not.
    changed = latents.clone()
    changed.flatten(2).transpose(1, 2)[mask] += 5.0
    torch.testing.assert_close(model(changed, mask, torch.zeros(4, 3, dtype=torch.long)).conditions, conditions)


def test_the_head_learns_to_denoise_a_fixed_target_and_a_scheduler_samples_it():
    torch.manual_seed(margin_seed(0))
    head = DiffusionHead(latent_channels=2, condition_size=4, width=64, depth=2)
    scheduler = DDPMScheduler(num_train_timesteps=100, clip_sample=False)
    targets = torch.tensor([[1.5, -0.5], [-1.0, 2.0]])  # one target per condition
    conditions = torch.eye(2, 4)
    optimizer = torch.optim.Adam(head.parameters(), lr=2e-3)
    generator = torch.Generator().manual_seed(margin_seed(0))
    for _ in range(1500):
        index = torch.randint(0, 2, (128,), generator=generator)
        noise = torch.randn(128, 2, generator=generator)
        timesteps = torch.randint(0, 100, (128,), generator=generator)
        noisy = scheduler.add_noise(targets[index], noise, timesteps)
        loss = F.mse_loss(head(noisy, timesteps, conditions[index]), noise)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    sampler = DDIMScheduler.from_config(scheduler.config)
    sampler.set_timesteps(25)
    sample = torch.randn(64, 2, generator=torch.Generator().manual_seed(margin_seed(1)))
    condition = conditions[torch.arange(64) % 2]
    with torch.no_grad():
        for t in sampler.timesteps:
            sample = sampler.step(head(sample, t, condition), t, sample).prev_sample
    torch.testing.assert_close(sample[0::2].mean(0), targets[0], atol=0.15, rtol=0)
    torch.testing.assert_close(sample[1::2].mean(0), targets[1], atol=0.15, rtol=0)
    error = float((sample - targets[torch.arange(64) % 2]).abs().median())
    check_margin("MAR head: median error of DDIM samples", error, below=0.15)


def test_save_and_load_give_identical_outputs(tmp_path):
    model = _model(conditioning="full", continuous_concepts={"size": [[2.7], [1.6]]}, latent_mean=[0.1, 0.2, 0.3],
                   latent_std=[1.0, 2.0, 3.0]).eval()
    with torch.no_grad():  # the head's output layers start at zero: give them weights
        model.head.output_projection.weight.normal_(std=0.1)
        model.head.modulation_out.weight.normal_(std=0.1)
    model.save_pretrained(tmp_path)
    loaded = MARTransformer.from_pretrained(tmp_path).eval()
    latents, mask = torch.randn(3, 3, 2, 2), torch.rand(3, 2, 2) < 0.5
    concepts = torch.tensor([[0, 1, 1], [1, 0, 0], [1, 1, 1]])
    with torch.no_grad():
        conditions = model(latents, mask, concepts).conditions
        torch.testing.assert_close(loaded(latents, mask, concepts).conditions, conditions, rtol=0, atol=0)
        flat, noisy = conditions.reshape(-1, 32), torch.randn(12, 3)
        torch.testing.assert_close(loaded.denoise(noisy, 7, flat), model.denoise(noisy, 7, flat), rtol=0, atol=0)


def test_bad_input_is_refused_with_the_problem_named():
    model = _model()
    with pytest.raises(ValueError, match=r"latents must be \(B, 3, 2, 2\)"):
        model(torch.randn(2, 4, 2, 2), torch.zeros(2, 4, dtype=torch.bool), torch.zeros(2, 3, dtype=torch.long))
    with pytest.raises(ValueError, match="samples \\(N, C\\) and conditions \\(N, D\\)"):
        model.denoise(torch.randn(5, 3), 1, torch.randn(4, 32))
    with pytest.raises(ValueError, match="head_width must be at least 1, got 0"):
        _model(head_width=0)
    for name in ("head_width", "head_depth"):  # the recipe's check is its owner's
        with pytest.raises(ValueError, match=f"{name} must be at least 1, got 0"):
            MARTransformer.check_options(**{name: 0})


def _pipe(kl: bool = False):
    from conftest import tiny_tokenizer

    tokenizer = tiny_tokenizer(kl, 3)
    transformer = _model(grid_size=7, latent_mean=[0.1, 0.0, -0.1], latent_std=[1.0, 0.5, 2.0]).eval()
    with torch.no_grad():
        transformer.head.output_projection.weight.normal_(std=0.1)
    pipe = MARPipeline(vqvae=None if kl else tokenizer, vae=tokenizer if kl else None, transformer=transformer,
                       scheduler=MaskGITScheduler(mask_token_id=0),
                       head_scheduler=DDPMScheduler(num_train_timesteps=50, clip_sample=False))
    pipe.set_progress_bar_config(disable=True)
    return pipe


@pytest.mark.parametrize("kl", [False, True], ids=["vq", "kl"])
def test_pipeline_is_deterministic_and_round_trips_through_save_and_the_hub_entry_file(tmp_path, kl):
    pipe = _pipe(kl)
    kwargs = dict(num_inference_steps=3, num_head_steps=4, output_type="np")
    first = pipe(["111", "000"], generator=torch.Generator().manual_seed(1), **kwargs).images
    assert first.shape == (2, 28, 28, 3) and 0 <= first.min() and first.max() <= 1
    np.testing.assert_array_equal(first, pipe(["111", "000"], generator=torch.Generator().manual_seed(1),
                                              **kwargs).images)
    pipe.save_pretrained(tmp_path / "mar")
    index = json.loads((tmp_path / "mar" / "model_index.json").read_text())
    assert index["transformer"] == ["compgen.models.mar_transformer", "MARTransformer"]
    for loaded in (MARPipeline.from_pretrained(tmp_path / "mar"),
                   DiffusionPipeline.from_pretrained(tmp_path / "mar", custom_pipeline=str(ENTRY_FILE),
                                                     trust_remote_code=True)):
        loaded.set_progress_bar_config(disable=True)
        again = loaded(["111", "000"], generator=torch.Generator().manual_seed(1), **kwargs).images
        np.testing.assert_array_equal(first, again)
    # A DDIM head scheduler swaps in on the same noise schedule.
    pipe.head_scheduler = DDIMScheduler.from_config(pipe.head_scheduler.config)
    assert pipe("011", num_inference_steps=2, num_head_steps=2, output_type="np").images.shape == (1, 28, 28, 3)


def test_pipeline_refuses_bad_options():
    pipe = _pipe()
    for options, message in (({"temperature": -1.0}, "temperature"), ({"num_head_steps": 0}, "num_head_steps"),
                             ({"num_head_steps": 2.5}, "num_head_steps"), ({"num_head_steps": True}, "num_head_steps"),
                             ({"guidance_scale": 2.0}, "concept_dropout")):
        with pytest.raises(ValueError, match=message):
            pipe("111", **options)
    with pytest.raises(ValueError, match="clip_sample=True"):
        MARPipeline(vqvae=pipe.vqvae, transformer=pipe.transformer, scheduler=pipe.scheduler,
                    head_scheduler=DDPMScheduler(num_train_timesteps=50))
    with pytest.raises(ValueError, match="thresholding=True"):
        MARPipeline(vqvae=pipe.vqvae, transformer=pipe.transformer, scheduler=pipe.scheduler,
                    head_scheduler=DDPMScheduler(num_train_timesteps=50, clip_sample=False, thresholding=True))


def test_a_training_forward_predicts_the_noisy_masked_tokens():
    model = _model()
    latents, mask = torch.randn(2, 3, 2, 2), torch.tensor([[True, False, True, False], [False, False, True, True]])
    concepts = torch.zeros(2, 3, dtype=torch.long)
    out = model(latents, mask, concepts, noisy_tokens=torch.randn(8, 3), timesteps=torch.arange(8))
    assert out.prediction.shape == (8, 3)  # two noise draws for each of the 4 masked tokens
    with pytest.raises(ValueError, match="k rows per masked token"):
        model(latents, mask, concepts, noisy_tokens=torch.randn(7, 3), timesteps=torch.arange(7))


@pytest.mark.usefixtures("fresh_accelerator_state")
def test_train_mar_end_to_end(dataset_dir, tmp_path):
    """The script on a tiny split: tokenizer first, then MAR, an evaluation, the card, and a pipeline that loads."""
    from test_kl_tokenizer import TINY

    from compgen.evaluation.probes import ConceptProbes

    script = load_recipe("mar")
    output = tmp_path / "mar"
    torch.manual_seed(0)  # untrained probes: the evaluation runs, its accuracy is moot
    ConceptProbes(SPACE.to_dict(), image_size=28, probe_type="linear").save_pretrained(tmp_path / "probes")
    script.main(["--dataset", str(dataset_dir), "--output_dir", str(output), *TINY, "--head_width", "16",
                 "--head_depth", "1", "--num_train_timesteps", "20", "--max_train_steps", "2", "--eval_steps", "2",
                 "--eval_images_per_class", "2", "--eval_head_steps", "2", "--probes_path", str(tmp_path / "probes")])
    records = [json.loads(line) for line in (output / "learning_dynamics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [2] and records[0]["sampling"]["num_head_steps"] == 2
    assert "MARTransformer" in (output / "README.md").read_text()
    pipe = MARPipeline.from_pretrained(output)
    pipe.set_progress_bar_config(disable=True)
    assert pipe("111", num_inference_steps=2, num_head_steps=2, output_type="np").images.shape == (1, 28, 28, 3)


def test_head_guidance_mixes_the_conditional_and_null_noise_predictions():
    """MAR's classifier-free guidance of its head: weight 1 is the conditional head, weight 0 the null one."""
    from model_families import mar, mar_pipeline

    pipe = mar_pipeline(mar())
    with torch.no_grad():  # adaLN-Zero starts the head blind to its condition: give its zero weights values
        for parameter in pipe.transformer.parameters():
            if not parameter.any():
                parameter.normal_(std=0.2, generator=torch.Generator().manual_seed(3))
    conditions = torch.randn(5, 16, generator=torch.Generator().manual_seed(0))
    null = torch.randn(5, 16, generator=torch.Generator().manual_seed(1))

    @torch.no_grad()
    def head(*args, **kwargs):
        return pipe.denoise_tokens(*args, num_head_steps=4, temperature=1.0,
                                   generator=torch.Generator().manual_seed(2), **kwargs)

    torch.testing.assert_close(head(conditions, null_conditions=null, guidance_scale=1.0), head(conditions))
    torch.testing.assert_close(head(conditions, null_conditions=null, guidance_scale=0.0), head(null))
    assert not torch.allclose(head(conditions, null_conditions=null, guidance_scale=3.0), head(conditions))
    pipe.set_progress_bar_config(disable=True)
    guided = pipe("021", num_inference_steps=2, num_head_steps=3, guidance_scale=3.0,
                  generator=torch.Generator().manual_seed(0), output_type="np").images
    assert guided.shape == (1, 28, 28, 3) and np.isfinite(guided).all()
