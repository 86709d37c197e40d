"""ONNX export of gradient graphs through loops: the autodiff tape (a stack of mixed
dtypes) becomes one ONNX sequence per dtype.  Oracles: PyTorch autograd, central finite
differences, plain Python; the export is also run against ``nx.grad``."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import nexus as nx
from nexus.autodiff.api import gradient_graph
from nexus.autodiff.examples import damped_loop, damped_python, rnn
from nexus.backends.onnx.stacks import split_stacks
from nexus.ir.types import StackType
from nexus.ir.verify import verify
from nexus.testing.extras import require

onnx = require("onnx", "onnx")
ort = require("onnxruntime", "onnx")


def ort_run(m: Any, *args: Any) -> list[np.ndarray]:
    sess = ort.InferenceSession(m.SerializeToString())
    return sess.run(None, {i.name: np.asarray(a) for i, a in zip(sess.get_inputs(), args)})


def export(g: Any) -> Any:
    m = nx.to_onnx(g)
    onnx.checker.check_model(m, full_check=True)
    return m


def all_ops(graph: Any) -> set[str]:
    """The op types of an ONNX graph and of its subgraphs (If arms, Loop bodies)."""
    ops = set()
    for node in graph.node:
        ops.add(node.op_type)
        for a in node.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                ops |= all_ops(a.g)
    return ops


def fd_grad(f: Any, x: np.ndarray, eps: float = 1e-6) -> np.ndarray:
    """Central finite differences of the scalar ``f`` at ``x``."""
    out = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        e = np.zeros_like(x)
        e[i] = eps
        out[i] = (f(x + e) - f(x - e)) / (2 * eps)
    return out


@nx.script
def tanh_loop(x: Any, n: int) -> Any:
    s = x
    for _i in range(n):
        s = np.tanh(s * 1.5)
    return np.sum(s)


@nx.script
def branchy_loop(x: Any, n: int) -> Any:
    s = x
    for i in range(n):
        if i % 2 == 0:
            s = np.sin(s) * s
        else:
            s = np.tanh(s * 1.5)
    return np.sum(s)


def branchy_python(x: np.ndarray, n: int) -> float:
    s = x
    for i in range(n):
        s = np.sin(s) * s if i % 2 == 0 else np.tanh(s * 1.5)
    return float(np.sum(s))


@pytest.mark.parametrize("n", [0, 1, 3])
def test_tanh_loop_gradient_exports(n: int) -> None:
    x = np.random.default_rng(0).standard_normal(4)
    g, _ = tanh_loop.specialize((x, n))
    got = ort_run(export(gradient_graph(g, (0,), "ones")), x, np.int64(n))

    def py(v: np.ndarray) -> float:
        for _ in range(n):
            v = np.tanh(v * 1.5)
        return float(np.sum(v))

    np.testing.assert_allclose(got[0], py(x), rtol=1e-12)
    np.testing.assert_allclose(got[1], fd_grad(py, x), rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(got[1], nx.grad(tanh_loop)(x, n), rtol=1e-12)


@pytest.mark.parametrize("n", [2, 5])
def test_loop_with_a_branch_pushes_block_codes(n: int) -> None:
    """The branch inside the loop makes the tape hold i64 block codes between f64 values."""
    x = np.random.default_rng(1).standard_normal(3)
    g, _ = branchy_loop.specialize((x, n))
    m = export(gradient_graph(g, (0,), "ones"))
    assert {"SequenceEmpty", "SequenceInsert", "SequenceErase", "SequenceAt"} <= all_ops(m.graph)
    got = ort_run(m, x, np.int64(n))
    np.testing.assert_allclose(got[0], branchy_python(x, n), rtol=1e-12)
    np.testing.assert_allclose(got[1], fd_grad(lambda v: branchy_python(v, n), x), rtol=1e-6, atol=1e-8)


def test_seed_001_rnn_gradient_matches_torch() -> None:
    torch = require("torch", "torch")
    rng = np.random.default_rng(2)
    T, D, H = 5, 3, 4
    xs, W, U, h0 = (rng.standard_normal(s) * 0.5 for s in ((T, D), (H, D), (H, H), (H,)))
    steps = 4
    m = export(gradient_graph(rnn(), (0, 1, 2, 3), "ones"))
    got = ort_run(m, xs, W, U, h0, np.int64(steps))
    tx, tW, tU, th = (torch.tensor(a, requires_grad=True) for a in (xs, W, U, h0))
    h = th
    for t in range(steps):
        h = torch.tanh(tW @ tx[t] + tU @ h)
    loss = h.sum()
    loss.backward()
    np.testing.assert_allclose(got[0], loss.item(), rtol=1e-12)
    for mine, ref in zip(got[1:], (tx, tW, tU, th)):
        np.testing.assert_allclose(mine, ref.grad.numpy(), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("big", [1e9, 2.0])
def test_while_with_break_and_continue(big: float) -> None:
    """A data-dependent loop with break and continue; ``big=2.0`` takes the continue arm."""
    rng = np.random.default_rng(3)
    x, w = rng.standard_normal(3), rng.standard_normal(3) * 0.3
    tol, cap = 1e-3, 7
    m = export(gradient_graph(damped_loop(), (0, 1), "ones"))
    got = ort_run(m, x, w, np.float64(tol), np.float64(big), np.int64(cap))
    np.testing.assert_allclose(got[0], damped_python(x, w, tol, big, cap), rtol=1e-12)
    np.testing.assert_allclose(got[1], fd_grad(lambda v: damped_python(v, w, tol, big, cap), x), rtol=1e-6,
                               atol=1e-8)
    np.testing.assert_allclose(got[2], fd_grad(lambda v: damped_python(x, v, tol, big, cap), w), rtol=1e-6,
                               atol=1e-8)


@nx.script
def doubling(x: Any, n: Any) -> Any:
    i = 0
    while i < n:
        x = x * 2.0
        i = i + 1
    return nx.reduce_sum(x * x)


def test_f32_loop_with_cotangent_argument() -> None:
    """f32 values and i64 block codes share one tape; the cotangent is an argument."""
    x = np.array([0.5, -1.0, 2.0], np.float32)
    g, _ = doubling.specialize((x, 3))
    got = ort_run(export(gradient_graph(g, [0])), x, np.int64(3), np.float32(2.0))
    np.testing.assert_allclose(got[-1], 2.0 * 2 * 64 * x, rtol=1e-6)  # d/dx sum((8x)^2) = 128 x


def test_split_makes_each_stack_homogeneous() -> None:
    x = np.random.default_rng(4).standard_normal(3)
    g, _ = branchy_loop.specialize((x, 3))
    gg = gradient_graph(g, (0,), "ones")
    split, dtypes = split_stacks(gg)
    verify(split)
    assert split is not gg and any(isinstance(n.type, StackType) for n in gg.nodes())
    for n in split.nodes():
        if n.op.name == "StackPush":
            assert dtypes[n.inputs[0]] == dtypes[n] == n.inputs[1].type.dtype  # type: ignore[attr-defined]
        elif n.op.name == "StackPop":
            assert dtypes[n.inputs[0]] == n.attrs["dtype"]
    assert set(dtypes.values()) == {"f64", "i64"}
    np.testing.assert_allclose(split(x, 3)[1], fd_grad(lambda v: branchy_python(v, 3), x), rtol=1e-6, atol=1e-8)


def test_forward_export_is_unchanged() -> None:
    """Graphs without tapes are exported as before: no rewrite, no sequence ops."""
    x = np.random.default_rng(5).standard_normal(4)
    g, _ = tanh_loop.specialize((x, 3))
    assert split_stacks(g)[0] is g
    m = export(g)
    assert not any(op.startswith("Sequence") for op in all_ops(m.graph))
    np.testing.assert_allclose(ort_run(m, x, np.int64(3))[0], np.sum(np.tanh(np.tanh(np.tanh(x * 1.5) * 1.5) * 1.5)),
                               rtol=1e-12)


@pytest.mark.parametrize(("axis", "idx"), [(0, np.int64(-1)), (1, np.array([2, 0, 2, -1], np.int64)),
                                            (-1, np.array([[0, 1], [1, 1]], np.int64))])
def test_gather_grad_adds_repeated_indices(axis: int, idx: np.ndarray) -> None:
    """GatherGrad (Gather's adjoint) against ``np.add.at``: repeated indices add up."""
    from nexus.ir.graph import Graph
    from nexus.ir.types import TensorType

    rng = np.random.default_rng(6)
    data = rng.standard_normal((3, 4))
    a = axis % 2
    gshape = data.shape[:a] + np.shape(idx) + data.shape[a + 1:]
    grad = rng.standard_normal(gshape)
    g = Graph("gg", [TensorType("f64", gshape), TensorType("f64", (3, 4)), TensorType("i64", np.shape(idx))],
              ["g", "data", "idx"])
    out = g.add("GatherGrad", list(g.args), g.start_block, {"axis": axis})
    g.end_block.append_input(g.add("Return", [out], g.start_block))
    want = np.zeros_like(data)
    np.add.at(np.moveaxis(want, a, 0), np.reshape(idx, -1) % data.shape[a],
              np.moveaxis(grad.reshape(data.shape[:a] + (-1,) + data.shape[a + 1:]), a, 0))
    np.testing.assert_allclose(ort_run(export(g), grad, data, idx)[0], want, rtol=1e-12)


@nx.script
def nested_loops(x: Any, n: int, m: int) -> Any:
    s = x
    for i in range(n):
        for j in range(m):
            if j < i:
                s = np.sin(s) + s * 0.5
        s = s * np.tanh(s)
    return np.sum(s)


def nested_python(x: np.ndarray, n: int, m: int) -> float:
    """The oracle: the script's own source run by Python and NumPy."""
    return float(nested_loops.fn(x, n, m))


def test_nested_loops_with_a_branch() -> None:
    x = np.random.default_rng(7).standard_normal(3) * 0.5
    g, _ = nested_loops.specialize((x, 3, 2))
    got = ort_run(export(gradient_graph(g, (0,), "ones")), x, np.int64(3), np.int64(2))
    np.testing.assert_allclose(got[0], nested_python(x, 3, 2), rtol=1e-12)
    np.testing.assert_allclose(got[1], fd_grad(lambda v: nested_python(v, 3, 2), x), rtol=1e-6, atol=1e-8)


def test_a_stack_result_is_one_clear_error() -> None:
    from nexus.backends.onnx.export import ExportError
    from nexus.ir.graph import Graph
    from nexus.ir.types import TensorType

    g = Graph("leak", [TensorType("f64", (2,))], ["x"])
    pushed = g.add("StackPush", [g.add("StackNew", [], g.start_block), g.args[0]], g.start_block)
    g.end_block.append_input(g.add("Return", [pushed], g.start_block))
    with pytest.raises(ExportError, match="is read by .*Return.*not a stack op"):
        nx.to_onnx(g)
