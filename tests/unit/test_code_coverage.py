"""code_coverage: whether a held-out class's token codes ever occur in the training classes' tokens."""

import numpy as np
import pytest
import torch

from compgen.evaluation.tokenizer_report import code_coverage
from compgen.images import uint8_to_signed
from compgen.models.vq_tokenizer import build_vq_tokenizer, encode_to_indices


def test_coverage_counts_codes_anywhere_and_at_the_same_position():
    torch.manual_seed(0)
    vqvae = build_vq_tokenizer(28, block_out_channels=(8, 8, 8), num_vq_embeddings=16, vq_embed_dim=4,
                               norm_num_groups=4)
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (12, 28, 28, 3), dtype=np.uint8)
    labels = ["000"] * 4 + ["001"] * 4 + ["111"] * 4
    coverage = code_coverage(vqvae, images, labels, training_classes=["000", "001"])
    # A training class's codes occur in the training tokens by definition, at their own positions too.
    assert coverage["000"] == {"anywhere": 1.0, "same_position": 1.0, "training_class": True}
    # By hand for the held-out class.
    tokens = encode_to_indices(vqvae, uint8_to_signed(images)).flatten(1)
    training, held_out = tokens[:8], tokens[8:]
    anywhere = np.mean([int(code) in set(training.flatten().tolist()) for code in held_out.flatten()])
    same = np.mean([int(held_out[i, p]) in set(training[:, p].tolist()) for i in range(4)
                    for p in range(tokens.shape[1])])
    assert coverage["111"]["anywhere"] == pytest.approx(anywhere)
    assert coverage["111"]["same_position"] == pytest.approx(same)
    assert coverage["111"]["same_position"] <= coverage["111"]["anywhere"]
    assert coverage["111"]["training_class"] is False


def test_mismatched_labels_or_no_training_class_are_named():
    vqvae = build_vq_tokenizer(28, block_out_channels=(8, 8, 8), num_vq_embeddings=16, vq_embed_dim=4,
                               norm_num_groups=4)
    images = np.zeros((2, 28, 28, 3), dtype=np.uint8)
    with pytest.raises(ValueError, match="one label per image"):
        code_coverage(vqvae, images, ["000"], ["000"])
    with pytest.raises(ValueError, match="none of the training classes"):
        code_coverage(vqvae, images, ["111", "111"], ["000"])
