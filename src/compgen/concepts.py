"""Concept graphs (Okawa et al. 2023, section 3): concept variables, classes, distance, graph and levels.

A *concept class* is a tuple of value indices, one per concept variable, written in the paper's string
form (``"101"``: shape 1, color 0, size 1). Its *level* relative to a set of training classes is its
minimum concept distance (Hamming distance) to any of them: 0 for a training class, 1, 2, ... otherwise.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

ConceptClass = tuple[int, ...]
"""A concept class: one value index per concept variable, in the space's variable order."""

ConceptLike = str | Sequence[int]
"""Anything :meth:`ConceptSpace.parse` accepts: ``"101"`` or ``(1, 0, 1)``."""


@dataclass(frozen=True)
class ConceptVariable:
    """A named concept variable with its ordered, named values (value ``i`` is written as digit ``i``)."""

    name: str
    values: tuple[str, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "values", tuple(self.values))
        if not self.name:
            raise ValueError("a concept variable needs a non-empty name")
        if len(self.values) < 2:
            raise ValueError(f"concept variable {self.name!r} needs at least 2 values, got {self.values}")
        if len(self.values) > 10:
            raise ValueError(
                f"concept variable {self.name!r} has {len(self.values)} values; the tuple string form "
                "writes one digit per variable, so at most 10 values are supported"
            )
        if len(set(self.values)) != len(self.values):
            raise ValueError(f"concept variable {self.name!r} has duplicate values: {self.values}")

    @property
    def num_values(self) -> int:
        return len(self.values)

    def index(self, value: str | int) -> int:
        """Index of a value given by name or index; raises ``ValueError`` naming the variable otherwise."""
        if isinstance(value, str):
            if value not in self.values:
                raise ValueError(
                    f"unknown value {value!r} for concept variable {self.name!r}; known values: {self.values}"
                )
            return self.values.index(value)
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"value for concept variable {self.name!r} must be an int or a name, got {value!r}")
        if not 0 <= value < self.num_values:
            raise ValueError(
                f"value {value} is out of range for concept variable {self.name!r} "
                f"(0..{self.num_values - 1}: {', '.join(self.values)})"
            )
        return value


@dataclass(frozen=True)
class ConceptSpace:
    """An ordered list of concept variables; every concept class of the space is one value per variable."""

    variables: tuple[ConceptVariable, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "variables", tuple(self.variables))
        if not self.variables:
            raise ValueError("a concept space needs at least one concept variable")
        names = [v.name for v in self.variables]
        if len(set(names)) != len(names):
            raise ValueError(f"concept variable names must be unique, got {names}")

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(v.name for v in self.variables)

    @property
    def num_variables(self) -> int:
        return len(self.variables)

    @property
    def cardinalities(self) -> tuple[int, ...]:
        return tuple(v.num_values for v in self.variables)

    def __len__(self) -> int:
        return self.num_variables

    def variable(self, name: str) -> ConceptVariable:
        for v in self.variables:
            if v.name == name:
                return v
        raise ValueError(f"unknown concept variable {name!r}; this space has {self.names}")

    def parse(self, concept: ConceptLike | dict[str, str | int]) -> ConceptClass:
        """Validate and convert ``"101"``, ``(1, 0, 1)`` or ``{"shape": "triangle", ...}`` to a class tuple."""
        if isinstance(concept, dict):
            unknown = set(concept) - set(self.names)
            missing = [n for n in self.names if n not in concept]
            if unknown:
                raise ValueError(f"unknown concept variables {sorted(unknown)}; this space has {self.names}")
            if missing:
                raise ValueError(f"concept class is missing variables {missing}")
            return tuple(v.index(concept[v.name]) for v in self.variables)
        if isinstance(concept, str):
            text = concept.strip()
            if not text.isdigit() or not text.isascii():
                raise ValueError(
                    f"concept class string {concept!r} must contain only digits, one per variable {self.names}"
                )
            values: Sequence[Any] = [int(ch) for ch in text]
        else:
            try:
                values = list(concept)
            except TypeError:
                raise ValueError(f"cannot interpret {concept!r} as a concept class") from None
            values = [int(v) if _is_integral(v) else v for v in values]
        if len(values) != self.num_variables:
            raise ValueError(
                f"concept class {concept!r} has {len(values)} values but the space has "
                f"{self.num_variables} variables {self.names}"
            )
        return tuple(var.index(val) for var, val in zip(self.variables, values, strict=True))

    def format(self, concept: ConceptLike) -> str:
        """The paper's string form of a class, e.g. ``"101"``."""
        return "".join(str(i) for i in self.parse(concept))

    def describe(self, concept: ConceptLike) -> dict[str, str]:
        """Value names of a class, e.g. ``{"shape": "triangle", "color": "red", "size": "small"}``."""
        return {v.name: v.values[i] for v, i in zip(self.variables, self.parse(concept), strict=True)}

    def all_classes(self) -> list[ConceptClass]:
        """Every class of the space in lexicographic order."""
        return list(itertools.product(*(range(n) for n in self.cardinalities)))

    def to_dict(self) -> dict[str, list[str]]:
        """JSON-friendly form (ordered ``{variable: [values]}``), e.g. for model configs."""
        return {v.name: list(v.values) for v in self.variables}

    def to_pairs(self) -> list[list[Any]]:
        """Ordered ``[[variable, [values]], ...]`` pairs: the form model configs store.

        diffusers writes configs with sorted keys, which would reorder a :meth:`to_dict` mapping and permute the
        tuple digits on reload; a list of pairs keeps the variable order.
        """
        return [[v.name, list(v.values)] for v in self.variables]

    @classmethod
    def from_dict(cls, data: ConceptSpaceLike) -> ConceptSpace:
        """Inverse of :meth:`to_dict` and :meth:`to_pairs`; a ``ConceptSpace`` is returned as it is.

        Accepts every :data:`ConceptSpaceLike` form, so callers need no ``isinstance`` check of their own.
        """
        if isinstance(data, ConceptSpace):
            return data
        if isinstance(data, str) or not isinstance(data, Mapping | Sequence):
            raise ValueError(
                f"cannot read a concept space from {data!r}; pass a ConceptSpace, {{variable: [values]}} "
                "or [[variable, [values]], ...]"
            )
        items = data.items() if isinstance(data, Mapping) else data
        variables = []
        for item in items:
            if isinstance(item, str) or not isinstance(item, Sequence) or len(item) != 2:
                raise ValueError(f"a concept variable must be a [name, [values]] pair, got {item!r}")
            name, values = item
            if isinstance(values, str):
                raise ValueError(f"the values of concept variable {name!r} must be a list of names, got {values!r}")
            variables.append(ConceptVariable(str(name), tuple(values)))
        return cls(tuple(variables))


ConceptSpaceLike = ConceptSpace | Mapping[str, Sequence[str]] | Sequence[Sequence[Any]]
"""Anything :meth:`ConceptSpace.from_dict` reads: a ``ConceptSpace``, ``{variable: [values]}`` or the ordered
``[[variable, [values]], ...]`` pairs that model configs store."""


def _is_integral(value: Any) -> bool:
    try:
        return not isinstance(value, bool | str) and int(value) == value
    except (TypeError, ValueError):
        return False


def concept_distance(a: Sequence[int], b: Sequence[int]) -> int:
    """Concept distance (Hamming distance) between two concept classes of the same space."""
    if len(a) != len(b):
        raise ValueError(f"concept classes {tuple(a)} and {tuple(b)} have different lengths")
    return sum(int(x) != int(y) for x, y in zip(a, b, strict=True))


@dataclass(frozen=True)
class ConceptGraph:
    """The concept graph of a space (nodes = classes, edges = distance 1) with a set of training classes."""

    space: ConceptSpace
    training_classes: tuple[ConceptClass, ...]
    nodes: tuple[ConceptClass, ...] = field(default=())

    def __init__(
        self,
        space: ConceptSpace,
        training_classes: Iterable[ConceptLike],
        nodes: Iterable[ConceptLike] | None = None,
    ) -> None:
        train = tuple(dict.fromkeys(space.parse(c) for c in training_classes))
        if not train:
            raise ValueError("a concept graph needs at least one training class")
        all_nodes = tuple(space.parse(c) for c in nodes) if nodes is not None else tuple(space.all_classes())
        missing = [space.format(c) for c in train if c not in all_nodes]
        if missing:
            raise ValueError(f"training classes {missing} are not nodes of the graph")
        object.__setattr__(self, "space", space)
        object.__setattr__(self, "training_classes", train)
        object.__setattr__(self, "nodes", all_nodes)

    @property
    def edges(self) -> list[tuple[ConceptClass, ConceptClass]]:
        """Pairs of nodes at concept distance 1 (each pair once, in node order)."""
        return [
            (a, b)
            for i, a in enumerate(self.nodes)
            for b in self.nodes[i + 1 :]
            if concept_distance(a, b) == 1
        ]

    def level(self, concept: ConceptLike) -> int:
        """Minimum concept distance from ``concept`` to the training classes (0 for a training class)."""
        parsed = self.space.parse(concept)
        return min(concept_distance(parsed, t) for t in self.training_classes)

    @property
    def levels(self) -> dict[str, int]:
        """``{class string: level}`` for every node, in node order."""
        return {self.space.format(c): self.level(c) for c in self.nodes}

    @property
    def max_level(self) -> int:
        return max(self.levels.values())

    def classes_at_level(self, level: int) -> list[ConceptClass]:
        return [c for c in self.nodes if self.level(c) == level]

    @property
    def held_out_classes(self) -> list[ConceptClass]:
        return [c for c in self.nodes if c not in self.training_classes]

    def format(self, concept: ConceptLike) -> str:
        return self.space.format(concept)


# --- the shapes concept space and the papers' split presets ------------------------------------------------

SHAPES = ConceptVariable("shape", ("circle", "triangle", "square"))
COLORS = ConceptVariable("color", ("red", "blue", "green"))
SIZES = ConceptVariable("size", ("large", "small"))
BACKGROUNDS = ConceptVariable("background", ("white", "black"))


def shapes_space(num_shapes: int = 2, num_colors: int = 2, background: bool = False) -> ConceptSpace:
    """The synthetic shapes space: (shape, color, size[, background]) with the first values of each variable.

    ``shapes_space()`` is Paper A's 2x2x2 cube ("000" = large red circle); ``num_shapes=3`` adds squares,
    ``num_colors=3`` adds green and ``background=True`` adds a 4th variable (white / black background).
    """
    if not 2 <= num_shapes <= len(SHAPES.values):
        raise ValueError(f"num_shapes must be in 2..{len(SHAPES.values)}, got {num_shapes}")
    if not 2 <= num_colors <= len(COLORS.values):
        raise ValueError(f"num_colors must be in 2..{len(COLORS.values)}, got {num_colors}")
    variables = [
        ConceptVariable("shape", SHAPES.values[:num_shapes]),
        ConceptVariable("color", COLORS.values[:num_colors]),
        SIZES,
    ]
    if background:
        variables.append(BACKGROUNDS)
    return ConceptSpace(tuple(variables))


@dataclass(frozen=True)
class SplitPreset:
    """A named training split from the papers: a concept space and its training classes."""

    name: str
    space: ConceptSpace
    training_classes: tuple[str, ...]
    description: str

    def graph(self) -> ConceptGraph:
        return ConceptGraph(self.space, self.training_classes)


SPLIT_PRESETS: dict[str, SplitPreset] = {
    preset.name: preset
    for preset in (
        SplitPreset(
            "H32-train1",
            shapes_space(),
            ("000", "001", "010", "100"),
            "Okawa et al. 2023 headline split: the origin and its three neighbours; "
            "011, 101, 110 are level 1 and 111 is level 2.",
        ),
        *(
            SplitPreset(
                f"H32-train{number}",
                shapes_space(),
                training,
                f"Okawa et al. 2023 split H32-train{number} (its public code's config_category.json): {note}.",
            )
            for number, training, note in (
                (2, ("000", "001", "011", "101"), "the star around 001; 110 is level 2"),
                (3, ("000", "010", "011", "110"), "the star around 010; 101 is level 2"),
                (4, ("000", "100", "101", "110"), "the star around 100; 011 is level 2"),
                (5, ("000", "010", "100", "111"), "every held-out class is level 1 (the same set as fail1)"),
                (6, ("001", "011", "101", "110"), "every held-out class is level 1"),
                (7, ("000", "010", "101", "110"), "every held-out class is level 1"),
                (8, ("000", "011", "100", "110"), "every held-out class is level 1"),
                (9, ("000", "011", "101", "110"), "every held-out class is level 1"),
            )
        ),
        SplitPreset(
            "fail1",
            shapes_space(),
            ("000", "100", "001", "111"),
            "Okawa et al. 2023 adversarial split (Fig. 9): color never changes alone in training.",
        ),
        SplitPreset(
            "H42-train1",
            shapes_space(background=True),
            ("0000", "1000", "0100", "0010", "0001"),
            "The 4-cube with background color (Okawa et al. 2023 Fig. 16): the origin and its four "
            "neighbours, giving levels 1, 2 and 3.",
        ),
    )
}


def get_split_preset(name: str) -> SplitPreset:
    """Look up a preset by name (``"H32-train1"`` to ``"H32-train9"``, ``"fail1"``, ``"H42-train1"``)."""
    if name not in SPLIT_PRESETS:
        raise ValueError(f"unknown split preset {name!r}; available: {sorted(SPLIT_PRESETS)}")
    return SPLIT_PRESETS[name]
