"""``# Copied from compgen.x.y.Class.method`` blocks stay copies (diffusers' ``make fix-copies`` convention): the block
under the marker is the named object's source, with the marker's ``with A->B`` renames applied."""

from __future__ import annotations

import importlib
import inspect
import re
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
MARKER = re.compile(r"^(?P<indent>\s*)# Copied from (?P<target>compgen(?:\.\w+)+)(?: with (?P<renames>.+))?$")


def copied_blocks(path: Path) -> list[tuple[int, str, str | None, str]]:
    """``(line, target, renames, block)`` of each marker in ``path``: the block is the decorated definition under it."""
    lines = path.read_text().splitlines()
    found = []
    for number, line in enumerate(lines):
        match = MARKER.match(line)
        if not match:
            continue
        indent, end = match["indent"], number + 2
        while end < len(lines) and (not lines[end].strip() or lines[end].startswith(indent + " ")
                                    or (lines[end - 1].lstrip().startswith("@") and lines[end].startswith(indent))):
            end += 1
        block = "\n".join(lines[number + 1 : end]).rstrip()
        found.append((number + 1, match["target"], match["renames"], textwrap.dedent(block)))
    return found


def resolve(target: str):
    """The object a dotted ``compgen...`` path names: the longest importable module, then attributes."""
    parts = target.split(".")
    for split in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:split]))
        except ModuleNotFoundError:
            continue
        for name in parts[split:]:
            obj = getattr(obj, name)
        return obj
    raise ImportError(target)


def expected_copy(target: str, renames: str | None) -> str:
    source = textwrap.dedent(inspect.getsource(resolve(target))).rstrip()
    for rename in (renames or "").split(","):
        if "->" in rename:
            old, new = (part.strip() for part in rename.split("->"))
            source = source.replace(old, new)
    return source


COPIES = [(path, *block) for path in sorted((REPO / "src").rglob("*.py")) for block in copied_blocks(path)]


def test_the_copies_are_found():
    assert len(COPIES) >= 4


@pytest.mark.parametrize("path, line, target, renames, block", COPIES,
                         ids=[f"{c[0].name}:{c[1]}" for c in COPIES])
def test_a_copied_block_is_its_source(path, line, target, renames, block):
    assert block == expected_copy(target, renames), f"{path.relative_to(REPO)}:{line} is no longer a copy of {target}"


def test_a_changed_copy_is_caught(tmp_path):
    path = REPO / "src" / "compgen" / "pipelines" / "tuple_dit.py"
    changed = tmp_path / "tuple_dit.py"
    changed.write_text(path.read_text().replace('return {"generator": generator} if accepts_generator else {}',
                                                'return {}', 1))
    blocks = {target: block for _, target, _, block in copied_blocks(changed)}
    target = "compgen.pipelines.tuple_ddpm.TupleConditionedDDPMPipeline.prepare_extra_step_kwargs"
    assert blocks[target] != expected_copy(target, None)
