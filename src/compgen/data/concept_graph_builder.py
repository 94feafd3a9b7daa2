"""A Hugging Face ``datasets`` builder for concept-graph splits of the synthetic shapes data.

Each config picks a concept space and its training classes (a paper preset or any user-defined set) and
renders three splits: ``train`` (the training classes only), ``test`` (every class of the concept graph,
for evaluation) and ``tokenizer`` (every class, from a stream of its own: what a token model's tokenizer trains on
without labels with ``--tokenizer_data all-classes``, so that the tokenizer can draw every class and the generator
alone decides whether a held-out combination comes out; Farid et al. 2025 do not publish their tokenizers' data).
Every row carries its concept class (``concepts``, e.g. ``"101"``), its ``level`` in the
concept graph, one ``ClassLabel`` column per concept variable and the exact per-image values the papers
condition on (``color_rgb``, ``size_value``, ``position``, ``rotation``).

Images of one (seed, split, class) come from their own random stream, so changing the image count of one
class (frequency experiments) leaves every other class's images byte-identical.

Dataset scripts are not supported by ``load_dataset`` in ``datasets`` 5; build in Python instead::

    from compgen.data.concept_graph_builder import build_concept_graph_dataset

    dataset = build_concept_graph_dataset("okawa-h32-train1")
    custom = build_concept_graph_dataset("only-10-of-001", split_preset="H32-train1", class_counts={"001": 10})
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import datasets
import numpy as np

from .. import concepts as concepts_module
from .. import shapes as shapes_module
from ..concepts import ConceptGraph, ConceptSpace, get_split_preset, shapes_space
from ..shapes import (
    PAPER_COLOR_JITTER,
    PAPER_POSITION_RANGE,
    PAPER_SIZE_JITTER,
    SIZE_RANGES,
    RenderConfig,
    render_classes,
)
from .png import encode_png

DATASET_NAME = "concept_graph_shapes"
SPLITS = ("train", "test", "tokenizer")
TOKENIZER_SPLIT = "tokenizer"
"""Images of every class (held-out ones included) for training a tokenizer without labels (Paper B's token models):
its own random stream, so it shares no image with ``train`` or ``test``."""
VERSION = datasets.Version("1.0.0")
_RENDER_CHUNK = 1024  # images per render call; part of the random-stream layout, so changing it changes images


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


class ConceptGraphShapes(datasets.GeneratorBasedBuilder):
    """Renders concept-graph splits of the synthetic shapes data (Okawa et al. 2023) as a ``datasets`` builder."""

    VERSION = VERSION
    BUILDER_CONFIG_CLASS = ConceptGraphShapesConfig
    BUILDER_CONFIGS = [
        ConceptGraphShapesConfig(
            name="okawa-h32-train1",
            version=VERSION,
            split_preset="H32-train1",
            images_per_class=1250,
            description="Okawa et al. 2023 headline split.",
        ),
        *(
            ConceptGraphShapesConfig(
                name=f"okawa-h32-train{number}",
                version=VERSION,
                split_preset=f"H32-train{number}",
                images_per_class=1250,
                description=f"Okawa et al. 2023 split H32-train{number}: H32-train1's star around {centre}.",
            )
            for number, centre in ((2, "001"), (3, "010"), (4, "100"))
        ),
        ConceptGraphShapesConfig(
            name="okawa-h32-train1-flat",
            version=VERSION,
            split_preset="H32-train1",
            images_per_class=1250,
            style="flat",
            rotate=True,
            position_range=1.0,
            description=(
                "The headline split as compgen drew it before its shaded solids: flat polygons at "
                "random rotations anywhere in the frame. Kept to reproduce earlier results; on it the U-Net draws "
                "111 for a while, then blank frames (results/paper-a-h100-flat-data/)."
            ),
        ),
        ConceptGraphShapesConfig(
            name="okawa-h32-train1-anywhere", version=VERSION, split_preset="H32-train1", images_per_class=1250,
            position_range=1.0, description="The headline split with the default solids anywhere in the frame (Paper A "
            "does not say where its objects stand): the U-Net does not draw 111 (results/paper-a-data-ablation/).",
        ),
        ConceptGraphShapesConfig(
            name="okawa-fail1",
            version=VERSION,
            split_preset="fail1",
            images_per_class=1250,
            description="Okawa et al. 2023 adversarial split (color never changes alone in training).",
        ),
        ConceptGraphShapesConfig(
            name="okawa-h42-train1",
            version=VERSION,
            split_preset="H42-train1",
            images_per_class=1000,
            description="The 4-cube with background color (Okawa et al. 2023 Fig. 16).",
        ),
    ]
    DEFAULT_CONFIG_NAME = "okawa-h32-train1"
    config: ConceptGraphShapesConfig

    def __init__(self, *args: Any, dataset_name: str | None = None, hash: str | None = None, **kwargs: Any):
        # The code hash keys the cache: editing the renderer or this builder never serves stale images.
        super().__init__(*args, dataset_name=dataset_name or DATASET_NAME, hash=hash or _code_hash(), **kwargs)

    def _create_builder_config(
        self, config_name: str | None = None, custom_features: Any = None, config_id: str | None = None, **kwargs: Any
    ) -> tuple[ConceptGraphShapesConfig, str]:
        # ``datasets`` only accepts the names in BUILDER_CONFIGS; any other name is a user-defined config
        # built from the keyword arguments alone (not from the default config's fields).
        if config_name is None or config_name in self.builder_configs:
            config, config_id = super()._create_builder_config(config_name, custom_features, config_id, **kwargs)
        else:
            kwargs.setdefault("version", self.VERSION)
            config = self.BUILDER_CONFIG_CLASS(name=config_name, **kwargs)
            config_id = config_id or config.create_config_id(kwargs, custom_features=custom_features)
        if config.data_dir is not None:  # the folder's absolute path and files key the cache, not the path string
            from .paper_a_files import paper_fingerprint

            config_id = f"{config_id}-{paper_fingerprint(config.data_dir)}"
        return config, config_id

    def _info(self) -> datasets.DatasetInfo:
        self.config.validate()
        return datasets.DatasetInfo(
            description=" ".join(filter(None, [self.config.description, self.config.summary()])),
            features=concept_graph_features(self.config.space, object_scale=self.config.object_scale != 1.0),
        )

    def _split_generators(self, dl_manager: Any) -> list[datasets.SplitGenerator]:
        # Paper A's published files hold train and test images only: no tokenizer split for them.
        splits = SPLITS if self.config.data_dir is None else ("train", "test")
        return [datasets.SplitGenerator(name=split, gen_kwargs={"split": split}) for split in splits]

    def _generate_examples(self, split: str) -> Iterator[tuple[int, dict[str, Any]]]:
        config = self.config
        if config.data_dir is not None:
            from .paper_a_files import paper_rows

            yield from paper_rows(config, split)
            return
        space, graph, render_config = config.space, config.graph, config.render_config
        # A framing other than Paper A's travels with the rows, so that a run's scorers are calibrated at it.
        framing = {OBJECT_SCALE_COLUMN: float(config.object_scale)} if config.object_scale != 1.0 else {}
        key = 0
        for concept, count in config.class_counts_for(split).items():
            parsed = space.parse(concept)
            level = graph.level(parsed)
            class_index = int(np.ravel_multi_index(parsed, space.cardinalities))
            for chunk, start in enumerate(range(0, count, _RENDER_CHUNK)):
                # One random stream per (seed, split, class, chunk): other classes' counts never shift it.
                stream = np.random.SeedSequence(config.seed, spawn_key=(SPLITS.index(split), class_index, chunk))
                batch = render_classes(
                    space,
                    np.tile(np.asarray(parsed, dtype=np.int64), (min(_RENDER_CHUNK, count - start), 1)),
                    seed=np.random.Generator(np.random.PCG64(stream)),
                    config=render_config,
                )
                pngs = encode_png(batch.images)
                rgb, size, position, rotation = (
                    batch.rgb.tolist(),
                    batch.size.tolist(),
                    batch.position.tolist(),
                    batch.rotation.tolist(),
                )
                for i, png in enumerate(pngs):
                    yield key, {
                        "image": {"bytes": png, "path": None},
                        "concepts": concept,
                        "level": level,
                        **dict(zip(space.names, parsed, strict=True)),
                        "color_rgb": rgb[i],
                        "size_value": size[i],
                        "position": position[i],
                        "rotation": rotation[i],
                        **framing,
                    }
                    key += 1


OBJECT_SCALE_COLUMN = "object_scale"
"""The column that holds the object's scale in the frame, in data rendered at another scale than Paper A's (1)."""


def concept_graph_features(space: ConceptSpace, object_scale: bool = False) -> datasets.Features:
    """The columns of a concept-graph dataset over ``space`` (one ``ClassLabel`` per concept variable), with the
    ``object_scale`` column when ``object_scale`` is true."""
    framing = {OBJECT_SCALE_COLUMN: datasets.Value("float32")} if object_scale else {}
    return datasets.Features(
        {
            "image": datasets.Image(),
            "concepts": datasets.Value("string"),
            "level": datasets.Value("int32"),
            **{v.name: datasets.ClassLabel(names=list(v.values)) for v in space.variables},
            "color_rgb": datasets.List(datasets.Value("float32"), length=3),
            "size_value": datasets.Value("float32"),
            "position": datasets.List(datasets.Value("float32"), length=2),
            "rotation": datasets.Value("float32"),
            **framing,
        }
    )


def build_concept_graph_dataset(
    config_name_or_config: str | ConceptGraphShapesConfig = "okawa-h32-train1",
    cache_dir: str | None = None,
    **overrides: Any,
) -> datasets.DatasetDict:
    """Build (or load from the cache) the ``train`` and ``test`` splits of a config.

    ``config_name_or_config`` is a predefined config name, a new name (then ``overrides`` define the config,
    e.g. ``split_preset="H32-train1", class_counts={"001": 10}``) or a :class:`ConceptGraphShapesConfig`.
    ``overrides`` replace fields of the chosen config.
    """
    builder = concept_graph_builder(config_name_or_config, cache_dir=cache_dir, **overrides)
    try:
        builder.download_and_prepare()
    except datasets.exceptions.DatasetGenerationError as error:
        # ``datasets`` wraps what went wrong with a row (a corrupt image, a malformed values file); say that instead.
        if isinstance(error.__cause__, ValueError):
            raise error.__cause__ from None
        raise
    return builder.as_dataset()


def concept_graph_builder(
    config_name_or_config: str | ConceptGraphShapesConfig = "okawa-h32-train1",
    cache_dir: str | None = None,
    **overrides: Any,
) -> ConceptGraphShapes:
    """The :class:`ConceptGraphShapes` builder of a config name or object (see ``build_concept_graph_dataset``)."""
    if isinstance(config_name_or_config, ConceptGraphShapesConfig):
        config = config_name_or_config
        defaults = ConceptGraphShapesConfig(name=config.name)
        kwargs = {
            field.name: getattr(config, field.name)
            for field in dataclasses.fields(ConceptGraphShapesConfig)
            if field.name != "name" and getattr(config, field.name) != getattr(defaults, field.name)
        }
        name = config.name
    elif isinstance(config_name_or_config, str):
        name, kwargs = config_name_or_config, {}
    else:
        raise ValueError(f"expected a config name or a ConceptGraphShapesConfig, got {config_name_or_config!r}")
    kwargs.update(overrides)
    if isinstance(kwargs.get("training_classes"), list):
        kwargs["training_classes"] = tuple(kwargs["training_classes"])
    return ConceptGraphShapes(config_name=name, cache_dir=cache_dir, **kwargs)


def _code_hash() -> str:
    """Hash of the code that determines the rows: the concept core, the renderer and this builder."""
    digest = hashlib.sha256()
    for module in (concepts_module, shapes_module):
        digest.update(Path(module.__file__).read_bytes())
    digest.update(Path(__file__).read_bytes())
    digest.update((Path(__file__).parent / "paper_a_files.py").read_bytes())
    digest.update((Path(__file__).parent / "png.py").read_bytes())
    digest.update((Path(__file__).parent.parent / "solids.py").read_bytes())
    return digest.hexdigest()[:16]
