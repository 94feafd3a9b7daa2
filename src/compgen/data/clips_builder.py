"""A Hugging Face ``datasets`` builder for concept-graph clips: compgen's shapes in time (:mod:`compgen.clips`).

A config names its training classes over the clip space (shape, time of day, turn) by one of the H32 splits'
training sets (``split_preset="H32-train1"``: the star 000, 001, 010, 100) or by ``training_classes``, and renders
``train`` (the training classes), ``test`` (every class, for evaluation) and ``tokenizer`` (every class, labels
unused: a frame tokenizer's training clips). Each row holds ``frames``, a list of
PNG frames (exact: what was rendered is what loads), its ``concepts``, ``level``, one ``ClassLabel`` per variable
and the per-clip values that drew it (``background_rgb``, ``object_rgb``, ``object_radius``, ``turn_rate``,
``trajectory``). A clip's frames load as a list of ``PIL.Image`` (what ``diffusers.utils.export_to_gif`` and
video pipelines take), or as one ``(T, H, W, 3)`` array with ``with_format("numpy")``::

    from compgen.data.clips_builder import build_clips_dataset

    clips = build_clips_dataset("clips-h32-train1")
    frames = clips["test"].with_format("numpy")[0]["frames"]   # (8, 32, 32, 3) uint8
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import datasets
import numpy as np

from .. import clips as clips_module
from .. import concepts as concepts_module
from .. import shapes as shapes_module
from ..clips import CLIP_SPACE, ClipConfig, render_clips
from ..concepts import ConceptGraph, get_split_preset
from .concept_graph_builder import builder_arguments
from .concept_graph_config import TOKENIZER_SPLIT
from .png import encode_png

DATASET_NAME = "concept_graph_clips"
VERSION = datasets.Version("1.0.0")
CLIP_SPLITS = ("train", "test", TOKENIZER_SPLIT)
"""``train`` (the training classes), ``test`` (every class, for evaluation) and ``tokenizer`` (every class, labels
unused: a frame tokenizer's images, as the shapes' tokenizer split; Paper B's question is then the generator's
alone)."""
_RENDER_CHUNK = 256  # clips per render call; part of the random-stream layout


@dataclasses.dataclass
class ConceptGraphClipsConfig(datasets.BuilderConfig):
    """A concept-graph split of the clips: its training classes, clip counts and how clips are drawn."""

    split_preset: str | None = "H32-train1"
    """An H32 split whose training classes (class strings) the clip space takes over; or give ``training_classes``."""
    training_classes: tuple[str, ...] | None = None
    clips_per_class: int = 500
    test_clips_per_class: int = 50
    tokenizer_clips_per_class: int = 125
    num_frames: int = 8
    image_size: int = 32
    seed: int = 0

    def validate(self) -> None:
        """Raise ``ValueError`` naming the field for a config that cannot be built."""
        if (self.split_preset is None) == (self.training_classes is None):
            raise ValueError("give a clip config either split_preset or training_classes")
        if self.split_preset is not None and not self.split_preset.startswith("H32-"):
            raise ValueError(f"split_preset must name an H32 split (its training classes over the clip space), got "
                             f"{self.split_preset!r}")
        for name in ("clips_per_class", "test_clips_per_class", "tokenizer_clips_per_class"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 1:
                raise ValueError(f"{name} must be a positive integer, got {getattr(self, name)!r}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:  # as the shapes configs
            raise ValueError(f"seed must be a non-negative int, got {self.seed!r}")
        ClipConfig(num_frames=self.num_frames, image_size=self.image_size)  # checked by their owner
        _ = self.graph  # unknown or repeated classes are refused here

    @property
    def clip_config(self) -> ClipConfig:
        return ClipConfig(num_frames=self.num_frames, image_size=self.image_size)

    @property
    def graph(self) -> ConceptGraph:
        classes = (get_split_preset(self.split_preset).training_classes if self.split_preset is not None
                   else tuple(self.training_classes))
        return ConceptGraph(CLIP_SPACE, classes)


class ConceptGraphClips(datasets.GeneratorBasedBuilder):
    """Renders concept-graph splits of the clips (:mod:`compgen.clips`) as a ``datasets`` builder."""

    VERSION = VERSION
    BUILDER_CONFIG_CLASS = ConceptGraphClipsConfig
    BUILDER_CONFIGS = [
        ConceptGraphClipsConfig(name="clips-h32-train1", version=VERSION, split_preset="H32-train1",
                                description="The star split in time: train 000, 001, 010, 100 (circle / day / "
                                            "right turn and each one change); 011, 101, 110 are level 1, 111 level 2."),
        ConceptGraphClipsConfig(name="clips-h32-train2", version=VERSION, split_preset="H32-train2",
                                description="H32-train2's training set over the clip space (000, 001, 011, 101): "
                                            "110, a night triangle turning right, is level 2."),
    ]
    DEFAULT_CONFIG_NAME = "clips-h32-train1"
    config: ConceptGraphClipsConfig

    def __init__(self, *args: Any, dataset_name: str | None = None, hash: str | None = None, **kwargs: Any):
        super().__init__(*args, dataset_name=dataset_name or DATASET_NAME, hash=hash or _code_hash(), **kwargs)

    def _create_builder_config(self, config_name: str | None = None, custom_features: Any = None,
                               config_id: str | None = None, **kwargs: Any) -> tuple[ConceptGraphClipsConfig, str]:
        # a name outside BUILDER_CONFIGS is a config of its own, built from the keyword arguments alone
        if config_name is None or config_name in self.builder_configs:
            return super()._create_builder_config(config_name, custom_features, config_id, **kwargs)
        kwargs.setdefault("version", self.VERSION)
        config = self.BUILDER_CONFIG_CLASS(name=config_name, **kwargs)
        return config, config_id or config.create_config_id(kwargs, custom_features=custom_features)

    def _info(self) -> datasets.DatasetInfo:
        self.config.validate()
        return datasets.DatasetInfo(description=self.config.description or "", features=clip_features())

    def _split_generators(self, dl_manager: Any) -> list[datasets.SplitGenerator]:
        return [datasets.SplitGenerator(name=split, gen_kwargs={"split": split}) for split in CLIP_SPLITS]

    def _generate_examples(self, split: str) -> Iterator[tuple[int, dict[str, Any]]]:
        config, graph = self.config, self.config.graph
        classes = graph.training_classes if split == "train" else CLIP_SPACE.all_classes()
        count = {"train": config.clips_per_class, "test": config.test_clips_per_class,
                 TOKENIZER_SPLIT: config.tokenizer_clips_per_class}[split]
        key = 0
        for concept in classes:
            parsed = CLIP_SPACE.parse(concept)
            class_index = int(np.ravel_multi_index(parsed, CLIP_SPACE.cardinalities))
            for chunk, start in enumerate(range(0, count, _RENDER_CHUNK)):
                # one random stream per (seed, split, class, chunk): other classes' counts never shift it
                stream = np.random.SeedSequence(config.seed, spawn_key=(CLIP_SPLITS.index(split), class_index, chunk))
                batch = render_clips(np.tile(np.asarray(parsed), (min(_RENDER_CHUNK, count - start), 1)),
                                     seed=np.random.Generator(np.random.PCG64(stream)), config=config.clip_config)
                for i in range(len(batch)):
                    yield key, {
                        "frames": [{"bytes": png, "path": None} for png in encode_png(batch.frames[i])],
                        "concepts": CLIP_SPACE.format(parsed),
                        "level": graph.level(parsed),
                        **dict(zip(CLIP_SPACE.names, parsed, strict=True)),
                        "background_rgb": batch.background_rgb[i].tolist(),
                        "object_rgb": batch.object_rgb[i].tolist(),
                        "object_radius": float(batch.object_radius[i]),
                        "turn_rate": float(batch.turn_rate[i]),
                        "trajectory": batch.trajectory[i].tolist(),
                    }
                    key += 1


def clip_features() -> datasets.Features:
    """The columns of a clips dataset: the frames, the class and its level, one ``ClassLabel`` per variable, and the
    per-clip values."""
    floats = datasets.Value("float32")
    return datasets.Features({
        "frames": datasets.List(datasets.Image()),
        "concepts": datasets.Value("string"),
        "level": datasets.Value("int32"),
        **{variable.name: datasets.ClassLabel(names=list(variable.values)) for variable in CLIP_SPACE.variables},
        "background_rgb": datasets.List(floats, length=3),
        "object_rgb": datasets.List(floats, length=3),
        "object_radius": floats,
        "turn_rate": floats,
        "trajectory": datasets.List(datasets.List(floats, length=2)),
    })


def build_clips_dataset(config_name_or_config: str | ConceptGraphClipsConfig = "clips-h32-train1",
                        cache_dir: str | None = None, **overrides: Any) -> datasets.DatasetDict:
    """Build (or load from the cache) the ``train`` and ``test`` splits of a clips config: a predefined name, a new
    name with ``overrides`` defining it (``split_preset="H32-train3", clips_per_class=100``), or a config object."""
    name, kwargs = builder_arguments(config_name_or_config, ConceptGraphClipsConfig, overrides)
    builder = ConceptGraphClips(config_name=name, cache_dir=cache_dir, **kwargs)
    builder.download_and_prepare()
    return builder.as_dataset()


def _code_hash() -> str:
    """Hash of the code that determines the rows: the concept core, the renderers and this builder."""
    digest = hashlib.sha256()
    for module in (concepts_module, shapes_module, clips_module):
        digest.update(Path(module.__file__).read_bytes())
    digest.update(Path(__file__).read_bytes())
    digest.update((Path(__file__).parent / "png.py").read_bytes())
    return digest.hexdigest()[:16]
