"""Counts a results README states ("7 of 10 seeds") held to the data they are attributed to.

Each results folder keeps a ``claims.json`` beside its README: a list of claims, each a ``context`` (a phrase copied
from the README, whitespace aside) and the counts that phrase states, each with a pointer into the folder's JSON
files for the count and for the total::

    {"claims": [{"context": "touching sizes hold 7 of 10",
                 "counts": [{"text": "7 of 10",
                             "count": ["distribution.json", "variants", "touching", "held_seeds"],
                             "of": ["distribution.json", "variants", "touching", "seeds"]}]}]}

A pointer is a file (relative to the folder, or to the repository when it starts with ``results/``) followed by the
keys (and list indices) to a value; the value counts as itself (an integer), its length (a list, or a dict of
anything but booleans) or the number of its true values (a dict of booleans). A phrase that is not a count of the
data (Paper B's "{7, 9, 11} of 12", a date) is a claim with ``"not_data"`` saying what it is instead of ``counts``.

:func:`claim_problems` reports every "k of n" in the README that no claim's context covers, every context the
README no longer contains, and every count whose data say otherwise: so a count changed in a README (3 of 10 -> 4 of
10) fails the check until the data change with it.

A count of things without its total ("three seeds", "21 cells") is held by :func:`word_count_problems`: a claim may
list it with a ``count`` pointer alone (``{"text": "21 cells", "count": [...]}``); otherwise it must be a count the
folder's data give (:func:`data_counts`: the size of a collection of runs or arms, of a group of one run's seeds, of
a seed list, or of the logs), or sit in a ``not_data`` claim (a plan, a count of Paper B's).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

COUNT_PATTERN = re.compile(r"(?<![\d.])\b(\d+) (?:seeds? |runs? |arms? )?of (?:the )?(\d+)\b")
"""A stated count: "7 of 10", "13 seeds of 20", "2 runs of 3", "9 of the 27" (not a decimal's digits: "0.06 of
50")."""
CLAIMS_FILE = "claims.json"
NUMBER_WORDS = {word: value for value, word in enumerate(
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen seventeen "
    "eighteen nineteen twenty".split())}
WORD_COUNT = re.compile(r"(?i)(?<!= )(?<![\w.-])(" + "|".join(list(NUMBER_WORDS)[2:]) + r"|\d+) "
                        r"(?:more |other |unseen |held-out |new )?(seeds|runs|arms|cells)\b(?! at (?:once|a time))")
"""A count of things stated without its total: "three seeds", "21 cells", "ten more seeds" (not "two runs at once",
the machine's parallelism, nor "N = 300 seeds 1 and 2")."""
COLLECTIONS = ("runs", "arms", "cells", "variants")


def normalized(text: str) -> str:
    """``text`` with every run of whitespace one space (a README wraps a phrase across lines)."""
    return re.sub(r"\s+", " ", text)


def resolve(pointer: list[Any], folder: Path, repo: Path) -> Any:
    """The value ``pointer`` (file, then keys and indices) names; ``KeyError`` naming the pointer if it is gone."""
    if not pointer or not isinstance(pointer[0], str):
        raise KeyError(f"pointer {pointer!r} must start with a JSON file name")
    path = (repo if pointer[0].startswith("results/") else folder) / pointer[0]
    if not path.is_file():
        raise KeyError(f"pointer {pointer!r}: no file {path}")
    value = json.loads(path.read_text())
    for key in pointer[1:]:
        try:
            value = value[key]
        except (KeyError, IndexError, TypeError):
            raise KeyError(f"pointer {pointer!r}: no {key!r} there") from None
    return value


def count_of(value: Any) -> int:
    """What a pointed-to value counts: an integer itself, a list its length, a dict of booleans its true values, any
    other dict its length."""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value
    if isinstance(value, list):
        return len(value)
    if isinstance(value, dict):
        if value and all(isinstance(item, bool) for item in value.values()):
            return sum(value.values())
        return len(value)
    raise TypeError(f"a count must point at an integer, a list or a dict, got {type(value).__name__}")


def claim_problems(readme: str, claims: list[dict[str, Any]], folder: Path, repo: Path) -> list[str]:
    """Every problem with ``readme``'s stated counts against ``claims``: an uncovered "k of n", a context the README
    no longer holds, a count the data do not give. Empty when every count is held to its data."""
    text = normalized(readme)
    problems, covered = [], []
    for claim in claims:
        context = normalized(claim.get("context", ""))
        starts = [m.start() for m in re.finditer(re.escape(context), text)] if context else []
        if not starts:
            problems.append(f"claim context not in the README: {context!r}")
            continue
        covered += [(start, start + len(context)) for start in starts]
        if "not_data" in claim:
            continue
        stated = [m.group(0) for m in COUNT_PATTERN.finditer(context)]
        listed = [count.get("text") for count in claim.get("counts", [])]
        if sorted(stated) != sorted(listed):
            problems.append(f"{context!r} states {stated} but its claim lists {listed}")
            continue
        for count in claim["counts"]:
            k, n = (int(x) for x in COUNT_PATTERN.fullmatch(count["text"]).groups())
            try:
                data = count_of(resolve(count["count"], folder, repo)), count_of(resolve(count["of"], folder, repo))
            except (KeyError, TypeError) as error:
                problems.append(f"{count['text']!r} in {context!r}: {error}")
                continue
            if data != (k, n):
                problems.append(f"{count['text']!r} in {context!r}: the data give {data[0]} of {data[1]}")
    for match in COUNT_PATTERN.finditer(text):
        if not any(start <= match.start() and match.end() <= end for start, end in covered):
            around = text[max(0, match.start() - 60) : match.end() + 20]
            problems.append(f"{match.group(0)!r} has no claim: ...{around}...")
    return problems


def count_value(text: str) -> int:
    """The number a stated count names: its digits or its word."""
    return int(text) if text.isdigit() else NUMBER_WORDS[text.lower()]


def data_counts(folder: Path) -> set[int]:
    """Every count a results folder's data give: the size of each collection of runs, arms or cells, of each group of
    one run's seeds within it, of each seed list, of each per-seed list of an arm, of its logs and their groups."""
    counts: set[int] = set()

    def groups(names: list[str]) -> None:
        counts.add(len(names))
        grouped: dict[str, int] = {}
        for name in names:
            key = re.sub(r"_*seed\d+", "", name)
            grouped[key] = grouped.get(key, 0) + 1
        counts.update(grouped.values())
        counts.add(len({seed for name in names for seed in re.findall(r"seed(\d+)", name)}))

    def walk(value: Any) -> None:
        if isinstance(value, dict):
            for key, item in value.items():
                if key in COLLECTIONS and isinstance(item, dict | list):
                    groups([str(name) for name in item] if isinstance(item, dict) else [
                        str(cell.get("name", cell.get("output_dir", ""))) if isinstance(cell, dict) else str(cell)
                        for cell in item])
                if "seed" in str(key).lower() or key in ("final", "best"):
                    if isinstance(item, list):
                        counts.add(len(item))
                    elif isinstance(item, int) and not isinstance(item, bool) and "seed" in str(key).lower():
                        counts.add(item)
                walk(item)
        elif isinstance(value, list):
            for item in value:
                walk(item)

    for path in sorted(folder.rglob("*.json")):
        walk(json.loads(path.read_text()))
    groups([path.stem for path in sorted(folder.rglob("logs/*.jsonl"))])
    return counts


def word_count_problems(readme: str, claims: list[dict[str, Any]], folder: Path, repo: Path,
                        counts: set[int] | None = None) -> list[str]:
    """Every count without a total in ``readme`` ("three seeds") that neither a claim's pointer nor the folder's
    data give (``counts``: the data's counts, :func:`data_counts` of ``folder`` by default)."""
    text = normalized(readme)
    counts = data_counts(folder) if counts is None else counts
    exempt, pointed = [], {}
    for claim in claims:
        context = normalized(claim.get("context", ""))
        for match in re.finditer(re.escape(context), text) if context else ():
            span = (match.start(), match.end())
            if "not_data" in claim:
                exempt.append(span)
            for count in claim.get("counts", []):
                if "of" not in count:
                    pointed.setdefault(span, []).append(count)
    exempt += [m.span() for m in COUNT_PATTERN.finditer(text)]  # "37 of 100 runs" is a claim's, checked above
    problems = []
    for match in WORD_COUNT.finditer(text):
        if any(start <= match.start() < end for start, end in exempt):
            continue
        stated = count_value(match.group(1))
        listed = [count for (start, end), found in pointed.items() if start <= match.start() and match.end() <= end
                  for count in found if normalized(count["text"]).lower() == match.group(0).lower()]
        if listed:
            try:
                given = count_of(resolve(listed[0]["count"], folder, repo))
            except (KeyError, TypeError) as error:
                problems.append(f"{match.group(0)!r}: {error}")
                continue
        else:
            given = stated if stated in counts else None
        if given != stated:
            around = text[max(0, match.start() - 60) : match.end() + 20]
            problems.append(f"{match.group(0)!r} is not a count the data give ({given if listed else sorted(counts)}): "
                            f"...{around}...")
    return problems


def load_claims(path: Path) -> list[dict[str, Any]]:
    """The claims of a ``claims.json`` (none if the file is absent)."""
    return json.loads(path.read_text())["claims"] if path.is_file() else []
