"""Where Nexus's time goes: the fixed cost of one call (W1) split into ``run``'s wrapper
and the generated code, cProfile of W2 and W3-small, and for W4 (the RNN gradient) the
NumPy calls per forward and reverse step of the gradient graph, counted on a run
(``nexus.autodiff.counts``), before and after the optimiser.

    python -m bench.profile
"""

from __future__ import annotations

import cProfile
import io
import pstats
import time
from collections.abc import Callable
from typing import Any

import nexus as nx
from bench import w1_seed, w2_count, w3_rnn
from bench.graphs import w1_seed as seed_graph
from bench.graphs import w2_count as count_graph
from bench.graphs import w3_rnn as rnn_graph
from nexus.autodiff.api import gradient_graph
from nexus.autodiff.counts import numpy_calls
from nexus.autodiff.examples import rnn
from nexus.backends.python.interpreter import prepare


def per_call(fn: Callable[[], Any], number: int = 2000, repeats: int = 7) -> float:
    """The fastest of ``repeats`` (load on a shared machine only ever adds time)."""
    ts = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(number):
            fn()
        ts.append((time.perf_counter() - t0) / number)
    return min(ts)


def profile(fn: Callable[[], Any], top: int = 8) -> str:
    pr = cProfile.Profile()
    pr.enable()
    fn()
    pr.disable()
    out = io.StringIO()
    pstats.Stats(pr, stream=out).sort_stats("tottime").print_stats(top)
    lines = out.getvalue().splitlines()
    start = next(i for i, line in enumerate(lines) if "ncalls" in line)
    return "\n".join(lines[start:start + top + 1])


def main() -> int:
    g = seed_graph()
    nx.run(g)
    gen = prepare(g).variant(False, "auto")
    fn = gen.fn
    print("W1 one call, split:")
    print(f"  nx.run(g)                 {per_call(lambda: nx.run(g)) * 1e9:8.0f} ns")
    print(f"  generated function alone  {per_call(lambda: fn(None)) * 1e9:8.0f} ns")
    print(f"  plain Python              {per_call(w1_seed.python) * 1e9:8.0f} ns")
    g2 = count_graph()
    n = w2_count.N
    print("\nW2 per iteration:")
    print(f"  nexus                     {per_call(lambda: nx.run(g2, n), 1, 5) / n * 1e9:8.1f} ns")
    print(f"  Python, NumPy scalars     {per_call(lambda: w2_count.numpy_scalars(n), 1, 5) / n * 1e9:8.1f} ns")
    print(f"  Python, Python ints       {per_call(lambda: w2_count.python(n), 1, 5) / n * 1e9:8.1f} ns")
    print("\nW2 cProfile (NumPy scalar operators are inlined bytecode: all time is in the generated function):")
    print(profile(lambda: nx.run(g2, n)))
    args = w3_rnn.inputs(*w3_rnn.SIZES["small"])
    g3 = rnn_graph(32, 32, 1)
    nx.run(g3, *args)
    print("\nW3-small cProfile (ufunc and @ calls are C slots, inside the generated function):")
    print(profile(lambda: nx.run(g3, *args)))
    print("\nW3-small generated code:")
    print(prepare(g3).variant(False, "auto").source)
    w4_section()
    return 0


def w4_section(t1: int = 4, t2: int = 12) -> None:
    """NumPy calls per step of the W4 RNN's gradient graph (batched, as bench/w4_grad.py):
    the difference between runs of ``t2`` and ``t1`` steps over ``t2 - t1``."""
    import numpy as np

    rng = np.random.default_rng(0)
    f = np.float32
    B, D, H = 2, 8, 8
    args = [rng.normal(size=(t2, B, D)).astype(f), rng.normal(size=(H, D)).astype(f),
            rng.normal(size=(H, H)).astype(f), rng.normal(size=(B, H)).astype(f)]
    g = rnn(dtype="f32", batched=True)
    print("\nW4 NumPy calls per RNN step (ops on arrays; stack ops, Projs and scalar control left out):")
    for label, opt in (("gradient graph as built", False), ("optimised (the default)", True)):
        gg = gradient_graph(g, (1, 2, 3), "ones", optimize=opt)
        f1, r1 = numpy_calls(gg, *args, t1)
        f2, r2 = numpy_calls(gg, *args, t2)
        fwd, rev = (f2 - f1) / (t2 - t1), (r2 - r1) / (t2 - t1)
        print(f"  {label:<26} forward {fwd:4.1f}  reverse {rev:4.1f}  reverse/forward {rev / fwd:.2f}")


if __name__ == "__main__":
    raise SystemExit(main())
