"""The README reads in two minutes: install and quick start on the first screen, a short Status table, and no
sentence in it or in docs/ longer than a reader holds in mind."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
MAX_WORDS = 40
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def sentences(markdown: str) -> list[str]:
    """The prose sentences of ``markdown``: code blocks, tables and headings left out, list items and paragraphs
    split apart, a sentence ending at '.', '!' or '?' before a capital, a backtick, a bracket or an asterisk."""
    text = re.sub(r"```.*?```", " ", markdown, flags=re.S)
    lines = [line for line in text.splitlines() if not line.lstrip().startswith(("|", "#"))]
    found = []
    for paragraph in re.split(r"\n\s*\n|\n(?=\s*(?:- |\d+\. ))", "\n".join(lines)):
        paragraph = re.sub(r"\s+", " ", paragraph).strip()
        found += [s for s in re.split(r"(?<=[.!?])\s+(?=[A-Z`(\[*])", paragraph) if s]
    return found


def test_the_sentence_splitter_splits_paragraphs_items_and_sentences():
    text = "One two. Three `four`.\n\n- item one\n- item two. Next\n\n```\ncode. Code\n```\n| a. B |\n"
    assert sentences(text) == ["One two.", "Three `four`.", "- item one", "- item two.", "Next"]


@pytest.mark.parametrize("path", DOCS, ids=[str(path.relative_to(REPO)) for path in DOCS])
def test_no_sentence_is_over_forty_words(path):
    long = [f"{len(s.split())} words: {s[:100]}" for s in sentences(path.read_text()) if len(s.split()) > MAX_WORDS]
    assert long == []


def test_install_and_quick_start_are_on_the_first_screen_and_status_is_short():
    lines = (REPO / "README.md").read_text().splitlines()
    headings = {line: number for number, line in enumerate(lines, 1) if line.startswith("## ")}
    assert headings["## Install"] <= 40 and headings["## Quick start"] <= 40
    status = lines[headings["## Status"]:]
    table = [line for line in status[: next(i for i, line in enumerate(status) if line.startswith("## "))]
             if line.startswith("|")]
    assert 3 <= len(table) <= 16  # a header, a rule and at most 14 rows
    assert max(len(line) for line in table) <= 160


def test_the_readme_lists_the_builders_named_configs():
    """Issue 74, item 6: the README's list of dataset configs is the builders' (it listed eight of twelve)."""
    from compgen.data.clips_builder import ConceptGraphClips
    from compgen.data.concept_graph_builder import ConceptGraphShapes

    readme = (REPO / "README.md").read_text()
    paragraph = readme[readme.index("Datasets (") : readme.index("```python", readme.index("Datasets ("))]
    listed = set(re.findall(r"`((?:okawa|clips)-[\w-]+)`", paragraph))
    assert listed == set(ConceptGraphShapes.builder_configs) | set(ConceptGraphClips.builder_configs)


def test_an_unknown_dataset_name_says_how_to_train_on_a_config_of_ones_own():
    from compgen.data.loading import load_concept_dataset

    with pytest.raises(ValueError, match=r"--dataset EXPORT_DIR --dataset_config my-3x2x2"):
        load_concept_dataset("my-3x2x2")
