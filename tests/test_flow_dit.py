"""The DiT trained by flow matching: the noising and the velocity target against diffusers' flow-matching scheduler,
the noise-level draws, the Euler sampler, a loss that decreases, refused options, and the script end to end (VQ and KL
tokenizers: the export, its reload, re-scoring). The contracts every family keeps run over its rows of
``model_families.TABLE`` (``flow-dit``, ``flow-dit-kl``)."""

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import reset_accelerate_state
from diffusers import (
    DDIMScheduler,
    DDPMScheduler,
    DiffusionPipeline,
    FlowMatchEulerDiscreteScheduler,
    FlowMatchHeunDiscreteScheduler,
)
from diffusers.models.unets.unet_2d import UNet2DOutput
from margins import check_margin, margin_seed
from model_families import dit, flow_dit_pipeline, tokenizer

from compgen import TupleConditionedFlowDiTPipeline, shapes_space
from compgen.pipelines.flow_dit import flow_matching_scheduler
from compgen.recipes import load_recipe
from compgen.training.tasks.flow_matching import FlowMatchingDiTTask
from compgen.training.tasks.latent_tokenizer import precompute_latents

pytestmark = pytest.mark.usefixtures("single_thread")

ENTRY_FILE = Path(__file__).resolve().parents[1] / "custom_pipelines" / "flow_dit.py"
IMAGES = torch.randint(0, 256, (8, 28, 28, 3), dtype=torch.uint8, generator=torch.Generator().manual_seed(0))


def make_task(scheduler=None, **options) -> FlowMatchingDiTTask:
    vqvae = tokenizer()
    return FlowMatchingDiTTask(dit(), vqvae, scheduler or flow_matching_scheduler(50),
                               precompute_latents(vqvae, IMAGES), eval_inference_steps=3, **options)


def batch(size: int = 8) -> dict[str, torch.Tensor]:
    concepts = torch.tensor([[0, 0, 0], [1, 1, 1], [0, 1, 0], [1, 0, 1], [0, 2, 0], [0, 2, 1], [1, 2, 0], [1, 1, 0]])
    return {"index": torch.arange(size), "concepts": concepts[:size],
            "concept_values": torch.rand(size, 4, generator=torch.Generator().manual_seed(1))}


class Recorder(torch.nn.Module):
    """A stand-in model that records its inputs and predicts zero."""

    def forward(self, sample, timestep, concepts, **_):
        self.sample, self.timestep = sample, timestep
        return UNet2DOutput(sample=torch.zeros_like(sample))


@pytest.mark.parametrize("shift", [1.0, 3.0])
@pytest.mark.parametrize("weighting_scheme", ["uniform", "logit_normal"])
def test_noising_and_target_are_the_schedulers(shift, weighting_scheme):
    """The model sees ``scheduler.scale_noise(x0, t, noise)`` at one of the scheduler's training timesteps ``t = sigma
    * num_train_timesteps``, and the loss is the MSE to the velocity ``noise - x0`` (SD3's training script)."""
    task = make_task(flow_matching_scheduler(50, shift=shift), weighting_scheme=weighting_scheme)
    recorder = Recorder()
    loss, _ = task.compute_loss(recorder, batch(), torch.Generator().manual_seed(3), 0)
    generator = torch.Generator().manual_seed(3)  # the task's draws, in its order: the noise, then the levels
    x0 = task.train_latents[:8]
    noise = torch.randn(x0.shape, generator=generator)
    task.draw_noise_levels(8, generator)
    scheduler = flow_matching_scheduler(50, shift=shift)
    assert set(recorder.timestep.tolist()) <= set(scheduler.timesteps.tolist())
    torch.testing.assert_close(recorder.sample, scheduler.scale_noise(x0, recorder.timestep, noise))
    torch.testing.assert_close(loss, (noise - x0).square().mean())


def test_noise_level_draws():
    draws = {}
    for name, options in {"uniform": {}, "logit_normal": {"weighting_scheme": "logit_normal"},
                          "noisier": {"weighting_scheme": "logit_normal", "logit_mean": 2.0}}.items():
        task = make_task(**options)
        indices = task.draw_noise_levels(4000, torch.Generator().manual_seed(0))
        draws[name] = task.train_sigmas[indices]
        assert 0 < draws[name].min() and draws[name].max() <= 1
    assert draws["uniform"].mean() == pytest.approx(0.5, abs=0.03)
    middle = {name: ((sigma > 0.25) & (sigma < 0.75)).float().mean() for name, sigma in draws.items()}
    assert middle["logit_normal"] > middle["uniform"] + 0.1  # SD3's draw trains most at intermediate noise
    assert draws["noisier"].mean() > 0.75  # a larger logit_mean: more noise


def test_a_perfect_velocity_is_integrated_to_its_target():
    """Euler steps along a straight path are exact: a model that predicts the true velocity ``(x - x0) / sigma`` ends on
    ``x0`` whatever the steps, and the pipeline decodes exactly that (codebook-snapped)."""
    pipe = flow_dit_pipeline(dit())
    pipe.set_progress_bar_config(disable=True)
    target = 3 * torch.randn(1, 4, 7, 7, generator=torch.Generator().manual_seed(0))
    num_train_timesteps = pipe.scheduler.config.num_train_timesteps
    pipe.transformer.forward = lambda sample, timestep, *args, **kwargs: UNet2DOutput(
        sample=(sample - target) / (timestep.view(-1, 1, 1, 1) / num_train_timesteps))
    seen = []
    images = pipe("000", num_inference_steps=4, generator=torch.Generator().manual_seed(1), output_type="pt",
                  callback_on_step_end=lambda p, i, t, kwargs: seen.append(kwargs["latents"].clone()) or {}).images
    torch.testing.assert_close(seen[-1], target, atol=1e-5, rtol=0)
    torch.testing.assert_close(images, pipe.decode_latents(target, output_type="pt"))


def test_the_loss_decreases_on_a_tiny_run():
    torch.manual_seed(0)
    task = make_task()
    model = task.model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)

    def held_out_loss() -> float:
        with torch.no_grad():
            return float(sum(task.compute_loss(model, batch(), torch.Generator().manual_seed(1000 + seed), 0)[0]
                             for seed in range(8)) / 8)

    before = held_out_loss()
    draws = 10_000 * margin_seed(0)  # the margins' seed offset moves the training's noise and timesteps
    for step in range(150):
        loss, _ = task.compute_loss(model, batch(), torch.Generator().manual_seed(draws + step), step)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    check_margin("flow DiT: held-out loss after / before 150 steps", held_out_loss() / before, below=0.75)


def test_sampling_is_deterministic_and_loads_through_the_hub_entry_file(tmp_path):
    pipe = flow_dit_pipeline(dit())
    pipe.set_progress_bar_config(disable=True)

    def sample(pipeline, **options):
        return pipeline(["111", "021"], num_inference_steps=3, generator=torch.Generator().manual_seed(1),
                        output_type="np", **options).images

    first = sample(pipe)
    assert first.shape == (2, 28, 28, 3) and 0 <= first.min() and first.max() <= 1
    np.testing.assert_array_equal(sample(pipe), first)
    pipe.save_pretrained(tmp_path / "flow-dit")
    index = json.loads((tmp_path / "flow-dit" / "model_index.json").read_text())
    assert index["_class_name"] == "TupleConditionedFlowDiTPipeline"
    assert index["transformer"] == ["compgen.models.tuple_dit", "TupleConditionedDiT"]
    assert index["scheduler"] == ["diffusers", "FlowMatchEulerDiscreteScheduler"]
    np.testing.assert_array_equal(sample(TupleConditionedFlowDiTPipeline.from_pretrained(tmp_path / "flow-dit")), first)
    generic = DiffusionPipeline.from_pretrained(tmp_path / "flow-dit", custom_pipeline=str(ENTRY_FILE),
                                                trust_remote_code=True)
    generic.set_progress_bar_config(disable=True)
    np.testing.assert_array_equal(sample(generic), first)
    # A second-order flow sampler swaps in; a DDPM-family scheduler would read the velocity as noise: refused.
    generic.scheduler = FlowMatchHeunDiscreteScheduler.from_config(generic.scheduler.config)
    assert sample(generic).shape == (2, 28, 28, 3)
    generic.scheduler = DDIMScheduler.from_config(generic.scheduler.config)
    with pytest.raises(ValueError, match="not a flow-matching scheduler"):
        sample(generic)


def test_bad_options_are_refused_with_their_reason():
    with pytest.raises(ValueError, match="weighting_scheme"):
        make_task(weighting_scheme="mode")
    with pytest.raises(ValueError, match="logit_std a finite number > 0"):
        make_task(weighting_scheme="logit_normal", logit_std=0.0)
    with pytest.raises(ValueError, match="logit_mean must be a finite number"):
        make_task(logit_mean=float("nan"))
    with pytest.raises(ValueError, match="FlowMatchEulerDiscreteScheduler's sigmas"):
        make_task(DDPMScheduler(num_train_timesteps=50, clip_sample=False))
    with pytest.raises(ValueError, match="use_dynamic_shifting"):
        make_task(FlowMatchEulerDiscreteScheduler(use_dynamic_shifting=True))
    with pytest.raises(ValueError, match="invert_sigmas=True"):  # the flow run from data to noise
        make_task(FlowMatchEulerDiscreteScheduler(invert_sigmas=True))
    with pytest.raises(ValueError, match="shift must be a finite number > 0"):
        flow_matching_scheduler(50, shift=0.0)
    with pytest.raises(ValueError, match="num_train_timesteps must be at least 1"):
        flow_matching_scheduler(0)
    with pytest.raises(ValueError, match="train_latents must be"):
        FlowMatchingDiTTask(dit(), tokenizer(), flow_matching_scheduler(50), torch.zeros(2, 3, 7, 7))
    with pytest.raises(ValueError, match="not a flow-matching scheduler"):
        TupleConditionedFlowDiTPipeline(vqvae=tokenizer(), transformer=dit(),
                                        scheduler=DDPMScheduler(num_train_timesteps=50, clip_sample=False))


@pytest.mark.parametrize("argv, message", [
    (["--shift", "0"], "shift must be a finite number > 0"),
    (["--shift", "nan"], "shift must be a finite number > 0"),
    (["--num_train_timesteps", "0"], "num_train_timesteps must be at least 1"),
    (["--weighting_scheme", "logit_normal", "--logit_std", "-1"], "logit_std a finite number > 0"),
    (["--weighting_scheme", "mode"], "invalid choice: 'mode'"),
    (["--eval_inference_steps", "0"], "eval_inference_steps must be an integer of at least 1"),
])
def test_bad_script_options_stop_before_the_tokenizer_is_trained(argv, message, tmp_path, capsys):
    script = load_recipe("flow-dit")
    with pytest.raises(SystemExit) as exit_info:
        script.main(["--cache_dir", str(tmp_path / "cache"), "--output_dir", str(tmp_path / "out"), *argv])
    assert exit_info.value.code == 2 and message in capsys.readouterr().err
    assert not (tmp_path / "cache").exists() and not (tmp_path / "out" / "tokenizer").exists()


@pytest.fixture(scope="module")
def flow_run(dataset_dir, tmp_path_factory):
    """A 2-step run of the script on a tiny split (VQ tokenizer first), evaluated at its end."""
    from test_kl_tokenizer import TINY

    from compgen.evaluation.probes import ConceptProbes

    root = tmp_path_factory.mktemp("flow-dit")
    torch.manual_seed(0)  # untrained probes: the evaluation runs, its accuracy is moot
    ConceptProbes(shapes_space().to_dict(), image_size=28, probe_type="linear").save_pretrained(root / "probes")
    reset_accelerate_state()
    load_recipe("flow-dit").main([
        "--dataset", str(dataset_dir), "--output_dir", str(root / "run"), *TINY, "--max_train_steps", "2",
        "--eval_steps", "2", "--eval_images_per_class", "2", "--probes_path", str(root / "probes")])
    reset_accelerate_state()
    return root


def test_the_script_trains_exports_and_the_export_reloads(flow_run):
    output = flow_run / "run"
    records = [json.loads(line) for line in (output / "learning_dynamics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [2] and records[0]["sampling"]["num_inference_steps"] == 2
    card = (output / "README.md").read_text()
    assert "flow matching" in card and "FlowMatchEulerDiscreteScheduler" in card and "- vq" in card
    index = json.loads((output / "model_index.json").read_text())
    assert index["_class_name"] == "TupleConditionedFlowDiTPipeline" and index["vae"] == [None, None]
    pipe = TupleConditionedFlowDiTPipeline.from_pretrained(output)
    pipe.set_progress_bar_config(disable=True)
    assert pipe.scheduler.config.shift == 1.0 and pipe.scheduler.config.num_train_timesteps == 1000
    images = [pipe("111", num_inference_steps=2, generator=torch.Generator().manual_seed(0), output_type="np").images
              for _ in range(2)]
    assert images[0].shape == (1, 28, 28, 3)
    np.testing.assert_array_equal(images[0], images[1])


def test_a_flow_run_is_rescored_with_its_evaluations_sampler(flow_run):
    from compgen.analysis.rescore import evaluate_run

    last = json.loads((flow_run / "run" / "learning_dynamics.jsonl").read_text().splitlines()[-1])
    record = evaluate_run(flow_run / "run", images_per_class=2)
    for key in ("accuracy", "pixel_accuracy", "object_rate"):
        assert record[key] == last[key], key


@pytest.mark.usefixtures("fresh_accelerator_state")
def test_the_script_trains_over_a_kl_tokenizer(dataset_dir, flow_run, tmp_path):
    from test_kl_tokenizer import TINY

    output = tmp_path / "flow-dit-kl"
    load_recipe("flow-dit").main([
        "--dataset", str(dataset_dir), "--output_dir", str(output), *TINY, "--tokenizer", "kl",
        "--weighting_scheme", "logit_normal", "--shift", "3", "--max_train_steps", "2", "--eval_steps", "2",
        "--eval_images_per_class", "2", "--probes_path", str(flow_run / "probes")])
    index = json.loads((output / "model_index.json").read_text())
    assert index["vae"] == ["diffusers", "AutoencoderKL"] and index["vqvae"] == [None, None]
    assert "logit-normal (mean 0.0, std 1.0)" in (output / "README.md").read_text()
    pipe = TupleConditionedFlowDiTPipeline.from_pretrained(output)
    pipe.set_progress_bar_config(disable=True)
    assert pipe.scheduler.config.shift == 3.0
    assert pipe("111", num_inference_steps=2, output_type="np").images.shape == (1, 28, 28, 3)
