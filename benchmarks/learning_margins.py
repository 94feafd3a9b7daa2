"""The margins of the tests that train something and check that it learned, measured over seeds and kernel paths.

Every such test states its threshold through ``tests/margins.py``'s ``check_margin``; this runs those tests (the
functions that call it, found in the test files) with ``COMPGEN_MARGIN_SEED`` offsets 0..N-1, natively and with
another set of CPU kernels (``--variants``), collects each check's values and writes the table
``docs/test_margins.md`` and ``benchmarks/results/test_margins.json``. A check passes the rule when its worst value
is at least twice the spread over seeds (their standard deviation) away from its threshold.

    python benchmarks/learning_margins.py --seeds 5

Kernel variants: ``native`` (what the machine picks) and ``avx2`` (PyTorch's AVX2 kernels, MKL and oneDNN held to
AVX2: other reduction orders, as another CPU's kernels take; it is not an AMD EPYC, whose numbers the table keeps
where they were measured).
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from compgen.cli import ArgumentParser

REPO_ROOT = Path(__file__).resolve().parents[1]
VARIANTS = {
    "native": {},
    "avx2": {"ATEN_CPU_CAPABILITY": "avx2", "MKL_ENABLE_INSTRUCTIONS": "AVX2", "ONEDNN_MAX_CPU_ISA": "AVX2"},
}
# Measured on a machine this project's tooling cannot reach: kept beside the table, never recomputed.
KNOWN_ELSEWHERE = [
    "A 2-core AMD EPYC with AVX-512 BF16 and no AMX, fp32, at commit 986d0b8 (before this table): the GIVT test's old "
    "set-up ended at loss -0.284 and failed its bar of -1.0. That set-up: a constant learning rate of 1e-3, no "
    "clipping, the last step's loss checked.",
    "The same old set-up on this machine: the `avx2` variant ends seed 0 at -0.846 (the likelihood after training), "
    "failing too; natively the last step's loss is -1.175, passing. The old margin was inside the rounding.",
]


def margin_tests(root: Path = REPO_ROOT / "tests") -> list[str]:
    """The node ids (file::function) of every test function that calls ``check_margin`` (directly or through a helper
    of its module that does)."""
    ids = []
    for path in sorted(root.rglob("test_*.py")):
        tree = ast.parse(path.read_text())
        functions = {node.name: node for node in tree.body if isinstance(node, ast.FunctionDef)}

        def calls(node: ast.AST) -> set[str]:
            return {n.func.id for n in ast.walk(node) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}

        checking = {name for name, node in functions.items() if "check_margin" in calls(node)}
        checking |= {name for name, node in functions.items() if calls(node) & checking}
        ids += [f"{path.relative_to(REPO_ROOT)}::{name}" for name in functions if name.startswith("test_")
                and name in checking]
    return ids


def run(ids: list[str], seed_offset: int, variant: str, log: Path) -> float:
    env = dict(os.environ, OMP_NUM_THREADS="1", COMPGEN_MARGIN_LOG=str(log), COMPGEN_MARGIN_SEED=str(seed_offset),
               COMPGEN_MARGIN_VARIANT=variant, **VARIANTS[variant])
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly", *ids],
                   cwd=REPO_ROOT, env=env, check=False, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def summarise(records: list[dict]) -> list[dict]:
    rows = {}
    for record in records:
        rows.setdefault(record["name"], []).append(record)
    table = []
    for name, values in rows.items():
        threshold, direction = values[0]["threshold"], values[0]["direction"]
        numbers = [r["value"] for r in values]
        distances = [(threshold - v) if direction == "below" else (v - threshold) for v in numbers]
        spread = statistics.pstdev(numbers) if len(numbers) > 1 else 0.0
        table.append(dict(name=name, direction=direction, threshold=threshold, runs=len(numbers),
                          variants=sorted({r["variant"] for r in values}), mean=statistics.fmean(numbers),
                          worst=numbers[distances.index(min(distances))], worst_distance=min(distances), spread=spread,
                          comfortable=min(distances) >= 2 * spread and min(distances) > 0))
    return sorted(table, key=lambda row: row["name"])


def write_table(table: list[dict], meta: dict, path: Path) -> None:
    lines = [
        "# The margins of the tests that learn",
        "",
        "Every test that trains something and checks that it learned (and every check of a scorer's or probe's",
        "accuracy on real renders drawn from a seed) states its threshold through `tests/margins.py`'s `check_margin`.",
        f"`python benchmarks/learning_margins.py --seeds {meta['seeds']}` runs those tests with {meta['seeds']} seed",
        "offsets each, natively and with AVX2 kernels (`avx2`: PyTorch, MKL and oneDNN held to AVX2, so other",
        "reduction orders, as another CPU's kernels take), and writes this table and",
        "`benchmarks/results/test_margins.json`. **Rule**: the worst value is at least twice the spread (standard",
        "deviation over every run) from its threshold; `tests/unit/test_margins_table.py` holds this table to it and",
        "to the tests that call `check_margin`.",
        "",
        f"Machine: {meta['machine']}; torch {meta['torch']}, fp32 (no test here trains in bf16), one thread.",
        "",
        "| check | threshold | runs | mean | worst | worst's distance | spread | rule |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in table:
        sign = "<" if row["direction"] == "below" else ">"
        lines.append(f"| {row['name']} | {sign} {row['threshold']:g} | {row['runs']} | {row['mean']:.4g} | "
                     f"{row['worst']:.4g} | {row['worst_distance']:.4g} | {row['spread']:.3g} | "
                     f"{'holds' if row['comfortable'] else 'FAILS'} |")
    lines += ["", "Measured elsewhere:", ""] + [f"- {line}" for line in KNOWN_ELSEWHERE] + [""]
    path.write_text("\n".join(lines))


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, default=5, help="seed offsets 0..N-1 per variant")
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    parser.add_argument("--tests", nargs="*", help="node ids (default: every test that calls check_margin)")
    parser.add_argument("--output", default=str(REPO_ROOT / "benchmarks" / "results" / "test_margins.json"))
    parser.add_argument("--table", default=str(REPO_ROOT / "docs" / "test_margins.md"))
    args = parser.parse_args(argv)
    if args.seeds < 2:
        parser.error(f"--seeds must be at least 2 (a spread needs two runs), got {args.seeds}")
    ids = args.tests or margin_tests()
    import torch

    meta = dict(seeds=args.seeds, variants=args.variants, tests=ids, torch=torch.__version__,
                machine=f"{platform.processor() or platform.machine()}, {_cpu_name()}, {os.cpu_count()} cores",
                seconds={})
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "margins.jsonl"
        for variant in args.variants:
            for offset in range(args.seeds):
                seconds = run(ids, offset, variant, log)
                meta["seconds"][f"{variant}/{offset}"] = round(seconds, 1)
                print(f"{variant} seed offset {offset}: {seconds:.0f} s", flush=True)
        records = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    table = summarise(records)
    Path(args.output).write_text(json.dumps(dict(meta=meta, table=table, records=records), indent=1) + "\n")
    write_table(table, meta, Path(args.table))
    failing = [row["name"] for row in table if not row["comfortable"]]
    print(f"{len(table)} checks, {len(failing)} outside the rule: {failing}")
    return 1 if failing else 0


def _cpu_name() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines() if Path("/proc/cpuinfo").exists() else []:
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "unknown CPU"


if __name__ == "__main__":
    sys.exit(main())
