"""ImageScorer prepares a batch once: one float conversion and one one-object check per score() call, with the very
verdicts of the three separate passes it replaced (probes, object rule, pixel scorer each on its own)."""

import numpy as np
import pytest
import torch

from compgen.concepts import shapes_space
from compgen.evaluation import pixel_scorer, preprocessing, scoring
from compgen.evaluation.corruptions import corrupt, to_uint8
from compgen.evaluation.objects import check_objects
from compgen.evaluation.probes import ConceptProbes
from compgen.shapes import render_classes

pytestmark = pytest.mark.usefixtures("single_thread")


def _batch(space) -> np.ndarray:
    """300 images (more than one pixel-scorer chunk): real renders, noisy ones, specks, and blank frames."""
    classes = np.repeat(np.array(space.all_classes()), 30, axis=0)
    clean = render_classes(space, classes, seed=4).images
    noisy = to_uint8(corrupt(clean[:40], "noise", level=4, seed=1))
    specks = to_uint8(corrupt(clean[40:80], "specks", level=5, seed=2))
    blank = np.full((20, 28, 28, 3), 255, dtype=np.uint8)
    return np.concatenate([clean, noisy, specks, blank])


@pytest.mark.slow  # about 7 s of the fast tier: both variants run in `make test`
@pytest.mark.parametrize("isolate", [False, True])
def test_one_score_call_checks_objects_once_and_matches_the_separate_passes(isolate, monkeypatch):
    space = shapes_space()
    torch.manual_seed(0)
    probes = ConceptProbes(space.to_pairs(), image_size=28, probe_type="cnn", subtract_background=True,
                           isolate_object=isolate)
    scorer = scoring.ImageScorer(probes, batch_size=64)
    images = _batch(space)

    # The three passes score() used to make, each converting the batch and checking its objects itself.
    probabilities = [p.numpy() for p in probes.predict_proba(images, batch_size=64)]
    expected = np.stack([p.argmax(axis=1) for p in probabilities], axis=1)
    check = check_objects(images)
    expected[~check.valid] = -1
    probabilities = [np.where(check.valid[:, None], p, 0.0) for p in probabilities]
    pixel = scorer.pixel_scorer(28).predict(images)

    calls = []
    original = scoring.check_objects

    def counted(x, *args, **kwargs):
        calls.append(len(x))
        return original(x, *args, **kwargs)

    for module in (scoring, preprocessing, pixel_scorer):
        monkeypatch.setattr(module, "check_objects", counted)
    scores = scorer.score(images)
    assert calls == [len(images)]
    np.testing.assert_array_equal(scores.predictions, expected)
    np.testing.assert_array_equal(scores.pixel_predictions, pixel)
    np.testing.assert_array_equal(scores.objects.reasons, check.reasons)
    for got, want in zip(scores.probabilities, probabilities, strict=True):
        np.testing.assert_array_equal(got, want)
    assert (scores.pixel_predictions == -1).any() and (scores.predictions == -1).any()


def test_score_samples_gives_the_training_logs_numbers_for_any_image_form():
    """Issue 74, item 4: one call scores a pipeline's output (PIL, uint8 or float numpy, tensors) for named classes by
    every scorer of the space, per class and per level: the same numbers the tracker logs for the same images."""
    from PIL import Image

    from compgen.concepts import get_split_preset
    from compgen.evaluation import LearningDynamicsTracker, default_shapes_probes, score_samples

    graph = get_split_preset("H32-train1").graph()
    names = [graph.format(node) for node in graph.nodes]
    rendered = render_classes(graph.space, [name for name in names for _ in range(6)], seed=3).images
    by_class = {name: rendered[6 * i: 6 * (i + 1)] for i, name in enumerate(names)}
    tracker = LearningDynamicsTracker(graph, default_shapes_probes(graph.space), num_images_per_class=6)
    logged = tracker.evaluate(lambda concepts, seed: rendered, step=0)
    forms = {name: (list(map(Image.fromarray, images)) if i % 3 == 0 else images.astype(np.float32) / 255.0
                    if i % 3 == 1 else torch.from_numpy(images).permute(0, 3, 1, 2).float() / 255.0)
             for i, (name, images) in enumerate(by_class.items())}
    scored = score_samples(forms, graph)
    for key in ("accuracy", "level_accuracy", "pixel_accuracy", "pixel_level_accuracy", "object_rate"):
        assert scored[key] == logged[key], key
    part = score_samples({"111": by_class["111"]}, graph)
    assert part["level_accuracy"] == {"2": logged["accuracy"]["111"]} and part["levels"] == {"111": 2}
    with pytest.raises(ValueError, match="not classes of the graph"):
        score_samples({"112": by_class["111"]}, graph)
    with pytest.raises(ValueError, match=r"samples\['111'\]: images must be"):
        score_samples({"111": by_class["111"][..., :2]}, graph)
