"""W2: ``s = (s + i*i) % 1000003`` for ``i < N``, N = 100000 given at run time: time per
iteration (int64 everywhere)."""

from __future__ import annotations

import ctypes
import functools
from collections.abc import Callable
from typing import Any

import numpy as np

import nexus as nx
from bench import cpeer, onnx_models
from bench.common import Row, Skip, measure, rows_from
from bench.graphs import MOD, w2_count

N = 100_000


def python(n: int) -> int:
    s = i = 0
    while i < n:
        s = (s + i * i) % MOD
        i += 1
    return s


def numpy_scalars(n: int) -> Any:
    """The same loop on NumPy int64 scalars: the arithmetic Nexus's scalars cost."""
    s, i, one, m = np.int64(0), np.int64(0), np.int64(1), np.int64(MOD)
    while i < n:
        s = (s + i * i) % m
        i = i + one
    return s


def torchscript() -> Callable[[int], Any]:
    import torch

    @torch.jit.script
    def count(n: int) -> int:
        s = 0
        i = 0
        while i < n:
            s = (s + i * i) % 1000003
            i += 1
        return s

    return count


def jax_fn() -> Callable[[int], Any]:
    import jax

    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp
    from jax import lax

    @jax.jit
    def count(n: Any) -> Any:
        def body(st: Any) -> Any:
            i, s = st
            return i + 1, (s + i * i) % MOD

        return lax.while_loop(lambda st: st[0] < n, body, (jnp.int64(0), jnp.int64(0)))[1]

    return lambda n: count(jnp.int64(n)).block_until_ready()


C_SOURCE = f"""
long long count(long long n) {{
    long long s = 0;
    for (long long i = 0; i < n; i++) s = (s + i * i) % {MOD}LL;
    return s;
}}
"""


def c_gcc() -> Callable[[int], Any]:
    """The loop in C, gcc -O3 (values stay non-negative, so C's % is Python's here)."""
    lib = cpeer.build(C_SOURCE)
    fn = lib.count
    fn.argtypes, fn.restype = [ctypes.c_longlong], ctypes.c_longlong
    return fn  # type: ignore[no-any-return]


def llvm(g: Any) -> Callable[[int], Any]:
    try:
        return nx.compile(g, backend="llvm")  # type: ignore[no-any-return]
    except ImportError as e:
        raise Skip(str(e)) from None


def run(repeats: int) -> list[Row]:
    g = w2_count()
    impls: dict[str, Callable[[int], Any]] = {"nexus": lambda n: nx.run(g, n), "python": python,
                                              "python on numpy scalars": numpy_scalars}
    for name, make in [("nexus llvm", lambda: llvm(g)), ("C gcc -O3", c_gcc)]:
        try:
            impls[name] = make()
        except Skip:
            pass
    try:
        impls["nexus xla"] = nx.compile(g, backend="xla")
    except ImportError:
        pass
    for name, make in [("torchscript", torchscript), ("jax jit while_loop", jax_fn),
                       ("onnxruntime Loop", onnx_models.count_loop)]:
        try:
            impls[name] = make()
        except (ImportError, Skip):
            pass
    want = python(N)
    ok = {name: int(fn(N)) == want for name, fn in impls.items()}
    times = measure({k: functools.partial(f, N) for k, f in impls.items()}, repeats)
    return rows_from("W2 count loop", times, "iter", per=N, ok=ok)
