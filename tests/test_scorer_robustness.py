"""Scores you can trust: both scorers hold up on the imperfect images half-trained generators draw.

The stress suite corrupts real renders of a seed no scorer was trained or calibrated on, at severity levels 1-5
(``compgen.evaluation.corruptions.SEVERITIES``); levels 1-4 span what the shared samples of the paper-preset U-Net
show (``tests/data/README.md``). The regression tests hold the scorers to what those samples show by eye.
"""

from pathlib import Path

import numpy as np
import pytest
from margins import check_margin, margin_seed

from compgen import get_split_preset
from compgen.analysis.stress_suite import stress_test
from compgen.concepts import shapes_space
from compgen.evaluation.corruptions import GENERATOR_LEVELS, SEVERITIES
from compgen.evaluation.objects import check_objects
from compgen.evaluation.pixel_scorer import PixelStatisticsScorer
from compgen.evaluation.probes import default_shapes_probes
from compgen.evaluation.tracker import LearningDynamicsTracker
from compgen.shapes import PAPER_COLOR_JITTER, PAPER_SIZE_JITTER, REFERENCE_STYLES, RenderConfig, render_classes

pytestmark = pytest.mark.usefixtures("single_thread")

GRAPH = get_split_preset("H32-train1").graph()
DATA = Path(__file__).parent / "data"
STRESS_SEED = 2024  # apart from the probes' training renders (seed 10000) and the calibration renders (31337)


@pytest.fixture(scope="module")
def probes():
    return default_shapes_probes(GRAPH.space)


@pytest.fixture(scope="module")
def pixel_scorer():
    return PixelStatisticsScorer.calibrate(GRAPH.space)


def _assert_robust(results, scorer: str):
    """Every corruption at every generator-like level read right at > 0.97 (at 0.98 the pixel scorer's worst of ten
    render seeds and kernel paths sat 0.003 above it, inside its spread of 0.004: docs/test_margins.md)."""
    accuracy = {(kind, level): round(by_level[level]["all"], 3) for kind, by_level in results.items()
                for level in map(str, range(GENERATOR_LEVELS + 1))}
    failures = {key: value for key, value in accuracy.items() if value <= 0.97}
    assert not failures, f"accuracy at or below 0.97 at generator-like severities: {failures}"
    check_margin(f"{scorer}: lowest accuracy under generator-like corruptions", min(accuracy.values()), above=0.97)


@pytest.mark.slow
@pytest.mark.parametrize("style", REFERENCE_STYLES)
def test_default_probes_survive_every_generator_like_corruption(probes, style):
    results = stress_test(lambda images: probes.predict(images).numpy(), GRAPH.space, images_per_class=50,
                          seed=margin_seed(STRESS_SEED), style=style)
    assert set(results) == set(SEVERITIES)
    _assert_robust(results, f"default probes ({style})")


@pytest.mark.slow
@pytest.mark.parametrize("style", REFERENCE_STYLES)
def test_pixel_scorer_survives_every_generator_like_corruption(pixel_scorer, style):
    _assert_robust(stress_test(pixel_scorer.predict, GRAPH.space, images_per_class=50, seed=margin_seed(STRESS_SEED),
                               style=style), f"pixel scorer ({style})")


@pytest.mark.parametrize("style", REFERENCE_STYLES)
@pytest.mark.parametrize("space", [GRAPH.space, shapes_space(num_shapes=3, num_colors=3, background=True)],
                         ids=["H32", "3x3x2x2"])
def test_pixel_scorer_is_perfect_on_clean_real_images(space, style):
    scorer = PixelStatisticsScorer.calibrate(space)  # raises unless it reads every calibration render right
    classes = np.repeat(np.array(space.all_classes()), 60, axis=0)
    config = RenderConfig(color_jitter=PAPER_COLOR_JITTER, size_jitter=PAPER_SIZE_JITTER, **REFERENCE_STYLES[style])
    batch = render_classes(space, classes, seed=STRESS_SEED, config=config)
    np.testing.assert_array_equal(scorer.predict(batch.images), batch.concepts)


def _shared(step: int, seed: int = 0):
    with np.load(DATA / f"paper_unet_h200_seed{seed}_step{step}.npz") as data:
        return data["images"], data["classes"]


@pytest.mark.parametrize("seed", [0, 1])
def test_small_circles_on_grey_noisy_backgrounds_are_scored_small(probes, pixel_scorer, seed):
    images, classes = _shared(2496, seed)
    small_circles = np.isin(classes, ["001", "011"])
    size = GRAPH.space.names.index("size")
    for predictions in (probes.predict(images).numpy(), pixel_scorer.predict(images)):
        assert (predictions[small_circles, size] == 1).mean() >= 0.9
        # The circles, all drawn correctly at that step, are scored right on every concept.
        for name in ("000", "001", "010", "011"):
            rows = classes == name
            assert (predictions[rows] == np.array(GRAPH.space.parse(name))).all(axis=1).all(), name


def test_blank_frames_of_the_small_triangles_are_scored_wrong(probes, pixel_scorer):
    images, classes = _shared(3900)
    blank = np.isin(classes, ["101", "111"])
    check = check_objects(images)
    assert set(check.reasons[blank]) == {"blank"} and check.valid[~blank].all()
    assert (pixel_scorer.predict(images)[blank] == -1).all()
    # The tracker scores them 0 however the probes would guess.
    record = _tracker_record(probes, images, classes, step=3900)
    assert record["accuracy"]["101"] == record["accuracy"]["111"] == 0.0
    assert record["object_failures"]["111"]["blank"] == 4
    assert record["pixel_accuracy"]["111"] == 0.0
    assert record["accuracy"]["011"] == 1.0 and record["pixel_accuracy"]["011"] == 1.0


def _tracker_record(probes, images, classes, step):
    """Score 4 shared samples per class through the tracker (both scorers, the one-object check)."""
    tracker = LearningDynamicsTracker(GRAPH, probes, num_images_per_class=4)
    by_class = {name: images[classes == name] for name in dict.fromkeys(classes)}
    return tracker.evaluate(lambda names, seed: np.concatenate([by_class[n] for n in dict.fromkeys(names)]),
                            step=step)


def test_the_two_scorers_agree_on_the_run_alone_and_flag_the_blobs_of_the_shared_run(probes, pixel_scorer):
    for step in (2496, 3120, 3900):  # seed 0 trained alone on the GPU: clean objects
        images, classes = _shared(step)
        valid = check_objects(images).valid
        targets = np.array([GRAPH.space.parse(name) for name in classes])
        probe_correct = (probes.predict(images).numpy() == targets).all(axis=1) & valid
        pixel_correct = (pixel_scorer.predict(images) == targets).all(axis=1)
        assert (probe_correct == pixel_correct).mean() >= 0.9, step
    # Seed 1 shared the GPU with six runs and draws 101 as red slivers: the probes accept them as small red
    # triangles, the pixel statistics reject the shape. The record says so.
    record = _tracker_record(probes, *_shared(2496, seed=1), step=2496)
    assert "101" in record["scorer_disagreements"]
    assert record["accuracy"]["101"] - record["pixel_accuracy"]["101"] > 0.1
    assert record["scorer_agreement"]["101"] < 0.9 and record["scorer_agreement"]["000"] == 1.0
