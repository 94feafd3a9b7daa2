"""The training loss of each arm near steps 10^3, 5x10^3 and 10^4 (the median of the logged losses in the 100 steps
up to each), from the folder's ``training_logs/``: does the loss plateau?

    python results/paper-b-maskgit-baseline/loss_by_step.py      # writes loss_by_step.json beside it
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

HERE = Path(__file__).resolve().parent
ENDS = (1000, 5000, 10000)


def main() -> None:
    table = {}
    for path in sorted((HERE / "training_logs").glob("*.jsonl")):
        records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        arm = path.stem.split("__")[0]
        table[arm] = {str(end): round(statistics.median(r["loss"] for r in records if end - 100 < r["step"] <= end), 4)
                      for end in ENDS}
    (HERE / "loss_by_step.json").write_text(json.dumps({"window": "median of the logged losses in (end - 100, end]",
                                                        "loss": table}, indent=1) + "\n")


if __name__ == "__main__":
    main()
