"""The ``datasets`` builder of the CelebA concept splits (see :mod:`compgen.data.celeba`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence
from typing import Any

import datasets

from .attributes import celeba_space, logger
from .config import CelebAConceptsConfig
from .images import center_crop_resize, decode_image
from .selection import SplitRow, split_definitions_for
from .sources import ImageSource, open_celeba_source

CELEBA_DESCRIPTION = ("CelebA as a concept graph over (gender, smile, hair) (Okawa et al. 2023, section 4.2; Farid et "
                      "al. 2025): train / test / probe_train / probe_val splits of face images.")

def celeba_features() -> datasets.Features:
    """The columns of every CelebA concept split: the image, its id, its class and level, one ``ClassLabel`` per
    attribute, and no continuous value (faces carry binary labels only)."""
    features = {
        "image": datasets.Image(),
        "image_id": datasets.Value("string"),
        "concepts": datasets.Value("string"),
        "level": datasets.Value("int32"),
    }
    features.update({v.name: datasets.ClassLabel(names=list(v.values)) for v in celeba_space().variables})
    return datasets.Features(features)


class CelebAConcepts(datasets.GeneratorBasedBuilder):
    """CelebA as a concept graph: ``train`` / ``test`` / ``probe_train`` / ``probe_val`` splits of face images.

    Example::

        builder = CelebAConcepts(data_dir="/data/celeba", cache_dir="/tmp/hf")  # or parquet="flwrlabs/celeba"
        builder.download_and_prepare()
        splits = builder.as_dataset()

    After preparation, :attr:`report` holds the exclusion and skip counts that are also logged.
    """

    BUILDER_CONFIG_CLASS = CelebAConceptsConfig
    BUILDER_CONFIGS = [
        CelebAConceptsConfig(
            name="default",
            description="Paper B's split (train 000, 001, 010, 100; level 1 011, 101, 110; level 2 111), 64x64.",
        ),
        CelebAConceptsConfig(
            name="cpu",
            image_size=32,
            max_train_per_class=2_000,
            max_probe_train_per_class=1_000,
            description="The default split at 32x32 with smaller training caps, for CPU runs.",
        ),
    ]
    DEFAULT_CONFIG_NAME = "default"
    config: CelebAConceptsConfig

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("dataset_name", "celeba_concepts")
        super().__init__(*args, **kwargs)
        self.config.__post_init__()  # validate attributes overridden by keyword arguments
        self.report: dict[str, int] = {}

    def _info(self) -> datasets.DatasetInfo:
        return datasets.DatasetInfo(
            description=CELEBA_DESCRIPTION,
            features=celeba_features(),
            homepage="https://mmlab.ie.cuhk.edu.hk/projects/CelebA.html",
            license="CelebA: non-commercial research purposes only (see the CelebA release agreement)",
        )

    def _split_generators(self, dl_manager: Any) -> list[datasets.SplitGenerator]:
        annotations, reader = open_celeba_source(self.config)
        definitions, table = split_definitions_for(self.config, annotations)
        self.report.update(
            excluded_both_hair=table.num_excluded_both_hair, excluded_neither_hair=table.num_excluded_neither_hair
        )
        for split, rows in definitions.items():
            self.report[f"selected_{split}"] = len(rows)
        return [
            datasets.SplitGenerator(name=split, gen_kwargs={"rows": rows, "reader": reader, "split": split})
            for split, rows in definitions.items()
        ]

    def _generate_examples(self, rows: list[SplitRow], reader: ImageSource, split: str) -> Iterator[tuple[Any, dict]]:
        config = self.config
        space = celeba_space()
        by_id = {r.image_id: r for r in rows}
        skipped = 0
        index = 0
        for image_id, data in reader.read([r.image_id for r in rows]):
            try:
                image = decode_image(data, image_id)
            except ValueError:
                if config.on_bad_image == "raise":
                    raise
                skipped += 1
                continue
            row = by_id[image_id]
            example = {
                "image": center_crop_resize(image, config.image_size, config.crop_size),
                "image_id": image_id,
                "concepts": row.concepts,
                "level": row.level,
            }
            example.update(space.describe(row.concepts))
            yield datasets.builder.Key(0, index), example
            index += 1
        self.report[f"skipped_{split}"] = skipped
        if skipped:
            logger.warning("CelebA split %r: skipped %d images that could not be decoded", split, skipped)
        if index == 0:
            raise ValueError(f"CelebA split {split!r} is empty: all {len(rows)} selected images failed to decode")


def load_celeba_concepts(
    data_dir: str | None = None,
    parquet: str | Sequence[str] | None = None,
    config_name: str = "default",
    cache_dir: str | None = None,
    **config_kwargs: Any,
) -> datasets.DatasetDict:
    """Build (or reuse from ``cache_dir``) the CelebA concept splits and return them as a ``DatasetDict``."""
    if isinstance(parquet, list):
        parquet = tuple(parquet)
    builder = CelebAConcepts(
        config_name=config_name, data_dir=data_dir, parquet=parquet, cache_dir=cache_dir, **config_kwargs
    )
    builder.download_and_prepare()
    return builder.as_dataset()


def config_summary(config: CelebAConceptsConfig) -> dict[str, Any]:
    """The selection-relevant fields of a config (for dataset cards and logs)."""
    keep = ("training_classes", "max_train_per_class", "max_test_per_class", "max_probe_train_per_class",
            "max_probe_val_per_class", "seed")  # fmt: skip
    return {f.name: getattr(config, f.name) for f in dataclasses.fields(config) if f.name in keep}
