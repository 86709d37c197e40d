"""Run the benchmark suite and print one table of medians, spreads and ratios to Nexus.

    python -m bench                      # every workload
    python -m bench --only W2,W3 -r 9    # some workloads, 9 repeats
    python -m bench --write-readme       # also replace the table in bench/README.md

Targets (ratios, from issue #3) are checked at the end: W2 per iteration at most ONNX
Runtime's Loop and within 3x of TorchScript; W3-small at most 1.5x the NumPy loop; W3-large
within 1.1x of NumPy; W6 parallel at least 1.6x faster than sequential with BLAS pinned
to one thread.
"""

from __future__ import annotations

import argparse
import re
import time
from collections.abc import Callable
from pathlib import Path

from bench import (
    w1_seed,
    w2_count,
    w3_rnn,
    w4_grad,
    w5_llvm,
    w6_parallel,
    w7_script,
    w8_call,
    w9_chain,
    w10_llvm,
    w10_ports,
    wc_compile,
)
from bench.common import Row, machine, table

WORKLOADS: dict[str, Callable[[int], list[Row]]] = {
    "W1": w1_seed.run, "W2": w2_count.run, "W3": w3_rnn.run, "W4": w4_grad.run, "W5": w5_llvm.run,
    "W6": w6_parallel.run, "W7": w7_script.run, "W8": w8_call.run, "W9": w9_chain.run, "W10": w10_ports.run,
    "W10L": w10_llvm.run, "WC": wc_compile.run,
}
README = Path(__file__).with_name("README.md")
BEGIN, END = "<!-- bench:begin -->", "<!-- bench:end -->"


def _row(rows: list[Row], workload: str, impl: str) -> Row | None:
    return next((r for r in rows if r.workload.startswith(workload) and r.impl == impl), None)


def targets(rows: list[Row]) -> list[str]:
    """The issue's targets, each with the measured ratio (medians; mins in brackets)."""
    out = []

    def check(label: str, wl: str, a: str, b: str, limit: float, speedup: bool = False) -> None:
        """a / b (b / a for a speedup) from the paired ratios, and the ratio of the mins.
        Rows hold base / row (paired); a / b = (base / b) / (base / a), exact when a is the base."""
        ra, rb = _row(rows, wl, a), _row(rows, wl, b)
        if ra is None or rb is None or ra.ratio is None or rb.ratio is None:
            return
        paired = rb.ratio / ra.ratio
        mins = ra.low / rb.low
        if speedup:
            paired, mins = 1 / paired, 1 / mins
        good = paired >= limit if speedup else paired <= limit
        op = ">=" if speedup else "<="
        out.append(f"- {label}: {paired:.2f} (ratio of mins {mins:.2f}), target {op} {limit}: "
                   f"{'met' if good else 'NOT met'}")

    check("W2 Nexus / ONNX Runtime Loop per iteration", "W2", "nexus", "onnxruntime Loop", 1.0)
    check("W2 Nexus / TorchScript per iteration", "W2", "nexus", "torchscript", 3.0)
    check("W3-small Nexus / NumPy loop", "W3 RNN small", "nexus", "numpy loop", 1.5)
    check("W3-large Nexus / NumPy loop, BLAS 1 thread", "W3 RNN large (T=100, D=H=512, batch 64), BLAS 1",
          "nexus", "numpy loop", 1.1)
    check("W3-large Nexus sequential / NumPy loop, BLAS 1 thread (interpreter overhead)",
          "W3 RNN large (T=100, D=H=512, batch 64), BLAS 1", "nexus sequential", "numpy loop", 1.1)
    check("W3-large Nexus / NumPy loop, BLAS default threads", "W3 RNN large (T=100, D=H=512, batch 64), BLAS d",
          "nexus", "numpy loop", 1.1)
    check("W6 speedup parallel vs sequential, BLAS 1 thread", "W6 4 chains x 3 (512 matmul+relu), BLAS 1",
          "nexus parallel", "nexus sequential", 1.6, speedup=True)
    check("W6 speedup auto vs sequential, BLAS 1 thread", "W6 4 chains x 3 (512 matmul+relu), BLAS 1",
          "nexus auto", "nexus sequential", 1.6, speedup=True)
    check("W6 (machine check) NumPy on 2 threads by hand vs sequential, BLAS 1 thread",
          "W6 4 chains x 3 (512 matmul+relu), BLAS 1", "numpy, 2 threads by hand", "nexus sequential", 1.6,
          speedup=True)
    check("W8 W1 through @nx.script / DSL graph with the same argument (issue 10)", "W8 W1 with n",
          "nexus @script(n)", "nexus DSL nx.run(g, n)", 1.3)
    check("W8 @nx.script identity / TorchScript identity (issue 10)", "W8 identity",
          "nexus @script", "torchscript", 1.0)
    w1 = _row(rows, "W1", "nexus llvm")
    if w1 is not None:
        out.append(f"- W1 llvm one call: {w1.median * 1e9:.0f} ns (min {w1.low * 1e9:.0f} ns), target <= 1 us: "
                   f"{'met' if w1.median <= 1e-6 else 'NOT met'}")
    check("W2 llvm / C gcc -O3 per iteration (issue 12)", "W2", "nexus llvm", "C gcc -O3", 1.2)
    check("W9 llvm / C loop (issue 12)", "W9", "nexus llvm", "C gcc -O3 -ffast-math loop", 1.2)
    check("W5 NMS @script llvm / ONNX Runtime NonMaxSuppression (issue 12)", "W5 NMS", "nexus llvm",
          "onnxruntime (1 thread)", 1.0)
    check("W10 NMS @script / the NumPy loop (issue 17)", "W10 NMS", "nexus @script", "numpy loop", 1.5)
    check("W10 Viterbi @script / the NumPy loop (issue 17)", "W10 Viterbi", "nexus @script", "numpy loop", 1.5)
    check("W9 speedup llvm vs NumPy in-place out= (issue 12)", "W9", "nexus llvm", "numpy in-place out=", 2.0,
          speedup=True)
    check("W2 xla / JAX lax.while_loop per iteration (issue 11)", "W2", "nexus xla", "jax jit while_loop", 1.3)
    check("W3-small xla / JAX lax.while_loop (issue 11)", "W3 RNN small", "nexus xla", "jax jit while_loop", 1.3)
    check("W4-small xla gradient (T at run time) / JAX grad through lax.scan (issue 11)", "W4 RNN gradient small",
          "nexus xla", "jax scan (jit)", 2.0)
    xla = _row(rows, "W7 fresh function to first result, RNN T=1000", "nexus xla script + compile + call")
    jax = _row(rows, "W7 fresh function to first result, RNN T=1000", "jax jit lower+compile + call")
    if xla is not None and jax is not None:
        out.append(f"- W7 compile + first call, xla {xla.median * 1e3:.0f} ms beside JAX's own {jax.median * 1e3:.0f} "
                   f"ms (issue 11: reported, no target)")
    return out


def write_readme(text: str) -> None:
    old = README.read_text() if README.exists() else f"# Benchmarks\n\n{BEGIN}\n{END}\n"
    if BEGIN not in old:
        old += f"\n{BEGIN}\n{END}\n"
    new = re.sub(re.escape(BEGIN) + ".*?" + re.escape(END), lambda _: f"{BEGIN}\n{text}\n{END}", old, flags=re.S)
    README.write_text(new)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", default=",".join(WORKLOADS), help="comma-separated workloads (W1,W2,W3,W6)")
    ap.add_argument("-r", "--repeats", type=int, default=7, help="interleaved repeats per implementation")
    ap.add_argument("--write-readme", action="store_true", help="replace the table in bench/README.md")
    a = ap.parse_args(argv)
    before = machine()
    rows: list[Row] = []
    t0 = time.perf_counter()
    for name in a.only.split(","):
        print(f"running {name} ...", flush=True)
        rows += WORKLOADS[name.strip().upper()](a.repeats)
    after = machine()
    text = "\n".join([
        f"Measured {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} with `python -m bench -r {a.repeats}` "
        f"({time.perf_counter() - t0:.0f} s).",
        f"Machine at start: {before}.", f"Machine at end: {after}.", "",
        "Median, min and max over interleaved rounds; *Nexus / this* is the median over rounds of "
        "Nexus's time over this row's time in the same round (below 1: Nexus is faster).  "
        "W6 rows compare with *nexus sequential* (above 1: faster than sequential).", "",
        table(rows), "", "Targets:", *targets(rows),
    ])
    print(text)
    if a.write_readme:
        write_readme(text)
        print(f"wrote {README}")
    return 0 if all(r.ok for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
