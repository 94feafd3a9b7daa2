"""The options of the CelebA concept splits (:class:`CelebAConceptsConfig`): source, training classes, sizes, caps."""

from __future__ import annotations

from dataclasses import dataclass

import datasets

from .attributes import BAD_IMAGE_ACTIONS, DEFAULT_TRAINING_CLASSES, celeba_graph, celeba_space


@dataclass
class CelebAConceptsConfig(datasets.BuilderConfig):
    """Configuration of :class:`CelebAConcepts`.

    Give the source as ``data_dir`` (official tree) or ``parquet`` (a Parquet file, directory or Hub id with
    ``parquet_config`` as its config name), or ``split_definitions`` (published definitions) plus either source.
    """

    training_classes: tuple[str, ...] = DEFAULT_TRAINING_CLASSES
    image_size: int = 64
    crop_size: int | None = None
    max_train_per_class: int = 10_000
    max_test_per_class: int = 100
    max_probe_train_per_class: int = 5_000
    max_probe_val_per_class: int = 500
    seed: int = 0
    on_bad_image: str = "raise"
    parquet: str | tuple[str, ...] | None = None
    parquet_config: str | None = None
    id_column: str | None = None
    partition_file: str | None = None
    split_definitions: str | None = None
    split_definitions_config: str | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        self.training_classes = tuple(celeba_space().format(c) for c in self.training_classes)
        celeba_graph(self.training_classes)
        if isinstance(self.parquet, list):
            self.parquet = tuple(self.parquet)
        if self.image_size < 8:
            raise ValueError(f"image_size must be at least 8, got {self.image_size}")
        for name in ("max_train_per_class", "max_test_per_class", "max_probe_train_per_class",
                     "max_probe_val_per_class"):  # fmt: skip
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")
        if self.on_bad_image not in BAD_IMAGE_ACTIONS:
            raise ValueError(f"on_bad_image must be one of {BAD_IMAGE_ACTIONS}, got {self.on_bad_image!r}")

    @property
    def caps(self) -> dict[str, int]:
        return {
            "train": self.max_train_per_class,
            "test": self.max_test_per_class,
            "probe_train": self.max_probe_train_per_class,
            "probe_val": self.max_probe_val_per_class,
        }
