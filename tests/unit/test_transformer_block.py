"""The token models' blocks on diffusers' attention (issue 41, item 2): weights of the older
``nn.TransformerEncoderLayer`` layout load and give the same outputs; diffusers' attention processors, attention
backends and fp8 layerwise casting work on every token transformer (the rows of ``model_families.TABLE`` with
transformer blocks; the others say why they are excluded)."""


import pytest
import torch
from model_families import FAMILIES, Family, maskgit, maskgit_forward, require
from torch import nn

from compgen.models.transformer_block import TokenAttnProcessor, convert_legacy_block_weights
from compgen.pipelines.concept_inputs import prepare_concept_inputs


def _inputs(model):
    return prepare_concept_inputs(model, ["021", "101"], 1, 1.0, None, device=torch.device("cpu"))


def _legacy(model: nn.Module) -> nn.Module:
    """``model`` with its blocks as compgen built them before: ``nn.TransformerEncoderLayer`` (pre-norm, GELU),
    carrying the same weights."""
    width = model.config.hidden_size
    legacy = nn.ModuleList(nn.TransformerEncoderLayer(
        width, block.attn.heads, dim_feedforward=block.ff.net[2].in_features, dropout=0.0, activation="gelu",
        batch_first=True, norm_first=True) for block in model.blocks).eval()
    with torch.no_grad():
        for old, new in zip(legacy, model.blocks, strict=True):
            old.self_attn.in_proj_weight.copy_(torch.cat([new.attn.to_q.weight, new.attn.to_k.weight,
                                                          new.attn.to_v.weight]))
            old.self_attn.in_proj_bias.copy_(torch.cat([new.attn.to_q.bias, new.attn.to_k.bias, new.attn.to_v.bias]))
            old.self_attn.out_proj.load_state_dict(new.attn.to_out[0].state_dict())
            old.linear1.load_state_dict(new.ff.net[0].proj.state_dict())
            old.linear2.load_state_dict(new.ff.net[2].state_dict())
            old.norm1.load_state_dict(new.norm1.state_dict())
            old.norm2.load_state_dict(new.norm2.state_dict())
    model.blocks = legacy
    return model


@pytest.mark.parametrize("family", FAMILIES)
def test_an_export_in_the_older_block_layout_loads_and_gives_its_outputs(family: Family, tmp_path):
    """``from_pretrained`` converts the older layout (diffusers' hook for renamed weights): the same outputs up to
    float rounding, since both compute the same pre-norm block."""
    require(family, "token-blocks")
    make, forward = family.model, family.forward
    model = make()
    reference = forward(model, _inputs(model))
    old = _legacy(make())
    assert torch.allclose(forward(old, _inputs(old)), reference, atol=1e-5)  # the same function
    old.save_pretrained(tmp_path / "old")
    assert any(".self_attn.in_proj_weight" in key for key in old.state_dict())
    loaded = type(model).from_pretrained(tmp_path / "old").eval()
    torch.testing.assert_close(forward(loaded, _inputs(loaded)), reference, atol=1e-5, rtol=1e-5)


def test_the_conversion_renames_only_legacy_blocks():
    weights = {"blocks.0.self_attn.in_proj_weight": torch.arange(12.0).view(6, 2),
               "blocks.0.self_attn.in_proj_bias": torch.arange(6.0), "blocks.0.linear1.weight": torch.ones(1),
               "head.weight": torch.zeros(1)}
    assert convert_legacy_block_weights(weights) == ["blocks.0."]
    assert torch.equal(weights["blocks.0.attn.to_k.weight"], torch.arange(4.0, 8.0).view(2, 2))
    assert set(weights) == {"blocks.0.attn.to_q.weight", "blocks.0.attn.to_k.weight", "blocks.0.attn.to_v.weight",
                            "blocks.0.attn.to_q.bias", "blocks.0.attn.to_k.bias", "blocks.0.attn.to_v.bias",
                            "blocks.0.ff.net.0.proj.weight", "head.weight"}
    assert convert_legacy_block_weights(weights) == []  # already converted: left alone


@pytest.mark.parametrize("family", FAMILIES)
def test_diffusers_attention_controls_reach_every_block(family: Family):
    require(family, "token-blocks")
    make, forward = family.model, family.forward
    model = make()
    reference = forward(model, _inputs(model))
    assert len(model.attn_processors) == model.config.num_layers

    class Counting(TokenAttnProcessor):
        calls = 0

        def __call__(self, attn, hidden_states, encoder_hidden_states=None, attention_mask=None):
            Counting.calls += 1
            return super().__call__(attn, hidden_states, encoder_hidden_states, attention_mask)

    model.set_attn_processor(Counting())
    torch.testing.assert_close(forward(model, _inputs(model)), reference)
    assert Counting.calls == model.config.num_layers
    model.set_attention_backend("_native_math")
    assert {p._attention_backend.value for p in model.attn_processors.values()} == {"_native_math"}
    torch.testing.assert_close(forward(model, _inputs(model)), reference, atol=1e-5, rtol=1e-5)
    model.set_default_attn_processor()
    assert {type(p) for p in model.attn_processors.values()} == {TokenAttnProcessor}
    torch.testing.assert_close(forward(model, _inputs(model)), reference)


@pytest.mark.parametrize("family", FAMILIES)
def test_diffusers_standard_attention_processors_run_every_token_transformer(family: Family):
    """Issue 76, case 14: the fifth round refused ``set_attn_processor(AttnProcessor())`` on the token transformers,
    so diffusers' model tests ``test_get_set_processor`` and ``test_attention_processor_dict`` failed on each and no
    standard processor could run them. The attention is diffusers' ``Attention`` now: both tests' steps pass as
    diffusers writes them, and each standard processor gives the default processor's outputs."""
    from diffusers.models.attention import AttentionModuleMixin
    from diffusers.models.attention_processor import AttnProcessor, AttnProcessor2_0

    require(family, "token-blocks")
    model = family.model()
    reference = family.forward(model, _inputs(model))
    # diffusers' test_attention_processor_dict
    current = model.attn_processors
    model.set_attn_processor({key: AttnProcessor() for key in current})
    assert all(type(model.attn_processors[key]) is AttnProcessor for key in current)
    torch.testing.assert_close(family.forward(model, _inputs(model)), reference, atol=1e-5, rtol=1e-5)
    # diffusers' test_get_set_processor
    modules = [module for module in model.modules() if isinstance(module, AttentionModuleMixin)]
    assert len(modules) == model.config.num_layers
    for module in modules:
        assert module.get_processor() is not None
        processor = AttnProcessor2_0()
        module.set_processor(processor)
        assert module.get_processor() is processor
    torch.testing.assert_close(family.forward(model, _inputs(model)), reference, atol=1e-5, rtol=1e-5)
    model.set_default_attn_processor()
    torch.testing.assert_close(family.forward(model, _inputs(model)), reference)


@pytest.mark.parametrize("family", FAMILIES)
def test_fp8_layerwise_casting_runs_and_stays_near_full_precision(family: Family):
    """Weights stored in fp8, computed in fp32 (diffusers' ``enable_layerwise_casting``): it failed on every token
    transformer (activations cast to a weight's dtype); now within fp8's rounding of the fp32 outputs."""
    require(family, "token-blocks")
    make, forward = family.model, family.forward
    model = make()
    reference = forward(model, _inputs(model))
    model.enable_layerwise_casting(storage_dtype=torch.float8_e4m3fn, compute_dtype=torch.float32)
    assert model.blocks[0].attn.to_q.weight.dtype == torch.float8_e4m3fn
    out = forward(model, _inputs(model))
    assert out.dtype == torch.float32 and torch.isfinite(out).all()
    assert (out - reference).abs().max() < 0.1 * reference.abs().max()


@pytest.mark.slow  # torch.compile: about 10 s, outside make test-fast
def test_a_token_transformer_compiles_as_one_graph():
    """``torch.compile(fullgraph=True)`` through diffusers' attention dispatcher: no graph break, the same outputs."""
    model = maskgit()
    reference = maskgit_forward(model, _inputs(model))
    model.compile(fullgraph=True)
    torch.testing.assert_close(maskgit_forward(model, _inputs(model)), reference, atol=1e-5, rtol=1e-5)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="GPU-only attention kernels: run where a GPU is")
@pytest.mark.parametrize("family", FAMILIES)
def test_gpu_attention_backends_and_bf16_casting_on_cuda(family: Family):
    """On a GPU: PyTorch's flash and efficient kernels through ``set_attention_backend``, and fp8 storage computed in
    bf16, each near the fp32 outputs."""
    require(family, "token-blocks")
    make, forward = family.model, family.forward
    model = make().cuda()
    inputs = prepare_concept_inputs(model, ["021", "101"], 1, 1.0, None, device=torch.device("cuda"))
    reference = forward(model, inputs).float()
    for backend in ("_native_efficient", "_native_flash"):
        model.set_attention_backend(backend)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            out = forward(model, inputs).float()
        assert (out - reference).abs().max() < 0.05 * reference.abs().max() + 1e-3
    model.reset_attention_backend()
    model.enable_layerwise_casting(storage_dtype=torch.float8_e4m3fn, compute_dtype=torch.bfloat16)
    out = forward(model, inputs).float()
    assert torch.isfinite(out).all() and (out - reference).abs().max() < 0.15 * reference.abs().max()
