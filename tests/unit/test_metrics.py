import numpy as np
import pytest
import torch

from compgen.evaluation.metrics import (
    additive_accuracy,
    chance_accuracy,
    concept_accuracies,
    level_means,
    multiplicative_accuracy,
    per_image_correctness,
    probability_product_accuracy,
)

# Four images of class (1, 0, 1): all right, color wrong, shape and size wrong, all right.
PREDICTIONS = np.array([[1, 0, 1], [1, 1, 1], [0, 0, 0], [1, 0, 1]])
TARGET = np.array([1, 0, 1])


def test_multiplicative_vs_additive_by_hand():
    assert multiplicative_accuracy(PREDICTIONS, TARGET) == pytest.approx(2 / 4)
    assert additive_accuracy(PREDICTIONS, TARGET) == pytest.approx((3 + 2 + 1 + 3) / 12)
    np.testing.assert_allclose(concept_accuracies(PREDICTIONS, TARGET), [3 / 4, 3 / 4, 3 / 4])
    assert per_image_correctness(PREDICTIONS, TARGET).tolist()[1] == [True, False, True]


def test_torch_inputs_and_per_image_targets_agree():
    targets = np.tile(TARGET, (4, 1))
    assert multiplicative_accuracy(torch.as_tensor(PREDICTIONS), torch.as_tensor(targets)) == pytest.approx(0.5)


def test_probability_product_by_hand():
    probabilities = [np.array([[0.2, 0.8], [0.5, 0.5]]), np.array([[1.0, 0.0], [0.1, 0.9]])]
    # image 0: 0.8 * 1.0; image 1: 0.5 * 0.1
    assert probability_product_accuracy(probabilities, [1, 0]) == pytest.approx((0.8 + 0.05) / 2)


def test_mismatched_shapes_raise():
    with pytest.raises(ValueError, match="do not match"):
        multiplicative_accuracy(PREDICTIONS, np.zeros((3, 3)))


def test_chance_and_level_means():
    chance = chance_accuracy([2, 2, 2])
    assert chance["multiplicative"] == pytest.approx(0.125)
    assert chance["additive"] == pytest.approx(0.5)
    means = level_means({"000": 1.0, "011": 0.5, "101": 0.0, "111": 0.25}, {"000": 0, "011": 1, "101": 1, "111": 2})
    assert means == {0: 1.0, 1: 0.25, 2: 0.25}
    with pytest.raises(ValueError, match="no level"):
        level_means({"999": 1.0}, {})
