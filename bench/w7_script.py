"""W7: from a fresh Python function to its first result.

The W3 RNN ``h = tanh(x_t @ W + h @ U)`` (f32, D=H=32, batch 1), written as a plain Python
function with a ``while`` loop.  Each timed call takes a *fresh* function (its own code
object, so no frontend cache can help) and measures:

- nexus: ``nx.script(fn)`` + the first call (parse, SSA build, interpreter preparation,
  run); also the build alone and a warm call alone, to separate build from run time;
- TorchScript: ``torch.jit.script(fn)`` + two calls (its profiling executor optimises on
  the second call);
- JAX: ``jax.jit(fn).lower(...).compile()`` + one call (``lax.while_loop`` version);
- nexus xla: ``nx.compile(nx.script(fn), backend="xla")`` + the first call (script, then
  lowering to XLA through JAX and XLA's compile: the row beside JAX's own compile time);
- ONNX Runtime: building the ``Loop`` model with ``onnx.helper`` + the session + one run.

Two sizes: T=1000 (W3 small: the run dominates) and T=1 (the build dominates).
Each implementation runs in a process of its own (``--peer all`` interleaves them in one,
as the other workloads do): a JAX compile slowed every later call in its process by 1.6x.
``python bench/w7_script.py`` prints the table (``--json`` for the runner).
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import json
import os
import sys
import tempfile
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

if __package__ in (None, ""):  # run as a file: make `bench` and `nexus` importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import nexus as nx  # noqa: E402
from bench.common import Row, Skip, measure, rows_from, subprocess_rows, table  # noqa: E402

D = H = 32
B = 1
FRESH = 24  # fresh functions per implementation and size (warm-up + repeats <= this)

NEXUS_SRC = '''
def rnn_{k}(xs, w, u, h, T: int):
    t = 0
    while t < T:
        h = np.tanh(xs[t] @ w + h @ u)
        t += 1
    return h
'''
TORCH_SRC = '''
def trnn_{k}(xs: torch.Tensor, w: torch.Tensor, u: torch.Tensor, h: torch.Tensor, T: int) -> torch.Tensor:
    t = 0
    while t < T:
        h = torch.tanh(xs[t] @ w + h @ u)
        t += 1
    return h
'''
JAX_SRC = '''
def jrnn_{k}(xs, w, u, h, T):
    def body(st):
        t, h = st
        return t + 1, jnp.tanh(lax.dynamic_index_in_dim(xs, t, keepdims=False) @ w + h @ u)
    return lax.while_loop(lambda st: st[0] < T, body, (jnp.asarray(0, T.dtype), h))[1]
'''


def inputs(T: int) -> tuple[Any, ...]:
    rng = np.random.default_rng(0)
    f = np.float32
    return (rng.normal(size=(T, B, D)).astype(f), (rng.normal(size=(D, H)) / np.sqrt(D)).astype(f),
            (rng.normal(size=(H, H)) / np.sqrt(H)).astype(f), (rng.normal(size=(B, H)) * 0.1).astype(f), T)


def numpy_loop(xs: Any, w: Any, u: Any, h: Any, T: int) -> Any:
    for t in range(T):
        h = np.tanh(xs[t] @ w + h @ u)
    return h


def fresh_functions(template: str, prefix: str, header: str, n: int, tmp: str) -> Iterator[Any]:
    """``n`` distinct functions (own code objects and names) from a real file, so that
    ``inspect.getsource`` works for every frontend."""
    path = os.path.join(tmp, f"w7_{prefix}.py")
    with open(path, "w") as fh:
        fh.write(header + "".join(template.format(k=k) for k in range(n)))
    spec = importlib.util.spec_from_file_location(f"w7_{prefix}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return iter([getattr(module, f"{prefix}_{k}") for k in range(n)])


def nexus_impls(args: tuple[Any, ...], tmp: str, tag: str) -> dict[str, Callable[[], Any]]:
    first = fresh_functions(NEXUS_SRC, "rnn", "import numpy as np\n", FRESH, os.path.join(tmp, "a" + tag))
    build = fresh_functions(NEXUS_SRC, "rnn", "import numpy as np\n", FRESH, os.path.join(tmp, "b" + tag))
    warm = nx.script(next(fresh_functions(NEXUS_SRC, "rnn", "import numpy as np\n", 1,
                                          os.path.join(tmp, "c" + tag))))
    warm(*args)
    return {
        "nexus script + first call": lambda: nx.script(next(first))(*args),
        "nexus script + build only": lambda: nx.script(next(build)).graph_for(*args),
        "nexus warm call (run only)": lambda: warm(*args),
    }


def torch_impl(args: tuple[Any, ...], tmp: str) -> Callable[[], Any]:
    import torch

    fns = fresh_functions(TORCH_SRC, "trnn", "import torch\n", FRESH, tmp)
    targs = [torch.from_numpy(a) for a in args[:4]]

    def run() -> Any:
        f = torch.jit.script(next(fns))
        f(*targs, args[4])
        return f(*targs, args[4]).numpy()

    return run


def jax_impl(args: tuple[Any, ...], tmp: str) -> Callable[[], Any]:
    import jax

    fns = fresh_functions(JAX_SRC, "jrnn", "import jax.numpy as jnp\nfrom jax import lax\n", FRESH, tmp)
    jargs = (*args[:4], np.int32(args[4]))

    def run() -> Any:
        compiled = jax.jit(next(fns)).lower(*jargs).compile()
        return np.asarray(compiled(*jargs))

    return run


def xla_impl(args: tuple[Any, ...], tmp: str) -> Callable[[], Any]:
    """A fresh function scripted, compiled by the xla backend, and called once."""
    import nexus.backends.xla  # noqa: F401  (ImportError without jax: the row is skipped)

    os.makedirs(os.path.join(tmp, "x"), exist_ok=True)
    fns = fresh_functions(NEXUS_SRC, "rnn", "import numpy as np\n", FRESH, os.path.join(tmp, "x"))
    return lambda: nx.compile(nx.script(next(fns)), backend="xla")(*args)


def onnx_impl(args: tuple[Any, ...]) -> Callable[[], Any]:
    from bench import onnx_models

    return lambda: onnx_models.rnn_loop()(*args)


PEERS = ("nexus", "nexus-xla", "torchscript", "jax", "onnxruntime")


def isolated(repeats: int, sizes: tuple[int, ...]) -> list[Row]:
    """Each implementation in a process of its own.  Measured together, a JAX compile
    left the process 1.6x slower for every later nexus call (warm calls included, GC and
    pauses ruled out), which is JAX's cost, not the build time of the others."""
    arg = ["--repeats", str(repeats), "--sizes", ",".join(map(str, sizes)), "--no-scripts"]
    rows: list[Row] = []
    for peer in PEERS:
        try:
            rows += subprocess_rows("bench.w7_script", [*arg, "--peer", peer], {})
        except Exception as e:  # noqa: BLE001  (a peer that fails is reported, not fatal)
            print(f"w7: {peer} failed in its process: {e}", file=sys.stderr)
    for r in rows:  # ratios across processes: of medians, not paired by round
        base = next((b for b in rows if b.workload == r.workload and b.impl == "nexus script + first call"), None)
        r.ratio = base.median / r.median if base is not None and r.median > 0 else None
        r.note = "own process; ratio of medians"
    return rows


def local(repeats: int, sizes: tuple[int, ...], peer: str = "all") -> list[Row]:
    """All implementations interleaved in this process, or only ``peer``'s."""
    rows: list[Row] = []
    with tempfile.TemporaryDirectory() as tmp:
        for T in sizes:
            args = inputs(T)
            want = numpy_loop(*args)
            sub = os.path.join(tmp, f"T{T}")
            os.makedirs(sub)
            for d in ("aT", "bT", "cT"):
                os.makedirs(os.path.join(sub, d + str(T)))
            impls = nexus_impls(args, sub, "T" + str(T)) if peer in ("all", "nexus") else {}
            for group, name, make in [
                ("torchscript", "torchscript script + 2 calls", lambda: torch_impl(args, sub)),
                ("jax", "jax jit lower+compile + call", lambda: jax_impl(args, sub)),
                ("nexus-xla", "nexus xla script + compile + call", lambda: xla_impl(args, sub)),
                ("onnxruntime", "onnxruntime Loop model + session + run", lambda: onnx_impl(args)),
            ]:
                if peer not in ("all", group):
                    continue
                try:
                    impls[name] = make()
                except (ImportError, Skip):
                    pass
            ok = {}
            for name, fn in impls.items():
                out = fn()
                ok[name] = name.endswith("build only") or bool(np.allclose(np.asarray(out), want, rtol=1e-3,
                                                                            atol=1e-4))
            times = measure(impls, repeats, warmup=0)
            rows += rows_from(f"W7 fresh function to first result, RNN T={T} (D=H={D}, batch {B})", times,
                              "call", ok=ok)
    return rows


def script_versions(repeats: int) -> list[Row]:
    """W1-W3 through @nx.script: the script of the plain Python function against the
    hand-built graph of ``bench/graphs.py`` and plain Python (run time, warm)."""
    from bench import graphs, w1_seed, w2_count, w3_rnn

    rows: list[Row] = []
    n = 10_000
    w3_args = w3_rnn.inputs(*w3_rnn.SIZES["small"])
    cases: list[tuple[str, Callable[..., Any], Any, tuple[Any, ...]]] = [
        ("W1 seed loop", w1_seed.python, graphs.w1_seed(), ()),
        (f"W2 count loop (N={n})", w2_count.python, graphs.w2_count(), (n,)),
        ("W3 RNN small (T=1000, D=H=32, batch 1)", w3_rnn.numpy_loop, graphs.w3_rnn(32, 32, 1), w3_args),
    ]
    for title, fn, hand, args in cases:
        scripted = nx.script(fn)
        want = fn(*args)
        impls: dict[str, Callable[[], Any]] = {
            "nexus @nx.script": functools.partial(scripted, *args),
            "nexus hand-built graph": functools.partial(nx.run, hand, *args),
            "plain Python": functools.partial(fn, *args),
        }
        ok = {k: bool(np.allclose(np.asarray(f(), dtype=np.float64), np.asarray(want, dtype=np.float64),
                                  rtol=1e-4, atol=1e-5)) for k, f in impls.items()}
        rows += rows_from(f"{title} via @nx.script", measure(impls, repeats), "call", ok=ok)
    return rows


def run(repeats: int) -> list[Row]:
    """For the suite runner."""
    return isolated(repeats, (1000, 1)) + script_versions(repeats)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--repeats", type=int, default=9)
    ap.add_argument("--sizes", default="1000,1")
    ap.add_argument("--no-scripts", action="store_true", help="skip the W1-W3 @nx.script rows")
    ap.add_argument("--peer", choices=("isolated", "all", *PEERS), default="isolated",
                    help="isolated (default): each implementation in its own process; all: interleaved "
                         "in this one; or only the one named")
    a = ap.parse_args(argv)
    if a.repeats + 2 > FRESH:
        ap.error(f"at most {FRESH - 2} repeats (fresh functions are made ahead)")
    sizes = tuple(int(s) for s in a.sizes.split(","))
    rows = isolated(a.repeats, sizes) if a.peer == "isolated" else local(a.repeats, sizes, a.peer)
    if not a.no_scripts:
        rows += script_versions(a.repeats)
    print(json.dumps([r.as_dict() for r in rows]) if a.json else table(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
