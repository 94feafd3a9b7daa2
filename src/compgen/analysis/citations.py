"""What README.md, results/INDEX.md and docs/ say of a results folder, held to that folder's data.

A table row or a paragraph that links a results folder (``results/paper-a-sizes/``, or ``paper-a-sizes/`` from the
index) speaks for it: its decimals must be numbers of that folder's JSON files (at their printed precision), its
counts of seeds, runs, arms or cells counts its data give (``claims.data_counts``), its verdict words ("not
reproduced", "partly reproduced", "not answered", "no gain") words of the folder's ``verdict`` field, and a
``machine`` column the machines and precision its ``machine`` fields name. A unit that links no folder is not
read here: a document's number without its data beside it is the reviewer's to catch.
"""

from __future__ import annotations

import json
import os
import re
from functools import cache
from pathlib import Path
from typing import Any

from compgen.analysis.attribution import DECIMAL, _given, _under, _values, readme_units
from compgen.analysis.claims import WORD_COUNT, count_value, data_counts, normalized

VERDICT = re.compile(r"(?i)\b(?:(?:not|partly) )?(?:reproduced|answered)\b|\bno gain\b")
"""The verdict words of a Status row: "reproduced", "not reproduced", "partly reproduced", "not answered", "no
gain"."""
MACHINES = ("Xeon", "EPYC", "H100", "H200")
PRECISIONS = ("bf16", "fp32", "tf32", "fp16")
DOCUMENTS = ("README.md", "results/INDEX.md", "docs/*.md")


def cited_folders(unit: str, document: Path, repo: Path) -> list[Path]:
    """The results folders ``unit`` links, resolved from ``document``'s place (a folder's top, not a file in it)."""
    results = repo / "results"
    found = []
    for link in re.findall(r"(?:\]\(|`|\s|^)((?:\.\./)*(?:results/)?[\w.-]+(?:/[\w.-]+)*/?)", unit):
        target = Path(os.path.normpath((repo if link.startswith("results/") else document.parent) / link))
        try:
            parts = target.relative_to(results).parts
        except ValueError:
            continue
        if parts and (results / parts[0]).is_dir() and (results / parts[0] / "README.md").is_file():
            folder = results / parts[0]
            if folder not in found:
                found.append(folder)
    return found


@cache
def _folder_data(folder: Path) -> dict[str, Any]:
    return {str(path.relative_to(folder)): json.loads(path.read_text()) for path in sorted(folder.rglob("*.json"))}


def _phrases(text: str) -> set[str]:
    return {" ".join(match.lower().split()) for match in VERDICT.findall(text)}


def unit_problems(unit: str, header: list[str] | None, cells: list[str] | None, folders: list[Path],
                  check_verdicts: bool, check_decimals: bool = True) -> list[str]:
    """What ``unit`` says that the data of ``folders`` do not: decimals, counts, verdict words, machine column."""
    data = {folder.name: _folder_data(folder) for folder in folders}
    values = _values(data)
    without_percentages = re.sub(r"[\d.]+(?:-[\d.]+)?%", "", unit)
    problems = [f"{token} is in none of {sorted(data)}" for token in DECIMAL.findall(without_percentages)
                if check_decimals and not _given(token, values)]
    counts = set().union(*(data_counts(folder) for folder in folders))
    problems += [f"{match.group(0)!r} is not a count of {sorted(data)} ({sorted(counts)})"
                 for match in WORD_COUNT.finditer(normalized(unit)) if count_value(match.group(1)) not in counts]
    if check_verdicts and _phrases(unit):
        verdicts = set().union(*(_phrases(str(verdict)) for verdict in _under(data, "verdict")))
        if not _phrases(unit) <= verdicts:
            problems.append(f"verdict {sorted(_phrases(unit) - verdicts)} is not in the verdict of {sorted(data)} "
                            f"({sorted(verdicts) or 'none recorded'})")
    if header and cells and "machine" in header:
        cell = cells[header.index("machine")] if header.index("machine") < len(cells) else ""
        machines = " ".join(str(machine) for machine in _under(data, "machine"))
        stated = [word for word in MACHINES + PRECISIONS if word in cell]
        problems += [f"machine {word!r} is in no machine field of {sorted(data)}" for word in stated
                     if word not in machines]
        if not any(word in cell for word in PRECISIONS):
            problems.append(f"the machine column {cell!r} names no precision")
    return [f"{problem}: ...{unit[:140]}..." for problem in problems]


def document_problems(document: Path, repo: Path) -> list[str]:
    """Every problem of ``document`` against the folders its rows and paragraphs cite (verdicts read in tables)."""
    problems = []
    for unit, header, cells in readme_units(document.read_text(), sentences=False):
        folders = cited_folders(unit, document, repo)
        if folders:
            # docs/ explain settings beside results (a size range, a guidance scale): their decimals are held in
            # tables only, where a row reports a measurement; a percentage derived from two stated times is not.
            problems += unit_problems(unit, header, cells, folders, check_verdicts=cells is not None,
                                      check_decimals=cells is not None or document.parent.name != "docs")
    return problems


def status_problems(folder: Path) -> list[str]:
    """A results README's own **Status** paragraph's verdict words, held to its ``verdict`` field (a folder that
    records one: those the README's Status table cites)."""
    readme = (folder / "README.md").read_text()
    status = [unit for unit, _, cells in readme_units(readme, sentences=False)
              if cells is None and unit.startswith(("**Status", "**Verdict"))]
    verdicts = set().union(*(_phrases(str(v)) for v in _under(_folder_data(folder), "verdict")))
    if not _under(_folder_data(folder), "verdict"):
        return []
    return [f"{folder.name}: verdict {sorted(_phrases(unit) - verdicts)} is not its verdict field's "
            f"({sorted(verdicts) or 'none recorded'}): ...{unit[:140]}..."
            for unit in status if not _phrases(unit) <= verdicts]


def documents(repo: Path) -> list[Path]:
    """The documents read here: README.md, results/INDEX.md and every page of docs/."""
    return [path for pattern in DOCUMENTS for path in sorted(repo.glob(pattern))]
