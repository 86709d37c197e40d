"""W4: gradient of sum(h_T) through the RNN ``h = tanh(x_t W^T + h U^T)`` over ``t < T``
(T a run-time value) w.r.t. W, U and h0.

Nexus graph mode (the gradient graph built once, run on the interpreter sequentially, as
``nx.grad`` does; "par" lets the interpreter run independent nodes on its pool) and tape
mode against PyTorch eager autograd, TorchScript + autograd and JAX ``grad`` through ``lax.scan`` (jitted).  Also
tries JAX ``grad`` through ``lax.while_loop`` and prints its error.  All in float32;
gradients are checked against PyTorch first.  Prints median, min and max per variant and
the ratio of medians to PyTorch eager, the paired ratios (median over rounds) to PyTorch
eager, TorchScript + autograd, JAX and Nexus graph mode, then the peak memory (tracemalloc) of graph mode,
tape mode and checkpointed tape mode.

    python bench/w4_grad.py [--size small|large|both] [--repeat N]
"""

from __future__ import annotations

import argparse
import functools
import math
import os
import statistics
import sys
import tracemalloc
from collections.abc import Callable
from typing import Any

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))


def _threads_from_argv() -> str:
    """``--threads N`` must act before NumPy, PyTorch and JAX start their thread pools."""
    for i, a in enumerate(sys.argv):
        if a == "--threads" and i + 1 < len(sys.argv):
            return sys.argv[i + 1]
        if a.startswith("--threads="):
            return a.split("=", 1)[1]
    return "1"


THREADS = _threads_from_argv()
if __name__ == "__main__":
    # Only as a script: imported by the suite runner (bench/run.py, W4), changing the
    # environment would also pin the threads of every later workload's subprocesses.
    for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[_var] = THREADS
    if THREADS == "1":
        os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_cpu_multi_thread_eigen=false").strip()

import numpy as np  # noqa: E402

import nexus as nx  # noqa: E402
from bench.common import measure  # noqa: E402
from nexus.autodiff.api import gradient_graph  # noqa: E402
from nexus.autodiff.examples import rnn  # noqa: E402

SIZES = {"small": dict(T=1000, D=32, H=32, B=1), "large": dict(T=100, D=512, H=512, B=64)}


def inputs(T: int, D: int, H: int, B: int) -> list[Any]:
    rng = np.random.default_rng(0)
    f = np.float32
    return [rng.normal(size=(T, B, D)).astype(f), (rng.normal(size=(H, D)) / np.sqrt(D)).astype(f),
            (rng.normal(size=(H, H)) / np.sqrt(H)).astype(f), rng.normal(size=(B, H)).astype(f) * f(0.1), T]


def torch_grad() -> Callable[..., Any]:
    import torch

    torch.set_num_threads(int(THREADS))

    def fn(xs: Any, W: Any, U: Any, h0: Any, T: int) -> Any:
        W, U, h0 = (torch.from_numpy(a).requires_grad_() for a in (W, U, h0))
        xs_t = torch.from_numpy(xs)
        h = h0
        for t in range(T):
            h = torch.tanh(xs_t[t] @ W.T + h @ U.T)
        h.sum().backward()
        return [p.grad.numpy() for p in (W, U, h0)]  # type: ignore[union-attr]

    return fn


def torchscript_grad() -> Callable[..., Any]:
    """The loop scripted with TorchScript, differentiated by autograd (its profiling
    executor builds differentiable graphs after the warm-up calls)."""
    import torch

    torch.set_num_threads(int(THREADS))

    @torch.jit.script
    def loop(xs: torch.Tensor, W: torch.Tensor, U: torch.Tensor, h0: torch.Tensor, T: int) -> torch.Tensor:
        h = h0
        for t in range(T):
            h = torch.tanh(xs[t] @ W.t() + h @ U.t())
        return h

    def fn(xs: Any, W: Any, U: Any, h0: Any, T: int) -> Any:
        W, U, h0 = (torch.from_numpy(a).requires_grad_() for a in (W, U, h0))
        loop(torch.from_numpy(xs), W, U, h0, T).sum().backward()
        return [p.grad.numpy() for p in (W, U, h0)]  # type: ignore[union-attr]

    return fn


def jax_scan_grad() -> Callable[..., Any]:
    import jax
    import jax.numpy as jnp

    def loss(W: Any, U: Any, h0: Any, xs: Any) -> Any:
        def cell(h: Any, x: Any) -> Any:
            h = jnp.tanh(x @ W.T + h @ U.T)
            return h, None

        h, _ = jax.lax.scan(cell, h0, xs)
        return h.sum()

    g = jax.jit(jax.grad(loss, argnums=(0, 1, 2)))

    def fn(xs: Any, W: Any, U: Any, h0: Any, T: int) -> Any:
        out = g(W, U, h0, xs[:T])
        return [np.asarray(jax.block_until_ready(o)) for o in out]

    return fn


def _xla_grad(g: Any) -> Callable[..., Any]:
    """nx.grad of the graph compiled by the xla backend (T stays a run-time value)."""
    exe = nx.compile(nx.grad(g, argnums=(1, 2, 3)), backend="xla")
    return lambda *a: list(exe(*a))


def _llvm_grad(g: Any) -> Callable[..., Any]:
    """nx.grad of the graph compiled by the llvm backend (the tape a native stack)."""
    exe = nx.compile(nx.grad(g, argnums=(1, 2, 3)), backend="llvm")
    return lambda *a: list(exe(*a))


def jax_while_message(args: list[Any]) -> str:
    """JAX's answer to reverse-mode through lax.while_loop (a run-time trip count)."""
    import jax
    import jax.numpy as jnp

    xs, W, U, h0, T = args
    xs = jnp.asarray(xs)

    def loss(W: Any, U: Any, h0: Any) -> Any:
        def body(c: Any) -> Any:
            t, h = c
            return t + 1, jnp.tanh(xs[t] @ W.T + h @ U.T)

        _, h = jax.lax.while_loop(lambda c: c[0] < T, body, (0, h0))
        return h.sum()

    try:
        jax.grad(loss, argnums=(0, 1, 2))(W, U, h0)
    except Exception as e:  # noqa: BLE001  (the failure is what we report)
        return f"{type(e).__name__}: {str(e).splitlines()[0]}"
    return "no error (unexpected)"


def timeit(fns: dict[str, Callable[[], Any]], repeat: int) -> dict[str, list[float]]:
    """Times each variant ``repeat`` times, interleaved (bench.common.measure) so that
    load changes on a shared machine hit all variants alike; three warm-up calls build
    and cache the gradient graph, jit-compile JAX and let TorchScript's profiling
    executor optimise."""
    return measure(fns, repeat, warmup=3)


def paired(times: dict[str, list[float]], a: str, b: str) -> float:
    """The median over rounds of a's time over b's in the same round."""
    return statistics.median(x / y for x, y in zip(times[a], times[b]))


def peak(fn: Callable[[], Any]) -> int:
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def run_size(name: str, repeat: int, memory: bool) -> None:
    p = SIZES[name]
    args = inputs(p["T"], p["D"], p["H"], p["B"])
    g = rnn(dtype="f32", batched=True)
    gg = gradient_graph(g, (1, 2, 3), "ones")
    variants: dict[str, Callable[..., Any]] = {
        "nexus graph": lambda *a: nx.grad(g, argnums=(1, 2, 3), mode="graph")(*a),
        "nexus graph par": lambda *a: list(nx.run(gg, *a, parallel=None))[1:],
        "nexus tape": lambda *a: nx.grad(g, argnums=(1, 2, 3), mode="tape")(*a),
        "torch eager": torch_grad(),
        "torchscript": torchscript_grad(),
        "jax scan (jit)": jax_scan_grad(),
        "nexus xla": _xla_grad(g),
        "nexus llvm": _llvm_grad(g),
    }
    want = variants["torch eager"](*args)
    for label, fn in variants.items():
        got = fn(*args)
        for a, b in zip(got, want):
            err = float(np.max(np.abs(a - b)) / (np.max(np.abs(b)) + 1e-30))
            if err > 1e-3:
                raise SystemExit(f"{label}: gradient differs from PyTorch (max rel err {err:.2e})")
    print(f"\n{name}: T={p['T']} D={p['D']} H={p['H']} batch={p['B']} float32, {repeat} runs, {THREADS} thread(s)")
    calls: dict[str, Callable[[], Any]] = {}
    for label, fn in variants.items():
        calls[label] = lambda fn=fn: fn(*args)  # type: ignore[misc]
    times = timeit(calls, repeat)
    base = statistics.median(times["torch eager"])
    print(f"{'variant':<16}{'median ms':>11}{'min ms':>10}{'max ms':>10}{'vs torch':>10}{'paired':>8}"
          f"{'vs TS':>7}{'vs JAX':>8}{'vs graph':>10}")
    for label, ts in times.items():
        med = statistics.median(ts)
        print(f"{label:<16}{med * 1e3:>11.2f}{min(ts) * 1e3:>10.2f}{max(ts) * 1e3:>10.2f}{med / base:>9.2f}x"
              f"{paired(times, label, 'torch eager'):>7.2f}x{paired(times, label, 'torchscript'):>6.2f}x"
              f"{paired(times, label, 'jax scan (jit)'):>7.2f}x{paired(times, label, 'nexus graph'):>9.2f}x")
    print(f"tape / graph (paired): {paired(times, 'nexus tape', 'nexus graph'):.2f}x")
    for peer in ("nexus graph", "jax scan (jit)", "torch eager"):
        r = [x / y for x, y in zip(times["nexus xla"], times[peer])]
        print(f"xla / {peer} per round: median {statistics.median(r):.3f}x ({min(r):.3f}..{max(r):.3f})")
    print(f"jax grad through lax.while_loop: {jax_while_message(args)}")
    if memory:
        every = int(math.sqrt(2 * p["T"]))  # two block entries per iteration
        peaks = {
            "nexus graph (stack)": peak(lambda: variants["nexus graph"](*args)),
            "nexus tape": peak(lambda: variants["nexus tape"](*args)),
            f"tape checkpoint={every}": peak(lambda: nx.grad(g, argnums=(1, 2, 3), mode="tape",
                                                             checkpoint=every)(*args)),
        }
        print(f"peak memory (tracemalloc, NumPy buffers included; 1/sqrt(T) = {1 / math.sqrt(p['T']):.3f})")
        full = peaks["nexus tape"]
        for label, b in peaks.items():
            print(f"  {label:<24}{b / 1e6:>9.2f} MB {b / full:>7.3f} of tape")


def run(repeats: int) -> list[Any]:
    """For the suite runner (``python -m bench --only W4``): W4-small, the xla backend's
    gradient (T at run time) against JAX ``grad`` through ``lax.scan`` (T fixed at trace
    time), interleaved in this process; the full comparison is ``python bench/w4_grad.py``."""
    from bench.common import rows_from

    p = SIZES["small"]
    args = inputs(p["T"], p["D"], p["H"], p["B"])
    g = rnn(dtype="f32", batched=True)
    impls: dict[str, Callable[..., Any]] = {"nexus xla": _xla_grad(g), "nexus llvm": _llvm_grad(g),
                                            "jax scan (jit)": jax_scan_grad()}
    want = impls["jax scan (jit)"](*args)
    ok = {k: all(np.allclose(a, b, rtol=1e-3, atol=1e-4) for a, b in zip(fn(*args), want)) for k, fn in impls.items()}
    calls: dict[str, Callable[[], Any]] = {k: functools.partial(fn, *args) for k, fn in impls.items()}
    times = measure(calls, repeats, warmup=3)
    return rows_from(f"W4 RNN gradient small (T={p['T']} at run time, D=H={p['D']})", times, "call", ok=ok)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", choices=["small", "large", "both"], default="both")
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--threads", default="1", help="BLAS/PyTorch/XLA threads for every variant (default 1: "
                    "a shared machine oversubscribed by BLAS threads gives meaningless times)")
    ap.add_argument("--no-memory", action="store_true", help="skip the tracemalloc peak-memory table")
    a = ap.parse_args(argv)
    for name in (["small", "large"] if a.size == "both" else [a.size]):
        run_size(name, a.repeat, memory=not a.no_memory)
    return 0


if __name__ == "__main__":
    sys.exit(main())
