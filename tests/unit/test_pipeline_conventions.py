"""The calls diffusers' own pipelines take, on every compgen pipeline (the family table, ``model_families.TABLE``):

1. ``generator`` as one generator or a list with one per image: a batch with a list reproduces the single-image calls
   image for image; a list of the wrong length is refused;
2. ``latents``: the starting noise (U-Net, DiT) or the starting tokens (MaskGIT: token ids, the mask token where to
   generate; GIVT, MAR: token latents, NaN where to generate); a batch started from the latents a generator draws is
   the batch that generator draws; latents of the wrong shape are refused;
3. ``callback_on_step_end`` with ``callback_on_step_end_tensor_inputs``: called after every step with the named
   tensors, and what it returns replaces them; a name the pipeline does not hand over is refused;
4. a pipeline that decodes through a tokenizer and has none (removed after loading) says so before any work.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from diffusers.utils.torch_utils import randn_tensor
from model_families import FAMILIES, GRID, Family, paper_layout_unet, pipeline_model, require

from compgen import GIVTPipeline, MARPipeline, MaskGITPipeline

pytestmark = pytest.mark.usefixtures("single_thread")

STEPS = 3


def generators(*seeds: int) -> list[torch.Generator]:
    return [torch.Generator().manual_seed(seed) for seed in seeds]


def images(pipe, prompts, **kwargs) -> np.ndarray:
    pipe.set_progress_bar_config(disable=True)
    return pipe(prompts, num_inference_steps=STEPS, output_type="np", return_dict=False, **kwargs)[0]  # or frames


@pytest.mark.parametrize("family", FAMILIES)
def test_a_list_of_generators_reproduces_single_image_calls(family: Family):
    require(family, "pipeline-calls")
    pipe = family.pipeline(family.model())
    batch = images(pipe, ["021", "110", "021"], generator=generators(3, 4, 5))
    for index, (prompt, seed) in enumerate(zip(["021", "110", "021"], (3, 4, 5), strict=True)):
        single = images(pipe, prompt, generator=generators(seed)[0])
        np.testing.assert_allclose(batch[index], single[0], atol=1e-5, err_msg=f"image {index}")
    assert not np.allclose(batch[0], batch[2])  # one prompt, two generators: two images
    with pytest.raises(ValueError, match="one generator per image"):
        images(pipe, ["021", "110"], generator=generators(3))


def starting_latents(pipe, batch_size: int, seed: int) -> tuple[torch.Tensor, torch.Generator]:
    """What the pipeline starts from with a generator of ``seed``, and that generator after drawing it: noise as the
    generator draws it (U-Net, DiT); every token masked, drawing nothing (the masked-token pipelines)."""
    model = pipeline_model(pipe)
    generator = torch.Generator().manual_seed(seed)
    if isinstance(pipe, MaskGITPipeline):
        return torch.full((batch_size, *model.token_grid_shape), model.mask_token_id), generator
    if isinstance(pipe, GIVTPipeline | MARPipeline):
        return torch.full((batch_size, model.config.latent_channels, GRID, GRID), float("nan")), generator
    config = model.config
    shape = ((batch_size, config.in_channels, config.sample_size, config.sample_size) if hasattr(config, "in_channels")
             else (batch_size, *model.latent_shape))
    return randn_tensor(shape, generator=generator, dtype=torch.float32), generator


@pytest.mark.parametrize("family", FAMILIES)
def test_latents_start_the_loop(family: Family):
    require(family, "pipeline-calls")
    pipe = family.pipeline(family.model())
    latents, generator = starting_latents(pipe, 2, seed=7)
    drawn = images(pipe, ["021", "110"], generator=torch.Generator().manual_seed(7))
    given = images(pipe, ["021", "110"], generator=generator, latents=latents)
    np.testing.assert_allclose(given, drawn, atol=1e-5)
    with pytest.raises(ValueError, match="latents must have shape"):
        images(pipe, ["021", "110"], latents=latents[:1])
    if not isinstance(pipe, MaskGITPipeline | GIVTPipeline | MARPipeline):  # starting noise: one NaN, all NaN images
        poisoned = latents.clone()
        poisoned[0, 0, 0, 0] = float("nan")
        with pytest.raises(ValueError, match="latents must be finite"):
            images(pipe, ["021", "110"], latents=poisoned)


@pytest.mark.parametrize("family", FAMILIES)
def test_step_callback_sees_and_replaces_the_latents(family: Family):
    require(family, "pipeline-calls")
    pipe = family.pipeline(family.model())
    seen = []

    def record(pipeline, step_index, timestep, callback_kwargs):
        assert pipeline is pipe and set(callback_kwargs) == {"latents"}
        seen.append(step_index)
        return {}

    plain = images(pipe, ["021"], generator=torch.Generator().manual_seed(0))
    recorded = images(pipe, ["021"], generator=torch.Generator().manual_seed(0), callback_on_step_end=record,
                      callback_on_step_end_tensor_inputs=["latents"])
    np.testing.assert_allclose(recorded, plain, atol=1e-6)  # a callback that returns nothing changes nothing
    assert seen == list(range(STEPS))

    def replace(pipeline, step_index, timestep, callback_kwargs):
        latents = callback_kwargs["latents"]
        if isinstance(pipe, MaskGITPipeline):  # every token known after the first step: the rest is decoding
            return {"latents": torch.where(latents == pipeline.transformer.mask_token_id, 0, latents)}
        return {"latents": torch.zeros_like(latents)}

    replaced = images(pipe, ["021"], generator=torch.Generator().manual_seed(0), callback_on_step_end=replace)
    assert not np.allclose(replaced, plain)
    with pytest.raises(ValueError, match="callback_on_step_end_tensor_inputs"):
        images(pipe, ["021"], callback_on_step_end=record, callback_on_step_end_tensor_inputs=["noise_pred"])
    # what a callback returns is checked: a dict, keys the pipeline takes back, latents of the batch's shape, numbers
    for returned, message in ((lambda latents: None, "must return a dict"),
                              (lambda latents: {"latent": latents}, r"returned \['latent'\]"),
                              (lambda latents: {"latents": latents[:1]}, "latents of shape")):
        with pytest.raises(ValueError, match=message):
            images(pipe, ["021", "110"], callback_on_step_end=lambda p, i, t, kw, f=returned: f(kw["latents"]))
    if not isinstance(pipe, MaskGITPipeline):  # continuous latents: a NaN would spread to all-NaN images
        with pytest.raises(ValueError, match="NaN or inf"):
            images(pipe, ["021"], callback_on_step_end=lambda p, i, t, kw: {"latents": torch.full_like(
                kw["latents"], float("nan"))})


def test_masked_token_pipelines_keep_the_tokens_latents_give():
    from model_families import givt, givt_pipeline, maskgit, maskgit_pipeline

    pipe = maskgit_pipeline(maskgit())
    known = torch.full((1, GRID * GRID), pipe.transformer.mask_token_id)
    known[0, :10] = 3
    pipe.set_progress_bar_config(disable=True)
    captured = {}

    def last(pipeline, step_index, timestep, callback_kwargs):
        captured["tokens"] = callback_kwargs["latents"].clone()
        return {}

    pipe("021", num_inference_steps=STEPS, latents=known, callback_on_step_end=last, output_type="np")
    assert (captured["tokens"][0, :10] == 3).all() and (captured["tokens"] != pipe.transformer.mask_token_id).all()
    with pytest.raises(ValueError, match="at least one token"):
        pipe("021", latents=torch.zeros(1, GRID * GRID, dtype=torch.long))

    pipe = givt_pipeline(givt())
    latents = torch.full((1, 4, GRID, GRID), float("nan"))
    latents[0, :, 0, :3] = 0.5
    captured.clear()
    pipe("021", num_inference_steps=STEPS, latents=latents, callback_on_step_end=last, output_type="np")
    assert (captured["tokens"][0, :, 0, :3] == 0.5).all() and not captured["tokens"].isnan().any()
    uneven = latents.clone()
    uneven = torch.cat([uneven, torch.full_like(uneven, float("nan"))])
    with pytest.raises(ValueError, match="same number of tokens"):
        pipe(["021", "110"], latents=uneven)


@pytest.mark.parametrize("family", FAMILIES)
def test_a_pipeline_without_its_tokenizer_says_so(family: Family):
    require(family, "tokenizer-required")
    pipe = family.pipeline(family.model())
    pipe.vqvae = None
    if hasattr(pipe, "vae"):
        pipe.vae = None
    with pytest.raises(ValueError, match="tokenizer"):
        images(pipe, ["021"])


@pytest.mark.parametrize("family", FAMILIES)
def test_gradient_checkpointing_gives_the_same_gradients(family: Family):
    """diffusers' ``enable_gradient_checkpointing`` on every model: the same loss and gradients, recomputed."""
    require(family, "gradient-checkpointing")

    def gradients(checkpointing: bool) -> dict[str, torch.Tensor]:
        model = family.model().train()
        for module in model.modules():  # no dropout anywhere: a recomputed forward is the same forward
            if isinstance(module, torch.nn.Dropout):
                module.p = 0.0
        if checkpointing:
            model.enable_gradient_checkpointing()
            assert model.is_gradient_checkpointing
        output = family.forward(model, family.inputs(model, ["021", "110"]))
        output.float().square().mean().backward()
        return {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}

    plain, checkpointed = gradients(False), gradients(True)
    assert plain.keys() == checkpointed.keys() and plain
    for name in plain:
        torch.testing.assert_close(checkpointed[name], plain[name], rtol=1e-5, atol=1e-6, msg=name)


def test_gradient_checkpointing_is_refused_where_it_would_change_training():
    from compgen.training.acceleration import enable_gradient_checkpointing

    with pytest.raises(ValueError, match="BatchNorm"):
        paper_layout_unet().enable_gradient_checkpointing()
    with pytest.raises(ValueError, match="supports it"):
        enable_gradient_checkpointing(torch.nn.Linear(2, 2))


def test_an_export_loaded_with_another_familys_pipeline_is_refused_at_load():
    """A flow-matching DiT export under the DDPM DiT pipeline, a MAR export under GIVT's and the reverse: a clear error
    when the pipeline is built (``from_pretrained`` builds it), not an AttributeError in the middle of sampling."""
    from diffusers import DDPMScheduler
    from model_families import dit, givt, mar, tokenizer

    from compgen import MaskGITScheduler, TupleConditionedDiTPipeline
    from compgen.pipelines.flow_dit import flow_matching_scheduler

    with pytest.raises(ValueError, match="load it with TupleConditionedFlowDiTPipeline"):
        TupleConditionedDiTPipeline(vqvae=tokenizer(), transformer=dit(), scheduler=flow_matching_scheduler(50))
    with pytest.raises(ValueError, match="load a MAR export with MARPipeline"):
        GIVTPipeline(vqvae=tokenizer(), transformer=mar(), scheduler=MaskGITScheduler(0))
    with pytest.raises(ValueError, match="load a GIVT export with GIVTPipeline"):
        MARPipeline(vqvae=tokenizer(), transformer=givt(), scheduler=MaskGITScheduler(0),
                    head_scheduler=DDPMScheduler(num_train_timesteps=50, clip_sample=False))


@pytest.mark.parametrize("video", [False, True], ids=["image", "video"])
def test_a_maskgit_export_under_a_dit_pipeline_and_the_reverse_are_refused_by_name(tmp_path, video):
    """``from_pretrained`` of an export with another family's pipeline class built the pipeline on the export's own
    components and died in ``AttributeError: 'FrozenDict' object has no attribute 'mask_token_id'`` (or
    ``'latent_channels'``); now the pipeline names both transformers."""
    from model_families import dit, dit_pipeline, maskgit, maskgit_pipeline, maskgit_video, maskgit_video_pipeline

    from compgen import MaskGITPipeline, TupleConditionedDiTPipeline, TupleConditionedFlowDiTPipeline
    from compgen.pipelines.flow_dit_video import FlowDiTVideoPipeline
    from compgen.pipelines.maskgit_video import MaskGITVideoPipeline

    token_export = (maskgit_video_pipeline(maskgit_video()) if video else maskgit_pipeline(maskgit()))
    token_export.save_pretrained(tmp_path / "maskgit")
    dit_export = dit_pipeline(dit())
    dit_export.save_pretrained(tmp_path / "dit")
    for pipeline in ((FlowDiTVideoPipeline,) if video else (TupleConditionedDiTPipeline,
                                                               TupleConditionedFlowDiTPipeline)):
        with pytest.raises(ValueError, match=f"{pipeline.__name__} needs a TupleConditionedDiT, got "
                                             "MaskGITTransformer: an export of another family"):
            pipeline.from_pretrained(tmp_path / "maskgit")
    pipeline = MaskGITVideoPipeline if video else MaskGITPipeline
    with pytest.raises(ValueError, match=f"{pipeline.__name__} needs a MaskGITTransformer, got TupleConditionedDiT"):
        pipeline.from_pretrained(tmp_path / "dit")


@pytest.mark.parametrize("family", FAMILIES)
def test_a_step_callback_changes_the_guidance_the_loop_reads(family: Family):
    """diffusers' ``test_callback_cfg`` convention: ``pipe.guidance_scale``, ``pipe.do_classifier_free_guidance`` and
    ``pipe.num_timesteps`` during a call, and a callback raising ``pipe._guidance_scale`` at every step guides the
    remaining steps with the raised weight (raised far, so that a tiny model's argmax moves too)."""
    require(family, "pipeline-calls")
    require(family, "guidance")
    pipe = family.pipeline(family.model())
    seen = []

    def increase_guidance(pipeline, step_index, timestep, callback_kwargs):
        seen.append((pipeline.guidance_scale, pipeline.do_classifier_free_guidance, pipeline.num_timesteps))
        pipeline._guidance_scale += 50.0
        return callback_kwargs

    steady = images(pipe, ["021"], generator=torch.Generator().manual_seed(0), guidance_scale=2.0)
    raised = images(pipe, ["021"], generator=torch.Generator().manual_seed(0), guidance_scale=2.0,
                    callback_on_step_end=increase_guidance)
    assert seen == [(2.0 + 50 * step, True, STEPS) for step in range(STEPS)]
    assert pipe.guidance_scale == 2.0 + 50 * STEPS
    assert not np.allclose(raised, steady)  # the loop read the raised weight
    images(pipe, ["021"])
    assert pipe.guidance_scale == 1.0 and not pipe.do_classifier_free_guidance


@pytest.mark.parametrize("family", FAMILIES)
def test_layerwise_casting_samples_finite_images(family: Family):
    """diffusers' ``test_layerwise_casting_inference`` convention: the pipeline in bf16 with its denoiser stored in
    float8 (``enable_layerwise_casting``) samples finite images. The VQ lookup once called ``torch.cdist`` in bf16,
    which has no CPU kernel."""
    from diffusers import ModelMixin

    require(family, "pipeline-calls")
    pipe = family.pipeline(family.model()).to(dtype=torch.bfloat16)  # as diffusers' mixin: bf16, the denoiser in fp8
    denoiser = pipeline_model(pipe)
    assert isinstance(denoiser, ModelMixin)
    denoiser.enable_layerwise_casting(storage_dtype=torch.float8_e4m3fn, compute_dtype=torch.bfloat16)
    out = images(pipe, ["021", "110"], generator=torch.Generator().manual_seed(0))
    assert out.shape[0] == 2 and np.isfinite(out).all()


def test_snapping_to_the_codebook_matches_the_quantizer():
    """compgen's fp32 nearest-code lookup picks the codes diffusers' ``VectorQuantizer`` picks."""
    from compgen.models.vq_tokenizer import build_vq_tokenizer
    from compgen.pipelines.latent_decoding import snap_to_codebook

    torch.manual_seed(0)
    vqvae = build_vq_tokenizer(28, block_out_channels=(8, 8, 8), num_vq_embeddings=16, vq_embed_dim=4,
                               norm_num_groups=4)
    latents = torch.randn(3, 4, 7, 7)
    expected, _, _ = vqvae.quantize(latents)
    torch.testing.assert_close(snap_to_codebook(vqvae, latents), expected, rtol=0, atol=1e-6)  # z + (z_q - z)


@pytest.mark.parametrize("family", FAMILIES)
def test_output_type_latent_returns_what_the_last_callback_left(family: Family):
    """diffusers' ``test_callback_inputs`` convention: with ``output_type="latent"`` the pipeline returns the final
    latents undecoded (token ids for MaskGIT), so latents a callback zeroes at the last step come back as zeros."""
    require(family, "pipeline-calls")
    pipe = family.pipeline(family.model())
    pipe.set_progress_bar_config(disable=True)
    kept = {}

    def zero_last(pipeline, step_index, timestep, callback_kwargs):
        assert set(callback_kwargs) <= set(pipeline._callback_tensor_inputs)
        if step_index == pipeline.num_timesteps - 1:
            callback_kwargs["latents"] = torch.zeros_like(callback_kwargs["latents"])
        kept["latents"] = callback_kwargs["latents"]
        return callback_kwargs

    output = pipe(["021", "110"], num_inference_steps=STEPS, generator=torch.Generator().manual_seed(0),
                  output_type="latent", callback_on_step_end=zero_last,
                  callback_on_step_end_tensor_inputs=pipe._callback_tensor_inputs, return_dict=False)[0]
    assert isinstance(output, torch.Tensor) and output.shape[0] == 2
    assert output.abs().sum() == 0
    assert output.reshape(-1).shape == kept["latents"].reshape(-1).shape
