"""Which images go into which split: deterministic selection under caps, or published split definitions."""

from __future__ import annotations

from dataclasses import dataclass

import datasets
import numpy as np

from ...concepts import ConceptGraph
from .attributes import (
    PARTITION_NAMES,
    SPLIT_PARTITIONS,
    SPLITS,
    CelebAAnnotations,
    ConceptTable,
    celeba_graph,
    celeba_space,
    concept_table,
)
from .config import CelebAConceptsConfig


@dataclass(frozen=True)
class SplitRow:
    """One selected image: its id, concept tuple string and level."""

    image_id: str
    concepts: str
    level: int


def select_split_definitions(
    table: ConceptTable,
    graph: ConceptGraph,
    caps: dict[str, int],
    seed: int = 0,
) -> dict[str, list[SplitRow]]:
    """Pick the images of every split (rows sorted by class, then image id) under per-class ``caps``.

    ``caps`` maps each split of :data:`SPLITS` to its per-class cap. Raises ``ValueError`` when a requested class
    has no image in the partition that feeds a split.
    """
    space = graph.space
    ids = np.asarray(table.image_ids, dtype=object)
    class_index = {c: i for i, c in enumerate(space.all_classes())}
    codes = np.asarray([class_index[tuple(c)] for c in table.concepts.tolist()], dtype=np.int64)
    definitions: dict[str, list[SplitRow]] = {}
    for split_index, split in enumerate(SPLITS):
        partition = SPLIT_PARTITIONS[split]
        classes = graph.training_classes if split == "train" else graph.nodes
        rows: list[SplitRow] = []
        for concept in sorted(classes):
            candidates = ids[(table.partitions == partition) & (codes == class_index[concept])]
            if len(candidates) == 0:
                raise ValueError(
                    f"CelebA class {space.format(concept)} {space.describe(concept)} has no images in official "
                    f"partition {partition} ({PARTITION_NAMES[partition]}), which feeds split {split!r}"
                )
            cap = caps[split]
            if len(candidates) > cap:
                rng = np.random.default_rng([seed, split_index, class_index[concept]])
                candidates = np.sort(candidates[rng.choice(len(candidates), size=cap, replace=False)])
            level = graph.level(concept)
            rows.extend(SplitRow(str(i), space.format(concept), level) for i in candidates)
        definitions[split] = rows
    return definitions


def definitions_from_dataset(published: datasets.DatasetDict) -> dict[str, list[SplitRow]]:
    """Split rows from published definitions (columns ``image_id``, ``concepts``, ``level``)."""
    missing = [s for s in SPLITS if s not in published]
    if missing:
        raise ValueError(f"published split definitions lack the splits {missing}; found {list(published)}")
    return {
        split: [
            SplitRow(i, c, int(lv))
            for i, c, lv in zip(
                published[split]["image_id"], published[split]["concepts"], published[split]["level"], strict=True
            )
        ]
        for split in SPLITS
    }


def check_definitions_against(definitions: dict[str, list[SplitRow]], table: ConceptTable) -> ConceptGraph:
    """Check that every defined image exists locally with the same concepts and levels; return the graph."""
    space = celeba_space()
    local = {i: space.format(c) for i, c in zip(table.image_ids, table.concepts.tolist(), strict=True)}
    absent = sorted({r.image_id for rows in definitions.values() for r in rows if r.image_id not in local})
    if absent:
        raise ValueError(f"{len(absent)} images of the split definitions are missing locally, e.g. {absent[:3]}")
    mismatched = [r for rows in definitions.values() for r in rows if local[r.image_id] != r.concepts]
    if mismatched:
        r = mismatched[0]
        raise ValueError(
            f"{len(mismatched)} images have other concepts locally than in the split definitions, e.g. "
            f"{r.image_id}: {local[r.image_id]} locally vs {r.concepts}"
        )
    graph = celeba_graph(sorted({r.concepts for r in definitions["train"]}))
    wrong = [r for rows in definitions.values() for r in rows if graph.level(r.concepts) != r.level]
    if wrong:
        raise ValueError(f"split definitions give level {wrong[0].level} to class {wrong[0].concepts}")
    return graph


def split_definitions_for(
    config: CelebAConceptsConfig, annotations: CelebAAnnotations
) -> tuple[dict[str, list[SplitRow]], ConceptTable]:
    """The split rows a config asks for: selected under its caps, or its published ``split_definitions``."""
    table = concept_table(annotations)
    if config.split_definitions is None:
        graph = celeba_graph(config.training_classes)
        return select_split_definitions(table, graph, config.caps, config.seed), table
    published = datasets.load_dataset(config.split_definitions, config.split_definitions_config)
    definitions = definitions_from_dataset(published)
    check_definitions_against(definitions, table)
    return definitions, table


