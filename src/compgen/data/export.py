"""Publish concept-graph datasets in the exact Hugging Face Hub layout, with a dataset card and contact sheets.

The layout is the one ``DatasetDict.push_to_hub(repo_id, config_name=...)`` writes, so
``datasets.load_dataset(<export dir or repo id>, "<config>")`` reads it the same way offline and from the Hub::

    <export dir>/README.md                                   # card; YAML ``configs:`` lists every config
    <export dir>/<config>/<split>-00000-of-00001.parquet     # one file per config and split
    <export dir>/images/<config>.png                         # contact sheet embedded in the card
"""

from __future__ import annotations

import io
import os
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import datasets
import numpy as np
from datasets.info import DatasetInfo, DatasetInfosDict
from datasets.splits import SplitDict, SplitInfo
from datasets.utils.metadata import MetadataConfigs
from huggingface_hub import CommitInfo, DatasetCard, DatasetCardData
from PIL import Image, ImageDraw, ImageFont

from .. import hub
from ..atomic_io import atomic_directory, check_writable_directory
from ..concepts import ConceptGraph
from ..shapes import ShapesBatch
from .concept_graph_builder import ConceptGraphShapesConfig, build_concept_graph_dataset

CONTACT_SHEET_DIR = "images"
_PAPER_A = (
    "Okawa, Lubana, Dick, Tanaka. Compositional Abilities Emerge Multiplicatively: Exploring Diffusion Models "
    "on a Synthetic Task. NeurIPS 2023 (arXiv 2310.09336)."
)


def parquet_path(config_name: str, split: str) -> str:
    """Path of a config's split inside an export, as ``push_to_hub`` names it."""
    return f"{config_name}/{split}-00000-of-00001.parquet"


def export_concept_graph_configs(
    configs: Sequence[str | ConceptGraphShapesConfig],
    output_dir: str | os.PathLike,
    cache_dir: str | None = None,
    samples_per_class: int = 8,
    overwrite: bool = False,
) -> Path:
    """Build each config (a name or a :class:`ConceptGraphShapesConfig`) and export them all to ``output_dir`` (new or
    empty, or any directory with ``overwrite``)."""
    built = build_configs(configs, build_concept_graph_dataset, output_dir, cache_dir, overwrite)
    return export_datasets(built, output_dir, samples_per_class=samples_per_class, overwrite=overwrite)


def build_configs(configs: Sequence[str | datasets.BuilderConfig], build: Callable[..., datasets.DatasetDict],
                  output_dir: str | os.PathLike, cache_dir: str | None, overwrite: bool
                  ) -> dict[str, datasets.DatasetDict]:
    """``{config name: DatasetDict}`` of each config built by ``build``, after checking, before any building, that
    there is something to export, no config twice, and that ``output_dir`` may be written."""
    if not configs:
        raise ValueError("no configs to export")
    names = [config if isinstance(config, str) else config.name for config in configs]
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        raise ValueError(f"config {twice[0]!r} is listed twice")
    check_writable_directory(Path(output_dir), overwrite)
    return {name: build(config, cache_dir=cache_dir) for name, config in zip(names, configs, strict=True)}


def export_datasets(
    datasets_by_config: Mapping[str, datasets.DatasetDict],
    output_dir: str | os.PathLike,
    default_config: str | None = None,
    samples_per_class: int = 8,
    overwrite: bool = False,
) -> Path:
    """Write concept-graph datasets (``{config name: DatasetDict}``) to ``output_dir`` in Hub layout.

    The directory is written atomically; it must be new or empty, or with ``overwrite`` a previous export there is
    replaced as a whole. The first config is the
    default one (``load_dataset(output_dir)`` without a config name) unless ``default_config`` says otherwise.
    """
    if not datasets_by_config:
        raise ValueError("no datasets to export")
    default_config = default_config or next(iter(datasets_by_config))
    if default_config not in datasets_by_config:
        raise ValueError(f"default_config {default_config!r} is not one of {list(datasets_by_config)}")
    for name, dataset in datasets_by_config.items():
        if not name or "/" in name or name.startswith("."):
            raise ValueError(f"invalid config name {name!r}")
        missing = {"image", "concepts", "level"} - set(next(iter(dataset.values())).column_names)
        if missing:
            raise ValueError(f"config {name!r} lacks the concept-graph columns {sorted(missing)}")

    with atomic_directory(output_dir, overwrite=overwrite) as tmp:
        infos, metadata_configs = write_hub_configs(tmp, datasets_by_config, default_config)
        for name, dataset in datasets_by_config.items():
            sheet = contact_sheet(_evaluation_split(dataset), samples_per_class=samples_per_class)
            sheet_path = tmp / CONTACT_SHEET_DIR / f"{name}.png"
            sheet_path.parent.mkdir(exist_ok=True)
            sheet.save(sheet_path)
        card = dataset_card(datasets_by_config, infos, metadata_configs)
        (tmp / "README.md").write_text(str(card), encoding="utf-8")
    return Path(output_dir)


def write_hub_configs(directory: Path, datasets_by_config: Mapping[str, datasets.DatasetDict], default_config: str
                      ) -> tuple[dict[str, DatasetInfo], dict[str, dict[str, Any]]]:
    """Write every config's splits into ``directory`` as ``push_to_hub`` lays them out (one Parquet file per config
    and split); returns the configs' ``DatasetInfo`` and ``configs:`` metadata for the card."""
    infos, metadata_configs = {}, {}
    for name, dataset in datasets_by_config.items():
        split_infos, download_size = SplitDict(), 0
        for split, split_dataset in dataset.items():
            path = directory / parquet_path(name, split)
            path.parent.mkdir(parents=True, exist_ok=True)
            split_dataset.to_parquet(path)
            download_size += path.stat().st_size
            split_infos.add(SplitInfo(name=split, num_bytes=split_dataset.data.nbytes, num_examples=len(split_dataset)))
        infos[name] = DatasetInfo(features=next(iter(dataset.values())).features, splits=split_infos,
                                  download_size=download_size,
                                  dataset_size=sum(info.num_bytes for info in split_infos.values()))
        metadata_configs[name] = {
            "data_files": [{"split": split, "path": f"{name}/{split}-*"} for split in dataset],
            **({"default": True} if name == default_config else {}),
        }
    return infos, metadata_configs


def _evaluation_split(dataset: datasets.DatasetDict) -> datasets.Dataset:
    """The split that covers every class of the graph (``test``), else the first split."""
    return dataset["test"] if "test" in dataset else next(iter(dataset.values()))


def dataset_card(
    datasets_by_config: Mapping[str, datasets.DatasetDict],
    infos: Mapping[str, DatasetInfo],
    metadata_configs: Mapping[str, dict[str, Any]],
) -> DatasetCard:
    """The README dataset card: YAML metadata (``configs``, ``dataset_info``) and a description of each config."""
    card_data = DatasetCardData(
        license="apache-2.0",
        pretty_name="Concept-graph shapes",
        task_categories=["unconditional-image-generation", "image-classification"],
        tags=["compositional-generalization", "concept-graph", "synthetic"],
        size_categories=["1K<n<10K"],
    )
    DatasetInfosDict(dict(infos)).to_dataset_card_data(card_data)
    MetadataConfigs(dict(metadata_configs)).to_dataset_card_data(card_data)

    sections = [_CARD_INTRO]
    for name, dataset in datasets_by_config.items():
        sections.append(_config_section(name, dataset))
    sections.append(_CARD_USAGE.format(config=next(iter(datasets_by_config)), citation=_PAPER_A))
    return DatasetCard(f"---\n{card_data.to_yaml()}\n---\n\n" + "\n\n".join(sections) + "\n")


_CARD_INTRO = """# Concept-graph shapes

Synthetic images of one object on a plain background, generated by the `compgen` library
(`compgen.data.concept_graph_builder`) to study compositional generalization in visual generative models through
*concept graphs* (Okawa et al. 2023). Each image belongs to a *concept class*: one value per concept variable
(shape, color, size and, for 4-variable spaces, background), written as a tuple string such as `"101"`
(digit *i* = value index of variable *i*). The concept graph links classes at concept distance (Hamming
distance) 1. A class's *level* is its distance to the nearest training class: 0 for training classes, then
1, 2, ... for held-out compositions. `train` holds the training classes only; `test` holds every class of
the graph, for evaluating generated images per level.

Columns: `image` (PNG), `concepts` (tuple string), `level` (int), one class-label column per concept variable,
and the exact per-image values the papers condition on: `color_rgb` (3 floats in [0, 1]), `size_value`
(object scale), `position` (object center x, y in pixels) and `rotation` (radians)."""

_CARD_USAGE = """## Usage

```python
from datasets import load_dataset

dataset = load_dataset("<this repo or export directory>", "{config}")
```

## Citation

The concept-graph framework and the headline splits are from: {citation}"""


def _config_section(name: str, dataset: datasets.DatasetDict) -> str:
    evaluation = _evaluation_split(dataset)
    variables = [
        (column, feature.names)
        for column, feature in evaluation.features.items()
        if isinstance(feature, datasets.ClassLabel)
    ]
    counts = {split: Counter(split_dataset["concepts"]) for split, split_dataset in dataset.items()}
    levels = dict(zip(evaluation["concepts"], evaluation["level"], strict=True))
    header = ["class", *(column for column, _ in variables), "level", *(f"{split} images" for split in dataset)]
    rows = [
        [
            f"`{concept}`",
            *(names[int(digit)] for (_, names), digit in zip(variables, concept, strict=True)),
            str(levels[concept]),
            *(str(counts[split][concept]) for split in dataset),
        ]
        for concept in sorted(levels)
    ]
    table = "\n".join("| " + " | ".join(row) + " |" for row in [header, ["---"] * len(header), *rows])
    space = "; ".join(f"{column}: {', '.join(names)}" for column, names in variables)
    description = evaluation.info.description or f"Concept space: {space}."
    return (
        f"## Config `{name}`\n\n{description}\n\n"
        f"Rows: {', '.join(f'{split} {len(d)}' for split, d in dataset.items())}.\n\n{table}\n\n"
        f"![{name}: samples per concept class]({CONTACT_SHEET_DIR}/{name}.png)"
    )


def contact_sheet(
    data: datasets.Dataset | ShapesBatch,
    samples_per_class: int = 8,
    graph: ConceptGraph | None = None,
    scale: int = 2,
) -> Image.Image:
    """A grid of samples: one row per concept class, labelled with its tuple string and level.

    ``data`` is a concept-graph ``Dataset`` (columns ``image``, ``concepts`` and optionally ``level``) or a
    rendered :class:`ShapesBatch`; for a batch, ``graph`` supplies the levels.
    """
    if samples_per_class < 1 or scale < 1:
        raise ValueError(f"samples_per_class and scale must be positive, got {samples_per_class}, {scale}")
    if isinstance(data, ShapesBatch):
        labels = ["".join(str(int(v)) for v in row) for row in data.concepts]
        levels = [graph.level(label) for label in labels] if graph is not None else None
    elif isinstance(data, datasets.Dataset):
        labels = data["concepts"]
        levels = data["level"] if "level" in data.column_names else None
    else:
        raise ValueError(f"contact_sheet expects a datasets.Dataset or a ShapesBatch, got {type(data).__name__}")
    if not labels:
        raise ValueError("contact_sheet needs at least one image")

    picked: dict[str, list[int]] = {}
    for index, label in enumerate(labels):
        rows = picked.setdefault(label, [])
        if len(rows) < samples_per_class:
            rows.append(index)
    classes = sorted(picked)
    indices = [i for label in classes for i in picked[label]]
    if isinstance(data, ShapesBatch):
        images = [data.images[i] for i in indices]
    else:
        images = [np.asarray(_as_pil(image).convert("RGB")) for image in data.select(indices)["image"]]
    tiles = dict(zip(indices, images, strict=True))

    size = images[0].shape[0] * scale
    gap, label_width = 4, 120
    font = ImageFont.load_default(size=14)
    sheet = Image.new(
        "RGB",
        (label_width + samples_per_class * (size + gap) + gap, len(classes) * (size + gap) + gap),
        (236, 236, 236),
    )
    draw = ImageDraw.Draw(sheet)
    for row, label in enumerate(classes):
        top = gap + row * (size + gap)
        text = label if levels is None else f"{label}  level {levels[picked[label][0]]}"
        draw.text((gap, top + size // 2), text, fill=(0, 0, 0), font=font, anchor="lm")
        for column, index in enumerate(picked[label]):
            tile = Image.fromarray(tiles[index]).resize((size, size), Image.Resampling.NEAREST)
            sheet.paste(tile, (label_width + column * (size + gap), top))
    return sheet


def _as_pil(image: Any) -> Image.Image:
    if isinstance(image, Image.Image):
        return image
    if isinstance(image, dict) and image.get("bytes") is not None:
        return Image.open(io.BytesIO(image["bytes"]))
    raise ValueError(f"cannot read image {type(image).__name__}")


def push_export_to_hub(
    export_dir: str | os.PathLike,
    repo_id: str,
    token: str | None = None,
    private: bool | None = None,
    commit_message: str = "Upload concept-graph shapes dataset",
) -> CommitInfo:
    """Upload an export to the Hub dataset repo ``repo_id`` (created if needed) in one commit.

    Files of the exported configs that are no longer part of the export are deleted from the repo, as
    ``DatasetDict.push_to_hub`` does for a config's data directory.
    """
    if not (Path(export_dir) / "README.md").is_file():
        raise ValueError(f"{export_dir} is not a dataset export: README.md is missing")
    files = hub.files_to_upload(export_dir)
    config_dirs = sorted({name.split("/")[0] for name in files if name.endswith(".parquet")})
    return hub.upload_folder_to_hub(
        export_dir,
        repo_id,
        repo_type="dataset",
        token=token,
        private=private,
        commit_message=commit_message,
        delete_patterns=[f"{name}/*" for name in config_dirs],
    )
