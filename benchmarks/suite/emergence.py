"""Time to emergence: wall-clock minutes of the cpu-quick U-Net preset until every level reaches 0.9 by both scorers."""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

from suite.common import REPO_ROOT, load_script


def time_to_emergence(arguments: list[str] | None = None) -> dict[str, Any]:
    """Train the cpu-quick U-Net preset (as the README runs it; ``arguments`` are added to its command line) and
    report when every level first reached 0.9."""
    out = Path(tempfile.mkdtemp(prefix="emergence-"))
    start = time.perf_counter()
    records = load_script(REPO_ROOT / "examples" / "train_tuple_unet.py").main(
        ["--preset", "cpu-quick", "--output_dir", str(out), *(arguments or [])]) or []
    if not records:
        from compgen.evaluation.tracker import read_log

        records = read_log(out / "learning_dynamics.jsonl")
    both = [r for r in records if min(r["level_accuracy"].values()) >= 0.9
            and min(r.get("pixel_level_accuracy", r["level_accuracy"]).values()) >= 0.9]
    return {"total_minutes": round((time.perf_counter() - start) / 60, 1),
            "minutes_to_all_levels_0.9": round(both[0]["wall_clock_s"] / 60, 1) if both else None,
            "step": both[0]["step"] if both else None}
