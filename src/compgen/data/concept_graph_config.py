"""The config of a concept-graph split of the shapes data: its concept space, training classes, image counts and
how its images are drawn (:class:`ConceptGraphShapesConfig`), checked before anything is rendered. The builder that
renders it is :mod:`compgen.data.concept_graph_builder`."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import datasets
import numpy as np

from ..concepts import ConceptGraph, ConceptSpace, get_split_preset, shapes_space
from ..shapes import (
    PAPER_COLOR_JITTER,
    PAPER_POSITION_RANGE,
    PAPER_SIZE_JITTER,
    SIZE_RANGES,
    RenderConfig,
)

SPLITS = ("train", "test", "tokenizer")
TOKENIZER_SPLIT = "tokenizer"
"""Images of every class (held-out ones included) for training a tokenizer without labels (Paper B's token models):
its own random stream, so it shares no image with ``train`` or ``test``."""


@dataclasses.dataclass
class ConceptGraphShapesConfig(datasets.BuilderConfig):
    """A concept-graph split of the shapes data: the concept space, its training classes and image counts.

    Give either ``split_preset`` (``"H32-train1"``, ``"fail1"``, ``"H42-train1"``) or ``training_classes``
    (class strings such as ``"010"``) in the space set by ``num_shapes``, ``num_colors`` and ``background``
    (Paper A's 2x2x2 cube by default). ``class_counts`` overrides ``images_per_class`` for single training
    classes (``{"001": 10}``); a count of 0 removes the class from ``train``, so it becomes a held-out class
    and the levels are computed without it.

    The images look like Paper A's Blender renders (Appendix A.1, Fig. 11): shaded solids (a sphere for ``circle``,
    an upright cone for ``triangle``, a cube for ``square``) in one pose before a fixed camera and light
    (``style="shaded"``), near the frame's centre (``position_range``). Colors and sizes are drawn from nearly their
    whole class ranges (``color_jitter`` 0.35, ``size_jitter`` 0.45), as Paper A samples them uniformly along the
    color and size axes (Section 3); the per-image values are what ``full`` conditioning feeds the models.
    ``style="flat"`` draws flat polygons instead, at random rotations with ``rotate=True`` (the
    ``okawa-h32-train1-flat`` config: compgen's data before the renders were matched). ``size_ranges="touching"``
    samples sizes as Paper A's text does (the size axis cut into two touching halves,
    :data:`~compgen.shapes.SIZE_RANGES`) instead of two ranges with a gap; ``object_scale`` sets the object's scale
    in the frame, the pixel budget of an object (``results/paper-a-sizes/`` measures both). ``docs/tuple_unet_h32.md``
    measures what the style, the rotation and the position do to composition. ``data_dir`` reads Paper A's own
    published images.
    """

    split_preset: str | None = None
    num_shapes: int | None = None
    num_colors: int | None = None
    background: bool | None = None
    training_classes: tuple[str, ...] | None = None
    images_per_class: int = 1250
    class_counts: dict[str, int] | None = None
    test_images_per_class: int = 100
    tokenizer_images_per_class: int | None = None
    """Images of every class in the ``tokenizer`` split; ``None``: ``images_per_class``."""
    image_size: int = 28
    seed: int = 0
    color_jitter: float = PAPER_COLOR_JITTER
    size_jitter: float = PAPER_SIZE_JITTER
    rotate: bool = False
    style: str = "shaded"
    position_range: float = PAPER_POSITION_RANGE
    size_ranges: str | None = None
    """``"apart"`` or ``"touching"`` (:data:`~compgen.shapes.SIZE_RANGES`): sets the size jitter by what it does to the
    two size classes' ranges; ``None`` leaves ``size_jitter`` as given."""
    object_scale: float = 1.0
    """The object's scale in the frame (:attr:`compgen.shapes.RenderConfig.object_scale`): 1 is Paper A's framing."""
    data_dir: str | None = None
    """A directory in Paper A's published layout (:mod:`compgen.data.paper_a_files`): rows are read from its
    ``train/`` and ``test/`` images instead of rendered; the render options are then unused."""

    def __post_init__(self) -> None:
        super().__post_init__()
        # -0.0 passes the jitter range checks (``0 <= -0.0``) but numpy's ``uniform(0.0, -0.0)`` refuses it: read 0.0.
        for field in ("color_jitter", "size_jitter", "position_range"):
            if isinstance(getattr(self, field), float) and getattr(self, field) == 0:
                setattr(self, field, 0.0)

    @property
    def space(self) -> ConceptSpace:
        """The concept space: the preset's, or the one set by ``num_shapes``, ``num_colors``, ``background``."""
        options = {"num_shapes": self.num_shapes, "num_colors": self.num_colors, "background": self.background}
        given = {key: value for key, value in options.items() if value is not None}
        if self.split_preset is None:
            return shapes_space(**given)
        space = get_split_preset(self.split_preset).space
        preset_options = {
            "num_shapes": space.variable("shape").num_values,
            "num_colors": space.variable("color").num_values,
            "background": "background" in space.names,
        }
        conflicting = {key: value for key, value in given.items() if preset_options[key] != value}
        if conflicting:
            raise ValueError(
                f"config {self.name!r}: split preset {self.split_preset!r} fixes the concept space "
                f"({preset_options}); remove the conflicting options {conflicting}"
            )
        return space

    @property
    def train_counts(self) -> dict[str, int]:
        """``{class string: number of training images}`` for every training class, in lexicographic order."""
        space = self.space
        if self.training_classes is not None:
            listed = self.training_classes
            if isinstance(listed, str):
                raise ValueError(f"config {self.name!r}: training_classes must be a list of class strings")
        elif self.split_preset is not None:
            listed = get_split_preset(self.split_preset).training_classes
        else:
            raise ValueError(f"config {self.name!r} needs a split_preset or a list of training_classes")
        classes = sorted({space.parse(c) for c in listed})
        if not classes:
            raise ValueError(f"config {self.name!r}: training_classes is empty")
        _check_count("images_per_class", self.images_per_class, self.name)
        counts = {space.format(c): self.images_per_class for c in classes}
        for concept, count in (self.class_counts or {}).items():
            key = space.format(concept)
            if key not in counts:
                raise ValueError(
                    f"config {self.name!r}: class_counts names {key!r}, which is not a training class "
                    f"{sorted(counts)}"
                )
            _check_count(f"class_counts[{key!r}]", count, self.name)
            counts[key] = int(count)
        return counts

    @property
    def graph(self) -> ConceptGraph:
        """The concept graph over the whole space; its training classes are those with at least one image."""
        present = [c for c, n in self.train_counts.items() if n > 0]
        if not present:
            raise ValueError(f"config {self.name!r}: every training class has 0 images")
        return ConceptGraph(self.space, present)

    @property
    def effective_size_jitter(self) -> float:
        """The size jitter the images are drawn with: ``size_ranges``'s, else ``size_jitter``."""
        if self.size_ranges is None:
            return self.size_jitter
        if self.size_ranges not in SIZE_RANGES:
            raise ValueError(f"config {self.name!r}: size_ranges must be one of {sorted(SIZE_RANGES)} or None, got "
                             f"{self.size_ranges!r}")
        if self.size_jitter != PAPER_SIZE_JITTER and self.size_jitter != SIZE_RANGES[self.size_ranges]:
            raise ValueError(f"config {self.name!r}: size_ranges={self.size_ranges!r} sets the size jitter to "
                             f"{SIZE_RANGES[self.size_ranges]}; remove size_jitter={self.size_jitter}")
        return SIZE_RANGES[self.size_ranges]

    @property
    def render_config(self) -> RenderConfig:
        """How the rows' images are drawn (style, pose, jitter, framing)."""
        return RenderConfig(
            image_size=self.image_size,
            color_jitter=self.color_jitter,
            size_jitter=self.effective_size_jitter,
            object_scale=self.object_scale,
            rotate=self.rotate,
            style=self.style,
            position_range=self.position_range,
        )

    def validate(self) -> None:
        """Raise a ``ValueError`` naming the problem if the config cannot be built."""
        _ = self.graph  # resolves the space, the training classes and the counts
        if self.data_dir is None:
            _ = self.render_config
        else:
            from .paper_a_files import check_image_size, check_paper_counts

            check_image_size(self.image_size, self.name)
            for split in ("train", "test"):  # an error names a missing folder or a class with too few images
                check_paper_counts(self.data_dir, split, self.class_counts_for(split))
        _check_count("test_images_per_class", self.test_images_per_class, self.name, minimum=1)  # an empty split fails
        if self.tokenizer_images_per_class is not None:
            _check_count("tokenizer_images_per_class", self.tokenizer_images_per_class, self.name, minimum=1)
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise ValueError(f"config {self.name!r}: seed must be a non-negative int, got {self.seed!r}")

    def class_counts_for(self, split: str) -> dict[str, int]:
        """``{class string: number of images}`` of a split, in the order its rows are written."""
        if split == "train":
            return self.train_counts
        if split == "test":
            return {self.space.format(c): self.test_images_per_class for c in self.space.all_classes()}
        if split == TOKENIZER_SPLIT:
            count = self.tokenizer_images_per_class
            count = self.images_per_class if count is None else count
            return {self.space.format(c): count for c in self.space.all_classes()}
        raise ValueError(f"unknown split {split!r}; splits are {SPLITS}")

    def summary(self) -> str:
        """One paragraph describing the space, the training classes and the levels (used as the description)."""
        graph = self.graph
        variables = "; ".join(f"{v.name}: {', '.join(v.values)}" for v in self.space.variables)
        by_level = {
            level: ", ".join(graph.format(c) for c in graph.classes_at_level(level))
            for level in range(graph.max_level + 1)
        }
        levels = "; ".join(f"level {level}: {classes}" for level, classes in by_level.items())
        counts = ", ".join(f"{c}: {n}" for c, n in self.train_counts.items())
        return (
            f"Concept graph of the synthetic shapes data ({variables}). Train images per class: {counts}. "
            f"{levels}. Test split: {self.test_images_per_class} images of every class. {self._tokenizer_summary()}"
            f"{self.image_size}x{self.image_size} pixels, seed {self.seed}. {self.rendering()}"
        )

    def _tokenizer_summary(self) -> str:
        if self.data_dir is not None:
            return ""
        count = self.class_counts_for(TOKENIZER_SPLIT)
        return (f"Tokenizer split: {next(iter(count.values()))} images of every class, for tokenizers trained without "
                "labels. ")

    def rendering(self) -> str:
        """One sentence on how the images were made (the render style, pose, position and jitter ranges)."""
        if self.data_dir is not None:
            return f"Images read from a directory in Paper A's published layout ({Path(self.data_dir).name})."
        if self.style == "shaded":
            look = "shaded 3D solids (sphere, cone, cube) in a fixed upright pose, one light, fixed camera"
        else:
            look = "flat polygons at " + ("random rotations" if self.rotate else "one upright rotation")
        return (
            f"Rendered as {look}; object centres over {self.position_range:.0%} of the free space around the frame's "
            f"centre; colour +-{self.color_jitter} per channel and scale +-{self.effective_size_jitter} around the "
            f"class values{self._size_ranges_summary()}; object scale in the frame {self.object_scale}."
        )

    def _size_ranges_summary(self) -> str:
        jitter = self.effective_size_jitter
        for name, value in SIZE_RANGES.items():
            if jitter == value:
                return f" (size ranges {name})"
        return " (size ranges overlapping)" if jitter > SIZE_RANGES["touching"] else ""


def _check_count(field: str, value: Any, config_name: str, minimum: int = 0) -> None:
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < minimum:
        what = "a positive" if minimum == 1 else "a non-negative"
        raise ValueError(f"config {config_name!r}: {field} must be {what} int, got {value!r}")
