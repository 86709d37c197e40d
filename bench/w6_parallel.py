"""W6: one block with 4 independent chains of 3 x (512x512 matmul + relu), summed.
Nexus sequential vs parallel (Kahn groups on the thread pool) and NumPy, once with BLAS
pinned to one thread in both, once with BLAS's default threads.  Each setting runs in a
subprocess, because BLAS reads its thread count from the environment at load time.

    python -m bench.w6_parallel --json [--repeats N]   # one setting, rows as JSON
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from bench.common import PIN_BLAS, Row, measure, rows_from, subprocess_rows

N, CHAINS, DEPTH = 512, 4, 3


def numpy_chains(x: Any, *ws: Any) -> Any:
    outs = []
    for c in range(CHAINS):
        v = x
        for k in range(DEPTH):
            v = np.maximum(v @ ws[c * DEPTH + k], 0)
        outs.append(v)
    return outs[0] + outs[1] + outs[2] + outs[3]


def chain(x: Any, ws: Any, c: int) -> Any:
    for k in range(DEPTH):
        x = np.maximum(x @ ws[c * DEPTH + k], 0)
    return x


def numpy_threads(pool: ThreadPoolExecutor, x: Any, *ws: Any) -> Any:
    """The chains split over two threads by hand: what the machine's cores allow."""
    futs = [pool.submit(lambda cs: [chain(x, ws, c) for c in cs], cs) for cs in ((0, 1), (2, 3))]
    (a, b), (c, d) = (f.result() for f in futs)
    return a + b + c + d


def local(repeats: int, label: str) -> list[Row]:
    import nexus as nx
    from bench.graphs import w6_chains

    rng = np.random.default_rng(0)
    x = rng.normal(size=(N, N)).astype(np.float32)
    ws = [(rng.normal(size=(N, N)) / np.sqrt(N)).astype(np.float32) for _ in range(CHAINS * DEPTH)]
    g = w6_chains(N, CHAINS, DEPTH)
    pool = ThreadPoolExecutor(2)
    impls: dict[str, Callable[[], Any]] = {
        "nexus sequential": lambda: nx.run(g, x, *ws, parallel=False),
        "nexus parallel": lambda: nx.run(g, x, *ws, parallel=True),
        "nexus auto": lambda: nx.run(g, x, *ws),
        "numpy": lambda: numpy_chains(x, *ws),
        "numpy, 2 threads by hand": lambda: numpy_threads(pool, x, *ws),
    }
    want = numpy_chains(x, *ws)
    ok = {k: bool(np.allclose(f(), want, rtol=1e-4, atol=1e-3)) for k, f in impls.items()}
    return rows_from(f"W6 4 chains x 3 (512 matmul+relu), {label}", measure(impls, repeats), "call", ok=ok,
                     base="nexus sequential")


def run(repeats: int) -> list[Row]:
    rows = []
    for label, env in [("BLAS 1 thread", PIN_BLAS), ("BLAS default threads", {})]:
        rows += subprocess_rows("bench.w6_parallel", ["--repeats", str(repeats), "--label", label], env)
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--label", default="this environment")
    a = ap.parse_args(argv)
    rows = local(a.repeats, a.label)
    if a.json:
        print(json.dumps([r.as_dict() for r in rows]))
    else:
        from bench.common import table

        print(table(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
