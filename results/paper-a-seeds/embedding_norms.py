"""The size of each concept's embedding at initialisation in the README command's U-Net (quickstart preset: widths 32,
64, one block per stage, full conditioning), for the seeds of the seed-streams study: the shape's table against the
colour's and the size's MLPs, whose sum multiplies the decoder's features (Paper A's ``h * e + t``).

    python results/paper-a-seeds/embedding_norms.py   # writes causes/embedding_norms_at_init.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1] / "src"))

from compgen.concepts import shapes_space  # noqa: E402
from compgen.models.tuple_unet import TupleConditionedUNet2DModel  # noqa: E402
from compgen.shapes import shapes_continuous_concepts  # noqa: E402

CLASSES = ("000", "001", "100", "101", "111")


def main() -> None:
    space = shapes_space()
    values = shapes_continuous_concepts(space)
    concepts = torch.tensor([[int(c) for c in name] for name in CLASSES])
    result = {"what": "L2 norm of each concept's embedding (96 channels: both decoder stages) at initialisation, per "
                      "class, for the quickstart U-Net; torch.manual_seed(seed) then the model, as the training script",
              "classes": list(CLASSES), "seeds": {}}
    for seed in (3, 5):
        torch.manual_seed(seed)
        model = TupleConditionedUNet2DModel(space.to_dict(), block_out_channels=(32, 64), layers_per_block=1,
                                            conditioning="full", continuous_concepts=values)
        embedding = model.concept_embedding
        norms = {}
        with torch.no_grad():
            for i, name in enumerate(space.names):
                embedder = embedding.embedders[name]
                if name in embedding.continuous_names:
                    out = embedder(getattr(embedding, f"{name}_values")[concepts[:, i]])
                else:
                    out = embedder(concepts[:, i])
                norms[name] = [round(float(v), 2) for v in out.norm(dim=1)]
        result["seeds"][str(seed)] = norms
    (HERE / "causes" / "embedding_norms_at_init.json").write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result["seeds"]))


if __name__ == "__main__":
    main()
