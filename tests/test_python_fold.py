"""The python backend folds an inference BatchNormalization into the Conv before it
(nexus.backends.python.fold): the result agrees with the two steps computed in NumPy (and
with PyTorch's Conv2d + BatchNorm2d), the generated code has no batch norm left, and what
cannot be folded (a Conv used twice, run-time parameters, float16) runs as written.  Tape
mode still records the graph's own nodes; errors and traces name them."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import nexus as nx
from nexus.backends.python.fold import fold_batch_norms
from nexus.backends.python.interpreter import prepare
from nexus.ir.graph import Graph
from nexus.ir.opdef import get_op
from nexus.ir.types import TensorType
from nexus.testing.extras import require

CONV, BN = get_op("Conv").kernel, get_op("BatchNormalization").kernel


def _params(rng: np.random.Generator, c: int, dt: Any) -> list[np.ndarray]:
    return [rng.uniform(0.5, 2.0, c).astype(dt), rng.normal(size=c).astype(dt), rng.normal(size=c).astype(dt),
            rng.uniform(0.1, 3.0, c).astype(dt)]


def conv_bn(dt: str = "f32", bias: bool = True, twice: bool = False, runtime_scale: bool = False,
            seed: int = 0) -> tuple[Graph, list[np.ndarray], np.ndarray, np.ndarray | None]:
    """x -> Conv(w, b) -> BatchNorm -> (+ the Conv again where ``twice``)."""
    rng = np.random.default_rng(seed)
    npdt = {"f32": np.float32, "f64": np.float64, "f16": np.float16}[dt]
    x_t = TensorType(dt, (2, 3, 9, 9))
    g = Graph("cbn", [x_t, TensorType(dt, (4,))] if runtime_scale else [x_t], ["x", "s"] if runtime_scale else ["x"])
    e = g.start_block
    w = rng.normal(size=(4, 3, 3, 3)).astype(npdt)
    b = rng.normal(size=4).astype(npdt) if bias else None
    params = _params(rng, 4, npdt)
    consts = [g.add("Constant", [], e, {"value": v}) for v in ([w, b] if bias else [w])]
    conv = g.add("Conv", [g.args[0], *consts], e, {"pads": (1, 1, 1, 1), "strides": (2, 2)})
    ps = [g.add("Constant", [], e, {"value": p}) for p in params]
    if runtime_scale:
        ps[0] = g.args[1]
    out = g.add("BatchNormalization", [conv, *ps], e, {"epsilon": 1e-3})
    if twice:
        out = g.add("Add", [out, conv], e)
    g.end_block.append_input(g.add("Return", [out], e))
    return g, params, w, b


def _two_steps(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, params: list[np.ndarray]) -> np.ndarray:
    """The oracle: the convolution, then the batch norm by its formula, in float64."""
    y = CONV(x.astype(np.float64), w.astype(np.float64), None if b is None else b.astype(np.float64),
             strides=(2, 2), pads=(1, 1, 1, 1))
    s, bias, mean, var = (p.astype(np.float64).reshape(1, -1, 1, 1) for p in params)
    return (y - mean) / np.sqrt(var + 1e-3) * s + bias  # type: ignore[no-any-return]


@pytest.mark.parametrize("dt,bias", [("f32", True), ("f32", False), ("f64", True)])
def test_a_folded_batch_norm_agrees_with_the_two_steps(dt: str, bias: bool) -> None:
    g, params, w, b = conv_bn(dt, bias)
    x = np.random.default_rng(1).normal(size=(2, 3, 9, 9)).astype(w.dtype)
    exe = nx.compile(g, backend="python")
    got = exe(x)
    assert got.dtype == w.dtype
    np.testing.assert_allclose(got, _two_steps(x, w, b, params), rtol=1e-5 if dt == "f32" else 1e-12, atol=1e-5)
    assert "BatchNormalization" not in exe.source() and "Conv" in exe.source()
    assert {n.op.name for n in g.nodes()} >= {"Conv", "BatchNormalization"}  # the caller's graph is unchanged


@pytest.mark.parametrize("case", ["twice", "runtime_scale", "f16"])
def test_what_cannot_fold_runs_as_written(case: str) -> None:
    g, params, w, b = conv_bn("f16" if case == "f16" else "f32", twice=case == "twice",
                              runtime_scale=case == "runtime_scale")
    assert fold_batch_norms(g.clone()[0]) == 0
    x = np.random.default_rng(2).normal(size=(2, 3, 9, 9)).astype(w.dtype)
    args = [x, params[0]] if case == "runtime_scale" else [x]
    exe = nx.compile(g, backend="python")
    want = _two_steps(x, w, b, params)
    if case == "twice":
        want = want + CONV(x.astype(np.float64), w.astype(np.float64), b.astype(np.float64) if b is not None else None,
                           strides=(2, 2), pads=(1, 1, 1, 1))
    np.testing.assert_allclose(exe(*args), want, rtol=1e-2 if case == "f16" else 1e-5, atol=1e-2 if case == "f16"
                               else 1e-5)
    assert "BatchNormalization" in exe.source()


def test_tape_mode_and_traces_see_the_graphs_own_nodes() -> None:
    g, params, w, b = conv_bn("f64")
    x = np.random.default_rng(3).normal(size=(2, 3, 9, 9))
    # a scalar loss over the folded pair: tape mode records the unfolded graph
    h = Graph("loss", [TensorType("f64", (2, 3, 9, 9))], ["x"])
    call = h.add("Call", [h.args[0]], h.start_block, {"callee": g})
    h.end_block.append_input(h.add("Return", [h.add("ReduceSum", [call], h.start_block)], h.start_block))
    tape, graph = (nx.grad(h, mode=m)(x) for m in ("tape", "graph"))
    np.testing.assert_allclose(tape, graph, rtol=1e-10)
    nodes = set(g.nodes())
    gen = prepare(g).variant(False, "off")
    assert set(gen.line_nodes.values()) <= nodes  # the folded copy's lines name g's nodes


def test_pytorch_conv_and_batch_norm_fold_and_agree() -> None:
    torch = require("torch", "torch")
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
                            torch.nn.Conv2d(8, 8, 3, groups=8, bias=False), torch.nn.BatchNorm2d(8))
    for bn in (m[1], m[4]):  # running statistics that are not the identity
        bn.running_mean.uniform_(-1, 1)
        bn.running_var.uniform_(0.5, 2)
        bn.weight.data.uniform_(0.5, 2)
        bn.bias.data.uniform_(-1, 1)
    m.eval()
    x = torch.randn(2, 3, 12, 12)
    g = nx.from_torch(m, (x,))
    exe = nx.compile(g, backend="python")
    assert "BatchNormalization" not in exe.source()
    with torch.no_grad():
        want = m(x).numpy()
    np.testing.assert_allclose(exe(x.numpy()), want, rtol=1e-4, atol=1e-5)
