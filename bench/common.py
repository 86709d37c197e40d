"""Timing and reporting shared by the workloads: interleaved repeats (so that a burst of
load on a shared machine hits every implementation alike), median with min and max, and
ratios to Nexus computed within the same run."""

from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any


@dataclass
class Row:
    """One implementation of one workload: time per ``unit`` (seconds), and whether its
    answer matched the reference."""

    workload: str
    impl: str
    median: float
    low: float
    high: float
    unit: str  # "call" or "iter"
    ok: bool = True
    note: str = ""
    ratio: float | None = None  # base time / this time, median over paired rounds (rows_from)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class Skip(Exception):
    """A peer that cannot run here (missing package, unsupported op): reported, not fatal."""


def measure(impls: dict[str, Callable[[], Any]], repeats: int, number: int = 1,
            warmup: int = 1, prime: bool = False) -> dict[str, list[float]]:
    """Seconds per call of each implementation; repeats interleaved round-robin, the
    starting implementation rotating from round to round.

    ``prime``: call each implementation once, untimed, right before each timed sample.
    A single timed call of a model otherwise runs with the caches the previous
    implementation left (an ONNX Runtime call measured 64 us alone and 110-270 us right
    after torch eager or the python backend), which is no caller's steady state."""
    for fn in impls.values():
        for _ in range(warmup):
            fn()
    times: dict[str, list[float]] = {k: [] for k in impls}
    names = list(impls)
    for r in range(repeats):
        # Rotate who goes first: an implementation's leftovers (threads still spinning,
        # caches) then burden every other one in turn, not always the same neighbour.
        for name in names[r % len(names):] + names[:r % len(names)]:
            fn = impls[name]
            if prime:
                fn()
            t0 = time.perf_counter()
            for _ in range(number):
                fn()
            times[name].append((time.perf_counter() - t0) / number)
    return times


def rows_from(workload: str, times: dict[str, list[float]], unit: str, per: int = 1,
              ok: dict[str, bool] | None = None, base: str | None = None) -> list[Row]:
    """Rows of a workload; ``per`` divides the times (iterations per call for ``iter``).

    The ratio is the median over rounds of (base time / this time) in the same round:
    paired like this, a burst of load that slows one round cancels out, which the ratio
    of two medians does not do.  ``base``: the first implementation named 'nexus...'.
    """
    ref = base or next((k for k in times if k.startswith("nexus")), None)
    out = []
    for name, ts in times.items():
        ts = [t / per for t in ts]
        ratio = None
        if ref is not None:
            ratio = statistics.median(b / t for b, t in zip(times[ref], times[name]) if t > 0)
        out.append(Row(workload, name, statistics.median(ts), min(ts), max(ts), unit,
                       (ok or {}).get(name, True), ratio=ratio))
    return out


def fmt_time(seconds: float) -> str:
    for scale, unit in ((1e-6, "ns"), (1e-3, "us"), (1.0, "ms")):
        if seconds < scale:
            return f"{seconds / scale * 1e3:.3g} {unit}"
    return f"{seconds:.3g} s"


def table(rows: list[Row]) -> str:
    """A Markdown table of the rows."""
    head = "| workload | implementation | median | min | max | per | Nexus / this (paired) | check |"
    lines = [head, "|" + "---|" * 8]
    for r in rows:
        ratio = f"{r.ratio:.2f}" if r.ratio is not None else "-"
        check = "ok" if r.ok else "**MISMATCH**"
        note = f" ({r.note})" if r.note else ""
        lines.append(f"| {r.workload} | {r.impl}{note} | {fmt_time(r.median)} | {fmt_time(r.low)} | "
                     f"{fmt_time(r.high)} | {r.unit} | {ratio} | {check} |")
    return "\n".join(lines)


def machine() -> str:
    """What the numbers were measured on, and under what load."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    load = " / ".join(f"{x:.1f}" for x in os.getloadavg()) if hasattr(os, "getloadavg") else "?"
    return f"{cpu}, {cores} cores, Python {platform.python_version()}, load average (1/5/15 min) {load}"


# BLAS reads its thread count from the environment when it loads: pinning needs a new process.
PIN_BLAS = {k: "1" for k in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
                             "BLIS_NUM_THREADS", "VECLIB_MAXIMUM_THREADS")}


def subprocess_rows(module: str, args: list[str], env: dict[str, str]) -> list[Row]:
    """Run ``python -m module --json ARGS`` with ``env`` added; its last line is a JSON list of rows."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = subprocess.run([sys.executable, "-m", module, "--json", *args], env={**os.environ, **env},
                         capture_output=True, text=True, cwd=root)
    if out.returncode != 0:
        raise RuntimeError(f"{module} failed:\n{out.stderr[-2000:]}")
    return [Row(**d) for d in json.loads(out.stdout.strip().splitlines()[-1])]
