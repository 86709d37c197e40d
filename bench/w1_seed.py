"""W1: seed 000's loop (sum 1..10 skipping 5, break once sum > 25 = 31): latency of one call."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import nexus as nx
from bench import onnx_models
from bench.common import Row, Skip, measure, rows_from
from bench.graphs import w1_seed

ANSWER = 31


def python() -> int:
    s, i = 0, 1
    while i <= 10:
        if i == 5:
            i += 1
            continue
        s += i
        i += 1
        if s > 25:
            break
    return s


def torchscript() -> Callable[[], Any]:
    import torch

    @torch.jit.script
    def seed(s: int, i: int) -> int:
        while i <= 10:
            if i == 5:
                i += 1
                continue
            s += i
            i += 1
            if s > 25:
                break
        return s

    return lambda: seed(0, 1)


def jax_seed(n: Any) -> Any:
    """Seed 000's loop up to ``n`` in JAX (``lax.while_loop`` + ``lax.cond``), to be jitted."""
    import jax.numpy as jnp
    from jax import lax

    def step(st: Any) -> Any:
        i, s, _ = st
        skip = i == 5
        s2 = lax.cond(skip, lambda: s, lambda: s + i)
        return i + 1, s2, jnp.logical_and(jnp.logical_not(skip), s2 > 25)

    init = (jnp.int32(1), jnp.int32(0), jnp.bool_(False))
    return lax.while_loop(lambda st: jnp.logical_and(st[0] <= n, jnp.logical_not(st[2])), step, init)[1]


def jax_fn() -> Callable[[], Any]:
    import jax

    seed = jax.jit(lambda: jax_seed(10))
    return lambda: seed().block_until_ready()


def llvm(g: Any) -> Callable[[], Any]:
    """The graph compiled to native code (issue 12): one ctypes call."""
    try:
        exe = nx.compile(g, backend="llvm")
    except ImportError as e:
        raise Skip(str(e)) from None
    return exe


def run(repeats: int) -> list[Row]:
    g = w1_seed()
    impls: dict[str, Callable[[], Any]] = {"nexus": lambda: nx.run(g), "python": python}
    try:
        impls["nexus llvm"] = llvm(g)
    except Skip:
        pass
    try:
        impls["nexus xla"] = nx.compile(g, backend="xla")
    except ImportError:
        pass
    peers = [("torchscript", torchscript), ("jax jit", jax_fn), ("onnxruntime Loop/If", onnx_models.seed_loop)]
    for name, make in peers:
        try:
            impls[name] = make()
        except (ImportError, Skip):
            pass
    ok = {name: int(fn()) == ANSWER for name, fn in impls.items()}
    times = measure(impls, repeats, number=200)
    return rows_from("W1 seed loop", times, "call", ok=ok)
