"""Do the scorers read data at another object scale? Real test renders (100 per class of H32-train1) scored by the
scorers calibrated at the data's framing ("matched") and by those of Paper A's framing (object scale 1).

    python results/paper-a-sizes/scorer_check.py   # writes scorer_check.json
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1] / "src"))

from compgen.data.concept_graph_builder import build_concept_graph_dataset  # noqa: E402
from compgen.data.loading import to_tensors  # noqa: E402
from compgen.evaluation.probes import default_shapes_probes  # noqa: E402
from compgen.evaluation.scoring import ImageScorer  # noqa: E402


def main() -> None:
    results = {}
    with tempfile.TemporaryDirectory() as cache:
        for scale, ranges in ((1.3, "touching"), (1.3, "apart"), (1.0, "touching")):
            data = build_concept_graph_dataset(f"check-{scale}-{ranges}", cache_dir=cache, split_preset="H32-train1",
                                               images_per_class=10, test_images_per_class=100,
                                               tokenizer_images_per_class=1, object_scale=scale, size_ranges=ranges)
            test = to_tensors(data["test"])
            concepts = test.concepts.numpy()
            for name, probes in (("matched", default_shapes_probes(test.space, object_scale=test.object_scale)),
                                 ("paper-framing", default_shapes_probes(test.space))):
                scores = ImageScorer(probes).score(test.images.numpy(), concepts)
                results[f"object_scale {scale}, size_ranges {ranges}, scorers {name}"] = {
                    scorer: {concept: float((predictions[:, j] == concepts[:, j]).mean())
                             for j, concept in enumerate(test.space.names)}
                    for scorer, predictions in (("probes", scores.predictions), ("pixel", scores.pixel_predictions))
                } | {"object_rate": float(scores.has_object.mean())}
    out = {"what": "accuracy per concept of real test renders (100 per class of H32-train1: shaded, centred) by each "
                   "scorer after the one-object and typicality checks",
           "command": "python results/paper-a-sizes/scorer_check.py", "results": results}
    (HERE / "scorer_check.json").write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
