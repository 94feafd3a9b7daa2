"""The flow DiT over clips (Paper B's continuous video model): the transformer's space-time latents ``(B, C, T, g, g)``,
old image configs loading as images, the refused ``num_frames``, :class:`FlowDiTVideoPipeline`'s frames (``np``,
``pt``, ``pil``, ``latent``), its generators and its export round trip, the image and video pipelines refusing each
other's transformer, and the flow-matching task on clips (frame-by-frame latents, the loss, uint8 clips sampled)."""

from __future__ import annotations

import json

import numpy as np
import PIL.Image
import pytest
import torch
from diffusers import DDPMScheduler

from compgen.clips import CLIP_SPACE
from compgen.models.kl_tokenizer import build_kl_tokenizer
from compgen.models.tuple_dit import TupleConditionedDiT
from compgen.models.vq_tokenizer import build_vq_tokenizer
from compgen.pipelines.flow_dit import TupleConditionedFlowDiTPipeline, flow_matching_scheduler
from compgen.pipelines.flow_dit_video import FlowDiTVideoPipeline
from compgen.pipelines.tuple_dit import TupleConditionedDiTPipeline
from compgen.training.tasks.flow_matching import FlowDiTVideoTask, FlowMatchingDiTTask
from compgen.training.tasks.latent_tokenizer import latent_statistics, precompute_latents

pytestmark = pytest.mark.usefixtures("single_thread")

FRAMES, SIZE, GRID, CHANNELS = 3, 16, 4, 4  # 16 px frames, downsampled 4x: a 4 x 4 grid per frame
STEPS = 2
PROMPTS = ["011", "100"]
CLIPS = torch.randint(0, 256, (4, FRAMES, SIZE, SIZE, 3), dtype=torch.uint8, generator=torch.Generator().manual_seed(0))


def vq_tokenizer():
    torch.manual_seed(2)
    return build_vq_tokenizer(SIZE, block_out_channels=(8, 8, 8), num_vq_embeddings=16, vq_embed_dim=CHANNELS,
                              norm_num_groups=4).eval()


def dit(num_frames: int | None = FRAMES, seed: int = 0) -> TupleConditionedDiT:
    """A tiny DiT over the clip space; ``num_frames=None`` leaves the argument out (an image model as before)."""
    torch.manual_seed(seed)
    frames = {} if num_frames is None else {"num_frames": num_frames}
    model = TupleConditionedDiT(CLIP_SPACE.to_dict(), latent_channels=CHANNELS, grid_size=GRID, hidden_size=32,
                                num_layers=1, num_heads=2, latent_mean=[0.1, 0.0, -0.1, 0.2],
                                latent_std=[1.0, 0.5, 2.0, 1.0], **frames).eval()
    with torch.no_grad():  # the output layer starts at zero (DiT), blind to its inputs: give it weights
        model.output_projection.weight.normal_(std=0.1)
    return model


def video_pipeline(model: TupleConditionedDiT | None = None, vae=None) -> FlowDiTVideoPipeline:
    """The clip pipeline over the VQ frame tokenizer (or the KL one ``vae``)."""
    pipe = FlowDiTVideoPipeline(vqvae=None if vae is not None else vq_tokenizer(), transformer=model or dit(),
                                scheduler=flow_matching_scheduler(50), vae=vae)
    pipe.set_progress_bar_config(disable=True)
    return pipe


def frames(pipe, prompts=PROMPTS, seed: int | None = 0, output_type: str = "np", **kwargs):
    generator = torch.Generator().manual_seed(seed) if seed is not None else kwargs.pop("generator")
    return pipe(prompts, num_inference_steps=STEPS, generator=generator, output_type=output_type, **kwargs).frames


def noisy(shape, seed: int = 1) -> torch.Tensor:
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed))


def concepts(batch_size: int) -> torch.LongTensor:
    return torch.tensor([[0, 1, 1], [1, 0, 0], [1, 1, 0], [0, 0, 1]])[:batch_size]


# --- the transformer ----------------------------------------------------------------------------------------------


def test_a_clip_model_takes_and_returns_space_time_latents():
    model = dit()
    assert model.latent_shape == (CHANNELS, FRAMES, GRID, GRID) and model.num_tokens == FRAMES * GRID * GRID
    assert dit(1).latent_shape == (CHANNELS, GRID, GRID)
    sample = noisy((2, CHANNELS, FRAMES, GRID, GRID))
    out = model(sample, 7, concepts(2)).sample
    assert out.shape == sample.shape and torch.isfinite(out).all()
    # every frame's tokens are seen: changing the last frame changes the prediction of the first
    changed = sample.clone()
    changed[:, :, -1] += 1.0
    assert not torch.allclose(model(changed, 7, concepts(2)).sample[:, :, 0], out[:, :, 0])
    with pytest.raises(ValueError, match=rf"sample must be \(B, {CHANNELS}, {FRAMES}, {GRID}, {GRID}\)"):
        model(noisy((2, CHANNELS, GRID, GRID)), 7, concepts(2))
    with pytest.raises(ValueError, match=rf"sample must be \(B, {CHANNELS}, {GRID}, {GRID}\)"):
        dit(1)(sample, 7, concepts(2))


def test_standardization_broadcasts_over_the_frames():
    model = dit()
    latents = noisy((2, CHANNELS, FRAMES, GRID, GRID))
    per_frame = model.normalize_latents(latents.transpose(1, 2).flatten(0, 1))
    torch.testing.assert_close(model.normalize_latents(latents), per_frame.unflatten(0, (2, FRAMES)).transpose(1, 2))
    torch.testing.assert_close(model.denormalize_latents(model.normalize_latents(latents)), latents)


def test_an_image_config_without_num_frames_loads_as_the_same_image_model(tmp_path):
    image = dit(None)
    assert image.config.num_frames == 1
    for name, tensor in dit(1).state_dict().items():  # the seed builds the same weights with or without the argument
        torch.testing.assert_close(tensor, image.state_dict()[name], rtol=0, atol=0)
    image.save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    config.pop("num_frames")  # a config saved before clips existed
    (tmp_path / "config.json").write_text(json.dumps(config))
    loaded = TupleConditionedDiT.from_pretrained(tmp_path).eval()
    assert loaded.config.num_frames == 1 and loaded.latent_shape == (CHANNELS, GRID, GRID)
    sample = noisy((2, CHANNELS, GRID, GRID))
    torch.testing.assert_close(loaded(sample, 7, concepts(2)).sample, image(sample, 7, concepts(2)).sample,
                               rtol=0, atol=0)


@pytest.mark.parametrize("num_frames", [0, -2, True, 2.0, "4"])
def test_bad_num_frames_are_refused(num_frames):
    with pytest.raises(ValueError, match="num_frames"):
        dit(num_frames)


# --- the pipelines ------------------------------------------------------------------------------------------------


def test_the_video_pipeline_returns_clips_of_every_output_type():
    pipe = video_pipeline()
    array = frames(pipe)
    assert array.shape == (2, FRAMES, SIZE, SIZE, 3) and array.min() >= 0 and array.max() <= 1
    tensor = frames(pipe, output_type="pt")
    assert tensor.shape == (2, FRAMES, 3, SIZE, SIZE)
    np.testing.assert_allclose(tensor.permute(0, 1, 3, 4, 2).numpy(), array, atol=1e-6)
    pil = frames(pipe, output_type="pil")
    assert len(pil) == 2 and all(len(clip) == FRAMES for clip in pil)
    assert all(isinstance(frame, PIL.Image.Image) and frame.size == (SIZE, SIZE) for clip in pil for frame in clip)
    latents = frames(pipe, output_type="latent")
    assert latents.shape == (2, CHANNELS, FRAMES, GRID, GRID)
    assert pipe(PROMPTS, num_videos_per_prompt=2, num_inference_steps=STEPS, output_type="np",
                return_dict=False)[0].shape == (4, FRAMES, SIZE, SIZE, 3)
    with pytest.raises(ValueError, match="output_type"):
        frames(pipe, output_type="gif")


def test_the_frames_differ_and_decode_as_the_image_pipeline_decodes_them():
    """Each frame of a clip is its latent grid decoded alone, as the image pipeline decodes an image's latents."""
    pipe = video_pipeline()
    latents = frames(pipe, output_type="latent")
    clips = frames(pipe)
    image_pipe = TupleConditionedFlowDiTPipeline(vqvae=pipe.vqvae, transformer=dit(1),  # the same statistics
                                                 scheduler=flow_matching_scheduler(50))
    for frame in range(FRAMES):
        decoded = image_pipe.decode_latents(latents[:, :, frame], output_type="np")
        np.testing.assert_allclose(clips[:, frame], decoded, atol=1e-5)
    assert not np.allclose(clips[:, 0], clips[:, -1])
    unsnapped = frames(pipe, quantize=False)
    assert unsnapped.shape == clips.shape and not np.allclose(unsnapped, clips)


def test_the_video_pipeline_is_reproducible_and_a_generator_list_reproduces_single_clips():
    pipe = video_pipeline()
    np.testing.assert_array_equal(frames(pipe, seed=3), frames(pipe, seed=3))
    assert not np.allclose(frames(pipe, seed=3), frames(pipe, seed=4))
    batch = frames(pipe, ["011", "100", "011"], seed=None,
                   generator=[torch.Generator().manual_seed(seed) for seed in (3, 4, 5)])
    for index, (prompt, seed) in enumerate(zip(["011", "100", "011"], (3, 4, 5), strict=True)):
        np.testing.assert_allclose(batch[index], frames(pipe, prompt, seed=seed)[0], atol=1e-5, err_msg=f"clip {index}")
    assert not np.allclose(batch[0], batch[2])
    with pytest.raises(ValueError, match="one generator per image"):
        frames(pipe, seed=None, generator=[torch.Generator().manual_seed(3)])


def test_starting_latents_are_the_clips_noise():
    pipe = video_pipeline()
    noise = noisy((2, CHANNELS, FRAMES, GRID, GRID), seed=5)
    np.testing.assert_allclose(frames(pipe, latents=noise), frames(pipe, latents=noise.clone()), atol=0)
    with pytest.raises(ValueError, match="batch, channels, frames, height, width"):
        frames(pipe, latents=noisy((2, CHANNELS, GRID, GRID)))


def test_the_video_pipeline_round_trips_through_save_pretrained(tmp_path):
    pipe = video_pipeline()
    pipe.save_pretrained(tmp_path, safe_serialization=True)
    loaded = FlowDiTVideoPipeline.from_pretrained(tmp_path)
    loaded.set_progress_bar_config(disable=True)
    assert loaded.transformer.config.num_frames == FRAMES
    np.testing.assert_array_equal(frames(loaded, seed=7), frames(pipe, seed=7))
    with pytest.raises(ValueError, match="use FlowDiTVideoPipeline"):
        TupleConditionedFlowDiTPipeline.from_pretrained(tmp_path)


def test_the_image_and_video_pipelines_refuse_each_others_transformer():
    with pytest.raises(ValueError, match=f"num_frames {FRAMES}: use FlowDiTVideoPipeline"):
        TupleConditionedFlowDiTPipeline(vqvae=vq_tokenizer(), transformer=dit(), scheduler=flow_matching_scheduler(50))
    with pytest.raises(ValueError, match="num_frames 1: use TupleConditionedFlowDiTPipeline"):
        FlowDiTVideoPipeline(vqvae=vq_tokenizer(), transformer=dit(1), scheduler=flow_matching_scheduler(50))
    with pytest.raises(ValueError, match="clips are sampled by flow matching"):  # no DDPM video pipeline
        TupleConditionedDiTPipeline(vqvae=vq_tokenizer(), transformer=dit(), scheduler=DDPMScheduler(clip_sample=False))


def test_a_kl_frame_tokenizer_decodes_the_clips():
    torch.manual_seed(1)
    vae = build_kl_tokenizer(SIZE, block_out_channels=(8, 8, 8), latent_channels=CHANNELS, norm_num_groups=4).eval()
    pipe = video_pipeline(vae=vae)
    assert pipe.vqvae is None
    assert frames(pipe).shape == (2, FRAMES, SIZE, SIZE, 3)


# --- the training task --------------------------------------------------------------------------------------------


def test_clip_latents_are_each_frames_latents_and_their_statistics_span_every_frame():
    vqvae = vq_tokenizer()
    latents = precompute_latents(vqvae, CLIPS)
    assert latents.shape == (len(CLIPS), CHANNELS, FRAMES, GRID, GRID)
    torch.testing.assert_close(latents[:, :, 1], precompute_latents(vqvae, CLIPS[:, 1]))
    mean, std = latent_statistics(latents)
    all_frames = latents.transpose(1, 2).flatten(0, 1)  # (N * T, C, g, g)
    assert (mean, std) == latent_statistics(all_frames)


def test_the_video_task_trains_on_clips_and_generates_uint8_clips():
    vqvae = vq_tokenizer()
    task = FlowDiTVideoTask(dit(), vqvae, flow_matching_scheduler(50), precompute_latents(vqvae, CLIPS),
                            eval_inference_steps=STEPS, eval_batch_size=2)
    assert task.train_latents.shape == (len(CLIPS), CHANNELS, FRAMES, GRID, GRID)
    batch = {"index": torch.arange(3), "concepts": concepts(3)}
    task.model.train()
    loss, _ = task.compute_loss(task.model, batch, torch.Generator().manual_seed(0), 0)
    assert loss.ndim == 0 and torch.isfinite(loss)
    loss.backward()
    assert task.model.input_projection.weight.grad.abs().sum() > 0
    clips = task.generate(task.model, ["011", "100", "111"], seed=0)
    assert clips.dtype == np.uint8 and clips.shape == (3, FRAMES, SIZE, SIZE, 3)
    np.testing.assert_array_equal(clips, task.generate(task.model, ["011", "100", "111"], seed=0))
    assert isinstance(task.pipeline(task.model), FlowDiTVideoPipeline)
    card = task.model_card_details()
    assert card["pipeline_class"] == "FlowDiTVideoPipeline" and "video" in card["tags"]


def test_the_image_and_video_tasks_refuse_each_others_transformer():
    vqvae = vq_tokenizer()
    with pytest.raises(ValueError, match="use FlowDiTVideoTask"):
        FlowMatchingDiTTask(dit(), vqvae, flow_matching_scheduler(50), precompute_latents(vqvae, CLIPS))
    with pytest.raises(ValueError, match="use FlowMatchingDiTTask"):
        FlowDiTVideoTask(dit(1), vqvae, flow_matching_scheduler(50), precompute_latents(vqvae, CLIPS[:, 0]))
    with pytest.raises(ValueError, match=r"train_latents must be \(N, 4, 3, 4, 4\)"):
        FlowDiTVideoTask(dit(), vqvae, flow_matching_scheduler(50), precompute_latents(vqvae, CLIPS[:, 0]))
