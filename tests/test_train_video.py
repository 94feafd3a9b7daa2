"""The video recipes end to end with tiny sizes (``maskgit-video``, ``flow-dit-video``): the frame tokenizer first,
training on clips, evaluations by the clip scorers, the pipeline returning ``frames``, the card; and what clips
refuse before any work."""

import json

import numpy as np
import pytest
import torch
from conftest import reset_accelerate_state
from repo_scripts import log_steps, torchrun
from safetensors.torch import load_file

from compgen import FlowDiTVideoPipeline, MaskGITVideoPipeline
from compgen.data.clips_builder import build_clips_dataset
from compgen.recipes import load_recipe

TINY = ["--train_batch_size", "8", "--hidden_size", "16", "--num_layers", "2", "--num_heads", "2",
        "--tokenizer_block_out_channels", "8,8,8", "--tokenizer_embed_dim", "4", "--codebook_size", "32",
        "--tokenizer_steps", "3", "--learning_rate", "3e-3", "--logging_steps", "2", "--eval_inference_steps", "3",
        "--seed", "0", "--max_train_steps", "4", "--eval_steps", "2", "--eval_images_per_class", "2",
        "--checkpointing_steps", "2"]

pytestmark = pytest.mark.usefixtures("fresh_accelerator_state")


def export(dataset, root):
    """``dataset`` in Hub layout (Parquet per split) under ``root``, as ``--dataset DIR`` reads it."""
    (root / "data").mkdir(parents=True)
    for split, data in dataset.items():
        data.to_parquet(str(root / "data" / f"{split}-00000-of-00001.parquet"))
    return root


@pytest.fixture(scope="module")
def clips_dir(tmp_path_factory):
    """A tiny clips-h32-train1 split: 8 training clips per class, 2 test and 2 tokenizer clips of every class."""
    root = tmp_path_factory.mktemp("tiny-clips")
    dataset = build_clips_dataset("tiny-video", cache_dir=str(root / "cache"), split_preset="H32-train1",
                                  clips_per_class=8, test_clips_per_class=2, tokenizer_clips_per_class=2)
    return export(dataset, root / "export")


@pytest.fixture(scope="module")
def maskgit_run(clips_dir, tmp_path_factory):
    reset_accelerate_state()
    out = tmp_path_factory.mktemp("maskgit-video")
    load_recipe("maskgit-video").main(["--dataset", str(clips_dir), "--output_dir", str(out), *TINY,
                                        "--jepa_layers", "1,2", "--mask_type", "block"])
    return out


def records(out):
    return [json.loads(line) for line in (out / "learning_dynamics.jsonl").read_text().splitlines()]


def test_maskgit_video_trains_on_clips_and_exports_a_video_pipeline(maskgit_run):
    out = maskgit_run
    pipe = MaskGITVideoPipeline.from_pretrained(out)
    pipe.set_progress_bar_config(disable=True)
    assert pipe.transformer.config.num_frames == 8 and pipe.transformer.token_grid_shape == (8, 8, 8)
    frames = pipe(["111", "000"], num_inference_steps=3, output_type="np").frames
    assert frames.shape == (2, 8, 32, 32, 3) and frames.min() >= 0 and frames.max() <= 1
    logged = records(out)
    assert [r["step"] for r in logged] == [2, 4]
    assert logged[-1]["num_frames"] == 8 and sorted(logged[-1]["accuracy"]) == [
        "000", "001", "010", "011", "100", "101", "110", "111"]
    assert set(logged[-1]["level_accuracy"]) == set(logged[-1]["pixel_level_accuracy"]) == {"0", "1", "2"}
    assert "clip_probes" in logged[-1]["scorer_version"]
    samples = np.load(sorted((out / "samples").glob("*.npz"))[-1])
    assert samples["images"].shape[1:] == (8, 32, 32, 3)  # clips kept for sample strips
    card = (out / "README.md").read_text()
    assert "MaskGITVideoPipeline" in card and "export_to_gif" in card and "Clips of 8 frames" in card
    assert "mask_type: `block`" in card and "| level | classes | final accuracy |" in card
    # the frame tokenizer trained on the frames of the tokenizer split (every class)
    options = json.loads((out / "tokenizer" / "tokenizer_options.json").read_text())
    assert options["tokenizer_data"] == "all-classes"


def test_flow_dit_video_shares_the_frame_tokenizer_and_exports_a_video_pipeline(maskgit_run, clips_dir,
                                                                                tmp_path):
    reset_accelerate_state()
    out = tmp_path / "flow"
    load_recipe("flow-dit-video").main(["--dataset", str(clips_dir), "--output_dir", str(out), *TINY,
                                         "--tokenizer_path", str(maskgit_run / "tokenizer"),
                                         "--position_embedding", "factorized"])
    pipe = FlowDiTVideoPipeline.from_pretrained(out)
    pipe.set_progress_bar_config(disable=True)
    assert pipe.transformer.latent_shape == (4, 8, 8, 8)
    assert pipe.transformer.config.position_embedding_type == "factorized"
    assert MaskGITVideoPipeline.from_pretrained(maskgit_run).transformer.config.position_embedding_type == "joint"
    clips = pipe("111", num_inference_steps=3, output_type="pil").frames
    assert len(clips) == 1 and len(clips[0]) == 8 and clips[0][0].size == (32, 32)
    assert [r["step"] for r in records(out)] == [2, 4]
    assert "FlowDiTVideoPipeline" in (out / "README.md").read_text()


@pytest.mark.parametrize("recipe", ["maskgit-video", "flow-dit-video"])
@pytest.mark.parametrize("flags, message", [
    (["--dataset", "okawa-h32-train1"], "is an image config"),
    (["--conditioning", "full"], "per-clip values of every concept"),
    (["--position_embedding", "diagonal"], "invalid choice: 'diagonal'"),
])
def test_what_clips_refuse_is_refused_before_any_work(recipe, flags, message, tmp_path, capsys):
    out = tmp_path / "run"
    with pytest.raises(SystemExit) as exit_info:
        load_recipe(recipe).main(["--output_dir", str(out), *flags])
    assert exit_info.value.code == 2 and message in capsys.readouterr().err
    assert not out.exists()  # nothing was written


def test_a_video_recipe_refuses_images_and_an_image_recipe_clips(tmp_path, capsys):
    from compgen.data.concept_graph_builder import build_concept_graph_dataset

    images = build_concept_graph_dataset("tiny-images", cache_dir=str(tmp_path / "cache"), split_preset="H32-train1",
                                         images_per_class=4, test_images_per_class=1)
    directory = export(images, tmp_path / "images")
    with pytest.raises(SystemExit) as exit_info:
        load_recipe("maskgit-video").main(["--dataset", str(directory), "--output_dir", str(tmp_path / "run"),
                                           "--no_eval"])
    assert exit_info.value.code == 2 and "holds images, not clips" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_info:  # and an image recipe refuses clips
        load_recipe("maskgit").main(["--dataset", "clips-h32-train1", "--output_dir", str(tmp_path / "run"),
                                     "--no_eval", "--tokenizer_data", "training-classes"])
    assert exit_info.value.code == 2 and "holds clips, not images" in capsys.readouterr().err


def test_a_video_run_gets_every_plot_its_clips_in_frame_strips(maskgit_run, tmp_path):
    """The plots of an image run (results folders draw them) from a clip run's log and samples."""
    from PIL import Image

    from compgen.evaluation.plots import plot_all

    written = plot_all(maskgit_run / "learning_dynamics.jsonl", tmp_path, samples_dir=maskgit_run / "samples")
    assert all(path.is_file() for path in written) and (tmp_path / "samples.png").is_file()
    width, height = Image.open(tmp_path / "samples.png").size
    assert width > 2 * height  # eight classes high, two evaluations of eight-frame strips wide


def test_a_video_run_is_rescored_by_the_clip_scorers(maskgit_run):
    from compgen.analysis.rescore import evaluate_run

    record = evaluate_run(maskgit_run, images_per_class=2, num_inference_steps=3)
    assert record["num_frames"] == 8 and record["image_size"] == 32 and "clip_probes" in record["scorer_version"]
    assert set(record["level_accuracy"]) == set(record["pixel_level_accuracy"]) == {"0", "1", "2"}
    assert record["evaluation_options"]["num_inference_steps"] == 3


@pytest.mark.slow
@pytest.mark.parametrize("recipe", ["maskgit-video", "flow-dit-video"])
def test_two_process_video_runs_log_once_and_resume_exactly(recipe, maskgit_run, clips_dir, tmp_path):
    """A video family data-parallel in two processes: one log line per evaluation (the clip scorers run once), and a
    run stopped at step 2 and resumed ends with the weights of an uninterrupted one (masks or noise draws included)."""
    script = f"examples/train_{recipe.replace('-', '_')}.py"
    flags = ["--dataset", str(clips_dir), *TINY, "--tokenizer_path", str(maskgit_run / "tokenizer"),
             "--mixed_precision", "no", "--lr_scheduler", "constant"]  # a constant rate lets a run stop at step 2
    if recipe == "maskgit-video":  # MaskGIT + JEPA, masks spanning time; its target's momentum constant too
        flags += ["--jepa_layers", "1,2", "--jepa_momentum_schedule", "constant"]
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    torchrun(script, *flags, "--output_dir", str(straight))
    assert log_steps(straight) == [2, 4]
    state = json.loads((straight / "checkpoints" / "checkpoint-4" / "trainer_state.json").read_text())
    assert state["num_processes"] == 2 and state["images_seen"] == 4 * 2 * 8  # 4 steps of 2 x 8 clips
    torchrun(script, *flags, "--max_train_steps", "2", "--output_dir", str(resumed))
    torchrun(script, *flags, "--output_dir", str(resumed), "--resume_from_checkpoint", "latest")
    assert log_steps(resumed) == [2, 4]
    weights = "transformer/diffusion_pytorch_model.safetensors"
    a, b = load_file(str(straight / weights)), load_file(str(resumed / weights))
    for name in a:
        torch.testing.assert_close(b[name], a[name], rtol=0, atol=0, msg=name)
    pipeline = {"maskgit-video": MaskGITVideoPipeline, "flow-dit-video": FlowDiTVideoPipeline}[recipe]
    pipe = pipeline.from_pretrained(straight)
    pipe.set_progress_bar_config(disable=True)
    assert pipe("111", num_inference_steps=2, output_type="np").frames.shape == (1, 8, 32, 32, 3)
