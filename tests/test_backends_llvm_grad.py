"""Gradient graphs compiled whole by the llvm backend: the tape's stack ops
(nexus.backends.llvm.stack) and the adjoint helpers (nexus.backends.llvm.adjoint).
Oracles: torch autograd, finite differences, and the python backend for the failures;
a stack used in a way the native stack cannot represent stays on the python backend."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import nexus as nx
from nexus.backends.base import NexusRuntimeError
from nexus.ir.graph import Graph
from nexus.ir.types import STACK, TensorType, TupleType
from nexus.testing.extras import require

require("llvmlite", "llvm")

from nexus.autodiff.api import gradient_graph  # noqa: E402
from nexus.autodiff.examples import rnn  # noqa: E402
from nexus.backends.llvm import LLVMExecutable  # noqa: E402


def rnn_loss(xs: Any, h0: Any, W: Any, U: Any, T: int) -> Any:  # noqa: N803
    h = h0
    t = 0
    while t < T:
        h = np.tanh(W @ xs[t] + U @ h)
        t = t + 1
    return np.sum(h * h)


def _whole(grad_exe: Any) -> Any:
    inner = grad_exe._exes[grad_exe.graph]
    assert isinstance(inner, LLVMExecutable), getattr(inner, "reason", inner)
    return inner


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_seed001_rnn_gradient_compiles_whole_and_matches_torch(dtype: type) -> None:
    torch = require("torch", "torch")
    exe = nx.compile(nx.grad(nx.script(rnn_loss), argnums=(2, 3)), backend="llvm")
    rng = np.random.default_rng(3)
    H, D = 6, 4
    xs, h0 = rng.standard_normal((100, D)).astype(dtype), rng.standard_normal(H).astype(dtype)
    W, U = (rng.standard_normal(s).astype(dtype) * 0.4 for s in ((H, D), (H, H)))
    for T in (0, 1, 20, 90):  # 90 steps outgrow the stack's first buffer
        tw, tu = torch.tensor(W, requires_grad=True), torch.tensor(U, requires_grad=True)
        h = torch.tensor(h0)
        for t in range(T):
            h = torch.tanh(tw @ torch.tensor(xs[t]) + tu @ h)
        if T:  # with no step the loss does not depend on W or U: torch has nothing to run back
            (h * h).sum().backward()
        gw, gu = exe(xs, h0, W, U, T)
        _whole(exe)
        tol = 2e-5 if dtype == np.float32 else 1e-12
        want_w = tw.grad.numpy() if tw.grad is not None else np.zeros_like(W)
        want_u = tu.grad.numpy() if tu.grad is not None else np.zeros_like(U)
        np.testing.assert_allclose(gw, want_w, rtol=tol, atol=tol)
        np.testing.assert_allclose(gu, want_u, rtol=tol, atol=tol)


def test_the_batched_rnn_gradient_matches_finite_differences() -> None:
    g = rnn("f64", batched=True)
    gg = gradient_graph(g, (1, 2, 3), "ones")
    exe = nx.compile(gg, backend="llvm")
    assert isinstance(exe, LLVMExecutable), getattr(exe, "reason", exe)
    rng = np.random.default_rng(5)
    T, B, D, H = 7, 3, 4, 5
    args = [rng.standard_normal((T, B, D)), rng.standard_normal((H, D)) * 0.3, rng.standard_normal((H, H)) * 0.3,
            rng.standard_normal((B, H)), T]
    out = exe(*args)
    grads = out[1:]
    run = nx.compile(g, backend="python")
    eps = 1e-6
    for k, gk in zip((1, 2, 3), grads):
        fd = np.zeros_like(args[k])
        for idx in np.ndindex(args[k].shape):
            plus = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
            minus = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
            plus[k][idx] += eps
            minus[k][idx] -= eps
            fd[idx] = (float(run(*plus)) - float(run(*minus))) / (2 * eps)
        np.testing.assert_allclose(gk, fd, rtol=1e-6, atol=1e-7)


def bias_loss(x: Any, b: Any, c: Any) -> Any:
    return np.sum(np.tanh(x * c + b))


@pytest.mark.parametrize("shapes", [((3, 4), (4,), (3, 1)), ((3, 4), (1, 4), (4,)), ((2, 3, 4), (3, 4), (1,))])
def test_gradients_of_broadcast_arguments_sum_back_to_their_shapes(shapes: tuple[tuple[int, ...], ...]) -> None:
    torch = require("torch", "torch")
    rng = np.random.default_rng(2)
    x, b, c = (rng.standard_normal(s) for s in shapes)
    exe = nx.compile(nx.grad(nx.script(bias_loss), argnums=(1, 2)), backend="llvm")
    gb, gc = exe(x, b, c)
    _whole(exe)
    tb, tc = torch.tensor(b, requires_grad=True), torch.tensor(c, requires_grad=True)
    torch.tanh(torch.tensor(x) * tc + tb).sum().backward()
    np.testing.assert_allclose(gb, tb.grad.numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(gc, tc.grad.numpy(), rtol=1e-12, atol=1e-12)


def _stack_graph(fork: bool) -> Graph:
    """Push a then b; with ``fork``, push b onto the empty stack instead (two stacks from
    one), then pop the stack holding a: a persistent stack gives a back."""
    g = Graph("stacks", [TensorType("f64", (3,)), TensorType("f64", (3,))], ["a", "b"])
    a, b = g.args
    blk = g.start_block
    s0 = g.add("StackNew", [], blk)
    s1 = g.add("StackPush", [s0, a], blk)
    s2 = g.add("StackPush", [s0 if fork else s1, b], blk)
    popped = g.add("StackPop", [s1 if fork else s2], blk, {"dtype": "f64"},
                   type=TupleType((STACK, TensorType("f64", (3,)))))
    top = g.add("Proj", [popped], blk, {"num": 1}, type=TensorType("f64", (3,)))
    keep = g.add("StackPush", [s2, top], blk) if fork else None
    del keep
    ret = g.add("Return", [top], blk)
    g.end_block.append_input(ret)
    return g


@pytest.mark.parametrize("fork", [False, True])
def test_a_forked_stack_stays_on_the_python_backend(fork: bool) -> None:
    g = _stack_graph(fork)
    a, b = np.arange(3.0), np.arange(3.0) + 10
    want = nx.compile(g, backend="python")(a, b)
    np.testing.assert_array_equal(want, a if fork else b)
    exe = nx.compile(g, backend="llvm")
    assert isinstance(exe, LLVMExecutable) != fork
    np.testing.assert_array_equal(exe(a, b), want)


def test_a_pop_from_an_empty_stack_fails_as_on_the_python_backend() -> None:
    g = Graph("empty", [TensorType("f64", ())], ["x"])
    blk = g.start_block
    s0 = g.add("StackNew", [], blk)
    popped = g.add("StackPop", [s0], blk, {"dtype": "f64"}, type=TupleType((STACK, TensorType("f64", ()))))
    top = g.add("Proj", [popped], blk, {"num": 1}, type=TensorType("f64", ()))
    g.end_block.append_input(g.add("Return", [g.add("Add", [top, g.args[0]], blk)], blk))
    exe = nx.compile(g, backend="llvm")
    assert isinstance(exe, LLVMExecutable)
    with pytest.raises(NexusRuntimeError, match="StackPop .*IndexError"):
        nx.compile(g, backend="python")(1.0)
    with pytest.raises(NexusRuntimeError, match="StackPop .*IndexError"):
        exe(1.0)
