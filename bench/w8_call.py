"""W8: call overhead.  What one call costs when the graph does almost nothing.

- identity: ``return x`` on an f32[4] array, as an ``@nx.script`` function, as a graph called
  with ``nx.run(g, x)``, as ``g(x)``, against TorchScript's empty function and plain Python;
- W1 with its bound as an argument (seed 000's loop up to ``n``, n = 10 gives 31): through
  ``@nx.script``, as a DSL graph called with ``nx.run(g, n)``, and as the IR graph with the
  bound built in (W1's graph), against TorchScript, plain Python and ``jax.jit`` of the same
  loop with n as its argument (issue 33: the xla row at most 1.3x of it).

Issue 10's targets: W1 through ``@nx.script`` within 1.3x of the DSL graph with the same
argument, and the script call floor (identity) below TorchScript's.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

import nexus as nx
from bench.common import Row, Skip, measure, rows_from
from bench.graphs import w1_seed
from bench.w1_seed import jax_seed

ANSWER = 31


def py_seed(n: int) -> int:
    s, i = 0, 1
    while i <= n:
        if i == 5:
            i += 1
            continue
        s += i
        i += 1
        if s > 25:
            break
    return s


def _script_seed() -> Callable[..., Any]:
    @nx.script
    def seed(n: int) -> Any:
        s = 0
        i = 1
        while i <= n:
            if i == 5:
                i += 1
                continue
            s += i
            i += 1
            if s > 25:
                break
        return s

    return seed


def _dsl_seed() -> Any:
    with nx.function("seed", n="i64") as f:
        (n,) = f.args
        s = nx.constant(0, dtype="i64")
        i = nx.constant(1, dtype="i64")
        with nx.while_loop(i <= n):
            with nx.if_cond(i == 5):
                with nx.then():
                    i = i + 1
                    nx.continue_()
            s = s + i
            i = i + 1
            with nx.if_cond(s > 25):
                with nx.then():
                    nx.break_()
        f.returns(s)
    return f.graph


def _torch() -> tuple[Callable[..., Any], Callable[..., Any]]:
    import torch

    @torch.jit.script
    def ident(x: torch.Tensor) -> torch.Tensor:
        return x

    @torch.jit.script
    def seed(n: int) -> int:
        s, i = 0, 1
        while i <= n:
            if i == 5:
                i += 1
                continue
            s += i
            i += 1
            if s > 25:
                break
        return s

    return ident, seed


def _numba_seed() -> Callable[..., Any]:
    """numba's dispatcher on the same loop (a peer where numba is installed)."""
    try:
        import numba
    except ImportError as e:
        raise Skip(str(e)) from None
    seed = numba.njit(py_seed)
    seed(10)
    return seed


def run(repeats: int) -> list[Row]:
    x = np.arange(4, dtype=np.float32)

    @nx.script
    def ident(x: Any) -> Any:
        return x

    with nx.function("ident", x=("f32", (4,))) as f:
        f.returns(f.args[0])
    gid = f.graph
    sseed, dseed, fixed = _script_seed(), _dsl_seed(), w1_seed()
    ident_impls: dict[str, Callable[[], Any]] = {
        "nexus @script": lambda: ident(x), "nexus nx.run(g, x)": lambda: nx.run(gid, x),
        "nexus g(x)": lambda: gid(x), "python": lambda: (lambda v: v)(x)}
    seed_impls: dict[str, Callable[[], Any]] = {
        "nexus @script(n)": lambda: sseed(10), "nexus DSL nx.run(g, n)": lambda: nx.run(dseed, 10),
        "nexus graph, n built in": lambda: nx.run(fixed), "python": lambda: py_seed(10)}
    # the README's way of picking a backend: nx.compile of the @nx.script function
    for backend in ("python", "llvm", "xla"):
        try:
            exe = nx.compile(sseed, backend=backend)
            exe(10)
        except ImportError:
            continue
        seed_impls[f"nexus nx.compile(script, {backend})(n)"] = lambda exe=exe: exe(10)
    try:  # issue 33's peer for the xla row: JAX's own jit of the same loop, n an argument
        import jax

        jseed = jax.jit(jax_seed)
        seed_impls["jax jit(n)"] = lambda: jseed(10).block_until_ready()
        seed_impls["jax jit(n), NumPy result"] = lambda: np.asarray(jseed(10))  # what Nexus returns
    except ImportError:
        pass
    try:
        nseed = _numba_seed()
        seed_impls["numba njit(n)"] = lambda: nseed(10)
    except Skip:
        pass
    try:
        tid, tseed = _torch()
        tx = __import__("torch").from_numpy(x)
        ident_impls["torchscript"] = lambda: tid(tx)
        seed_impls["torchscript"] = lambda: tseed(10)
    except (ImportError, Skip):
        pass
    ok_id = {k: np.array_equal(np.asarray(fn()), x) for k, fn in ident_impls.items()}
    ok_seed = {k: int(fn()) == ANSWER for k, fn in seed_impls.items()}
    rows = rows_from("W8 identity call", measure(ident_impls, repeats, number=2000), "call", ok=ok_id)
    rows += rows_from("W8 W1 with n as argument", measure(seed_impls, repeats, number=500), "call", ok=ok_seed)
    return rows
