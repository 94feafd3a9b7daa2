"""The shared training loop on the real tuple-conditioned U-Net: loss goes down, exact resume, model card, push list."""

import json

import numpy as np
import pytest
import torch
from conftest import reset_accelerate_state, small_training_data
from diffusers import DDPMScheduler
from margins import check_margin, margin_seed
from safetensors.torch import load_file

from compgen import TupleConditionedDDPMPipeline, TupleConditionedUNet2DModel
from compgen.evaluation.tracker import levels_held, renderer_generator
from compgen.hub import files_to_upload
from compgen.training.checkpoint import list_checkpoints
from compgen.training.config import TrainingConfig
from compgen.training.tasks.ddpm import DDPMTask
from compgen.training.trainer import Trainer

pytestmark = pytest.mark.usefixtures("fresh_accelerator_state")



@pytest.fixture(scope="module")
def small_data(tmp_path_factory):
    cache = tmp_path_factory.mktemp("hf-cache")
    return small_training_data("tiny-h32", cache_dir=cache, split_preset="H32-train1", images_per_class=32,
                              test_images_per_class=4)


class CrashAt(Exception):
    pass


class CrashingDDPMTask(DDPMTask):
    """Simulates a killed run: raises right after the optimizer step ``crash_step``."""

    crash_step: int | None = None

    def after_optimizer_step(self, model, step):
        if step == self.crash_step:
            raise CrashAt(step)
        return {}


def make_task(data, crash_step=None, seed: int = 0, task_class: type = CrashingDDPMTask):
    torch.manual_seed(seed)
    unet = TupleConditionedUNet2DModel(
        concept_space=data.space.to_dict(), block_out_channels=(8, 16), norm_num_groups=4, conditioning="quantized"
    )
    task = task_class(unet, DDPMScheduler(num_train_timesteps=50), eval_inference_steps=2)
    task.crash_step = crash_step
    return task


def config(tmp_path, **kwargs):
    defaults = dict(output_dir=str(tmp_path), train_batch_size=16, max_train_steps=6, learning_rate=3e-3,
                    checkpointing_steps=3, eval_steps=100, logging_steps=2, ema_decay=0.9)
    return TrainingConfig(**(defaults | kwargs))


def test_a_few_steps_lower_the_loss(small_data, tmp_path):
    data, graph = small_data
    task = make_task(data, seed=margin_seed(0))
    batch = {"images": data.images[:32].permute(0, 3, 1, 2).float() / 127.5 - 1, "concepts": data.concepts[:32]}

    def loss_on_fixed_batch():
        with torch.no_grad():
            return np.mean([task.compute_loss(task.model, batch, torch.Generator().manual_seed(s), 0)[0].item()
                            for s in range(8)])

    before = loss_on_fixed_batch()
    options = dict(max_train_steps=25, checkpointing_steps=25, use_ema=False, seed=margin_seed(0))
    Trainer(config(tmp_path, **options), task, data, graph).train()
    check_margin("trainer: U-Net loss after / before 25 steps", loss_on_fixed_batch() / before, below=0.8)


def test_resume_after_a_crash_gives_the_weights_of_an_uninterrupted_run(small_data, tmp_path):
    data, graph = small_data
    Trainer(config(tmp_path / "straight"), make_task(data), data, graph).train()

    crashed = tmp_path / "crashed"
    with pytest.raises(CrashAt):
        Trainer(config(crashed), make_task(data, crash_step=5), data, graph).train()
    assert [step for step, _ in list_checkpoints(crashed / "checkpoints")] == [3]
    # The run's wall clock goes on from the checkpoint's (a run trained in parts reports its whole time): say the
    # first part took 1000 s to reach step 3.
    trainer_state = crashed / "checkpoints" / "checkpoint-3" / "trainer_state.json"
    first_part = json.loads(trainer_state.read_text())
    assert 0 < first_part["wall_clock_s"] < 1000
    trainer_state.write_text(json.dumps(first_part | {"wall_clock_s": 1000.0}))
    reset_accelerate_state()
    # A fresh model (different init would not matter): resume restores weights, optimizer, EMA and data order.
    Trainer(config(crashed, resume_from_checkpoint="latest"), make_task(data), data, graph).train()
    whole = json.loads((crashed / "checkpoints" / "checkpoint-6" / "trainer_state.json").read_text())["wall_clock_s"]
    assert 1000.0 < whole < 1000.0 + 600

    straight = load_file(str(tmp_path / "straight" / "unet" / "diffusion_pytorch_model.safetensors"))
    resumed = load_file(str(crashed / "unet" / "diffusion_pytorch_model.safetensors"))
    assert straight.keys() == resumed.keys()
    for name in straight:
        torch.testing.assert_close(resumed[name], straight[name], rtol=0, atol=0, msg=name)
    assert [step for step, _ in list_checkpoints(crashed / "checkpoints")] == [3, 6]


def test_gradient_checkpointing_trains_the_same_weights(small_data, tmp_path):
    """``--gradient_checkpointing``: the blocks recompute their activations in the backward pass; same training."""
    data, graph = small_data
    Trainer(config(tmp_path / "plain", max_train_steps=3), make_task(data), data, graph).train()
    reset_accelerate_state()
    Trainer(config(tmp_path / "checkpointed", max_train_steps=3, gradient_checkpointing=True), make_task(data), data,
            graph).train()
    plain = load_file(str(tmp_path / "plain" / "unet" / "diffusion_pytorch_model.safetensors"))
    checkpointed = load_file(str(tmp_path / "checkpointed" / "unet" / "diffusion_pytorch_model.safetensors"))
    for name in plain:
        torch.testing.assert_close(checkpointed[name], plain[name], rtol=1e-5, atol=1e-6, msg=name)


def test_checkpoints_are_pruned_and_resume_rejects_a_missing_checkpoint(small_data, tmp_path):
    data, graph = small_data
    Trainer(config(tmp_path, checkpointing_steps=1, checkpoints_total_limit=2), make_task(data), data, graph).train()
    assert [step for step, _ in list_checkpoints(tmp_path / "checkpoints")] == [5, 6]
    assert not list((tmp_path / "checkpoints").glob(".tmp-*"))
    with pytest.raises(ValueError, match="no complete checkpoint"):
        Trainer(config(tmp_path, resume_from_checkpoint="checkpoint-99"), make_task(data), data, graph).train()


def test_evaluation_log_model_card_and_push_list(small_data, tmp_path):
    data, graph = small_data
    from compgen.evaluation.probes import default_shapes_probes

    probes = default_shapes_probes(data.space, image_size=data.image_size, seed=0)
    task = make_task(data)
    # Evaluate a "perfect generator" through the loop's callback: the card must then report 1.0 everywhere.
    task.generate = lambda model, concepts, seed: renderer_generator(data.space, data.image_size)(concepts, seed)
    Trainer(config(tmp_path, eval_steps=3, eval_images_per_class=4), task, data, graph, probes,
            dataset_name="tiny-h32").train()

    records = [json.loads(line) for line in (tmp_path / "learning_dynamics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [3, 6]
    card = (tmp_path / "README.md").read_text()
    assert "library_name: diffusers" in card
    assert "| level | classes | final accuracy | best accuracy | first step >= 0.9 |" in card
    assert "| 2 | 111 | 1.000 | 1.000 | 3 |" in card
    assert "| 111 | triangle | blue | small | 2 | 1.000 | 1.000 |" in card
    assert (tmp_path / "learning_dynamics.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # both scorers in the card's plot (the title says which is dashed), and the per-concept figure linked
    assert "[accuracy per concept](concept_accuracy.png)" in card and (tmp_path / "concept_accuracy.png").is_file()

    pipe = TupleConditionedDDPMPipeline.from_pretrained(tmp_path)
    assert pipe("111", num_inference_steps=2, output_type="np").images.shape == (1, 28, 28, 3)
    uploaded = files_to_upload(tmp_path)
    assert not [f for f in uploaded if f.startswith("checkpoints/")]
    assert {"README.md", "model_index.json", "learning_dynamics.jsonl", "learning_dynamics.png",
            "scheduler/scheduler_config.json", "unet/config.json", "unet/diffusion_pytorch_model.safetensors"} <= set(
        uploaded)


def test_evaluations_thin_out_while_the_levels_hold(small_data, tmp_path):
    """``--eval_steps_held``: every ``eval_steps`` until three evaluations agree, then every ``eval_steps_held`` (and
    the last step); a perfect generator holds from its third evaluation on."""
    data, graph = small_data
    from compgen.evaluation.probes import default_shapes_probes

    task = make_task(data)
    task.generate = lambda model, concepts, seed: renderer_generator(data.space, data.image_size)(concepts, seed)
    options = config(tmp_path, max_train_steps=10, eval_steps=1, eval_steps_held=3, eval_images_per_class=2,
                     checkpointing_steps=100)
    Trainer(options, task, data, graph, default_shapes_probes(data.space), dataset_name="t").train()
    records = [json.loads(line) for line in (tmp_path / "learning_dynamics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [1, 2, 3, 6, 9, 10]
    with pytest.raises(ValueError, match="eval_steps_held must be at least 1"):
        config(tmp_path, eval_steps_held=0)
    with pytest.raises(ValueError, match="eval_mixed_precision"):
        config(tmp_path, eval_mixed_precision="fp32")


def test_evaluations_from_eval_start_step_are_the_ones_every_evaluation_gives(small_data, tmp_path):
    """``--eval_start_step``: no evaluation before it; evaluation draws from generators of its own, so the training
    (the final weights) and each evaluation that runs (its records) are those of a run that evaluates throughout."""
    data, graph = small_data
    from compgen.evaluation.probes import default_shapes_probes

    probes = default_shapes_probes(data.space, image_size=data.image_size, seed=0)

    def run(name: str, **options) -> tuple[list[dict], dict]:
        reset_accelerate_state()
        evaluation = dict(eval_steps=2, eval_images_per_class=2, checkpointing_steps=100)
        Trainer(config(tmp_path / name, **(evaluation | options)), make_task(data), data, graph, probes,
                dataset_name="t").train()
        records = [json.loads(line) for line in (tmp_path / name / "learning_dynamics.jsonl").read_text().splitlines()]
        return records, load_file(str(tmp_path / name / "unet" / "diffusion_pytorch_model.safetensors"))

    every, every_weights = run("every")
    late, late_weights = run("late", eval_start_step=4)
    assert [r["step"] for r in every] == [2, 4, 6] and [r["step"] for r in late] == [4, 6]
    for mine, theirs in zip(late, every[1:], strict=True):
        assert (mine["accuracy"], mine["pixel_accuracy"], mine["fidelity"]) == (
            theirs["accuracy"], theirs["pixel_accuracy"], theirs["fidelity"])
    for name in every_weights:
        torch.testing.assert_close(late_weights[name], every_weights[name], rtol=0, atol=0, msg=name)
    assert not TrainingConfig(eval_steps=100, eval_start_step=600).evaluation_due(500)
    with pytest.raises(ValueError, match="eval_start_step must be non-negative"):
        TrainingConfig(eval_start_step=-1)


def test_log_spaced_evaluations():
    """``--eval_schedule log``: three evaluations per doubling of the step count (and the last step)."""
    from compgen.training.config import TrainingConfig, log_spaced_multiple

    assert [m for m in range(1, 50) if log_spaced_multiple(m)] == [1, 2, 3, 4, 5, 6, 8, 10, 12, 16, 20, 24, 32, 40,
                                                                   48]
    options = TrainingConfig(eval_steps=250, eval_schedule="log")
    due = [step for step in range(1, 20001) if options.evaluation_due(step)]
    assert due[:7] == [250, 500, 750, 1000, 1250, 1500, 2000] and due[-3:] == [12000, 16000, 20000]
    assert len(due) == 17
    assert [s for s in range(1, 2001) if TrainingConfig(eval_steps=250).evaluation_due(s)] == list(range(250, 2001,
                                                                                                      250))
    with pytest.raises(ValueError, match="eval_schedule must be linear or log"):
        TrainingConfig(eval_schedule="geometric")
    with pytest.raises(ValueError, match="attention_kernel must be one of"):
        TrainingConfig(attention_kernel="fast")


def test_levels_hold_when_no_level_moves_by_either_scorer():
    def record(level2, pixel2):
        return {"level_accuracy": {"0": 1.0, "2": level2}, "pixel_level_accuracy": {"0": 1.0, "2": pixel2}}

    assert not levels_held([record(0.9, 0.9)] * 2)  # too few evaluations to tell
    assert levels_held([record(0.90, 0.92), record(0.94, 0.95), record(0.95, 0.93)])
    assert not levels_held([record(0.90, 0.80), record(0.94, 0.95), record(0.95, 0.93)])  # the pixel scorer moved
    assert not levels_held([record(0.5, 0.92), record(0.94, 0.95), record(0.95, 0.93)])


def test_v_prediction_target_is_diffusers_velocity_and_the_closed_form():
    """The v target the documented results depend on: v = sqrt(a_t) eps - sqrt(1 - a_t) x0 (Salimans & Ho 2022)."""
    from compgen.pipelines.tuple_ddpm import paper_ddpm_scheduler

    class Zero(torch.nn.Module):
        config = type("Config", (), {"conditioning": "quantized", "concept_dropout": 0.0})()

        def forward(self, sample, timesteps, concepts, concept_values=None, drop_mask=None):
            return type("Out", (), {"sample": torch.zeros_like(sample)})()

    scheduler = paper_ddpm_scheduler(prediction_type="v_prediction")
    task = DDPMTask(Zero(), scheduler)
    images = torch.rand(6, 3, 28, 28) * 2 - 1
    batch = {"images": images, "concepts": torch.zeros(6, 3, dtype=torch.long)}
    loss, _ = task.compute_loss(task.model, batch, torch.Generator().manual_seed(5), 0)
    draws = torch.Generator().manual_seed(5)
    noise = torch.randn(images.shape, generator=draws)
    timesteps = torch.randint(0, 500, (6,), generator=draws)
    alpha_bar = scheduler.alphas_cumprod[timesteps].view(-1, 1, 1, 1)
    closed_form = alpha_bar.sqrt() * noise - (1 - alpha_bar).sqrt() * images
    torch.testing.assert_close(scheduler.get_velocity(images, noise, timesteps), closed_form)
    torch.testing.assert_close(loss, closed_form.pow(2).mean())  # the model predicted 0: the loss is |v|^2


class GlobalDrawsDDPMTask(CrashingDDPMTask):
    """Records, per step, a draw from torch's global generator (where a model's dropout draws from)."""

    def compute_loss(self, model, batch, generator, step):
        self.draws = getattr(self, "draws", {}) | {step: float(torch.rand(()))}
        return super().compute_loss(model, batch, generator, step)


def test_a_resumed_run_draws_from_the_global_generator_what_an_uninterrupted_one_drew(small_data, tmp_path):
    """Dropout draws from torch's global generator, not the step's: the loop seeds it by the step, so a resumed run
    (a fresh process's generator state) takes the same draws, and two steps draw apart."""
    data, graph = small_data

    def task(crash_step=None):
        return make_task(data, crash_step, task_class=GlobalDrawsDDPMTask)

    straight = task()
    Trainer(config(tmp_path / "straight"), straight, data, graph).train()
    with pytest.raises(CrashAt):
        Trainer(config(tmp_path / "crashed"), task(crash_step=5), data, graph).train()
    reset_accelerate_state()
    torch.manual_seed(12345)  # another process's state: the loop must not depend on it
    resumed = task()
    Trainer(config(tmp_path / "crashed", resume_from_checkpoint="latest"), resumed, data, graph).train()
    assert sorted(resumed.draws) == [3, 4, 5]
    assert all(resumed.draws[step] == straight.draws[step] for step in resumed.draws)
    assert len(set(straight.draws.values())) == len(straight.draws) == 6


def test_the_ema_schedule_is_checked_and_a_constant_one_starts_at_its_decay(tmp_path):
    from compgen.training.ema import MomentumSchedule

    with pytest.raises(ValueError, match="ema_schedule must be one of warmup, constant, got 'cosine'"):
        config(tmp_path, ema_schedule="cosine")
    assert config(tmp_path, ema_schedule="constant").ema_schedule == "constant"
    assert MomentumSchedule(0.9999, kind="constant")(0) == 0.9999 > MomentumSchedule(0.9999, kind="warmup")(0)
