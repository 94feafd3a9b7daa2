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
from ..concepts import ConceptSpace
from ..shapes import render_classes
from .concept_graph_config import SPLITS, ConceptGraphShapesConfig
from .concept_graph_config import TOKENIZER_SPLIT as TOKENIZER_SPLIT  # re-exported: where users import it from
from .png import encode_png

DATASET_NAME = "concept_graph_shapes"
VERSION = datasets.Version("1.0.0")
_RENDER_CHUNK = 1024  # images per render call; part of the random-stream layout, so changing it changes images


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
        *(
            ConceptGraphShapesConfig(
                name=f"okawa-h32-train{number}-sizes-touching", version=VERSION, split_preset=f"H32-train{number}",
                images_per_class=1250, size_ranges="touching",
                description=f"Okawa et al. 2023 split H32-train{number} with sizes drawn as Paper A's text says (the "
                "size axis cut into two touching halves, not two ranges with a gap); the README's quick start "
                "trains on H32-train1's (results/paper-a-sizes/).",
            )
            for number in (1, 2, 3, 4)
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
    name, kwargs = builder_arguments(config_name_or_config, ConceptGraphShapesConfig, overrides)
    return ConceptGraphShapes(config_name=name, cache_dir=cache_dir, **kwargs)


def builder_arguments(config_name_or_config: str | datasets.BuilderConfig, config_class: type[datasets.BuilderConfig],
                      overrides: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """``(config name, keyword arguments)`` for a builder, from a config name or a ``config_class`` object (its fields
    that differ from the defaults) with ``overrides`` on top."""
    if isinstance(config_name_or_config, config_class):
        config = config_name_or_config
        defaults = config_class(name=config.name)
        kwargs = {field.name: getattr(config, field.name) for field in dataclasses.fields(config_class)
                  if field.name != "name" and getattr(config, field.name) != getattr(defaults, field.name)}
        name = config.name
    elif isinstance(config_name_or_config, str):
        name, kwargs = config_name_or_config, {}
    else:
        raise ValueError(f"expected a config name or a {config_class.__name__}, got {config_name_or_config!r}")
    kwargs.update(overrides)
    if isinstance(kwargs.get("training_classes"), list):
        kwargs["training_classes"] = tuple(kwargs["training_classes"])
    return name, kwargs


def _code_hash() -> str:
    """Hash of the code that determines the rows: the concept core, the renderer and this builder."""
    digest = hashlib.sha256()
    for module in (concepts_module, shapes_module):
        digest.update(Path(module.__file__).read_bytes())
    digest.update(Path(__file__).read_bytes())
    digest.update((Path(__file__).parent / "concept_graph_config.py").read_bytes())
    digest.update((Path(__file__).parent / "paper_a_files.py").read_bytes())
    digest.update((Path(__file__).parent / "png.py").read_bytes())
    digest.update((Path(__file__).parent.parent / "solids.py").read_bytes())
    return digest.hexdigest()[:16]
