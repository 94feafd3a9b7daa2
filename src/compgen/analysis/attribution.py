"""Decimals a results README quotes, held to the run or arm it quotes them for.

``results_folder.unbacked_numbers`` asks only that a number be somewhere in the folder's JSON; a number moved from one
arm's row to another's passes it. Here each table row and each sentence is read for the runs and arms it names: a
run's or arm's name (or a distinctive part of a run's name, ``shaded-centred`` in ``unet__full__shaded-centred__seed0``)
and its seeds (``seed 2``, ``seeds 0, 3 and 5``, ``seeds 0-6``, the first cell of a table whose first column is
``seed``). A decimal in such a unit that the data give only under *other* entries of the same collection (``runs``,
``arms``, ``cells``, ``variants``) is misattributed. Numbers found outside those collections, or in a collection the
unit names nothing of (an arm's mean beside its seeds' runs), stay allowed: the check flags a swap, not a
cross-reference.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from compgen.analysis.results_folder import _numbers_in

COLLECTIONS = ("runs", "arms", "cells", "variants")
"""Keys whose value is a dict of named entries (runs, arms) that a README row or sentence is about."""
NOT_A_NAME = {"full", "quantized", "none", "steps"}
"""Parts of run names that are words of the prose (the conditioning), never a run's identity."""
DECIMAL = re.compile(r"(?<![\w.])(\d+\.\d+)(?![\w.])")
SEED_LIST = re.compile(r"(?i)\bseeds? (\d+(?:-\d+)?(?:(?:,| and| or|, and|, or) \d+(?:-\d+)?)*)")


def _values(value: Any) -> set[float]:
    found: set[float] = set()
    _numbers_in(value, found)
    return found


def _under(value: Any, key: str) -> list[Any]:
    """Every value stored under ``key`` anywhere in ``value``."""
    if isinstance(value, dict):
        return [item for k, item in value.items() if k == key] + [
            found for item in value.values() for found in _under(item, key)]
    if isinstance(value, list):
        return [found for item in value for found in _under(item, key)]
    return []


def _given(token: str, values: set[float]) -> bool:
    decimals = len(token.split(".")[1])
    return any(abs(round(number, decimals) - float(token)) < 10 ** -(decimals + 3) for number in values)


Entry = tuple[tuple[str, ...], str, dict[str, Any], set[float]]


def named_entries(data: Any) -> tuple[list[Entry], set[float]]:
    """Every entry of a named collection anywhere in ``data`` as (collection path, name, the entry, its numbers),
    and the numbers outside every collection."""
    entries: list[Entry] = []

    def outside(value: Any, path: tuple[str, ...]) -> Any:
        if isinstance(value, dict):
            rest = {}
            for key, item in value.items():
                if key in COLLECTIONS and isinstance(item, dict) and item and all(
                        isinstance(entry, dict) for entry in item.values()):
                    entries.extend((path + (key,), name, entry, _values(entry)) for name, entry in item.items())
                else:
                    rest[key] = outside(item, path + (str(key),))
            return rest
        if isinstance(value, list):
            return [outside(item, path) for item in value]
        return value

    return entries, _values(outside(data, ()))


def name_parts(names: set[str]) -> dict[str, set[str]]:
    """The parts of each name a README may call it by: its pieces between ``__``, spaces and brackets, less those
    every name shares (the dataset of a one-dataset folder) and the seed."""
    parts = {name: {part for part in re.split(r"__|\s+|[(),]", name)
                    if len(part) > 3 and part not in NOT_A_NAME and not re.fullmatch(r"seed\d+", part)}
             for name in names}
    shared = set.intersection(*parts.values()) if parts else set()
    return {name: found - shared for name, found in parts.items()}


def _mentions(name: str, text: str) -> bool:
    return re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", text) is not None


def readme_units(text: str, sentences: bool = True) -> Iterator[tuple[str, list[str] | None, list[str] | None]]:
    """Table rows (with their table's header and their cells) and the sentences of every other paragraph (or each
    paragraph whole)."""
    for block in re.split(r"\n\s*\n", text):
        lines = block.splitlines()
        if lines and all(line.lstrip().startswith("|") for line in lines):
            header = [cell.strip() for cell in lines[0].strip().strip("|").split("|")]
            for line in lines[1:]:
                cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
                if not set("".join(cells)) <= set("-: "):
                    yield line, header, cells
        else:
            paragraph = " ".join(lines)
            for sentence in re.split(r"(?<=[.;])\s+(?=[A-Z(*`])", paragraph) if sentences else [paragraph]:
                yield sentence, None, None


def mentioned(unit: str, header: list[str] | None, cells: list[str] | None, parts: dict[str, set[str]]) -> set[str]:
    """The entries ``unit`` names: by name, by a part of its name, or by its seed."""
    named = {name for name, found in parts.items() if _mentions(name, unit) or any(_mentions(p, unit) for p in found)}
    seeds = set()
    for match in SEED_LIST.finditer(unit):
        for first, last in re.findall(r"(\d+)(?:-(\d+))?", match.group(1)):
            seeds |= {str(seed) for seed in range(int(first), int(last or first) + 1)}
    if header and cells and header[0].lower() == "seed" and cells[0].isdigit():
        seeds.add(cells[0])
    for name in parts:
        seed = re.search(r"seed(\d+)$", name)
        if seed and seed.group(1) in seeds:
            named.add(name)
    return named


def _log_values(entry: dict[str, Any], where: Path | None) -> set[float]:
    """The numbers of a run's learning-dynamics log (its ``log`` field, relative to the JSON file naming it): a
    README may quote an evaluation the summary does not keep."""
    log = entry.get("log")
    if where is None or not isinstance(log, str) or not (where / log).is_file():
        return set()
    return _values([json.loads(line) for line in (where / log).read_text().splitlines() if line.strip()])


def misattributed_numbers(readme: str, data: dict[str, Any], folder: Path | None = None) -> list[str]:
    """Decimals of ``readme`` that its data give only under entries other than those their row or sentence names,
    each with the names it was read against. With ``folder``, the named runs' logs count as their data too."""
    entries, outside = named_entries(data)
    parts = name_parts({name for _, name, _, _ in entries})
    problems = []
    for unit, header, cells in readme_units(readme):
        tokens = DECIMAL.findall(unit)
        named = mentioned(unit, header, cells, parts) if tokens else set()
        if not named:
            continue
        collections = {path for path, name, _, _ in entries if name in named}
        allowed, elsewhere = set(outside), set()
        for path, name, _, values in entries:
            (allowed if name in named or path not in collections else elsewhere).update(values)
        # A table cell under a column named by a key of the named entries (a class, "011") is read under that key.
        columns = [(cell, (header[index] if header and index < len(header) else "").strip("` "))
                   for index, cell in enumerate(cells or [unit])]
        for cell, column in columns:
            own = [found for _, name, entry, _ in entries if name in named for found in _under(entry, column)]
            for token in DECIMAL.findall(cell):
                if own and column:  # a cell is the named entries' value under its column, never a log's
                    wrong = not _given(token, _values(own))
                else:
                    wrong = not _given(token, allowed) and _given(token, elsewhere) and not any(
                        _given(token, _log_values(entry, folder and folder / Path(path[0]).parent))
                        for path, name, entry, _ in entries if name in named)
                if wrong:
                    where = f" under {column!r}" if own else ""
                    problems.append(f"{token} is not a number of {sorted(named)[:4]}{where}"
                                    f" (what its text names): ...{unit[:160]}...")
    return problems
