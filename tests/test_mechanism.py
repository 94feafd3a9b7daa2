"""Paper B's mechanism measures (compgen.analysis.mechanism) on constructed transformers whose answer is known."""

from __future__ import annotations

import json

import pytest
import torch

from compgen import MaskGITPipeline, MaskGITScheduler, MaskGITTransformer
from compgen.analysis import mechanism
from compgen.analysis.mechanism import (
    circuit_overlap,
    concept_responses,
    polysemanticity,
    transformer_internals,
)

SPACE = {"shape": ["circle", "triangle"], "color": ["red", "blue"], "size": ["large", "small"]}
BLOCK = 8  # hidden dimensions per concept variable


def constructed_transformer(value_reads: list[list[int]], neuron_reads: list[list[int]]) -> MaskGITTransformer:
    """A one-block transformer whose answer is known: concept variable ``c`` lives in hidden dimensions
    ``[8c, 8c + 8)`` (zero-mean patterns, so the layer norms keep the other dimensions at zero); every attention weight
    is uniform; head ``h`` passes on the dimensions of the concepts ``value_reads[h]``; MLP neuron ``n`` reads the
    dimensions of the concepts ``neuron_reads[n]``."""
    torch.manual_seed(0)
    heads = len(value_reads)
    width = BLOCK * heads
    model = MaskGITTransformer(SPACE, codebook_size=16, grid_size=3, hidden_size=width, num_layers=1,
                               num_heads=heads, mlp_ratio=len(neuron_reads) / width, conditioning="quantized").eval()
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.zero_()
        for norm in (model.blocks[0].norm1, model.blocks[0].norm2, model.norm_out):
            norm.weight.fill_(1.0)
        for index, name in enumerate(SPACE):
            table = model.concept_embedding.embedders[name].weight  # (2 values, width)
            start = BLOCK * index
            table[0, start : start + 4] = torch.tensor([1.0, -1.0, 1.0, -1.0])
            table[1, start + 4 : start + 8] = torch.tensor([1.0, -1.0, 1.0, -1.0])
        attention = model.blocks[0].attn
        value = attention.to_v.weight  # rows of the value projection, head h at rows [8h, 8h + 8)
        for head, reads in enumerate(value_reads):
            for concept in reads:
                value[BLOCK * head : BLOCK * (head + 1), BLOCK * concept : BLOCK * (concept + 1)] += torch.eye(BLOCK)
        attention.to_out[0].weight.copy_(torch.eye(width))
        linear1 = model.blocks[0].ff.net[0].proj.weight  # (neurons, width)
        for neuron, reads in enumerate(neuron_reads):
            for concept in reads:
                linear1[neuron, BLOCK * concept : BLOCK * concept + 4] = torch.tensor([1.0, -1.0, 1.0, -1.0])
    return model


def inputs(model: MaskGITTransformer, batch: int = 16) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(1)
    tokens = torch.randint(0, 17, (batch, model.num_tokens), generator=generator)
    return tokens, torch.randint(0, 2, (batch, 3), generator=generator)


def test_internals_reproduce_the_forward():
    model = MaskGITTransformer(SPACE, codebook_size=16, grid_size=3, hidden_size=32, num_layers=2, num_heads=4).eval()
    tokens, concepts = inputs(model)
    logits, heads, neurons = transformer_internals(model, tokens, concepts)
    torch.testing.assert_close(logits, model(tokens, concepts).logits, atol=1e-5, rtol=1e-5)
    assert [tuple(h.shape) for h in heads] == [(16, 4, 9, 32)] * 2
    assert [tuple(n.shape) for n in neurons] == [(16, 9, 128)] * 2


def test_monosemantic_heads_and_disjoint_circuits():
    model = constructed_transformer([[0], [1], [2]], [[0], [0], [1], [1], [2], [2]])
    sensitivity, influence = concept_responses(model, *inputs(model))
    assert sensitivity.shape == (1, 3, 3) and influence.shape == (1, 6, 3)
    off_diagonal = sensitivity[0] * (1 - torch.eye(3))
    assert off_diagonal.abs().max() < 1e-5 and (sensitivity[0].diagonal() > 1.0).all()
    result = polysemanticity(sensitivity)
    assert result["concepts_per_head"] == [[1, 1, 1]]
    assert result["polysemantic_heads_per_layer"] == [0]
    assert result["effective_concepts"] == pytest.approx(1.0, abs=1e-3)
    overlap = circuit_overlap(influence, list(SPACE), top_fraction=2 / 6)
    assert overlap["mean"] == 0.0 and overlap["per_layer"] == [0.0]


def test_polysemantic_heads_and_shared_circuits():
    # head 0 passes on shape and colour, head 1 colour alone, head 2 nothing; every neuron reads all three concepts
    model = constructed_transformer([[0, 1], [1], []], [[0, 1, 2]] * 6)
    sensitivity, influence = concept_responses(model, *inputs(model))
    result = polysemanticity(sensitivity)
    assert result["concepts_per_head"] == [[2, 1, 0]]
    assert result["polysemantic_heads"] == 1 and result["silent_heads"] == 1
    overlap = circuit_overlap(influence, list(SPACE), top_fraction=1.0)
    assert overlap["mean"] == 1.0
    assert set(overlap["pairs"]) == {"shape-color", "shape-size", "color-size"}


def test_thresholds_decide_responses():
    sensitivity = torch.tensor([[[0.5, 0.3, 0.01], [0.04, 0.04, 0.0]]])
    assert polysemanticity(sensitivity, floor=0.05, ratio=0.5)["concepts_per_head"] == [[2, 0]]
    assert polysemanticity(sensitivity, floor=0.05, ratio=0.7)["concepts_per_head"] == [[1, 0]]
    assert polysemanticity(sensitivity, floor=0.01, ratio=0.5)["concepts_per_head"] == [[2, 2]]
    with pytest.raises(ValueError, match="top_fraction"):
        circuit_overlap(torch.zeros(1, 4, 3), list(SPACE), top_fraction=0.0)


def test_command_on_an_exported_pipeline(tmp_path, capsys):
    from conftest import tiny_tokenizer

    tiny_vqvae = tiny_tokenizer(kl=False, channels=4)
    transformer = MaskGITTransformer(SPACE, codebook_size=tiny_vqvae.config.num_vq_embeddings, grid_size=7,
                                     hidden_size=32, num_layers=2, num_heads=4)
    pipeline = MaskGITPipeline(vqvae=tiny_vqvae, transformer=transformer,
                               scheduler=MaskGITScheduler(mask_token_id=transformer.mask_token_id))
    pipeline.save_pretrained(tmp_path / "pipe")
    mechanism.main([str(tmp_path / "pipe"), str(tmp_path / "pipe"), "--labels", "a", "b", "--output",
                    str(tmp_path / "out"), "--num_images_per_class", "2"])
    records = json.loads((tmp_path / "out" / "mechanism.json").read_text())
    assert set(records) == {"a", "b"}
    assert records["a"]["polysemanticity"] == records["b"]["polysemanticity"]  # seeded: the same answer twice
    assert len(records["a"]["polysemanticity"]["polysemantic_heads_per_layer"]) == 2
    assert (tmp_path / "out" / "mechanism.png").stat().st_size > 0
    with pytest.raises(SystemExit):
        mechanism.main([str(tmp_path / "pipe"), "--labels", "a", "b", "--output", str(tmp_path / "x")])
    with pytest.raises(SystemExit):
        mechanism.main([str(tmp_path / "pipe"), "--mask_ratio", "1.5", "--output", str(tmp_path / "x")])
    (tmp_path / "a_file").write_text("")  # refused before the measuring, not after it
    with pytest.raises(SystemExit):
        mechanism.main([str(tmp_path / "pipe"), "--output", str(tmp_path / "a_file")])
    unet = tmp_path / "unet-export"  # another family's export: a usage error naming it, not a loader error
    unet.mkdir()
    (unet / "model_index.json").write_text('{"_class_name": "TupleConditionedDDPMPipeline"}')
    capsys.readouterr()
    with pytest.raises(SystemExit):
        mechanism.main([str(unet), "--output", str(tmp_path / "y")])
    assert "TupleConditionedDDPMPipeline export" in capsys.readouterr().err
