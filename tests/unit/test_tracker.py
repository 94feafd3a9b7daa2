import json

import numpy as np
import pytest

from compgen import get_split_preset
from compgen.evaluation.probes import default_shapes_probes
from compgen.evaluation.scoring import PIXEL_SCORER_VERSION, probes_fingerprint
from compgen.evaluation.tracker import (
    LearningDynamicsTracker,
    flat_scalars,
    memorizing_generator,
    read_log,
    renderer_generator,
)
from compgen.evaluation.typicality import TYPICALITY_VERSION

GRAPH = get_split_preset("H32-train1").graph()


pytestmark = pytest.mark.usefixtures("single_thread")


class RecordingAccelerator:
    is_main_process = True

    def __init__(self):
        self.logged = []

    def log(self, values, step=None):
        self.logged.append((values, step))


@pytest.fixture(scope="module")
def probes():
    return default_shapes_probes(GRAPH.space)


@pytest.mark.slow  # about 7 s of the fast tier (rendering and scoring every class): in `make test`
def test_perfect_generator_scores_one_everywhere(probes, tmp_path):
    tracker = LearningDynamicsTracker(GRAPH, probes, num_images_per_class=50, log_path=tmp_path / "log.jsonl")
    calls = []

    def generate(concepts, seed):
        calls.append((len(concepts), seed))
        return renderer_generator(GRAPH.space)(concepts, seed)

    accelerator = RecordingAccelerator()
    record = tracker.evaluate(generate, step=10, images_seen=640, accelerator=accelerator)
    assert calls == [(8 * 50, 0)]  # one batched call, fixed seed
    assert all(value == 1.0 for value in record["accuracy"].values())
    assert record["level_accuracy"] == {"0": 1.0, "1": 1.0, "2": 1.0}
    assert record["chance"] == pytest.approx(1 / 8)
    values, step = accelerator.logged[0]
    assert step == 10 and values["eval/accuracy/111"] == 1.0 and values["eval/concept_accuracy/111/color"] == 1.0
    assert values == flat_scalars(record)
    # Every record says what judged it and which code produced it.
    assert record["scorer_version"] == {"probes": probes_fingerprint(probes), "pixel_statistics": PIXEL_SCORER_VERSION,
                                        "typicality": TYPICALITY_VERSION}
    assert len(record["scorer_version"]["probes"]) == 12
    assert record["commit"] is None or len(record["commit"].split("+")[0]) == 40


def test_memorizing_generator_fails_off_the_training_set(probes, tmp_path):
    log_path = tmp_path / "log.jsonl"
    tracker = LearningDynamicsTracker(GRAPH, probes, num_images_per_class=50, log_path=log_path)
    first = tracker.evaluate(memorizing_generator(GRAPH), step=0)
    second = tracker.evaluate(memorizing_generator(GRAPH), step=5, images_seen=320)
    assert float(first["level_accuracy"]["0"]) == 1.0
    assert first["level_accuracy"]["1"] <= 0.05 and first["level_accuracy"]["2"] <= 0.05
    # level-1 classes miss exactly one concept
    assert first["additive_accuracy"]["011"] == pytest.approx(2 / 3)
    records = read_log(log_path)
    assert [r["step"] for r in records] == [0, 5]
    assert records[1]["accuracy"] == second["accuracy"] and records[1]["images_seen"] == 320
    assert records[1]["wall_clock_s"] >= records[0]["wall_clock_s"] and records[0]["eval_s"] > 0


def test_read_log_skips_truncated_last_line_and_bad_generators_raise(probes, tmp_path):
    path = tmp_path / "log.jsonl"
    path.write_text(json.dumps({"step": 1}) + "\n" + '{"step": 2, "acc')
    assert read_log(path) == [{"step": 1}]
    tracker = LearningDynamicsTracker(GRAPH, probes, num_images_per_class=2)
    with pytest.raises(ValueError, match="uint8 images of shape"):
        tracker.evaluate(lambda concepts, seed: np.zeros((3, 28, 28, 3), dtype=np.uint8), step=0)


def test_sample_files_written(probes, tmp_path):
    tracker = LearningDynamicsTracker(GRAPH, probes, num_images_per_class=3, sample_dir=tmp_path, samples_per_class=2)
    tracker.evaluate(renderer_generator(GRAPH.space), step=7)
    with np.load(tmp_path / "samples_step00000007.npz") as data:
        assert data["images"].shape == (16, 28, 28, 3) and list(data["classes"][:2]) == ["000", "000"]


def test_samples_without_an_object_count_as_wrong(probes):
    tracker = LearningDynamicsTracker(GRAPH, probes, num_images_per_class=10)
    record = tracker.evaluate(lambda concepts, seed: np.full((len(concepts), 28, 28, 3), 240, np.uint8), step=1)
    assert all(value == 0.0 for value in record["accuracy"].values())
    assert all(value == 0.0 for value in record["object_rate"].values())
    assert all(value == 0.0 for value in record["pixel_accuracy"].values())
    assert record["object_failures"]["111"] == {"blank": 10, "fragments": 0, "several": 0, "oversized": 0,
                                                "hybrid": 0, "pale": 0}


def test_two_objects_in_one_sample_are_wrong_on_every_concept(probes):
    """A sample with the right object plus a second one is not a sample of the class (one object means one)."""
    render = renderer_generator(GRAPH.space)

    def two_objects(concepts, seed):
        left, right = render(concepts, seed), render(concepts, seed + 1)
        images = left.copy()
        images[:, :, 14:] = np.minimum(left[:, :, 14:], right[:, :, 14:])  # paste the right half's object over
        return images

    record = LearningDynamicsTracker(GRAPH, probes, num_images_per_class=20).evaluate(two_objects, step=0)
    several = sum(counts["several"] for counts in record["object_failures"].values())
    valid = sum(record["object_rate"].values()) * 20
    assert several > 0 and several + valid == 8 * 20
    for name, rate in record["object_rate"].items():
        assert record["accuracy"][name] <= rate + 1e-9 and record["pixel_accuracy"][name] <= rate + 1e-9


def test_records_carry_the_second_scorer_and_flag_disagreement(probes, tmp_path):
    from compgen.evaluation.pixel_scorer import PixelStatisticsScorer

    perfect = LearningDynamicsTracker(GRAPH, probes, num_images_per_class=20).evaluate(
        renderer_generator(GRAPH.space), step=3)
    assert perfect["pixel_accuracy"] == perfect["accuracy"] and all(v == 1.0 for v in perfect["accuracy"].values())
    assert perfect["pixel_level_accuracy"] == {"0": 1.0, "1": 1.0, "2": 1.0}
    assert perfect["scorer_agreement"]["111"] == 1.0 and perfect["scorer_disagreements"] == []
    assert flat_scalars(perfect)["eval/pixel_accuracy/111"] == 1.0

    # A second scorer that calls every object large disagrees with the probes on every small class.
    calibrated = PixelStatisticsScorer.calibrate(GRAPH.space)
    sizes_wrong = PixelStatisticsScorer(GRAPH.space, calibrated.triangle_threshold, calibrated.square_threshold,
                                        calibrated.max_elongation, {"circle": 0.0, "triangle": 0.0},
                                        calibrated.color_prototypes)
    log_path = tmp_path / "log.jsonl"
    tracker = LearningDynamicsTracker(GRAPH, probes, num_images_per_class=20, pixel_scorer=sizes_wrong,
                                      log_path=log_path)
    record = tracker.evaluate(renderer_generator(GRAPH.space), step=4)
    small = [GRAPH.format(c) for c in GRAPH.nodes if c[2] == 1]
    assert record["scorer_disagreements"] == small
    # Its per-concept accuracy names the concept it rejects (size), where the multiplicative accuracy cannot.
    assert {concept for concept, value in record["pixel_concept_accuracy"][small[0]].items() if value < 1.0} == {
        GRAPH.space.names[2]}
    assert read_log(log_path)[0]["scorer_disagreements"] == small
    assert all(record["scorer_agreement"][name] == 0.0 for name in small)
    no_second = LearningDynamicsTracker(GRAPH, probes, num_images_per_class=2, pixel_scorer=False).evaluate(
        renderer_generator(GRAPH.space), step=5)
    assert "pixel_accuracy" not in no_second
