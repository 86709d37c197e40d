"""W-dist: collectives and data parallelism through nexus.distributed (gloo, this machine).

- AllReduce (sum) of 1M and 16M float32 on 2 ranks: a one-node Nexus graph (the
  AllReduce op, with and without the cross-rank signature check) against plain
  ``torch.distributed.all_reduce`` on a torch tensor, measured in the same run,
  interleaved round-robin; the paired ratio is the median over rounds of Nexus's time
  over plain torch.distributed's time in that round (1.00: no overhead).
- Data-parallel SGD step time of an MLP (64 -> 256 -> 10, tanh, MSE) on a global batch of
  4096 rows split over 1, 2 and 4 ranks (the gradient graph with AllReduce of each
  gradient), median over steps on rank 0.  The machine has 2 cores, so 4 ranks share
  them: the 4-rank row measures overhead, not scaling.

    python -m bench.w_dist [-r ROUNDS]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from typing import Any

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import numpy as np  # noqa: E402

import nexus as nx  # noqa: E402
from bench.common import fmt_time  # noqa: E402

SIZES = {"1M": 1 << 20, "16M": 1 << 24}


def _allreduce_graph(n: int) -> Any:
    with nx.function("allreduce", x=("f32", (n,))) as f:
        f.returns(nx.all_reduce(f.args[0], op="sum"))
    return f.graph


def allreduce_worker(rank: int, rounds: int) -> dict[str, dict[str, list[float]]]:
    """Times per round of each implementation, for each size (rank 0's clock)."""
    import torch
    import torch.distributed as dist

    from nexus.distributed import runtime

    comm = runtime.current()
    out: dict[str, dict[str, list[float]]] = {}
    for label, n in SIZES.items():
        x = np.full(n, rank + 1, np.float32)
        t = torch.from_numpy(x.copy())
        dg = runtime.DistributedGraph(_allreduce_graph(n))

        def nexus_checked() -> Any:
            return dg(x)

        def nexus_unchecked() -> Any:
            comm.check = False  # type: ignore[attr-defined]
            try:
                return dg(x)
            finally:
                comm.check = True  # type: ignore[attr-defined]

        def plain() -> Any:
            y = t.clone()  # Nexus's AllReduce leaves its input alone: copy here too
            dist.all_reduce(y)
            return y

        impls = {"nexus AllReduce node": nexus_checked, "nexus, check=False": nexus_unchecked,
                 "torch.distributed.all_reduce": plain}
        want = sum(r + 1 for r in range(runtime.world_size()))
        ok = {k: bool(np.all(np.asarray(fn()) == want)) for k, fn in impls.items()}
        times: dict[str, list[float]] = {k: [] for k in impls}
        names = list(impls)
        for r in range(rounds):
            for name in names[r % len(names):] + names[:r % len(names)]:
                dist.barrier()  # every rank starts each measurement together
                t0 = time.perf_counter()
                impls[name]()
                times[name].append(time.perf_counter() - t0)
        out[label] = {**times, "_ok": [float(all(ok.values()))]}
    return out


def dp_worker(rank: int, batch: int, steps: int) -> list[float]:
    from nexus.distributed import runtime
    from nexus.distributed.data_parallel import sgd_step

    world = runtime.world_size()
    n = batch // world
    rng = np.random.default_rng(0)
    params = [(rng.standard_normal(s) * 0.1).astype(np.float32) for s in ((64, 256), (256,), (256, 10), (10,))]
    x = rng.standard_normal((batch, 64)).astype(np.float32)[rank * n:(rank + 1) * n]
    y = rng.standard_normal((batch, 10)).astype(np.float32)[rank * n:(rank + 1) * n]
    with nx.function("mlp", w1=("f32", (64, 256)), b1=("f32", (256,)), w2=("f32", (256, 10)), b2=("f32", (10,)),
                     x=("f32", (n, 64)), y=("f32", (n, 10))) as f:
        w1, b1, w2, b2, xa, ya = f.args
        d = nx.sub(nx.add(nx.matmul(nx.tanh(nx.add(nx.matmul(xa, w1), b1)), w2), b2), ya)
        f.returns(nx.reduce_mean(nx.mul(d, d)))
    step = runtime.DistributedGraph(sgd_step(f.graph, 4, 0.01))
    p = params
    times = []
    for _ in range(steps + 1):
        t0 = time.perf_counter()
        _, *p = step(*p, x, y)
        times.append(time.perf_counter() - t0)
    return times[1:]  # the first step compiles the graph


def _row(name: str, ts: list[float], base: list[float] | None, unit: str = "call") -> str:
    ratio = statistics.median(a / b for a, b in zip(ts, base, strict=True)) if base else None
    r = f"{ratio:.2f}" if ratio is not None else "-"
    return (f"| {name} | {fmt_time(statistics.median(ts))} | {fmt_time(min(ts))} | {fmt_time(max(ts))} | "
            f"{unit} | {r} |")


def main() -> None:
    from nexus.distributed import spawn

    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("-r", "--rounds", type=int, default=15)
    ap.add_argument("--steps", type=int, default=20)
    args = ap.parse_args()
    print(f"load average at start: {' / '.join(f'{v:.1f}' for v in os.getloadavg())}")
    print("| workload | median | min | max | per | this / torch.distributed (paired) |")
    print("|---|---|---|---|---|---|")
    res = spawn(allreduce_worker, 2, (args.rounds,), timeout=600, comm_timeout=120)
    if any(r.error for r in res):
        raise SystemExit("\n".join(f"rank {r.rank}: {r.error}" for r in res if r.error))
    for label, times in res[0].value.items():
        base = times["torch.distributed.all_reduce"]
        for name, ts in times.items():
            if name != "_ok":
                print(_row(f"AllReduce {label} f32, 2 ranks: {name}", ts, base))
        if times["_ok"] != [1.0]:
            print(f"**MISMATCH** in AllReduce {label}")
    one: list[float] | None = None
    for world in (1, 2, 4):
        res = spawn(dp_worker, world, (4096, args.steps), timeout=600, comm_timeout=120)
        if any(r.error for r in res):
            raise SystemExit("\n".join(f"rank {r.rank}: {r.error}" for r in res if r.error))
        ts = res[0].value
        one = one or ts
        print(_row(f"data-parallel SGD step, batch 4096, {world} rank(s)", ts, None, "step")
              + f" vs 1 rank: {statistics.median(ts) / statistics.median(one):.2f}x")
    print(f"load average at end: {' / '.join(f'{v:.1f}' for v in os.getloadavg())}")


if __name__ == "__main__":
    main()
