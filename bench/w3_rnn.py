"""W3: RNN forward ``h = tanh(x_t @ W + h @ U)`` over ``t < T`` (T given at run time),
float32: small (T=1000, D=H=32, batch 1) and large (T=100, D=H=512, batch 64)."""

from __future__ import annotations

import argparse
import functools
import json
from collections.abc import Callable
from typing import Any

import numpy as np

import nexus as nx
from bench import onnx_models
from bench.common import PIN_BLAS, Row, Skip, measure, rows_from, subprocess_rows, table
from bench.graphs import w3_rnn

SIZES = {"small": (1000, 32, 32, 1), "large": (100, 512, 512, 64)}  # T, D, H, batch


def inputs(T: int, D: int, H: int, B: int) -> tuple[Any, ...]:
    rng = np.random.default_rng(0)
    f = np.float32
    return (rng.normal(size=(T, B, D)).astype(f), (rng.normal(size=(D, H)) / np.sqrt(D)).astype(f),
            (rng.normal(size=(H, H)) / np.sqrt(H)).astype(f), (rng.normal(size=(B, H)) * 0.1).astype(f), T)


def numpy_loop(xs: Any, w: Any, u: Any, h: Any, T: int) -> Any:
    for t in range(T):
        h = np.tanh(xs[t] @ w + h @ u)
    return h


def torchscript() -> Callable[..., Any]:
    import torch

    @torch.jit.script
    def rnn(xs: torch.Tensor, w: torch.Tensor, u: torch.Tensor, h: torch.Tensor, T: int) -> torch.Tensor:
        t = 0
        while t < T:
            h = torch.tanh(xs[t] @ w + h @ u)
            t += 1
        return h

    def call(xs: Any, w: Any, u: Any, h: Any, T: int) -> Any:
        return rnn(*(torch.from_numpy(a) for a in (xs, w, u, h)), T).numpy()

    return call


def jax_fn() -> Callable[..., Any]:
    import jax
    import jax.numpy as jnp
    from jax import lax

    @jax.jit
    def rnn(xs: Any, w: Any, u: Any, h: Any, T: Any) -> Any:
        def body(st: Any) -> Any:
            t, h = st
            return t + 1, jnp.tanh(lax.dynamic_index_in_dim(xs, t, keepdims=False) @ w + h @ u)

        return lax.while_loop(lambda st: st[0] < T, body, (jnp.asarray(0, T.dtype), h))[1]

    def call(xs: Any, w: Any, u: Any, h: Any, T: int) -> Any:
        return np.asarray(rnn(xs, w, u, h, np.int32(T)))

    return call


def run(repeats: int) -> list[Row]:
    """Small in this process; large twice in subprocesses, BLAS pinned to one thread and
    with its default threads (on a loaded machine, default threads swing wildly)."""
    rows = local(repeats, ("small",), "")
    for label, env in [("BLAS 1 thread", PIN_BLAS), ("BLAS default threads", {})]:
        rows += subprocess_rows("bench.w3_rnn", ["--repeats", str(repeats), "--sizes", "large",
                                                 "--label", label], env)
    return rows


def local(repeats: int, sizes: tuple[str, ...], label: str) -> list[Row]:
    rows: list[Row] = []
    for size in sizes:
        T, D, H, B = SIZES[size]
        args = inputs(T, D, H, B)
        g = w3_rnn(D, H, B)
        impls: dict[str, Callable[..., Any]] = {"nexus": lambda *a, g=g: nx.run(g, *a), "numpy loop": numpy_loop}
        for backend in ("xla", "llvm"):
            try:
                impls[f"nexus {backend}"] = nx.compile(g, backend=backend)
            except ImportError:
                pass
        if size == "large":
            impls["nexus sequential"] = lambda *a, g=g: nx.run(g, *a, parallel=False)
        for name, make in [("torchscript", torchscript), ("jax jit while_loop", jax_fn),
                           ("onnxruntime Loop", onnx_models.rnn_loop)]:
            try:
                impls[name] = make()
            except (ImportError, Skip):
                pass
        want = numpy_loop(*args)
        ok = {name: bool(np.allclose(fn(*args), want, rtol=1e-3, atol=1e-4)) for name, fn in impls.items()}
        # Small calls take milliseconds: several per round and more rounds steady the medians.
        number, rounds = (3, 3 * repeats) if size == "small" else (1, repeats)
        times = measure({k: functools.partial(f, *args) for k, f in impls.items()}, rounds, number)
        title = f"W3 RNN {size} (T={T}, D=H={D}, batch {B}){', ' + label if label else ''}"
        rows += rows_from(title, times, "call", ok=ok)
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--sizes", default="small,large")
    ap.add_argument("--label", default="")
    a = ap.parse_args(argv)
    rows = local(a.repeats, tuple(a.sizes.split(",")), a.label)
    print(json.dumps([r.as_dict() for r in rows]) if a.json else table(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
