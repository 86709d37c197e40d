"""Gradients through control flow, both modes, against PyTorch autograd and finite
differences: the seed-001 RNN with a run-time trip count, a data-dependent while loop
with break and continue, early return, nested loops."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import nexus as nx
from nexus.autodiff import vjp_graph
from nexus.autodiff.examples import damped_loop, damped_python, rnn
from nexus.frontend import script
from nexus.ir.graph import Graph
from nexus.ir.node import Node
from nexus.ir.types import TensorType
from nexus.passes import optimize
from nexus.testing.extras import require

MODES = ["graph", "tape"]


def _rnn_args(rng: np.random.Generator, T: int, batched: bool = False) -> list:
    D, H, B = 3, 4, 2
    xs = rng.normal(size=(T + 2, B, D) if batched else (T + 2, D))
    h0 = rng.normal(size=(B, H) if batched else H)
    return [xs, rng.normal(size=(H, D)) * 0.5, rng.normal(size=(H, H)) * 0.5, h0, T]


def _torch_rnn(args: list, batched: bool = False) -> tuple[float, list[np.ndarray]]:
    torch = require("torch", "torch")
    xs, W, U, h0, T = args
    W, U, h0 = (torch.tensor(a, requires_grad=True) for a in (W, U, h0))
    h = h0
    for t in range(T):
        x = torch.tensor(xs[t])
        h = torch.tanh(x @ W.T + h @ U.T) if batched else torch.tanh(W @ x + U @ h)
    out = h.sum()
    out.backward()
    grads = [np.zeros(p.shape) if p.grad is None else p.grad.numpy() for p in (W, U, h0)]
    return float(out.detach()), grads


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("T", [0, 1, 6])
@pytest.mark.parametrize("batched", [False, True])
def test_rnn_matches_torch(mode: str, T: int, batched: bool) -> None:
    args = _rnn_args(np.random.default_rng(T), T, batched)
    value, grads = nx.value_and_grad(rnn(batched=batched), argnums=(1, 2, 3), mode=mode)(*args)
    want_value, want = _torch_rnn(args, batched)
    assert value == pytest.approx(want_value, rel=1e-12)
    for got, exp in zip(grads, want):
        np.testing.assert_allclose(got, exp, rtol=1e-5, atol=1e-12)


def test_rnn_same_graph_different_trip_counts() -> None:
    """One gradient graph serves every T (the trip count is a run-time value)."""
    g = rnn()
    f = nx.grad(g, argnums=2)
    rng = np.random.default_rng(1)
    for T in (2, 5):
        args = _rnn_args(rng, T)
        np.testing.assert_allclose(f(*args), _torch_rnn(args)[1][1], rtol=1e-5)


def test_gradient_graph_verifies_prints_parses_and_runs() -> None:
    gg = vjp_graph(rnn(), (1, 2, 3), seed="ones")
    nx.verify(gg)
    text = nx.print_graph(gg)
    back = nx.parse(text)
    nx.verify(back)
    # (the printer orders blocks by creation, so the first round trip may reorder them;
    # from then on the text is a fixpoint)
    again = nx.print_graph(back)
    assert nx.print_graph(nx.parse(again)) == again
    assert nx.structurally_equal(nx.parse(again), back)
    args = _rnn_args(np.random.default_rng(3), 4)
    for got, exp in zip(nx.run(back, *args)[1:], _torch_rnn(args)[1]):
        np.testing.assert_allclose(got, exp, rtol=1e-5)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("seed", range(4))
def test_data_dependent_while_loop(mode: str, seed: int) -> None:
    """Trip count decided by the data, continue and break: vs PyTorch eager and FD."""
    torch = require("torch", "torch")
    rng = np.random.default_rng(seed)
    x, w = rng.normal(size=5), rng.normal(size=5) * 0.3
    tol, big, cap = 0.05 + 0.2 * seed, 6.0, 40
    g = damped_loop()
    value, (gx, gw) = nx.value_and_grad(g, argnums=(0, 1), mode=mode)(x, w, tol, big, cap)
    assert value == pytest.approx(damped_python(x, w, tol, big, cap), rel=1e-12)
    tx, tw = torch.tensor(x, requires_grad=True), torch.tensor(w, requires_grad=True)
    damped_python(tx, tw, tol, big, cap).backward()
    np.testing.assert_allclose(gx, tx.grad.numpy(), rtol=1e-5, atol=1e-12)  # type: ignore[union-attr]
    np.testing.assert_allclose(gw, tw.grad.numpy(), rtol=1e-5, atol=1e-12)  # type: ignore[union-attr]
    eps = 1e-6
    for i in range(5):  # central differences (the trip count stays put for small steps)
        d = np.zeros(5)
        d[i] = eps
        fd = (damped_python(x + d, w, tol, big, cap) - damped_python(x - d, w, tol, big, cap)) / (2 * eps)
        assert gx[i] == pytest.approx(fd, rel=1e-5, abs=1e-8)


def test_continue_branch_is_taken() -> None:
    """The test data really exercises the continue (shrink) path and several iterations."""
    x = np.full(5, 3.0)
    w = np.full(5, 0.1)
    res = nx.run(vjp_graph(damped_loop(), (0,), seed="ones"), x, w, 0.1, 6.0, 40)
    assert res is not None
    i, xx, shrinks = 0, x.copy(), 0
    while True:
        i += 1
        xx = xx * 0.9 + w
        if (xx * xx).sum() > 6.0:
            xx, shrinks = xx * 0.5, shrinks + 1
            continue
        if (xx * xx).sum() < 0.1 or i >= 40:
            break
    assert shrinks >= 1 and i >= 3


def _early_return() -> Graph:
    """if sum(x) > 0: return x*x summed (early) else: y = exp(x); return sum(y*w)."""
    t = TensorType("f64", (3,))
    g = Graph("early", [t, t], ["x", "w"])
    x, w = g.args
    e = g.start_block
    s = g.add("ReduceSum", [x], e)
    zero = g.add("Constant", [], e, {"value": np.array(0.0)})
    c = g.add("Cond", [g.add("Greater", [s, zero], e)], e)
    t_b = g.new_block("early", [g.add("Proj", [c], e, {"num": 1})])
    g.end_block.append_input(g.add("Return", [g.add("ReduceSum", [g.add("Mul", [x, x], t_b)], t_b)], t_b))
    f_b = g.new_block("late", [g.add("Proj", [c], e, {"num": 0})])
    y = g.add("Exp", [x], f_b)
    g.end_block.append_input(g.add("Return", [g.add("ReduceSum", [g.add("Mul", [y, w], f_b)], f_b)], f_b))
    return g


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_early_return(mode: str, sign: float) -> None:
    x, w = sign * np.array([0.5, 1.0, 2.0]), np.array([0.3, -0.2, 0.7])
    gx, gw = nx.grad(_early_return(), argnums=(0, 1), mode=mode)(x, w)
    if sign > 0:
        np.testing.assert_allclose(gx, 2 * x)
        np.testing.assert_allclose(gw, 0 * w)
    else:
        np.testing.assert_allclose(gx, np.exp(x) * w)
        np.testing.assert_allclose(gw, np.exp(x))


def _nested() -> Graph:
    """for i < n: for j < i: x = sin-free update x = x * a + 0.1 * j; return sum(x)"""
    f, i64 = TensorType("f64", (2,)), TensorType("i64", ())
    g = Graph("nested", [f, TensorType("f64", ()), i64], ["x", "a", "n"])
    x0, a, n = g.args
    e = g.start_block

    def c(v: object, dt: str = "f64") -> Node:
        return g.add("Constant", [], e, {"value": np.array(v, dtype={"f64": np.float64, "i64": np.int64}[dt])})

    zero, one, tenth = c(0, "i64"), c(1, "i64"), c(0.1)
    oh = g.new_block("outer", [g.add("Jmp", [], e)])
    i = g.add("Phi", [zero], oh)
    x = g.add("Phi", [x0], oh)
    oc = g.add("Cond", [g.add("Less", [i, n], oh)], oh)
    pre = g.new_block("pre", [g.add("Proj", [oc], oh, {"num": 1})])
    ih = g.new_block("inner", [g.add("Jmp", [], pre)])
    j = g.add("Phi", [zero], ih)
    xi = g.add("Phi", [x], ih)
    ic = g.add("Cond", [g.add("Less", [j, i], ih)], ih)
    ib = g.new_block("inner_body", [g.add("Proj", [ic], ih, {"num": 1})])
    jf = g.add("Cast", [j], ib, {"to": "f64"})
    x_new = g.add("Add", [g.add("Mul", [xi, a], ib), g.add("Mul", [jf, tenth], ib)], ib)
    x_new = g.add("Tanh", [x_new], ib)
    ih.append_input(g.add("Jmp", [], ib))
    j.append_input(g.add("Add", [j, one], ib))
    xi.append_input(x_new)
    latch = g.new_block("outer_latch", [g.add("Proj", [ic], ih, {"num": 0})])
    oh.append_input(g.add("Jmp", [], latch))
    i.append_input(g.add("Add", [i, one], latch))
    x.append_input(xi)
    done = g.new_block("done", [g.add("Proj", [oc], oh, {"num": 0})])
    g.end_block.append_input(g.add("Return", [g.add("ReduceSum", [g.add("Mul", [x, x], done)], done)], done))
    return g


@pytest.mark.parametrize("mode", MODES)
def test_nested_loops(mode: str) -> None:
    torch = require("torch", "torch")
    x0, a, n = np.array([0.3, -0.8]), 0.9, 5
    gx, ga = nx.grad(_nested(), argnums=(0, 1), mode=mode)(x0, a, n)
    tx, ta = torch.tensor(x0, requires_grad=True), torch.tensor(a, dtype=torch.float64, requires_grad=True)
    x = tx
    for i in range(n):
        for j in range(i):
            x = torch.tanh(x * ta + 0.1 * j)
    (x * x).sum().backward()
    np.testing.assert_allclose(gx, tx.grad.numpy(), rtol=1e-10)  # type: ignore[union-attr]
    np.testing.assert_allclose(ga, ta.grad.numpy(), rtol=1e-10)  # type: ignore[union-attr]


@pytest.mark.parametrize("mode", MODES)
def test_vjp_with_cotangent(mode: str) -> None:
    """nx.vjp on a non-scalar result: the cotangent weights the outputs."""
    t = TensorType("f64", (3,))
    g = Graph("f", [t, t], ["a", "b"])
    e = g.start_block
    y = g.add("Mul", [g.add("Tanh", [g.args[0]], e), g.args[1]], e)
    g.end_block.append_input(g.add("Return", [y], e))
    a, b, ct = np.array([0.1, -0.5, 2.0]), np.array([1.0, 2.0, 3.0]), np.array([0.5, -1.0, 2.0])
    out, fn = nx.vjp(g, a, b, mode=mode)
    np.testing.assert_allclose(out, np.tanh(a) * b)
    ga, gb = fn(ct)
    np.testing.assert_allclose(ga, ct * b * (1 - np.tanh(a) ** 2))
    np.testing.assert_allclose(gb, ct * np.tanh(a))


def test_errors_name_the_problem() -> None:
    with pytest.raises(ValueError, match="mode"):
        nx.grad(rnn(), mode="forward")
    t = TensorType("f64", (3,))
    g = Graph("f", [t], ["a"])
    g.end_block.append_input(g.add("Return", [g.add("Tanh", [g.args[0]], g.start_block)], g.start_block))
    with pytest.raises(ValueError, match="one scalar result"):
        nx.grad(g)(np.ones(3))


def _script_rnn() -> object:
    def rnn_cell(W: object, U: object, x: object, h: object) -> object:
        return nx.tanh(W @ x + U @ h)  # type: ignore[attr-defined,operator]

    @script.script
    def cell(W: script.Tensor, U: script.Tensor, x: script.Tensor, h: script.Tensor) -> script.Tensor:  # type: ignore[name-defined]
        return rnn_cell(W, U, x, h)

    @script.script
    def rnn_script(xs: script.Tensor, W: script.Tensor, U: script.Tensor, h0: script.Tensor,  # type: ignore[name-defined]
                   T: int) -> script.Tensor:  # type: ignore[name-defined]
        h = h0
        for t in range(T):
            h = cell(W, U, xs[t], h)  # a call to another script: graph mode inlines it
        return nx.reduce_sum(h)  # type: ignore[attr-defined]

    return rnn_script


@pytest.mark.parametrize("mode", MODES)
def test_script_rnn_matches_torch(mode: str) -> None:
    """@nx.script functions are accepted directly (seed-001 RNN with a helper and a call)."""
    f = _script_rnn()
    args = _rnn_args(np.random.default_rng(7), 5)
    value, grads = nx.value_and_grad(f, argnums=(1, 2, 3), mode=mode)(*args)
    want_value, want = _torch_rnn(args)
    assert value == pytest.approx(want_value, rel=1e-12)
    for got, exp in zip(grads, want):
        np.testing.assert_allclose(got, exp, rtol=1e-5, atol=1e-12)


def test_gradient_graphs_optimise_and_still_agree() -> None:
    """The gradient graph is an ordinary graph: the default pipeline (verifying after each
    pass) keeps its results."""
    cases = [(rnn(), (1, 2, 3), _rnn_args(np.random.default_rng(5), 4)),
             (damped_loop(), (0, 1), [np.full(5, 3.0), np.full(5, 0.1), 0.1, 6.0, 40]),
             (_nested(), (0, 1), [np.array([0.3, -0.8]), 0.9, 4])]
    for g, argnums, args in cases:
        gg = vjp_graph(g, argnums, seed="ones")
        want = nx.run(gg, *args)
        opt, _ = gg.clone()
        optimize(opt, verify_each=True)
        got = nx.run(opt, *args)
        for a, b in zip(got, want):
            np.testing.assert_allclose(a, b, rtol=1e-12)


@pytest.mark.parametrize("mode", MODES)
def test_non_differentiable_op_is_named(mode: str) -> None:
    t = TensorType("f64", (3,))
    g = Graph("floordiv", [t, t], ["a", "b"])
    e = g.start_block
    q = g.add("FloorDiv", [g.args[0], g.args[1]], e, name="q")
    g.end_block.append_input(g.add("Return", [g.add("ReduceSum", [q], e)], e))
    with pytest.raises((ValueError, RuntimeError), match="FloorDiv.*not differentiable"):
        nx.grad(g, mode=mode)(np.ones(3), np.ones(3))


@pytest.mark.parametrize("mode", MODES)
def test_dsl_graph_matches_torch(mode: str) -> None:
    """A graph from the seed-000 with-statement DSL (a while loop with break)."""
    torch = require("torch", "torch")

    @nx.graph(x="f64", w="f64")  # type: ignore[misc]
    def f(x: Any, w: Any) -> Any:
        i = nx.constant(0, dtype="i64")  # type: ignore[attr-defined]
        with nx.while_loop(nx.less(i, 6)):  # type: ignore[attr-defined]
            x = nx.tanh(x * w + 0.5)  # type: ignore[attr-defined]
            i = i + 1
            with nx.if_cond(x > 0.9):  # type: ignore[attr-defined]
                with nx.then():  # type: ignore[attr-defined]
                    nx.break_()  # type: ignore[attr-defined]
        return x * x

    gx, gw = nx.grad(f, argnums=(0, 1), mode=mode)(0.3, 1.4)
    tx, tw = (torch.tensor(v, dtype=torch.float64, requires_grad=True) for v in (0.3, 1.4))
    y = tx
    for _ in range(6):
        y = torch.tanh(y * tw + 0.5)
        if y > 0.9:
            break
    (y * y).backward()
    assert gx == pytest.approx(float(tx.grad), rel=1e-10)  # type: ignore[arg-type]
    assert gw == pytest.approx(float(tw.grad), rel=1e-10)  # type: ignore[arg-type]
