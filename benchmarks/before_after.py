"""compgen at an earlier revision against the working tree, on a machine whose load changes: ``run_benchmarks.py``
runs alternately with each version (before, after, after, before, ...), so that both see the same load on average,
and each row reports the median over the rounds of its per-run medians.

    python benchmarks/before_after.py --rev f364e22 --rounds 2 --output benchmarks/results/x.json -- \\
        --threads 1 --repeats 2 --only transformer

Everything after ``--`` goes to ``run_benchmarks.py`` (this same benchmark code measures both versions; only the
``compgen`` package differs, exported from ``--rev`` with ``git archive``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from compgen.cli import ArgumentParser

REPO_ROOT = Path(__file__).resolve().parents[1]


def export_source(rev: str, directory: Path) -> Path:
    """The ``src`` tree of ``rev`` under ``directory`` (its ``compgen`` package is what runs as "before")."""
    archive = subprocess.run(["git", "archive", rev, "src"], cwd=REPO_ROOT, check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(directory)], input=archive, check=True)
    return directory / "src"


def run(source: Path | None, arguments: list[str], output: Path) -> list[dict[str, Any]]:
    """One ``run_benchmarks.py`` run with ``source`` first on the path (``None``: the working tree)."""
    env = dict(os.environ)
    if source is not None:
        env["PYTHONPATH"] = f"{source}{os.pathsep}{env.get('PYTHONPATH', '')}"
    subprocess.run([sys.executable, str(REPO_ROOT / "benchmarks" / "run_benchmarks.py"), *arguments, "--output",
                    str(output)], env=env, check=True, stdout=subprocess.DEVNULL)
    return json.loads(output.read_text())["results"]


def main(argv: list[str] | None = None) -> dict[str, Any]:
    argv = list(sys.argv[1:] if argv is None else argv)
    split = argv.index("--") if "--" in argv else len(argv)
    parser = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rev", required=True, help="the earlier revision (a commit, tag or branch)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--after_args", dest="after_args", default="",
                        help="more run_benchmarks.py options for the after runs only (e.g. --channels_last; with "
                             "--rev HEAD this compares one option on the same code)")
    parser.add_argument("--output", default=None)
    args = parser.parse_args(argv[:split])
    arguments = argv[split + 1:]
    runs: dict[str, list[list[dict[str, Any]]]] = {"before": [], "after": []}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        source = export_source(args.rev, tmp)
        for round_index in range(args.rounds):
            order = ["before", "after"] if round_index % 2 == 0 else ["after", "before"]
            for version in order:
                out = tmp / f"{version}-{round_index}.json"
                extra = args.after_args.split() if version == "after" else []
                runs[version].append(run(source if version == "before" else None, arguments + extra, out))
    rows: dict[str, dict[str, Any]] = {}
    for version, results in runs.items():
        for result in results:
            for row in result:
                entry = rows.setdefault(row["name"], {"name": row["name"], "unit": row["unit"]})
                entry.setdefault(version, []).append(row)
    summary = []
    for entry in rows.values():
        line = {"name": entry["name"], "unit": entry["unit"]}
        for version in ("before", "after"):
            measured = entry.get(version, [])
            if measured and "median" in measured[0]:
                line[version] = round(statistics.median(r["median"] for r in measured), 3)
            for key in ("kernels", "flops_per_step"):
                if measured and key in measured[0]:
                    line[f"{version}_{key}"] = measured[0][key]
        summary.append(line)
        print(f"{line['name']:56s} before {line.get('before', '-')!s:>9} after {line.get('after', '-')!s:>9} "
              f"{line['unit']}; kernels {line.get('before_kernels', '-')} -> {line.get('after_kernels', '-')}")
    report = {"rev": args.rev, "rounds": args.rounds, "arguments": arguments, "rows": summary, "runs": runs}
    if args.output:
        Path(args.output).parent.mkdir(parents=True, exist_ok=True)
        Path(args.output).write_text(json.dumps(report, indent=2) + "\n")
    return report


if __name__ == "__main__":
    main()
