"""The user-facing docs speak of dates and machines, not of the development process that produced them: no development
steps or rounds, no tracker issue numbers, no roles of the people or agents who wrote the code."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
# Every doc a user reads (README.md, ARCHITECTURE.md, docs/*.md, results/INDEX.md and results/**/README.md), and the
# text files beside them: the Makefile, the examples and the other files of the results folders.
SCOPE = ["README.md", "ARCHITECTURE.md", "Makefile", "docs", "examples", "results"]
PROCESS_WORDS = re.compile(
    "|".join([
        # development steps
        r"\bsessions?\b|\bsession-\d|\bround \d|\brounds? of (?:development|work)\b|\bthis round\b|\bin rounds\b",
        r"\b(?:earlier|later|next|previous|last|first|second) rounds?\b|\biteration \d",
        # tracker issue numbers: "issue 21", "issue #21", "issues #29, #31", "issues 29 and 31" (not "to issue 2
        # requests" or "each step issues 300 launches")
        r"\bissues?[ -]?#\d+|\bissues?-\d+",
        r"(?<!\bto )(?<!\bcan )(?<!\bmay )(?<!\bwill )\bissue \d+\b",
        r"\bissues \d+(?:, ?\d+)*,? (?:and|&) \d+\b",
        # a tracker issue cited as a source ("the speed issue measured", "in the issue"; not "the issue with fp16")
        r"\bthe issue['’]s\b|\b(?:in|from|of) the (?:\w+ )?issue\b(?! (?:with|is|was|of)\b)",
        r"\bthe (?:\w+ )?issue (?:found|measured|asked|quoted|reported|said)\b",
        # roles ("the lead", not "takes the lead" or "the lead time"; a helper that did or said something, not a
        # helper function)
        r"(?<!\btake )(?<!\btakes )(?<!\btook )(?<!\bin )(?<!\bholds )\bthe lead\b(?![- ](?:time|author|in)\b)",
        r"\blead['’]s\b|\breviewers?\b|\bsub-?agents?\b|\bhelpers?['’]",
        r"\b(?:the|a|another|each|one) helpers? (?:found|measured|ran|wrote|asked|reported|said|checked|timed)\b",
    ]),
    re.IGNORECASE,
)
# The technical uses of the word (pytest, a shell, a login) masked before PROCESS_WORDS is searched.
TECHNICAL = re.compile(
    r"\b(?:pytest|test|ssh|tmux|screen|shell|interactive|login|python|notebook|jupyter|http|browser) sessions?\b"
    r"|\bsession[- ]scoped?\b|scope=[\"']session[\"']|\bSession\(",
    re.IGNORECASE,
)


def process_words(line: str) -> list[str]:
    """The words of ``line`` that speak of the development process."""
    return PROCESS_WORDS.findall(TECHNICAL.sub(" ", line))


def _files() -> list[Path]:
    files = []
    for entry in SCOPE:
        path = REPO / entry
        if path.is_file():
            files.append(path)
        elif path.is_dir():
            files += [p for p in path.rglob("*") if p.suffix in {".md", ".py", ".yaml", ".txt", ""} and p.is_file()]
    return files


def test_the_check_covers_every_user_facing_doc():
    files = set(_files())
    docs = [REPO / "README.md", REPO / "ARCHITECTURE.md", REPO / "results" / "INDEX.md",
            *(REPO / "docs").glob("*.md"), *(REPO / "results").rglob("README.md")]
    assert [path for path in docs if path not in files] == []


def test_the_check_catches_process_words_and_lets_technical_words_pass():
    # The words are spelled in pieces so that this file itself passes a plain-text search for them.
    unit, step, issue, lead, review = "sess" + "ion", "rou" + "nd", "iss" + "ue", "le" + "ad", "revi" + "ewer"
    caught = (
        f"on the machine of {unit} 2", f"the {unit}-2 machine", f"earlier {unit}s", f"{step} 3 of work",
        f"this {step}", "itera" + "tion 4 found", f"measured in {unit} 5 of the project",
        f"as {issue} 21 asked", f"see {issue} #21", f"({issue}#21)", f"fixed in {issue}s 29 and 31",
        f"{issue}s 29, 30 and 31", f"{issue}s #29, #31", f"the {issue}-21 numbers",
        f"the speed {issue} measured on one H100", f"3340 img/s in the {issue})", f"where the {issue} found",
        f"the H100 numbers of the {issue} and", f"(the {issue}'s control)", f"quoted from the speed {issue} were",
        f"the {lead} asked for it", f"the {lead}'s numbers", f"at the {lead}’s request", f"a {review} found",
        f"the {review}s asked", "a sub" + "agent measured", "two sub-" + "agents", "the help" + "er measured it",
        "a help" + "er ran the sweep", "the help" + "er's table",
    )
    for text in caught:
        assert process_words(text), text
    passed = (
        "noisy backgrounds", "rounded corners", "--rounds 2", "median over the rounds of its runs",
        f"a pytest {unit}", f"{unit}-scoped fixtures", f'scope="{unit}"', f"an ssh {unit} to the GPU machine",
        f"requests.{unit.title()}()", f"known {issue}s", f"an {issue} with fp16", f"to {issue} 2 requests at once",
        f"the {issue} with fp16 is overflow", f"in the {issue} of memory", f"the {issue} is the padding",
        f"each step {issue}s 300 kernel launches", "tissue 3", "GPU #0", f"MaskGIT takes the {lead} after 2k steps",
        f"the {lead} time of the data loader", f"{lead}s to collapse", f"{lead}ing to", "the figure help" + "ers",
        "a help" + "er function", "may call help" + "ers a GPU kernel does not", "the `save_figure` help" + "er",
        "the help" + "er computes the mean", "One help" + "er (`first_step_at`) behind model cards",
        "the help" + "ers used here",
        "review the logs", "preview images",
    )
    for text in passed:
        assert not process_words(text), text


@pytest.mark.parametrize("path", _files(), ids=lambda p: p.relative_to(REPO).as_posix())
def test_docs_name_a_date_and_a_machine_not_a_development_step(path):
    hits = [f"{i}: {line.strip()}" for i, line in enumerate(path.read_text(errors="replace").splitlines(), 1)
            if process_words(line)]
    assert hits == [], f"{path.relative_to(REPO)}: {hits}"
