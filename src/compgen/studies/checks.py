"""Checks of a study file's values, each naming the key it concerns: YAML without repeated keys, types, non-empty
lists without repeats, flags, and the datasets a study defines."""

from __future__ import annotations

import types
import typing
from typing import Any

import yaml

_KINDS = {str: "a string", int: "an integer", float: "a number", bool: "true or false", dict: "a mapping",
          list: "a list", type(None): "null"}


class UniqueKeyLoader(yaml.SafeLoader):
    """YAML that refuses a key given twice in one mapping (plain YAML keeps the last one silently)."""

    def construct_mapping(self, node, deep=False):
        seen: dict[Any, Any] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    f"while reading the mapping {node.start_mark}", None,
                    f"the key {key!r} is given twice (first {seen[key]}); YAML would keep only the last",
                    key_node.start_mark)
            seen[key] = key_node.start_mark
        return super().construct_mapping(node, deep=deep)


def expect(value: Any, kinds: type | tuple[type, ...], where: str) -> None:
    """Raise ``ValueError`` naming ``where`` unless ``value`` is of ``kinds`` (``true`` is no number here)."""
    kinds = kinds if isinstance(kinds, tuple) else (kinds,)
    if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
        named = [kind for kind in kinds if kind is not int or float not in kinds]  # "a number" covers integers
        expected = " or ".join(_KINDS.get(kind, kind.__name__) for kind in named)
        raise ValueError(f"{where} must be {expected}, got {value!r}")


def expect_list(value: Any, kinds: type | tuple[type, ...], where: str) -> None:
    """A non-empty list of ``kinds``, each once."""
    expect(value, list, where)
    if not value:
        raise ValueError(f"{where} is empty: the grid would have no cells")
    for item in value:
        expect(item, kinds, f"{where}: entry {item!r}")
    if all(isinstance(item, str | int) for item in value):
        expect_unique(value, where)


def expect_unique(values: list[Any], where: str) -> None:
    repeated = sorted({str(v) for v in values if values.count(v) > 1})
    if repeated:
        raise ValueError(f"{where}: {', '.join(repeated)} given more than once (two cells would share a directory)")


def expect_flags(flags: Any, where: str, reserved: dict[str, str]) -> None:
    """A mapping of flag names to strings, numbers or booleans, none of them one the study sets itself."""
    expect(flags, dict, where)
    for name, value in flags.items():
        expect(value, (str, int, float, bool, type(None)), f"{where}: {name}")
        if name in reserved or (name.startswith("no_") and name[3:] in reserved):
            raise ValueError(f"{where}: {name} is set by the study ({reserved.get(name, reserved.get(name[3:]))}); "
                             "remove it")


def check_definition(entry: dict[str, Any], where: str) -> None:
    """A dataset definition: known ``ConceptGraphShapesConfig`` keys, values of their types, a valid config."""
    from ..data.concept_graph_builder import ConceptGraphShapesConfig

    if not entry.get("name") or not isinstance(entry["name"], str):
        raise ValueError(f"{where}: a dataset defined in the study needs a name: {entry}")
    if entry["name"].strip(".") == "" or any(c in entry["name"] for c in "/\\"):
        raise ValueError(f"{where}: the name {entry['name']!r} would name the study's data/ directory itself or "
                         "another one; give a plain name (letters, digits, '-', '_')")
    hints = typing.get_type_hints(ConceptGraphShapesConfig)
    own = [name for name in ConceptGraphShapesConfig.__annotations__ if name in hints]
    unknown = sorted(set(entry) - set(own) - {"name", "description"})
    if unknown:
        raise ValueError(f"{where}: unknown dataset keys {unknown}; known: {sorted(own)}")
    for key in set(entry) & set(own):
        hint = hints[key]
        options = typing.get_args(hint) if isinstance(hint, types.UnionType) else (hint,)
        kinds = tuple(typing.get_origin(option) or option for option in options)
        kinds += (list,) if tuple in kinds else ()
        kinds += (int,) if float in kinds else ()
        expect(entry[key], kinds, f"{where}: {key}")
    try:
        config = ConceptGraphShapesConfig(**entry)
        config.graph  # noqa: B018 (checks the split against the space)
    except (TypeError, ValueError) as error:
        raise ValueError(f"{where}: {error}") from None
