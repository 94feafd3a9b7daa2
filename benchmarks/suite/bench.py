"""One run's settings and rows: which rows are measured, and each row's rate, share of the matmul peak and kernels."""

from __future__ import annotations

import re
from typing import Any

import torch

from suite.common import StepSettings
from suite.flops import matmul_peak, precisions


class Bench:
    """The settings every family measures under, and the rows they record (``results``)."""

    def __init__(self, settings: StepSettings, repeats: int, peer_dir: str | None = None,
                 compile_mode: str | None = None, kernels_only: bool = False, skip: list[str] | None = None) -> None:
        self.settings = settings
        self.device, self.dtype = settings.device, settings.dtype
        self.repeats, self.peer_dir, self.skip = repeats, peer_dir, skip or []
        self.compile, self.kernels_only = compile_mode, kernels_only
        self.sync = torch.cuda.synchronize if self.device.type == "cuda" else (lambda: None)
        self.results: list[dict[str, Any]] = []
        self.precision = precisions(self.device, self.dtype)
        self.peaks = {} if kernels_only else {
            precision: matmul_peak(self.device, self.dtype or torch.float32, self.sync, tf32=precision == "tf32")
            for precision in sorted(set(self.precision.values()))}
        self.peak = self.peaks.get(self.precision["matmul"], 0.0)

    @property
    def compile_modes(self) -> list[str | None]:
        """Eager (``None``), then, with ``--compile``, its mode."""
        return [None] + ([self.compile] if self.compile else [])

    def roofline(self, flops: int, conv_flops: int) -> float:
        """FLOP/s of a step whose convolutions and matmuls each run at the matmul peak of their precision."""
        seconds = conv_flops / self.peaks[self.precision["conv"]] + (flops - conv_flops) / self.peak
        return flops / seconds

    def record(self, name: str, kind: str, rate: dict[str, float], unit: str, flops: tuple[int, int] | None = None,
               **extra: Any) -> None:
        """One row: the rate's median, min and max, and with ``flops`` (all, convolutions) its share of the peak."""
        entry = {"name": name, "kind": kind, "unit": unit, **{k: round(v, 3) for k, v in rate.items()}, **extra}
        if flops:
            steps_per_second = rate["median"] / extra.get("batch_size", 1)
            entry["flops_per_step"], entry["conv_flops_per_step"] = flops
            entry["peak_fraction"] = round(flops[0] * steps_per_second / self.roofline(*flops), 4)
        self.results.append(entry)
        print(f"{kind:6s} {name:42s} {rate['median']:10.1f} {unit} (min {rate['min']:.1f}, max {rate['max']:.1f})"
              + (f", {entry['peak_fraction']:.1%} of matmul peak" if flops else ""), flush=True)

    def wanted(self, name: str) -> bool:
        """Whether the row ``name`` is measured (``--skip``: regular expressions of the rows to leave out)."""
        return not any(re.search(pattern, name) for pattern in self.skip)
