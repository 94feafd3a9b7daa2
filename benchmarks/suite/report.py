"""The markdown table of one run's rows, under a line on its machine and precision."""

from __future__ import annotations

from typing import Any


def markdown(results: list[dict[str, Any]], header: dict[str, Any]) -> str:
    lines = [f"Device: {header['device']} ({header['machine']}), torch {header['torch']}, {header['threads']} "
             f"thread(s), {header['precision']}; convolutions in {header['op_precision']['conv']}, matmuls in "
             f"{header['op_precision']['matmul']}; matmul peak measured: "
             + ", ".join(f"{v:.3f} TFLOP/s ({k})" for k, v in header["peak_tflops"].items()) + ".",
             "", "| kind | benchmark | median | min | max | unit | share of matmul peak | kernels per step |",
             "|---|---|---|---|---|---|---|---|"]
    for r in results:
        share = f"{r['peak_fraction']:.1%}" if "peak_fraction" in r else ""
        kernels = r.get("kernels", "")
        if "median" not in r:
            lines.append(f"| {r['kind']} | {r['name']} |  |  |  |  |  | {kernels} |")
            continue
        fmt = ".1%" if r["unit"] == "of wall-clock" else ".1f"
        lines.append(f"| {r['kind']} | {r['name']} | {r['median']:{fmt}} | {r['min']:{fmt}} | {r['max']:{fmt}} | "
                     f"{r['unit'] if r['unit'] != 'of wall-clock' else 'of evaluation + training wall-clock'} | "
                     f"{share} | "
                     f"{kernels} |")
    return "\n".join(lines) + "\n"
