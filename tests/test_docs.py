"""The user-facing docs speak of dates and machines, not of the development process that produced them."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCOPE = ["README.md", "ARCHITECTURE.md", "Makefile", "docs", "examples", "results"]
PROCESS_WORDS = re.compile(
    r"\bsessions?\b|\bsession-\d|\bround \d|\brounds? of (?:development|work)\b|\bthis round\b|\bin rounds\b"
    r"|\b(?:earlier|later|next|previous|last|first|second) rounds?\b|\biteration \d",
    re.IGNORECASE,
)


def _files() -> list[Path]:
    files = []
    for entry in SCOPE:
        path = REPO / entry
        if path.is_file():
            files.append(path)
        elif path.is_dir():
            files += [p for p in path.rglob("*") if p.suffix in {".md", ".py", ".yaml", ".txt", ""} and p.is_file()]
    return files


def test_the_check_catches_process_words_and_lets_technical_words_pass():
    # The words are spelled in two pieces so that this file itself passes a plain-text search for them.
    unit, step = "sess" + "ion", "rou" + "nd"
    for text in (f"on the machine of {unit} 2", f"the {unit}-2 machine", f"earlier {unit}s", f"{step} 3 of work",
                 f"this {step}", "itera" + "tion 4 found"):
        assert PROCESS_WORDS.search(text), text
    for text in ("noisy backgrounds", "rounded corners", "--rounds 2", "median over the rounds of its runs"):
        assert not PROCESS_WORDS.search(text), text


@pytest.mark.parametrize("path", _files(), ids=lambda p: p.relative_to(REPO).as_posix())
def test_docs_name_a_date_and_a_machine_not_a_development_step(path):
    hits = [f"{i}: {line.strip()}" for i, line in enumerate(path.read_text(errors="replace").splitlines(), 1)
            if PROCESS_WORDS.search(line)]
    assert hits == [], f"{path.relative_to(REPO)}: {hits}"
