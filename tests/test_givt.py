"""GIVT's Gaussian-mixture output and the masked transformer that predicts it: exact densities, a one-component fit
that recovers a Gaussian, a tiny model that learns per-class latents, save/load round trips and refused input."""

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from diffusers import DiffusionPipeline
from margins import check_margin, margin_seed
from test_kl_tokenizer import TINY

from compgen import GIVTPipeline, MaskGITScheduler
from compgen.concepts import shapes_space
from compgen.models.gaussian_mixture import mixture_log_prob, mixture_sample
from compgen.models.givt_transformer import GIVTTransformer
from compgen.recipes import load_recipe

pytestmark = pytest.mark.usefixtures("single_thread")

SPACE = shapes_space()
ENTRY_FILE = Path(__file__).resolve().parents[1] / "custom_pipelines" / "givt.py"


def _model(seed: int = 0, **kwargs) -> GIVTTransformer:
    torch.manual_seed(seed)
    options = dict(concept_space=SPACE.to_pairs(), latent_channels=3, grid_size=2, num_mixtures=2, hidden_size=32,
                   num_layers=1, num_heads=2)
    return GIVTTransformer(**(options | kwargs))


def test_mixture_log_prob_is_the_mixture_density():
    torch.manual_seed(0)
    logits, means, log_scales = torch.randn(5, 3), torch.randn(5, 3, 2), 0.3 * torch.randn(5, 3, 2)
    targets = torch.randn(5, 2)
    reference = torch.distributions.MixtureSameFamily(
        torch.distributions.Categorical(logits=logits),
        torch.distributions.Independent(torch.distributions.Normal(means, log_scales.exp()), 1))
    torch.testing.assert_close(mixture_log_prob(logits, means, log_scales, targets), reference.log_prob(targets))
    with pytest.raises(ValueError, match="a mixture needs"):
        mixture_log_prob(logits, means, log_scales, torch.randn(5, 3))


def test_a_one_component_fit_recovers_a_gaussians_mean_and_variance():
    generator = torch.Generator().manual_seed(0)
    data = torch.tensor([1.5, -2.0]) + torch.tensor([0.5, 2.0]) * torch.randn(4000, 2, generator=generator)
    means = torch.zeros(1, 2, requires_grad=True)
    log_scales = torch.zeros(1, 2, requires_grad=True)
    optimizer = torch.optim.Adam([means, log_scales], lr=0.05)
    for _ in range(600):
        loss = -mixture_log_prob(torch.zeros(len(data), 1), means.expand(len(data), 1, 2),
                                 log_scales.expand(len(data), 1, 2), data).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    torch.testing.assert_close(means.detach()[0], data.mean(0), atol=0.02, rtol=0)
    torch.testing.assert_close(log_scales.detach()[0].exp().square(), data.var(0), rtol=0.03, atol=0)


def test_mixture_samples_follow_the_weights_and_temperature():
    logits = torch.tensor([[math.log(0.8), math.log(0.2)]]).expand(20000, 2)
    means = torch.tensor([[[-3.0], [3.0]]]).expand(20000, 2, 1)
    log_scales = torch.full((20000, 2, 1), math.log(0.5))
    samples = mixture_sample(logits, means, log_scales, generator=torch.Generator().manual_seed(0))[:, 0]
    assert abs(float((samples > 0).float().mean()) - 0.2) < 0.01
    assert abs(float(samples[samples < 0].std()) - 0.5) < 0.02
    cold = mixture_sample(logits, means, log_scales, temperature=0.0, generator=torch.Generator().manual_seed(0))
    assert set(cold[:, 0].tolist()) == {-3.0, 3.0}
    same = mixture_sample(logits, means, log_scales, generator=torch.Generator().manual_seed(0))[:, 0]
    torch.testing.assert_close(same, samples)
    with pytest.raises(ValueError, match="temperature"):
        mixture_sample(logits, means, log_scales, temperature=-1.0)


def test_the_model_outputs_a_mixture_per_token_and_starts_as_unit_gaussians():
    model = _model()
    latents, mask = torch.randn(4, 3, 2, 2), torch.rand(4, 4) < 0.5
    out = model(latents, mask, torch.zeros(4, 3, dtype=torch.long))
    assert out.logits.shape == (4, 4, 2) and out.means.shape == out.log_scales.shape == (4, 4, 2, 3)
    assert float(out.means.abs().max()) == 0.0 and float(out.log_scales.abs().max()) == 0.0
    mask[0, 0] = True
    nll = model.masked_nll(out, latents, mask)
    expected = 0.5 * math.log(2 * math.pi) + 0.5 * latents.flatten(2).transpose(1, 2)[mask].square().mean()
    torch.testing.assert_close(nll, expected)
    # Visible tokens are read, masked ones are not.
    changed = latents.clone()
    changed.flatten(2).transpose(1, 2)[mask] += 5.0
    torch.testing.assert_close(model(changed, mask, torch.zeros(4, 3, dtype=torch.long)).logits, out.logits)


def test_the_output_survives_accelerates_fp32_conversion():
    """Under mixed precision Accelerate rebuilds a model's output from a dict of fp32 tensors (a training run with
    ``--mixed_precision bf16`` failed on it)."""
    from accelerate.utils import convert_to_fp32

    model = _model()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = model(torch.randn(2, 3, 2, 2), torch.ones(2, 4, dtype=torch.bool), torch.zeros(2, 3, dtype=torch.long))
    converted = convert_to_fp32(out)
    assert type(converted) is type(out) and converted.means.dtype == torch.float32
    assert converted.log_scales.shape == out.log_scales.shape == (2, 4, 2, 3)


def test_a_tiny_model_learns_the_latents_of_each_class():
    """Each class has one fixed latent grid; trained on fully masked grids, the mixture's mean reaches them. The
    learning rate decays to 0 and the gradient is clipped: at a constant rate the likelihood spikes as the scales
    shrink, and the last step's loss is a draw from those spikes that one CPU's rounding passes and another's fails
    (docs/test_margins.md). Untrained, the likelihood is about 1.3-1.5 and the median error 0.6-0.8."""
    seed = margin_seed(0)
    model = _model(num_mixtures=1, position_embedding_std=1.0, hidden_size=64, num_layers=2, seed=seed)
    classes = torch.tensor(SPACE.all_classes())
    targets = torch.randn(len(classes), 3, 2, 2, generator=torch.Generator().manual_seed(1 + 100 * seed))
    mask = torch.ones(len(classes), 4, dtype=torch.bool)

    def likelihood_and_error() -> tuple[float, float]:
        model.eval()
        with torch.no_grad():
            out = model(torch.zeros_like(targets), mask, classes)
        model.train()
        drawn = mixture_sample(out.logits, out.means, out.log_scales, temperature=0.0)
        error = (drawn - targets.flatten(2).transpose(1, 2)).abs().median()
        return float(model.masked_nll(out, targets, mask)), float(error)

    untrained = likelihood_and_error()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, 1000)
    for _ in range(1000):
        loss = model.masked_nll(model(targets, mask, classes), targets, mask)
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
    likelihood, error = likelihood_and_error()
    assert untrained[0] > 1.0 and untrained[1] > 0.3  # the checks below fail an untrained model
    check_margin("givt: negative log-likelihood after training", likelihood, below=-1.5)
    check_margin("givt: median token error after training", error, below=0.01)


def test_save_and_load_give_identical_outputs(tmp_path):
    model = _model(conditioning="full", continuous_concepts={"size": [[2.7], [1.6]]}, latent_mean=[0.1, 0.2, 0.3],
                   latent_std=[1.0, 2.0, 3.0]).eval()
    model.save_pretrained(tmp_path)
    loaded = GIVTTransformer.from_pretrained(tmp_path).eval()
    latents, mask = torch.randn(3, 3, 2, 2), torch.rand(3, 2, 2) < 0.5
    concepts = torch.tensor([[0, 1, 1], [1, 0, 0], [1, 1, 1]])
    with torch.no_grad():
        for a, b in zip(model(latents, mask, concepts, return_dict=False),
                        loaded(latents, mask, concepts, return_dict=False), strict=True):
            torch.testing.assert_close(a, b, rtol=0, atol=0)
    torch.testing.assert_close(loaded.denormalize_latents(loaded.normalize_latents(latents)), latents)


def test_bad_input_is_refused_with_the_problem_named():
    model = _model()
    concepts = torch.zeros(2, 3, dtype=torch.long)
    with pytest.raises(ValueError, match=r"latents must be \(B, 3, 2, 2\)"):
        model(torch.randn(2, 4, 2, 2), torch.zeros(2, 4, dtype=torch.bool), concepts)
    with pytest.raises(ValueError, match="mask must be a bool tensor"):
        model(torch.randn(2, 3, 2, 2), torch.zeros(2, 4), concepts)
    with pytest.raises(ValueError, match="concepts has batch size"):
        model(torch.randn(2, 3, 2, 2), torch.zeros(2, 4, dtype=torch.bool), torch.zeros(3, 3, dtype=torch.long))
    with pytest.raises(ValueError, match="at least one masked token"):
        out = model(torch.randn(2, 3, 2, 2), torch.zeros(2, 4, dtype=torch.bool), concepts)
        model.masked_nll(out, torch.randn(2, 3, 2, 2), torch.zeros(2, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match="num_mixtures must be at least 1, got 0"):
        _model(num_mixtures=0)
    with pytest.raises(ValueError, match="num_mixtures must be at least 1, got 0"):  # the recipe's check, its owner's
        GIVTTransformer.check_options(num_mixtures=0)
    with pytest.raises(ValueError, match="latent_std must hold 3 values"):
        _model(latent_std=[1.0])


def _pipe(kl: bool = False):
    from conftest import tiny_tokenizer

    tokenizer = tiny_tokenizer(kl, 3)
    transformer = _model(grid_size=7, latent_mean=[0.1, 0.0, -0.1], latent_std=[1.0, 0.5, 2.0]).eval()
    with torch.no_grad():  # give the zero-initialised head weights, so that samples depend on the conditioning
        transformer.head.weight.normal_(std=0.1)
    pipe = GIVTPipeline(vqvae=None if kl else tokenizer, vae=tokenizer if kl else None, transformer=transformer,
                        scheduler=MaskGITScheduler(mask_token_id=0))
    pipe.set_progress_bar_config(disable=True)
    return pipe


@pytest.mark.parametrize("kl", [False, True], ids=["vq", "kl"])
def test_pipeline_is_deterministic_and_round_trips_through_save_and_the_hub_entry_file(tmp_path, kl):
    pipe = _pipe(kl)
    kwargs = dict(num_inference_steps=4, output_type="np")
    first = pipe(["111", "000"], generator=torch.Generator().manual_seed(1), **kwargs).images
    assert first.shape == (2, 28, 28, 3) and 0 <= first.min() and first.max() <= 1
    np.testing.assert_array_equal(first, pipe(["111", "000"], generator=torch.Generator().manual_seed(1),
                                              **kwargs).images)
    assert not np.array_equal(first, pipe(["111", "000"], generator=torch.Generator().manual_seed(2),
                                          **kwargs).images)
    pipe.save_pretrained(tmp_path / "givt")
    index = json.loads((tmp_path / "givt" / "model_index.json").read_text())
    assert index["transformer"] == ["compgen.models.givt_transformer", "GIVTTransformer"]
    for loaded in (GIVTPipeline.from_pretrained(tmp_path / "givt"),
                   DiffusionPipeline.from_pretrained(tmp_path / "givt", custom_pipeline=str(ENTRY_FILE),
                                                     trust_remote_code=True)):
        loaded.set_progress_bar_config(disable=True)
        again = loaded(["111", "000"], generator=torch.Generator().manual_seed(1), **kwargs).images
        np.testing.assert_array_equal(first, again)


def test_pipeline_refuses_bad_options():
    pipe = _pipe()
    with pytest.raises(ValueError, match="temperature"):
        pipe("111", temperature=-0.5)
    with pytest.raises(ValueError, match="num_inference_steps"):
        pipe("111", num_inference_steps=None)
    with pytest.raises(ValueError, match="exactly one tokenizer"):
        GIVTPipeline(vqvae=None, vae=None, transformer=pipe.transformer, scheduler=pipe.scheduler)
    with pytest.raises(ValueError, match="needs a model trained with concept_dropout > 0"):
        pipe("111", guidance_scale=2.0)  # no null concepts to guide against: the fix is named


def test_distribution_based_guidance_draws_from_the_guided_gaussian():
    """GIVT's guidance (Tschannen et al. 2024, Sec. 3.4) of one component: p_c^s / p_u^(s-1) is a Gaussian of
    precision s/sc^2 - (s-1)/su^2; scale 1 is the conditional component; an improper density falls back to it."""
    from compgen.models.gaussian_mixture import mixture_sample

    logits = torch.tensor([[0.0, -1e9]])  # the first component, always
    means, null_means = torch.tensor([[[1.0], [5.0]]]), torch.tensor([[[0.0], [5.0]]])
    log_scales = torch.zeros(1, 2, 1)
    null_log_scales = torch.full((1, 2, 1), float(np.log(2.0)))

    def draw(scale, temperature=0.0, null_log=null_log_scales):
        return mixture_sample(logits, means, log_scales, temperature, torch.Generator().manual_seed(0),
                              null_means=null_means, null_log_scales=null_log, guidance_scale=scale)

    assert draw(1.0).item() == 1.0  # no guidance: the conditional mean
    precision = 3.0 / 1.0 - 2.0 / 4.0
    assert draw(3.0).item() == pytest.approx((3.0 * 1.0 - 2.0 * 0.0 / 4.0) / precision)  # pushed away from the null
    many = torch.cat([mixture_sample(logits.expand(4000, 2), means.expand(4000, 2, 1), log_scales.expand(4000, 2, 1),
                                     1.0, torch.Generator().manual_seed(1), null_means=null_means.expand(4000, 2, 1),
                                     null_log_scales=null_log_scales.expand(4000, 2, 1), guidance_scale=3.0)])
    assert many.std().item() == pytest.approx(precision ** -0.5, rel=0.05)
    assert draw(3.0, null_log=torch.full((1, 2, 1), -1.0)).item() == 1.0  # improper: the conditional component


def test_guided_sampling_runs_and_differs_from_unguided():
    model = _model(grid_size=7, concept_dropout=0.1).eval()
    with torch.no_grad():  # the output head starts at zero, blind to the concepts: give it weights
        model.head.weight.normal_(std=0.1)
    pipe = GIVTPipeline(vqvae=_pipe().vqvae, transformer=model, scheduler=_pipe().scheduler)
    pipe.set_progress_bar_config(disable=True)
    kwargs = {"num_inference_steps": 2, "output_type": "np"}
    plain = pipe("111", generator=torch.Generator().manual_seed(0), **kwargs).images
    guided = pipe("111", generator=torch.Generator().manual_seed(0), guidance_scale=3.0, **kwargs).images
    assert np.isfinite(guided).all() and not np.array_equal(plain, guided)


@pytest.mark.usefixtures("fresh_accelerator_state")
@pytest.mark.parametrize("tokenizer", ["vq", "kl"])
def test_train_givt_end_to_end(dataset_dir, tmp_path, tokenizer):
    """The script on a tiny split: tokenizer first, then GIVT, an evaluation, the card, and a pipeline that loads."""

    from compgen.evaluation.probes import ConceptProbes

    script = load_recipe("givt")
    output = tmp_path / f"givt-{tokenizer}"
    torch.manual_seed(0)  # untrained probes: the evaluation runs, its accuracy is moot
    ConceptProbes(SPACE.to_dict(), image_size=28, probe_type="linear").save_pretrained(tmp_path / "probes")
    script.main(["--dataset", str(dataset_dir), "--output_dir", str(output), *TINY, "--tokenizer", tokenizer,
                 "--num_mixtures", "2", "--max_train_steps", "2", "--eval_steps", "2", "--eval_images_per_class",
                 "2", "--eval_inference_steps", "2", "--probes_path", str(tmp_path / "probes")])
    records = [json.loads(line) for line in (output / "learning_dynamics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [2] and records[0]["sampling"]["temperature"] == 1.0
    card = (output / "README.md").read_text()
    assert "GIVTTransformer" in card and "num_mixtures" in card
    pipe = GIVTPipeline.from_pretrained(output)
    pipe.set_progress_bar_config(disable=True)
    assert pipe("111", num_inference_steps=2, output_type="np").images.shape == (1, 28, 28, 3)
    assert pipe.transformer.config.num_mixtures == 2
