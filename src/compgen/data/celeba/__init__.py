"""CelebA concept-graph splits (Okawa et al. 2023 section 4.2, Farid et al. 2025): a ``datasets`` builder.

Three binary concepts, tuple order (gender, smile, hair):

* gender: 0 female, 1 male (attribute ``Male``)
* smile: 0 smiling, 1 not smiling (attribute ``Smiling``)
* hair: 0 black, 1 blond (attributes ``Black_Hair`` / ``Blond_Hair``; images with both or neither are excluded)

Sources: the official download (``img_align_celeba/``, ``list_attr_celeba.txt``, ``list_eval_partition.txt``,
given as ``data_dir``) or a Parquet dataset with the 40 attributes as columns (``parquet``: a local file,
directory or Hub dataset id; bool, -1/1 or 0/1 values are detected).

Splits and the official partition (0 train, 1 val, 2 test) that feeds each:

* ``train``: training classes only, partition 0, at most ``max_train_per_class`` images per class.
* ``probe_train``: every class, partition 0, at most ``max_probe_train_per_class`` per class (attribute probes may
  see every composition; the generator may not).
* ``probe_val``: every class, partition 1, at most ``max_probe_val_per_class`` per class.
* ``test``: every class, partition 2, at most ``max_test_per_class`` per class (real references for evaluation).

Selection under a cap is deterministic: candidates are sorted by image id and drawn with a generator seeded by
(seed, split, class), so two copies of CelebA with the same ids give the same splits.

The package's modules, one job each: :mod:`.attributes` (attribute tables, concepts, exclusions),
:mod:`.sources` (the official tree and Parquet mirrors behind one :class:`~.sources.ImageSource` interface),
:mod:`.images` (decoding and cropping), :mod:`.config` (the options), :mod:`.selection` (which image goes into which
split), :mod:`.builder` (the ``datasets`` builder) and :mod:`.publish` (publishing and rebuilding split definitions
without images).
"""

from .attributes import (
    BAD_IMAGE_ACTIONS,
    CELEBA_ATTRIBUTES,
    CONCEPT_ATTRIBUTES,
    DEFAULT_TRAINING_CLASSES,
    SPLITS,
    CelebAAnnotations,
    ConceptTable,
    celeba_graph,
    celeba_space,
    concept_table,
    normalize_image_id,
    read_attribute_table,
    read_official_annotations,
    read_partition_file,
)
from .builder import CelebAConcepts, config_summary, load_celeba_concepts
from .config import CelebAConceptsConfig
from .images import center_crop_resize, decode_image
from .selection import SplitRow, select_split_definitions
from .sources import FileImages, ImageSource, ParquetImages, open_celeba_source, read_parquet_annotations

__all__ = [
    "BAD_IMAGE_ACTIONS",
    "CELEBA_ATTRIBUTES",
    "CONCEPT_ATTRIBUTES",
    "DEFAULT_TRAINING_CLASSES",
    "SPLITS",
    "CelebAAnnotations",
    "CelebAConcepts",
    "CelebAConceptsConfig",
    "ConceptTable",
    "FileImages",
    "ImageSource",
    "ParquetImages",
    "SplitRow",
    "celeba_graph",
    "celeba_space",
    "center_crop_resize",
    "concept_table",
    "config_summary",
    "decode_image",
    "load_celeba_concepts",
    "normalize_image_id",
    "open_celeba_source",
    "read_attribute_table",
    "read_official_annotations",
    "read_parquet_annotations",
    "read_partition_file",
    "select_split_definitions",
]
