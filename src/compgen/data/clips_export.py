"""Publish concept-graph clips (:mod:`compgen.data.clips_builder`) in the exact Hub layout, with a dataset card, a
contact sheet of frame strips and an animated preview per config::

    <export dir>/README.md                                # card; YAML ``configs:`` lists every config
    <export dir>/<config>/<split>-00000-of-00001.parquet  # as push_to_hub writes them
    <export dir>/images/<config>.png                      # frame strips: each row one clip, labelled class and level
    <export dir>/images/<config>.gif                      # one clip of every class, played together

``datasets.load_dataset(<export dir>, "<config>")`` reads it offline as from the Hub; the frames are PNG, so they load
exactly as rendered.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

import datasets
import numpy as np
from datasets.utils.metadata import MetadataConfigs
from huggingface_hub import DatasetCard, DatasetCardData
from PIL import Image, ImageDraw, ImageFont

from ..atomic_io import atomic_directory
from .clips_builder import ConceptGraphClipsConfig, build_clips_dataset
from .export import CONTACT_SHEET_DIR, build_configs, write_hub_configs

CLIP_COLUMNS = ("frames", "concepts", "level")


def export_clip_configs(configs: Sequence[str | ConceptGraphClipsConfig], output_dir: str | os.PathLike,
                        cache_dir: str | None = None, overwrite: bool = False) -> Path:
    """Build each clips config (a name or a :class:`ConceptGraphClipsConfig`) and export them to ``output_dir``."""
    built = build_configs(configs, build_clips_dataset, output_dir, cache_dir, overwrite)
    return export_clip_datasets(built, output_dir, overwrite=overwrite)


def export_clip_datasets(datasets_by_config: Mapping[str, datasets.DatasetDict], output_dir: str | os.PathLike,
                         clips_per_class: int = 4, overwrite: bool = False) -> Path:
    """Write clips datasets (``{config name: DatasetDict}``) to ``output_dir`` in Hub layout, atomically (a new or
    empty directory, or any with ``overwrite``); the first config is the default one."""
    if not datasets_by_config:
        raise ValueError("no clip datasets to export")
    for name, dataset in datasets_by_config.items():
        if not name or "/" in name or name.startswith("."):
            raise ValueError(f"invalid config name {name!r}")
        missing = set(CLIP_COLUMNS) - set(next(iter(dataset.values())).column_names)
        if missing:
            raise ValueError(f"config {name!r} lacks the clip columns {sorted(missing)}")
    with atomic_directory(output_dir, overwrite=overwrite) as tmp:
        infos, metadata_configs = write_hub_configs(tmp, datasets_by_config, next(iter(datasets_by_config)))
        (tmp / CONTACT_SHEET_DIR).mkdir()
        for name, dataset in datasets_by_config.items():
            clip_strips(dataset["test"], clips_per_class).save(tmp / CONTACT_SHEET_DIR / f"{name}.png")
            save_clip_preview(dataset["test"], tmp / CONTACT_SHEET_DIR / f"{name}.gif")
        card_data = DatasetCardData(license="apache-2.0", pretty_name="Concept-graph clips",
                                    task_categories=["text-to-video"],
                                    tags=["compositional-generalization", "concept-graph", "synthetic", "video"])
        datasets.info.DatasetInfosDict(dict(infos)).to_dataset_card_data(card_data)
        MetadataConfigs(dict(metadata_configs)).to_dataset_card_data(card_data)
        sections = [_CARD_INTRO] + [f"## `{name}`\n\n{dataset['train'].info.description}\n\n"
                                    f"![frame strips]({CONTACT_SHEET_DIR}/{name}.png)\n"
                                    f"![every class]({CONTACT_SHEET_DIR}/{name}.gif)"
                                    for name, dataset in datasets_by_config.items()]
        card = DatasetCard(f"---\n{card_data.to_yaml()}\n---\n\n" + "\n\n".join(sections) + "\n")
        (tmp / "README.md").write_text(str(card), encoding="utf-8")
    return Path(output_dir)


def _first_clips(split: datasets.Dataset, per_class: int) -> dict[str, list[int]]:
    picked: dict[str, list[int]] = {}
    for index, concept in enumerate(split["concepts"]):
        rows = picked.setdefault(concept, [])
        if len(rows) < per_class:
            rows.append(index)
    return dict(sorted(picked.items()))


def clip_strips(split: datasets.Dataset, clips_per_class: int = 4, scale: int = 2) -> Image.Image:
    """Frame strips: ``clips_per_class`` clips of every class, one row each (frames left to right), labelled with the
    class and its level."""
    picked = _first_clips(split, clips_per_class)
    data = split.with_format("numpy")
    rows = [(concept, int(data[index]["level"]), data[index]["frames"]) for concept, indices in picked.items()
            for index in indices]
    frames, size = rows[0][2].shape[0], rows[0][2].shape[1] * scale
    gap, label_width = 2, 110
    sheet = Image.new("RGB", (label_width + frames * (size + gap), len(rows) * (size + gap) + gap), (236, 236, 236))
    draw, font = ImageDraw.Draw(sheet), ImageFont.load_default(size=13)
    for row, (concept, level, clip) in enumerate(rows):
        top = gap + row * (size + gap)
        draw.text((4, top + size // 2), f"{concept}  level {level}", fill=(0, 0, 0), font=font, anchor="lm")
        for column, frame in enumerate(clip):
            tile = Image.fromarray(frame).resize((size, size), Image.NEAREST)
            sheet.paste(tile, (label_width + column * (size + gap), top))
    return sheet


def save_clip_preview(split: datasets.Dataset, path: str | os.PathLike, scale: int = 3, frame_ms: int = 250) -> None:
    """An animated GIF of the first clip of every class side by side, looping."""
    picked = _first_clips(split, 1)
    data = split.with_format("numpy")
    clips = np.stack([data[indices[0]]["frames"] for indices in picked.values()])  # (C, T, H, W, 3)
    gap = np.full((*clips.shape[1:3], 2, 3), 236, dtype=np.uint8)
    frames = [np.concatenate([part for clip in clips for part in (clip[t], gap[t])], axis=1)
              for t in range(clips.shape[1])]
    images = [Image.fromarray(frame).resize((frame.shape[1] * scale, frame.shape[0] * scale), Image.NEAREST)
              for frame in frames]
    images[0].save(path, save_all=True, append_images=images[1:], duration=frame_ms, loop=0)


_CARD_INTRO = """# Concept-graph clips

Short clips of one moving object, generated by the `compgen` library (`compgen.clips`, `compgen.data.clips_builder`)
to study compositional generalization in video (Farid et al. 2025 study it in image and video generation). Each clip
belongs to a concept class, one value per variable: `shape` (circle, triangle), `time_of_day` (day, night: the
scene's colour) and `turn` (right, left: the object's path bends one way; it exists only in time, since any single
frame is equally likely under either). A class is written as a tuple string such as `"101"`; its *level* is its
concept distance to the nearest training class. `train` holds the training classes, `test` every class, `tokenizer`
every class as well (labels unused: a frame tokenizer's training clips).

Columns: `frames` (a list of PNG frames, exact), `concepts`, `level`, one class-label column per variable, and the
per-clip values that drew it: `background_rgb`, `object_rgb`, `object_radius` (pixels), `turn_rate` (the heading's
change per frame in radians, positive for left) and `trajectory` (the object's centre per frame, pixels).

```python
from datasets import load_dataset

clips = load_dataset("<this repo or export directory>", "clips-h32-train1")
frames = clips["test"].with_format("numpy")[0]["frames"]  # (T, H, W, 3) uint8
```"""
