"""Calls of ``nx.compile(script, backend="xla")`` through its per-signature entries
(``XlaExecutable.entry``, chained by ``nexus.backends.base.Specialized``): every argument
kind, the calls an entry leaves to the Python path, the graph last called, a graph changed
after compiling; and a gradient whose reverse sweep branches around large matrix products
(lax.cond, not a select of both arms).  The oracles are plain Python and NumPy."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import nexus as nx
from bench.w8_call import py_seed as seed
from nexus.ir.types import dtype_of
from nexus.testing.extras import require

require("jax", "xla")


def scaled(x: Any, a: Any) -> Any:
    return x * a + 1


def pair(x: Any, y: Any) -> Any:
    return x + y, x.sum()


def one(x: Any) -> Any:
    return (x * 2,)


def _compiled(fn: Any) -> Any:
    return nx.compile(nx.script(fn), backend="xla")


def test_the_readme_call_runs_through_the_entry() -> None:
    exe = _compiled(seed)
    for n in (10, 0, 3, -4, 10**12, 10):
        got = exe(n)
        assert got == seed(n) and type(got) is int
    assert isinstance(type(exe).__dict__["__call__"], staticmethod)  # the entry, not Specialized._python
    assert exe.graph is not None and exe.graph.name == "py_seed"


@pytest.mark.parametrize("a", [2, 2.5, True, np.float32(1.5), np.int32(3), np.int64(-2), np.float64(0.25),
                               np.bool_(False), np.int8(-3), np.uint16(7)])
def test_scalar_arguments_of_every_kind(a: Any) -> None:
    exe, ref = _compiled(scaled), nx.compile(nx.script(scaled), backend="python")
    for x in (a, a, 0.5, 3, a, a):  # new signatures between calls of the same one
        got, want = exe(x, x), ref(x, x)
        assert got == scaled(x, x) and type(got) is type(want)  # the script's result types


def test_a_signature_per_shape_and_class_and_the_graph_last_called() -> None:
    exe = _compiled(scaled)
    x32 = np.arange(5, dtype=np.float32)
    x64 = np.arange(6.0).reshape(2, 3)
    calls = [(x32, np.float32(2)), (x64, 2.0), (x32, np.float32(3)), (3, 4), (x64, 0.5),
             (x32[:3].copy(), np.float32(2)), (x64, 0.25), (x32, np.float32(-1))]
    for x, a in calls:
        got, want = exe(x, a), scaled(x, a)
        assert got.dtype == want.dtype if isinstance(want, np.ndarray) else type(got) is type(want)
        np.testing.assert_array_equal(got, want)
        assert [t.dtype for t in exe.graph.arg_types] == [dtype_of(np.asarray(x).dtype),
                                                          dtype_of(np.asarray(a).dtype)]


def test_several_results_and_a_one_tuple() -> None:
    exe, ex1 = _compiled(pair), _compiled(one)
    x, y = np.arange(4.0), np.ones(4)
    want = nx.compile(nx.script(pair), backend="python")(x, y)
    for _ in range(3):
        s, total = exe(x, y)
        np.testing.assert_array_equal(s, x + y)
        assert total == x.sum() and type(total) is type(want[1])
        (d,) = ex1(x)
        np.testing.assert_array_equal(d, x * 2)


def test_arguments_the_entry_leaves_to_the_python_path() -> None:
    exe = _compiled(scaled)
    x = np.arange(12.0).reshape(3, 4)
    exe(x, 2.0)
    exe(x, 2.0)
    others = (x.T, x[:, ::2], [[1.0, 2.0]], np.asfortranarray(x), x.astype(np.float32),
              np.arange(4)[None, :].astype(float))
    for arg in others:
        np.testing.assert_array_equal(exe(arg, 2.0), scaled(np.asarray(arg), 2.0))
    exe(3, 4)
    with pytest.raises(Exception) as python_error:  # an int beyond i64: the python backend's error
        nx.compile(nx.script(scaled), backend="python")(3, 2**70)
    with pytest.raises(type(python_error.value)) as xla_error:
        exe(3, 2**70)
    assert str(xla_error.value) == str(python_error.value)
    with pytest.raises(TypeError):
        exe(3)


def test_a_graph_changed_after_compiling_is_compiled_again() -> None:
    exe = _compiled(scaled)
    x = np.arange(3.0)
    np.testing.assert_array_equal(exe(x, 2.0), scaled(x, 2.0))
    np.testing.assert_array_equal(exe(x, 2.0), scaled(x, 2.0))
    g = exe.graph
    version = g.version
    nx.optimize(g, "constfold,cse,dce")
    if g.version == version:
        g.version += 1  # (nothing to optimise: a change all the same)
    np.testing.assert_array_equal(exe(x, 3.0), scaled(x, 3.0))


def _rnn_grads(xs: np.ndarray, W: np.ndarray, U: np.ndarray, h0: np.ndarray, T: int) -> list[np.ndarray]:
    """d sum(h_T) / d (W, U, h0) for ``h = tanh(x_t W^T + h U^T)``, by hand (NumPy)."""
    hs = [h0]
    for t in range(T):
        hs.append(np.tanh(xs[t] @ W.T + hs[-1] @ U.T))
    dh = np.ones_like(h0)
    dW, dU = np.zeros_like(W), np.zeros_like(U)
    for t in reversed(range(T)):
        da = dh * (1 - hs[t + 1] ** 2)
        dW += da.T @ xs[t]
        dU += da.T @ hs[t]
        dh = da @ U
    return [dW, dU, dh]


@pytest.mark.parametrize("T", [0, 1, 4])
def test_a_gradient_that_branches_around_large_products_matches_numpy(T: int) -> None:
    from nexus.autodiff.examples import rnn

    rng = np.random.default_rng(T)
    B, D, H = 8, 48, 64  # each product of the reverse sweep is past the select's work bound
    xs = rng.normal(size=(5, B, D))
    W, U = rng.normal(size=(H, D)) / np.sqrt(D), rng.normal(size=(H, H)) / np.sqrt(H)
    h0 = rng.normal(size=(B, H)) * 0.1
    exe = nx.compile(nx.grad(rnn(dtype="f64", batched=True), argnums=(1, 2, 3)), backend="xla")
    got = exe(xs, W, U, h0, T)
    for a, b in zip(got, _rnn_grads(xs, W, U, h0, T)):
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-12)


def dispatch(codes: Any, xs: Any, U: Any, acc: Any, other: Any) -> Any:
    """A reverse sweep's shape: one product-sized arm of a chain of Ifs on a code adds to
    an accumulator, one passes it on, one overwrites it (with ``other``, a NaN in ``acc``
    must not leak there), one adds to it by a nested If."""
    n = codes.shape[0]
    for i in range(n):
        c = codes[i]
        if c == 0:
            acc = acc
        elif c == 1:
            acc = acc + xs[i].T @ (xs[i] @ U)
        elif c == 2:
            acc = other * 2.0
        else:
            if c == 3:
                acc = acc + U
            else:
                acc = acc
    return acc


@pytest.mark.parametrize("codes", [[1, 0, 1, 0, 4, 1], [0, 2, 1, 3, 0, 1, 4], [2, 2], [4, 0, 3], [0, 4, 0]])
def test_a_chain_of_ifs_that_adds_to_an_accumulator_matches_numpy(codes: list[int]) -> None:
    # The Ifs become lax.conds that return what they add (Trace.sums): compare with Python.
    rng = np.random.default_rng(len(codes))
    n, B, H = len(codes), 16, 64  # the product arm is past the select's work bound
    xs, U = rng.normal(size=(n, B, H)), rng.normal(size=(H, H)) / 8
    acc, other = rng.normal(size=(H, H)), rng.normal(size=(H, H))
    acc[0, 0], acc[1, 1], acc[3, 3], other[2, 2] = np.nan, -np.inf, -0.0, -0.0
    args = (np.array(codes, np.int64), xs, U, acc, other)
    got, want = _compiled(dispatch)(*args), dispatch(*args)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)  # (a NaN where NumPy has one)
    zero = want == 0  # the sign of a zero passed on or written is Python's too
    np.testing.assert_array_equal(np.signbit(got[zero]), np.signbit(want[zero]))
