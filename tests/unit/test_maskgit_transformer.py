"""MaskGITTransformer: shapes, hidden states, conditioning (quantized / full / null concepts), errors.

Its save/load round trip is a row of tests/model_families.py (checked by tests/unit/test_model_contract.py)."""

import pytest
import torch

from compgen import MaskGITTransformer, shapes_space
from compgen.shapes import shapes_continuous_concepts

SPACE = shapes_space()


def make(**kwargs):
    torch.manual_seed(0)
    defaults = dict(concept_space=SPACE.to_dict(), codebook_size=16, grid_size=4, hidden_size=32, num_layers=3,
                    num_heads=4)
    return MaskGITTransformer(**(defaults | kwargs)).eval()


def inputs(batch=5, seed=0):
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(0, 17, (batch, 16), generator=generator), torch.randint(0, 2, (batch, 3), generator=generator)


def test_logits_and_hidden_states_shapes():
    model = make()
    tokens, concepts = inputs()
    out = model(tokens, concepts, output_hidden_states=True)
    assert out.logits.shape == (5, 16, 16)
    assert len(out.hidden_states) == model.config.num_layers + 1
    assert all(h.shape == (5, 16, 32) for h in out.hidden_states)
    assert model(tokens, concepts).hidden_states is None
    # A (B, H, W) grid is the same input as its flattened sequence.
    torch.testing.assert_close(model(tokens.view(5, 4, 4), concepts).logits, out.logits)
    assert torch.equal(model(tokens, concepts, return_dict=False)[0], out.logits)


def test_the_output_depends_on_every_concept():
    model = make()
    tokens, _ = inputs()
    base = torch.zeros(5, 3, dtype=torch.long)
    reference = model(tokens, base).logits
    for column in range(3):
        changed = base.clone()
        changed[:, column] = 1
        assert not torch.allclose(model(tokens, changed).logits, reference)


def test_full_conditioning_uses_values_and_defaults_to_the_class_values():
    model = make(conditioning="full", continuous_concepts=shapes_continuous_concepts(SPACE))
    tokens, concepts = inputs()
    table = shapes_continuous_concepts(SPACE)
    canonical = torch.tensor([table["color"][c] + table["size"][s] for c, s in concepts[:, 1:].tolist()])
    torch.testing.assert_close(model(tokens, concepts).logits, model(tokens, concepts, concept_values=canonical).logits)
    assert not torch.allclose(model(tokens, concepts, concept_values=canonical + 0.3).logits,
                              model(tokens, concepts).logits)


def test_null_concepts_only_with_dropout():
    tokens, concepts = inputs()
    with pytest.raises(ValueError, match="null"):
        make()(tokens, concepts, drop_mask=torch.ones(5, 3, dtype=torch.bool))
    model = make(concept_dropout=0.1)
    assert model.has_null_embeddings
    all_null = torch.ones(5, 3, dtype=torch.bool)
    # With every concept dropped the output no longer depends on the tuple.
    torch.testing.assert_close(model(tokens, concepts, drop_mask=all_null).logits,
                               model(tokens, 1 - concepts, drop_mask=all_null).logits)


def test_invalid_inputs_raise_clear_errors():
    model = make()
    tokens, concepts = inputs()
    with pytest.raises(ValueError, match="16 tokens"):
        model(tokens[:, :9], concepts)
    with pytest.raises(ValueError, match="token ids"):
        model(tokens + 17, concepts)
    with pytest.raises(ValueError, match="out of range"):
        model(tokens, concepts + 2)
    with pytest.raises(ValueError, match="batch size"):
        model(tokens, concepts[:2])
    with pytest.raises(ValueError, match="divisible"):
        make(hidden_size=30)
    with pytest.raises(ValueError, match="continuous_concepts"):
        make(conditioning="full")

