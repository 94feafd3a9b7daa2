"""Publish CelebA concept-graph split *definitions* (image ids, tuples, splits, levels) and materialize them.

The definitions are a small Parquet dataset in exact Hub layout (``data/<split>-00000-of-00001.parquet`` for the
``default`` config, ``<config>/<split>-...`` otherwise, and a README whose YAML ``configs:`` lists them), so
``load_dataset(repo_or_dir, config)`` reads them. Anyone with a CelebA copy then rebuilds exactly the same splits
with :func:`materialize_split_definitions`. The images themselves are not part of the definitions.
"""

from __future__ import annotations

import io
import os
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import datasets
from huggingface_hub import DatasetCard, DatasetCardData

from ...atomic_io import atomic_write_bytes, atomic_write_text
from .attributes import PARTITION_NAMES, SPLIT_PARTITIONS, SPLITS, celeba_space
from .builder import CelebAConcepts
from .config import CelebAConceptsConfig
from .selection import SplitRow, split_definitions_for
from .sources import open_celeba_source

CELEBA_LICENSE_SUMMARY = """\
CelebA license terms (summary of the CelebA Dataset Release Agreement, MMLAB, The Chinese University of Hong Kong;
read the full agreement at https://mmlab.ie.cuhk.edu.hk/projects/CelebA.html before sharing anything):
  * CelebA is available for NON-COMMERCIAL RESEARCH PURPOSES ONLY. Its images and data derived from them may not be
    reproduced, sold, traded or otherwise exploited for any commercial purpose.
  * The agreement does NOT allow further copying, publishing or distribution of any portion of CelebA, except
    copies for internal use at a single site within the same organization. A public upload of the images breaks
    it: push images only to a private repository that only that organization can read.
  * The images are of celebrities collected from the Internet; MMLAB does not own their copyright and gives no
    warranty; you are responsible for how you use them, and MMLAB may end your access at any time.
The split definitions alone (image file names, derived concept labels, split and level) contain no images."""

DEFINITION_FEATURES = datasets.Features(
    {
        "image_id": datasets.Value("string"),
        "concepts": datasets.Value("string"),
        "split": datasets.Value("string"),
        "level": datasets.Value("int32"),
        **{v.name: datasets.ClassLabel(names=list(v.values)) for v in celeba_space().variables},
    }
)


def compute_split_definitions(
    data_dir: str | None = None, parquet: str | Sequence[str] | None = None, **config_kwargs: Any
) -> dict[str, list[SplitRow]]:
    """Select the split rows of a CelebA copy without decoding any image (same arguments as the builder)."""
    if isinstance(parquet, list):
        parquet = tuple(parquet)
    config = CelebAConceptsConfig(data_dir=data_dir, parquet=parquet, **config_kwargs)
    annotations, _ = open_celeba_source(config)
    definitions, _ = split_definitions_for(config, annotations)
    return definitions


def split_definitions_dataset(definitions: dict[str, list[SplitRow]]) -> datasets.DatasetDict:
    """The definitions as a ``DatasetDict`` with columns image_id, concepts, split, level, gender, smile, hair."""
    space = celeba_space()
    splits = {}
    for split, rows in definitions.items():
        columns: dict[str, list] = {
            "image_id": [r.image_id for r in rows],
            "concepts": [r.concepts for r in rows],
            "split": [split] * len(rows),
            "level": [r.level for r in rows],
        }
        for position, name in enumerate(space.names):
            columns[name] = [int(r.concepts[position]) for r in rows]
        splits[split] = datasets.Dataset.from_dict(columns, features=DEFINITION_FEATURES)
    return datasets.DatasetDict(splits)


def hub_data_dir(config_name: str) -> str:
    """The folder ``DatasetDict.push_to_hub`` uses for a config: ``data`` for ``default``, else the config name."""
    return "data" if config_name == "default" else config_name


def write_hub_layout(
    dataset: datasets.DatasetDict, out_dir: str | os.PathLike, config_name: str, card_text: str, **card_data: Any
) -> Path:
    """Write ``dataset`` as one Parquet file per split in Hub layout and (re)write the README's ``configs:``.

    Other configs already listed in ``out_dir/README.md`` are kept, so several configs can share one repository.
    """
    out = Path(out_dir)
    data_dir = hub_data_dir(config_name)
    for split, ds in dataset.items():
        buffer = io.BytesIO()
        ds.to_parquet(buffer)
        atomic_write_bytes(out / data_dir / f"{split}-00000-of-00001.parquet", buffer.getvalue())
    configs = []
    readme = out / "README.md"
    if readme.is_file():
        existing = DatasetCard.load(readme).data.to_dict().get("configs", [])
        configs = [c for c in existing if c["config_name"] != config_name]
    configs.append(
        {
            "config_name": config_name,
            "data_files": [{"split": split, "path": f"{data_dir}/{split}-*"} for split in dataset],
        }
    )
    configs.sort(key=lambda c: (c["config_name"] != "default", c["config_name"]))
    data = DatasetCardData(configs=configs, **card_data)
    atomic_write_text(readme, f"---\n{data.to_yaml()}\n---\n\n{card_text}\n")
    return out


def _count_table(definitions: dict[str, list[SplitRow]]) -> str:
    classes = sorted({r.concepts for rows in definitions.values() for r in rows})
    counts = {split: Counter(r.concepts for r in rows) for split, rows in definitions.items()}
    levels = {r.concepts: r.level for rows in definitions.values() for r in rows}
    header = "| class | level | " + " | ".join(definitions) + " |"
    lines = [header, "|" + " --- |" * (2 + len(definitions))]
    for concept in classes:
        description = ", ".join(celeba_space().describe(concept).values())
        cells = " | ".join(str(counts[s].get(concept, 0)) for s in definitions)
        lines.append(f"| {concept} ({description}) | {levels[concept]} | {cells} |")
    return "\n".join(lines)


def definitions_card_text(
    definitions: dict[str, list[SplitRow]], config_name: str, settings: dict[str, Any], with_images: bool = False
) -> str:
    """Markdown body of the dataset card: what the rows are, how to materialize them, counts and license."""
    partitions = "\n".join(
        f"* `{split}`: official partition {SPLIT_PARTITIONS[split]} ({PARTITION_NAMES[SPLIT_PARTITIONS[split]]})"
        for split in SPLITS
    )
    content = "the images (center-cropped, resized) with" if with_images else "no images, only"
    return f"""# CelebA concept-graph splits (`{config_name}`)

Compositional-generalization splits of CelebA over three binary concepts in tuple order (gender, smile, hair):
gender 0 female / 1 male (`Male`), smile 0 smiling / 1 not smiling (`Smiling`), hair 0 black / 1 blond
(`Black_Hair` / `Blond_Hair`; images with both or neither are excluded). A class's *level* is its Hamming distance
to the nearest training class. This dataset holds {content} the image file names of the official
`img_align_celeba/` folder, the concept tuple, the split and the level.

Splits and the official partition each is drawn from:

{partitions}

Selection settings: `{settings}`.

## Materialize the images from your own CelebA copy

```python
from compgen.data.celeba.publish import materialize_split_definitions

splits = materialize_split_definitions("<this repo or folder>", data_dir="/path/to/celeba", config="{config_name}")
```

## Counts per class

{_count_table(definitions)}

## License

{CELEBA_LICENSE_SUMMARY}
"""


def save_split_definitions(
    definitions: dict[str, list[SplitRow]],
    out_dir: str | os.PathLike,
    config_name: str = "default",
    settings: dict[str, Any] | None = None,
) -> Path:
    """Write the definitions to ``out_dir`` in Hub layout with a dataset card; returns ``out_dir``."""
    text = definitions_card_text(definitions, config_name, settings or {})
    return write_hub_layout(
        split_definitions_dataset(definitions),
        out_dir,
        config_name,
        text,
        license="other",
        license_name="celeba-dataset-release-agreement",
        pretty_name="CelebA concept-graph splits",
        tags=["compositional-generalization", "celeba", "split-definitions"],
    )


def save_materialized_splits(
    dataset: datasets.DatasetDict,
    definitions: dict[str, list[SplitRow]],
    out_dir: str | os.PathLike,
    config_name: str = "default",
    settings: dict[str, Any] | None = None,
) -> Path:
    """Write built splits *with images* in Hub layout (see :data:`CELEBA_LICENSE_SUMMARY` before sharing)."""
    text = definitions_card_text(definitions, config_name, settings or {}, with_images=True)
    return write_hub_layout(
        dataset, out_dir, config_name, text, license="other", license_name="celeba-dataset-release-agreement"
    )


def materialize_split_definitions(
    definitions: str | os.PathLike,
    data_dir: str | None = None,
    parquet: str | Sequence[str] | None = None,
    config: str | None = None,
    cache_dir: str | None = None,
    **config_kwargs: Any,
) -> datasets.DatasetDict:
    """Build the images of published split definitions (a Hub id or folder) from a local CelebA copy.

    Every defined image must exist locally with the same concepts, else ``ValueError``; preprocessing options
    (``image_size``, ``crop_size``, ``on_bad_image``, Parquet options) pass through to :class:`CelebAConcepts`.
    """
    if isinstance(parquet, list):
        parquet = tuple(parquet)
    builder = CelebAConcepts(
        data_dir=data_dir,
        parquet=parquet,
        split_definitions=str(definitions),
        split_definitions_config=config,
        cache_dir=cache_dir,
        **config_kwargs,
    )
    builder.download_and_prepare()
    return builder.as_dataset()


__all__ = [
    "CELEBA_LICENSE_SUMMARY",
    "DEFINITION_FEATURES",
    "compute_split_definitions",
    "definitions_card_text",
    "hub_data_dir",
    "materialize_split_definitions",
    "save_materialized_splits",
    "save_split_definitions",
    "split_definitions_dataset",
    "write_hub_layout",
]
