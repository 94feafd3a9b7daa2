"""Training data for every compgen script, from one of four sources, all through ``datasets``.

- a concept-graph config name (``"okawa-h32-train1"``), built on the fly by the shapes builder;
- ``"celeba"``: the CelebA concept splits built by :class:`~compgen.data.celeba.CelebAConcepts` from a local copy
  (``data_dir=`` an official tree or ``parquet=`` a Parquet file, directory or Hub id);
- a local directory in Hub layout (what ``dataset_scripts/publish_concept_graph.py`` writes);
- a Hub dataset id (``"org/name"``), read with ``load_dataset``.

The result is held in memory as tensors (the shapes and CelebA splits are small), with the concept space
recovered from the dataset's ``ClassLabel`` columns so that nothing about the data is hard-coded.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from ..concepts import ConceptGraph, ConceptSpace, ConceptVariable

CELEBA_SOURCE = "celeba"
"""Source name of the CelebA concept splits; a local directory called ``celeba`` is read as ``./celeba``."""

def continuous_columns(features, space: ConceptSpace) -> dict[str, str]:
    """Concept variable -> the dataset column holding its exact per-image value ("full information" conditioning).

    The convention: a float column (or a sequence of floats) named ``<variable>_<anything>`` beside the variable's
    ``ClassLabel`` column, e.g. ``color_rgb`` and ``size_value`` in the shapes data; CelebA has none. More than one
    such column for a variable is an error (which one would be meant?).
    """
    from datasets import Sequence, Value

    def is_float(feature) -> bool:
        inner = feature.feature if isinstance(feature, Sequence) else getattr(feature, "feature", feature)
        if isinstance(feature, list) and feature:
            inner = feature[0]
        return isinstance(inner, Value) and inner.dtype.startswith("float")

    found: dict[str, str] = {}
    for name in space.names:
        matches = [column for column, feature in features.items()
                   if column.startswith(f"{name}_") and is_float(feature)]
        if len(matches) > 1:
            raise ValueError(f"columns {matches} all look like the continuous value of {name!r}; keep one")
        if matches:
            found[name] = matches[0]
    return found


@dataclass
class ConceptImageData:
    """A split held as tensors: ``images`` uint8 (N, H, W, 3) (clips: (N, T, H, W, 3), a clips dataset's ``frames``),
    ``concepts`` int64 (N, V), optional values."""

    space: ConceptSpace
    images: torch.Tensor
    concepts: torch.Tensor
    concept_values: torch.Tensor | None
    """Float (N, D): the per-image values of the continuous variables, in space order, or None."""
    object_scale: float = 1.0
    """The object's scale in the frame the images were rendered at (the ``object_scale`` column; 1 without it)."""

    def __len__(self) -> int:
        return len(self.images)

    def to(self, device: torch.device | str) -> ConceptImageData:
        """The same split with its tensors on ``device`` (the shapes and CelebA splits fit in device memory)."""
        values = None if self.concept_values is None else self.concept_values.to(device)
        return ConceptImageData(self.space, self.images.to(device), self.concepts.to(device), values,
                                self.object_scale)

    @property
    def image_size(self) -> int:
        return int(self.images.shape[-2])

    @property
    def num_frames(self) -> int:
        """Frames per sample: 1 for images, ``T`` for clips."""
        return int(self.images.shape[1]) if self.images.ndim == 5 else 1

    def frames_as_images(self) -> ConceptImageData:
        """Every frame as an image of its clip's class (a frame tokenizer's training images); images unchanged."""
        if self.images.ndim == 4:
            return self
        repeat = self.num_frames
        values = None if self.concept_values is None else self.concept_values.repeat_interleave(repeat, 0)
        return ConceptImageData(self.space, self.images.flatten(0, 1), self.concepts.repeat_interleave(repeat, 0),
                                values, self.object_scale)

    def class_strings(self) -> list[str]:
        return sorted({"".join(map(str, row)) for row in self.concepts.tolist()})

    def graph(self, all_classes: list[str] | None = None) -> ConceptGraph:
        """The concept graph whose training classes are the classes present in this split."""
        return ConceptGraph(self.space, self.class_strings(), nodes=all_classes)


def carries_continuous_values(source: str | None) -> bool | None:
    """Whether a dataset source carries per-image continuous values ("full" conditioning), read from its declared
    features or its metadata without loading an image: False for CelebA (binary labels) and for an image folder
    without ``<variable>_value`` columns; None where only the loaded data tell (a config, a Hub id)."""
    if source == CELEBA_SOURCE:
        from .celeba.attributes import celeba_space
        from .celeba.builder import celeba_features

        return bool(continuous_columns(celeba_features(), celeba_space()))
    if source and Path(source).is_dir():
        from .image_folder import has_continuous_values, is_image_folder

        if is_image_folder(source):
            return has_continuous_values(source)
    return None


def concept_space_from_features(features) -> ConceptSpace:
    """The concept space a dataset describes: its ``ClassLabel`` columns, in column order."""
    from datasets import ClassLabel

    variables = [ConceptVariable(name, tuple(f.names)) for name, f in features.items() if isinstance(f, ClassLabel)]
    if not variables:
        raise ValueError(f"dataset has no ClassLabel concept columns; columns are {list(features)}")
    return ConceptSpace(tuple(variables))


def load_concept_dataset(source: str, config_name: str | None = None, cache_dir: str | None = None, **overrides):
    """A ``DatasetDict`` from a concept-graph config name, ``"celeba"``, a local Hub-layout directory, or a Hub id.

    ``overrides`` are builder options: shapes config fields, or for CelebA the source (``data_dir=`` or
    ``parquet=`` with ``parquet_config=``) and config fields such as ``training_classes``; ``config_name`` is then
    the CelebA builder config (``"default"`` 64 px, ``"cpu"`` 32 px).
    """
    from datasets import load_dataset

    if source == CELEBA_SOURCE:
        from .celeba import load_celeba_concepts

        return load_celeba_concepts(config_name=config_name or "default", cache_dir=cache_dir, **overrides)
    if Path(source).is_dir():
        from .image_folder import is_image_folder, load_image_folder

        if is_image_folder(source):  # one's own labelled images (docs/datasets.md, "Your own images")
            return load_image_folder(source, overrides.get("training_classes", ()))
        return _own_labels(load_dataset(str(source), config_name, cache_dir=cache_dir), source, overrides)
    from .concept_graph_builder import ConceptGraphShapes, build_concept_graph_dataset

    if source in ConceptGraphShapes.builder_configs:
        return build_concept_graph_dataset(source, cache_dir=cache_dir, **overrides)
    from .clips_builder import ConceptGraphClips, build_clips_dataset  # not imported by a run on shapes

    if source in ConceptGraphClips.builder_configs:
        return build_clips_dataset(source, cache_dir=cache_dir, **overrides)
    if overrides:
        return build_concept_graph_dataset(source, cache_dir=cache_dir, **overrides)
    if "/" in source:
        return _own_labels(load_dataset(source, config_name, cache_dir=cache_dir), source, overrides)
    raise ValueError(
        f"unknown dataset source {source!r}: not {CELEBA_SOURCE!r}, not a directory, not a concept-graph config "
        f"({sorted(ConceptGraphShapes.builder_configs)}), not a clips config "
        f"({sorted(ConceptGraphClips.builder_configs)}) and not a Hub id (org/name). A config of your own is made "
        "from its fields in Python and exported: export_concept_graph_configs([ConceptGraphShapesConfig("
        f"name={source!r}, split_preset=...)], EXPORT_DIR) (compgen.data.export); then train on it with --dataset "
        f"EXPORT_DIR --dataset_config {source}"
    )


def _own_labels(dataset_dict, source: str, overrides: dict):
    """A directory or Hub dataset as loaded; with ``training_classes``, one of one's own images whose attribute
    columns are text or integers (:func:`~compgen.data.image_folder.labelled_split_dataset` of its ``train``
    split)."""
    if not overrides.get("training_classes"):
        return dataset_dict
    from datasets import ClassLabel

    from .image_folder import labelled_split_dataset

    split = dataset_dict["train"] if "train" in dataset_dict else next(iter(dataset_dict.values()))
    if any(isinstance(feature, ClassLabel) for feature in split.features.values()):
        raise ValueError(f"{source} is a concept-graph dataset with its own splits and training classes: drop "
                         "--training_classes (it names those of a dataset of one's own images)")
    return labelled_split_dataset(split, overrides["training_classes"])


def to_tensors(dataset) -> ConceptImageData:
    """Decode a ``datasets.Dataset`` split into :class:`ConceptImageData` (images decoded once, in order), with the
    per-image continuous concept values of :func:`continuous_columns` in variable order."""
    space = concept_space_from_features(dataset.features)
    columns = continuous_columns(dataset.features, space)
    if len(dataset) == 0:
        raise ValueError("the dataset split is empty")
    formatted = dataset.with_format("numpy")
    column = "frames" if "frames" in dataset.features else "image"  # a clips dataset's frames: (N, T, H, W, 3)
    images = np.stack([np.asarray(img) for img in formatted[column]])
    if images.ndim == 3:
        images = np.repeat(images[..., None], 3, axis=-1)
    images = images[..., :3]
    concepts = np.stack([np.asarray(formatted[name], dtype=np.int64) for name in space.names], axis=1)
    value_parts = []
    for name in space.names:
        if name in columns:
            value_parts.append(np.asarray(formatted[columns[name]], dtype=np.float32).reshape(len(dataset), -1))
    values = torch.from_numpy(np.concatenate(value_parts, axis=1)) if value_parts else None
    return ConceptImageData(space, torch.from_numpy(np.ascontiguousarray(images)), torch.from_numpy(concepts), values,
                            _object_scale(formatted))


def _object_scale(formatted) -> float:
    """The one object scale of a split's ``object_scale`` column (1 without the column); mixed scales are refused,
    since one set of scorers judges a run."""
    if "object_scale" not in formatted.column_names:
        return 1.0
    scales = np.unique(np.asarray(formatted["object_scale"], dtype=np.float32))
    if len(scales) != 1 or not np.isfinite(scales[0]):
        raise ValueError(f"the object_scale column must hold one finite value for the whole split, got {scales[:5]}")
    return round(float(scales[0]), 6)


def training_data_from(dataset_dict, split: str = "train") -> tuple[ConceptImageData, ConceptGraph]:
    """``split`` of a loaded ``DatasetDict`` as tensors, and its concept graph (nodes = the ``test`` classes)."""
    data = split_tensors(dataset_dict, split)
    nodes = None
    if "test" in dataset_dict:
        nodes = sorted(set(dataset_dict["test"]["concepts"]))
    return data, data.graph(nodes)


def split_tensors(dataset_dict, split: str) -> ConceptImageData:
    """One split of a loaded ``DatasetDict`` as tensors, with an error naming the available splits."""
    if split not in dataset_dict:
        raise ValueError(f"split {split!r} not found; available: {list(dataset_dict)}")
    return to_tensors(dataset_dict[split])
