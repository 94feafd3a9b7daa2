"""TupleConditionedUNet2DModel and ConceptEmbedding: shapes, conditioning modes, null concepts, validation."""

import pytest
import torch

from compgen import shapes_space
from compgen.models.concept_embedding import ConceptEmbedding
from compgen.models.tuple_unet import TupleConditionedUNet2DModel
from compgen.shapes import shapes_continuous_concepts

SPACE = shapes_space()
TINY = {"block_out_channels": (8, 16), "layers_per_block": 1}


def make_unet(**kwargs) -> TupleConditionedUNet2DModel:
    torch.manual_seed(0)
    config = {"concept_space": SPACE.to_dict(), **TINY, **kwargs}
    if config.get("conditioning") == "full":
        config.setdefault("continuous_concepts", shapes_continuous_concepts(SPACE))
    return TupleConditionedUNet2DModel(**config).eval()


def batch(size: int = 4, sample_size: int = 28):
    generator = torch.Generator().manual_seed(1)
    sample = torch.randn(size, 3, sample_size, sample_size, generator=generator)
    concepts = torch.tensor([[0, 0, 0], [1, 1, 1], [0, 1, 0], [1, 0, 1]])[:size]
    return sample, torch.tensor([10, 100, 250, 499])[:size], concepts


def test_shapes_continuous_concepts_matches_renderer_tables():
    table = shapes_continuous_concepts(SPACE)
    assert table == {"color": [[0.9, 0.1, 0.1], [0.1, 0.1, 0.9]], "size": [[2.7], [1.6]]}
    assert len(shapes_continuous_concepts(shapes_space(num_colors=3))["color"]) == 3


@pytest.mark.parametrize("sample_size, block_out_channels", [(28, (8, 16)), (32, (8, 16)), (64, (8, 8, 16))])
@pytest.mark.parametrize("mode", [{"conditioning": "quantized"}, {"conditioning": "full"}, {"concept_dropout": 0.1}])
def test_forward_shapes(sample_size, block_out_channels, mode):
    unet = make_unet(sample_size=sample_size, block_out_channels=block_out_channels, **mode)
    sample, timesteps, concepts = batch(sample_size=sample_size)
    out = unet(sample, timesteps, concepts).sample
    assert out.shape == sample.shape
    assert torch.isfinite(out).all()
    (tuple_out,) = unet(sample, 7, concepts, return_dict=False)  # a plain int timestep broadcasts
    assert tuple_out.shape == sample.shape


def test_conditioning_changes_output_quantized_and_full():
    sample, timesteps, concepts = batch()
    unet = make_unet()
    flipped = concepts.clone()
    flipped[:, 1] = 1 - flipped[:, 1]  # change only the color
    assert not torch.allclose(unet(sample, timesteps, concepts).sample, unet(sample, timesteps, flipped).sample)

    full = make_unet(conditioning="full")
    canonical = full(sample, timesteps, concepts).sample
    rgb = torch.tensor(shapes_continuous_concepts(SPACE)["color"])[concepts[:, 1]]
    size = torch.tensor(shapes_continuous_concepts(SPACE)["size"])[concepts[:, 2]]
    explicit = full(sample, timesteps, concepts, concept_values=torch.cat([rgb, size], dim=1)).sample
    torch.testing.assert_close(explicit, canonical)  # None means the canonical class values
    jittered = full(sample, timesteps, concepts, concept_values=torch.cat([rgb * 0.5, size + 0.3], dim=1)).sample
    assert not torch.allclose(jittered, canonical)


def test_full_mode_uses_values_not_indices_for_continuous_variables():
    full = make_unet(conditioning="full")
    sample, timesteps, concepts = batch(2)
    values = torch.tensor([[0.5, 0.5, 0.5, 2.0], [0.5, 0.5, 0.5, 2.0]])
    other = concepts.clone()
    other[:, 1:] = 1 - other[:, 1:]  # color and size indices change, their values do not
    torch.testing.assert_close(
        full(sample, timesteps, concepts, concept_values=values).sample,
        full(sample, timesteps, other, concept_values=values).sample,
    )


def test_drop_mask_uses_learned_null():
    unet = make_unet(concept_dropout=0.1)
    sample, timesteps, concepts = batch()
    all_dropped = torch.ones_like(concepts, dtype=torch.bool)
    # With every concept dropped the output no longer depends on the class.
    out_a = unet(sample, timesteps, concepts, drop_mask=all_dropped).sample
    out_b = unet(sample, timesteps, 1 - concepts, drop_mask=all_dropped).sample
    torch.testing.assert_close(out_a, out_b)
    assert not torch.allclose(out_a, unet(sample, timesteps, concepts).sample)

    embedding = unet.concept_embedding
    mask = torch.tensor([[True, False, False]]).expand(4, 3)
    embedded = embedding(concepts, drop_mask=mask)
    torch.testing.assert_close(embedded[:, 0], embedding.null_embedding[0].expand(4, -1))
    torch.testing.assert_close(embedded[:, 1:], embedding(concepts)[:, 1:])


def test_training_mode_samples_dropout_from_torch_rng():
    unet = make_unet(concept_dropout=0.5).train()
    sample, timesteps, concepts = batch()
    torch.manual_seed(3)
    first = unet(sample, timesteps, concepts).sample
    torch.manual_seed(3)
    torch.testing.assert_close(unet(sample, timesteps, concepts).sample, first)
    torch.manual_seed(4)
    assert not torch.allclose(unet(sample, timesteps, concepts).sample, first)
    unet.eval()
    torch.testing.assert_close(
        unet(sample, timesteps, concepts).sample,
        unet(sample, timesteps, concepts, drop_mask=torch.zeros_like(concepts, dtype=torch.bool)).sample,
    )


def test_gradients_reach_every_parameter():
    unet = make_unet(conditioning="full", concept_dropout=0.3).train()
    sample, timesteps, concepts = batch()
    mask = torch.tensor([[True, True, True], [False, False, False], [True, False, True], [False, True, False]])
    unet(sample, timesteps, concepts, drop_mask=mask).sample.square().mean().backward()
    missing = [name for name, p in unet.named_parameters() if p.grad is None or not p.grad.abs().sum() > 0]
    assert missing == []


def test_channels_last_and_bf16_autocast_match_fp32():
    unet = make_unet()
    sample, timesteps, concepts = batch()
    reference = unet(sample, timesteps, concepts).sample
    unet_cl = make_unet().to(memory_format=torch.channels_last)
    out_cl = unet_cl(sample.contiguous(memory_format=torch.channels_last), timesteps, concepts).sample
    torch.testing.assert_close(out_cl, reference, atol=1e-4, rtol=1e-4)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out_bf16 = unet(sample, timesteps, concepts).sample
    assert out_bf16.shape == reference.shape
    assert (out_bf16.float() - reference).abs().mean() < 0.05


@pytest.mark.parametrize(
    "concepts, match",
    [
        (torch.tensor([[0, 1]]), "shape \\(batch, 3\\)"),
        (torch.tensor([[0, 2, 0]]), "'color'"),
        (torch.tensor([[-1, 0, 0]]), "'shape'"),
        (torch.tensor([[0.0, 1.0, 0.0]]), "integer"),
    ],
)
def test_bad_concepts_raise(concepts, match):
    unet = make_unet()
    with pytest.raises(ValueError, match=match):
        unet(torch.randn(1, 3, 28, 28), 1, concepts)


def test_bad_values_masks_and_configs_raise():
    sample, timesteps, concepts = batch(2)
    with pytest.raises(ValueError, match="concept_values must have shape \\(2, 4\\)"):
        make_unet(conditioning="full")(sample, timesteps, concepts, concept_values=torch.zeros(2, 3))
    with pytest.raises(ValueError, match="quantized"):
        make_unet()(sample, timesteps, concepts, concept_values=torch.zeros(2, 4))
    with pytest.raises(ValueError, match="no null embeddings"):
        make_unet()(sample, timesteps, concepts, drop_mask=torch.zeros(2, 3, dtype=torch.bool))
    with pytest.raises(ValueError, match="batch size"):
        make_unet()(sample, timesteps, concepts[:1])
    with pytest.raises(ValueError, match="continuous_concepts"):
        TupleConditionedUNet2DModel(SPACE.to_dict(), conditioning="full")
    with pytest.raises(ValueError, match="divisible"):
        TupleConditionedUNet2DModel(SPACE.to_dict(), sample_size=30)
    with pytest.raises(ValueError, match="conditioning"):
        TupleConditionedUNet2DModel(SPACE.to_dict(), conditioning="binary")
    with pytest.raises(ValueError, match="one non-empty value vector per class"):
        ConceptEmbedding(SPACE.to_dict(), 8, continuous_concepts={"size": [[2.7]]})


PAPER = {"block_type": "paper", "norm_type": "batch", "layers_per_block": 2}


@pytest.mark.parametrize("mode", [{"conditioning": "quantized"}, {"conditioning": "full"}, {"concept_dropout": 0.1},
                                  {"norm_type": "group"}, {"concept_modulation": "film"},
                                  {"concept_modulation": "scale_shift"}])
def test_paper_layout_forward_and_gradients(mode):
    unet = make_unet(**{**PAPER, **mode}).train()
    sample, timesteps, concepts = batch()
    out = unet(sample, timesteps, concepts).sample
    assert out.shape == sample.shape and torch.isfinite(out).all()
    out.square().mean().backward()
    missing = {name for name, p in unet.named_parameters() if p.grad is None}
    assert missing <= {"concept_embedding.null_embedding"}  # the null gets gradients only where a concept drops
    norms = {type(m) for m in unet.modules()} & {torch.nn.BatchNorm2d, torch.nn.GroupNorm}
    assert torch.nn.BatchNorm2d in norms or mode.get("norm_type") == "group"


def test_paper_layout_checks():
    # Its save/load round trip (BatchNorm statistics included) is a row of tests/model_families.py.
    with pytest.raises(ValueError, match="layers_per_block must be 2"):
        make_unet(block_type="paper", layers_per_block=1)
    with pytest.raises(ValueError, match="block_type"):
        make_unet(block_type="dense")
    with pytest.raises(ValueError, match="norm_type"):
        make_unet(norm_type="layer")


def test_residual_layout_builds_what_it_built_before_the_paper_layout():
    """The cpu-quick preset's model (widths 32, 64, one block per stage) is unchanged: same weights, same shapes."""
    torch.manual_seed(0)
    unet = TupleConditionedUNet2DModel(SPACE.to_dict(), block_out_channels=(32, 64), layers_per_block=1,
                                       conditioning="full", continuous_concepts=shapes_continuous_concepts(SPACE))
    assert sum(p.numel() for p in unet.parameters()) == 401699
    assert (unet.config.block_type, unet.config.norm_type) == ("residual", "group")
    assert not any(isinstance(m, torch.nn.BatchNorm2d) for m in unet.modules())
    names = list(unet.state_dict())
    assert names[:3] == ["conv_in.conv1.weight", "conv_in.conv1.bias", "conv_in.norm1.weight"]
    assert "time_embedding.linear_1.weight" in names and "concept_embedding.embedders.shape.weight" in names


@pytest.mark.parametrize("layout", [{}, {"block_type": "paper", "layers_per_block": 2}])
@pytest.mark.parametrize("modulation", ["film", "add", "scale_shift"])
def test_zero_concept_embedding_init_starts_unconditioned_and_learns(layout, modulation, tmp_path):
    """``concept_embedding_init="zero"``: every concept embeds to 0, so at initialisation the output is the same for
    every class (the decoder starts unconditioned); one step of training gives the classes apart again, and the
    option survives a save/load round trip."""
    unet = make_unet(conditioning="full", concept_modulation=modulation, concept_embedding_init="zero", **layout)
    sample, timesteps, concepts = batch()
    assert unet.concept_embedding(concepts, None, None).abs().max() == 0
    same_image = sample[:1].expand(4, -1, -1, -1)
    with torch.no_grad():
        out = unet(same_image, timesteps[:1].expand(4), concepts).sample
    torch.testing.assert_close(out, out[:1].expand_as(out))

    unet.train()
    optimizer = torch.optim.SGD(unet.parameters(), lr=0.1)
    unet(sample, timesteps, concepts).sample.square().mean().backward()
    optimizer.step()
    unet.eval()
    assert unet.concept_embedding(concepts, None, None).abs().max() > 0
    with torch.no_grad():
        out = unet(same_image, timesteps[:1].expand(4), concepts).sample
    assert not torch.allclose(out[0], out[1])

    unet.save_pretrained(tmp_path)
    loaded = TupleConditionedUNet2DModel.from_pretrained(tmp_path).eval()
    assert loaded.config.concept_embedding_init == "zero"
    with torch.no_grad():
        torch.testing.assert_close(loaded(sample, timesteps, concepts).sample, unet(sample, timesteps, concepts).sample)


def test_zero_concept_embedding_init_is_refused_with_the_multiplying_modulation():
    with pytest.raises(ValueError, match="'multiply' modulation .* all-zero features"):
        make_unet(concept_embedding_init="zero")
    with pytest.raises(ValueError, match="concept_embedding_init must be one of"):
        make_unet(concept_modulation="film", concept_embedding_init="small")
    assert make_unet().config.concept_embedding_init == "normal"

def capture_full_resolution(unet: TupleConditionedUNet2DModel) -> dict:
    """After a forward pass: ``stage``, the last decoder stage's output, and ``conv_in``, the output convolution's
    input (its first channels are the full-resolution features, gated or not)."""
    captured = {}
    unet.up_stages[-1].register_forward_hook(lambda module, args, output: captured.update(stage=output))
    unet.conv_out.register_forward_pre_hook(lambda module, args: captured.update(conv_in=args[0]))
    return captured


@pytest.mark.parametrize("layout", [{}, {"block_type": "paper", "layers_per_block": 2}])
@pytest.mark.parametrize("modulation", ["multiply", "film", "add", "scale_shift"])
def test_modulate_full_resolution_gates_the_output_convolutions_input(layout, modulation, tmp_path):
    """``modulate_full_resolution``: the last decoder stage's output is modulated by one more slice of the concept and
    time embeddings before the output convolution (exactly ``modulate`` of it), gradients reach every parameter, and
    the option survives a save/load round trip with identical outputs."""
    unet = make_unet(conditioning="full", concept_modulation=modulation, modulate_full_resolution=True, **layout)
    assert unet.modulation_channels == [16, 8, 8]
    sample, timesteps, concepts = batch()
    captured = capture_full_resolution(unet)
    with torch.no_grad():
        out = unet(sample, timesteps, concepts).sample
        scales, concept_shifts = unet.split_concept_embedding(unet.concept_embedding(concepts, None, None).sum(dim=1))
        scale, shift = scales[-1], unet.embed_time(timesteps)[-1]
        if concept_shifts is not None:
            shift = shift + concept_shifts[-1]
        expected = unet.modulate(captured["stage"], scale, shift)
    torch.testing.assert_close(captured["conv_in"][:, :8], expected)
    assert not torch.allclose(expected, captured["stage"])

    unet.train()
    unet(sample, timesteps, concepts).sample.square().mean().backward()
    missing = [name for name, p in unet.named_parameters() if p.grad is None or not p.grad.abs().sum() > 0]
    assert missing == []

    unet.eval().save_pretrained(tmp_path)
    loaded = TupleConditionedUNet2DModel.from_pretrained(tmp_path).eval()
    assert loaded.config.modulate_full_resolution is True
    with torch.no_grad():
        torch.testing.assert_close(loaded(sample, timesteps, concepts).sample, unet(sample, timesteps, concepts).sample)
    assert out.shape == sample.shape


def test_modulate_full_resolution_off_leaves_the_full_resolution_features_ungated():
    """Off (the default), the output convolution sees the last stage's output unmodulated, as in Paper A."""
    unet = make_unet()
    assert unet.modulation_channels == [16, 8] and unet.config.modulate_full_resolution is False
    sample, timesteps, concepts = batch()
    captured = capture_full_resolution(unet)
    with torch.no_grad():
        unet(sample, timesteps, concepts)
    torch.testing.assert_close(captured["conv_in"][:, :8], captured["stage"], atol=0, rtol=0)


@pytest.mark.parametrize("layout", [{}, {"block_type": "paper", "layers_per_block": 2}])
def test_scale_shift_modulation_scales_and_shifts_each_stage_by_the_concepts(layout):
    """``concept_modulation="scale_shift"``: each concept embeds to a scale and a shift per modulated channel, and
    every decoder stage's input is ``h * (1 + scale) + time shift + concept shift``, with ``h`` the bottleneck's
    features for the first stage and the previous stage's output after it."""
    unet = make_unet(conditioning="full", concept_modulation="scale_shift", **layout)
    film = make_unet(conditioning="full", concept_modulation="film", **layout)
    assert unet.concept_embedding.embedding_dim == 2 * film.concept_embedding.embedding_dim == 2 * 24
    sample, timesteps, concepts = batch()
    inputs, unmodulated = [], []
    activation = torch.relu if layout else torch.nn.functional.gelu
    unet.bottleneck_norm.register_forward_hook(lambda module, args, output: unmodulated.append(activation(output)))
    for stage in unet.up_stages:
        stage.register_forward_pre_hook(lambda module, args: inputs.append(args[0]))
        stage.register_forward_hook(lambda module, args, output: unmodulated.append(output))
    with torch.no_grad():
        unet(sample, timesteps, concepts)
        scales, shifts = unet.split_concept_embedding(unet.concept_embedding(concepts, None, None).sum(dim=1))
        times = unet.embed_time(timesteps)
    assert [s.shape[1] for s in scales] == [s.shape[1] for s in shifts] == unet.modulation_channels
    for h, stage_input, scale, time, shift in zip(unmodulated, inputs, scales, times, shifts, strict=False):
        expected = h * (1 + scale[:, :, None, None]) + (time + shift)[:, :, None, None]
        torch.testing.assert_close(stage_input, expected)
    assert len(inputs) == 2 and not torch.allclose(shifts[0][0], shifts[0][1])
