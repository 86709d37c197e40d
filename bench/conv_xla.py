"""Convolution layers on the xla backend (issue 33) beside the same layer written directly in
JAX and PyTorch eager, one thread each: the layers of :mod:`bench.conv_kernels` (depthwise,
grouped, dense, pointwise), at batch 1 and 8.

- *nexus xla*: a graph of one ``Conv`` node compiled with ``nx.compile(g, backend="xla")``
  (its rule in ``nexus/backends/xla/rules_nn.py``: depthwise as a multiply-add per kernel
  position, 1x1 and few-channel kernels as a product batched over N);
- *jax conv*: ``jax.jit`` of ``lax.conv_general_dilated`` with ``feature_group_count``, what
  XLA:CPU itself does with the layer;
- *torch eager*: ``torch.nn.functional.conv2d`` (oneDNN), ``torch.set_num_threads(1)``.

XLA runs on one thread (``XLA_FLAGS=--xla_cpu_multi_thread_eigen=false
intra_op_parallelism_threads=1``, set before JAX loads).  Ratios are bench.common's: the
median over interleaved rounds of (nexus xla's time / that peer's) in the same round.

    python -m bench.conv_xla [-r 9] [--batch 1 8]
"""

from __future__ import annotations

import os
import sys

XLA_ONE_THREAD = "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"

if __name__ == "__main__":
    # Read when XLA and BLAS load: before JAX and NumPy.
    os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {XLA_ONE_THREAD}".strip()
    for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[_var] = "1"
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import argparse  # noqa: E402
from collections.abc import Callable  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402

from bench.common import Row, machine, measure, rows_from, table  # noqa: E402
from bench.conv_kernels import LAYERS, Layer  # noqa: E402


def _graph(layer: Layer, x: np.ndarray, w: np.ndarray) -> Any:
    from nexus.ir.graph import Graph
    from nexus.ir.types import TensorType

    g = Graph(layer.name.replace(" ", "_"), [TensorType("f32", x.shape)])
    b = g.start_block
    p = layer.dilation * (layer.k - 1) // 2
    attrs = {"strides": (layer.stride,) * 2, "pads": (p,) * 4, "dilations": (layer.dilation,) * 2,
             "group": layer.group}
    conv = g.add("Conv", [g.args[0], g.add("Constant", [], b, {"value": w})], b, attrs)
    g.end_block.append_input(g.add("Return", [conv], b))
    return g


def run_layer(layer: Layer, batch: int, repeats: int) -> list[Row]:
    import jax
    import torch
    from jax import lax

    import nexus as nx

    torch.set_num_threads(1)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((batch, layer.cin, layer.hw, layer.hw)).astype(np.float32)
    w = (rng.standard_normal((layer.cout, layer.cin // layer.group, layer.k, layer.k)) / layer.k).astype(np.float32)
    p = layer.dilation * (layer.k - 1) // 2
    exe = nx.compile(_graph(layer, x, w), backend="xla")
    own = jax.jit(lambda v: lax.conv_general_dilated(v, w, (layer.stride,) * 2, [(p, p)] * 2,
                                                     rhs_dilation=(layer.dilation,) * 2,
                                                     feature_group_count=layer.group))
    tx, tw = torch.from_numpy(x), torch.from_numpy(w)

    def eager() -> Any:
        with torch.no_grad():
            return torch.nn.functional.conv2d(tx, tw, stride=layer.stride, padding=p, dilation=layer.dilation,
                                              groups=layer.group).numpy()

    impls: dict[str, Callable[[], Any]] = {"torch eager": eager, "nexus xla": lambda: exe(x),
                                           "jax conv": lambda: np.asarray(own(x))}
    want = eager()
    ok = {k: bool(np.allclose(fn(), want, rtol=1e-4, atol=1e-4)) for k, fn in impls.items()}
    times = measure(impls, repeats)
    return rows_from(f"{layer.name} b{batch}", times, "call", ok=ok)  # ratios: nexus xla / each


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-r", "--repeats", type=int, default=9)
    ap.add_argument("--batch", type=int, nargs="+", default=[1, 8])
    args = ap.parse_args(argv)
    rows: list[Row] = []
    for batch in args.batch:
        for layer in LAYERS:
            rows += run_layer(layer, batch, args.repeats)
    print(machine())
    print(table(rows))


if __name__ == "__main__":
    main()
