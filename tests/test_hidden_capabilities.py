"""Over-prompting sweeps: the values a sweep asks for reach the model, and each row is scored against the class."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from compgen import TupleConditionedUNet2DModel, get_split_preset, shapes
from compgen.analysis.hidden_capabilities import value_sweep
from compgen.shapes import RenderConfig, render_classes, shapes_continuous_concepts

pytestmark = pytest.mark.usefixtures("single_thread")

SPACE = get_split_preset("H32-train1").space


class RenderingPipeline:
    """Stands for a trained pipeline: it draws the class at exactly the continuous values it is given (the renderer's
    class values patched to them), so a sweep's verdicts can be checked against what the values mean."""

    def __init__(self, monkeypatch) -> None:
        self.unet = TupleConditionedUNet2DModel(
            concept_space=SPACE.to_dict(), block_out_channels=(8, 16), layers_per_block=1, conditioning="full",
            continuous_concepts=shapes_continuous_concepts(SPACE),
        )
        self.monkeypatch = monkeypatch
        self.calls: list[list[float]] = []

    def __call__(self, concepts, num_images_per_prompt, generator, output_type, num_inference_steps, concept_values):
        assert output_type == "np" and concept_values.shape == (1, 4)
        values = concept_values[0].tolist()
        self.calls.append(values)
        for name in ("red", "blue"):
            self.monkeypatch.setitem(shapes.COLOR_RGB, name, tuple(values[:3]))
        for name in ("large", "small"):
            self.monkeypatch.setitem(shapes.SIZE_SCALE, name, values[3])
        seed = int(torch.randint(0, 2**31, (1,), generator=generator))
        batch = render_classes(SPACE, [concepts] * num_images_per_prompt, seed=seed,
                               config=RenderConfig(color_jitter=0.0, size_jitter=0.0, rotate=False))
        return SimpleNamespace(images=batch.images.astype(np.float32) / 255.0)


def test_a_size_sweep_scores_each_value_against_the_class(monkeypatch):
    pipe = RenderingPipeline(monkeypatch)
    rows = value_sweep(pipe, "unet", "111", "size", [[1.6], [2.7]], images=12)
    assert [row["value"] for row in rows] == pytest.approx([1.6, 2.7])
    # Other values stay canonical: blue (0.1, 0.1, 0.9); the swept size is the fourth number.
    np.testing.assert_allclose(pipe.calls, [[0.1, 0.1, 0.9, 1.6], [0.1, 0.1, 0.9, 2.7]], rtol=1e-6)
    small, large = rows
    assert small["probes"] == small["pixel"] == 1.0 and small["no_object"] == 0.0
    assert large["probes"] == large["pixel"] == 0.0  # a large blue triangle is not class 111


def test_a_colour_sweep_and_bad_requests(monkeypatch):
    pipe = RenderingPipeline(monkeypatch)
    rows = value_sweep(pipe, "unet", "111", "color", [[0.9, 0.1, 0.1], [0.1, 0.1, 0.9]], images=8)
    assert [row["pixel"] for row in rows] == [0.0, 1.0]
    with pytest.raises(ValueError, match="'shape' is not a continuous variable"):
        value_sweep(pipe, "unet", "111", "shape", [[1.0]], images=2)
    with pytest.raises(ValueError, match="color takes 3 numbers per value"):
        value_sweep(pipe, "unet", "111", "color", [[0.5]], images=2)


def test_far_off_values_are_refused_and_non_finite_samples_never_scored(monkeypatch):
    """1e20 as a size reads as an absent capability ("no object 1.00") if the NaN samples it gives are scored: it is
    refused before sampling, and a model that returns non-finite samples gets a row saying so, with no accuracy."""
    pipe = RenderingPipeline(monkeypatch)
    with pytest.raises(ValueError, match="far outside the model's size values"):
        value_sweep(pipe, "unet", "111", "size", [[1e20]], images=2)
    with pytest.raises(ValueError, match="far outside"):
        value_sweep(pipe, "unet", "111", "size", [[float("nan")]], images=2)
    assert pipe.calls == []

    class NaNPipeline(RenderingPipeline):
        def __call__(self, *args, **kwargs):
            out = super().__call__(*args, **kwargs)
            out.images[0] = np.nan
            return out

    rows = value_sweep(NaNPipeline(monkeypatch), "unet", "111", "size", [[1.6]], images=4)
    assert rows == [{"value": pytest.approx(1.6), "probes": None, "pixel": None, "no_object": None, "hybrid": None,
                     "pale": None, "non_finite": 0.25}]


def test_the_command_refuses_a_run_without_export_a_missing_checkpoint_and_a_directory_output(tmp_path, capsys):
    from compgen.analysis.hidden_capabilities import main

    argv = ["--concepts", "111", "--variable", "size", "--values", "1.6"]
    with pytest.raises(SystemExit):
        main([str(tmp_path), *argv])
    assert "no exported pipeline" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main([str(tmp_path), *argv, "--output", str(tmp_path)])
    assert "a directory; give a file name" in capsys.readouterr().err
    run = tmp_path / "run"
    from diffusers import DDPMScheduler

    from compgen import TupleConditionedDDPMPipeline

    unet = TupleConditionedUNet2DModel(concept_space=SPACE.to_dict(), block_out_channels=(8, 16), layers_per_block=1,
                                       conditioning="full", continuous_concepts=shapes_continuous_concepts(SPACE))
    TupleConditionedDDPMPipeline(unet=unet, scheduler=DDPMScheduler(num_train_timesteps=10)).save_pretrained(run)
    (run / "checkpoints" / "checkpoint-4").mkdir(parents=True)
    with pytest.raises(SystemExit):
        main([str(run), *argv, "--checkpoint", "checkpoint-9"])
    err = capsys.readouterr().err
    assert "no such checkpoint" in err and "checkpoint-4" in err and "EMA" not in err
