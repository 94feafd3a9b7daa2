"""The runs of a study: its cells (one training run each) and tokenizer runs, and how their flags become argv."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Cell:
    """One training run of a study."""

    model: str
    conditioning: str
    seed: int
    dataset: str
    command: tuple[str, ...]
    output_dir: Path
    identity: str = ""
    """What the cell is (script, options, dataset and tokenizer definitions), as JSON (see ``records``)."""
    steps: int = 0
    """The training steps the study asks of it (a fine-tuning cell's own, after its source's)."""
    source: str | None = None
    """The name of the cell whose weights it starts from (a model's ``init_from``), which must finish first."""

    @property
    def name(self) -> str:
        return f"{self.model}/{self.conditioning}/{self.dataset}/seed{self.seed}"

    @property
    def arm(self) -> str:
        """What the cell's seeds average over: the model, its conditioning mode and the dataset."""
        return f"{self.model} ({self.conditioning}) on {self.dataset}"


@dataclass(frozen=True)
class TokenizerCell:
    """The training of one study tokenizer (shared by the token models' cells of its datasets)."""

    dataset: str
    command: tuple[str, ...]
    output_dir: Path
    identity: str
    tokenizer: str = ""
    """Its name in the study's ``tokenizers`` (``""``: the study's ``tokenizer``)."""

    @property
    def name(self) -> str:
        return f"tokenizer {self.tokenizer + ' ' if self.tokenizer else ''}{self.dataset}"



def canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True)


def flags_to_argv(flags: dict[str, Any]) -> list[str]:
    """``{"preset": "cpu-quick", "use_ema": False}`` -> ``["--preset", "cpu-quick", "--no_use_ema"]``."""
    argv: list[str] = []
    for name, value in flags.items():
        if isinstance(value, bool):
            argv.append(f"--{name}" if value else f"--no_{name}")
        elif value is not None:
            argv += [f"--{name}", str(value)]
    return argv


def file_safe(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "-" for c in text)
