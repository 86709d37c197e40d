"""Dims that an op's running proves equal are unified by shape inference (issue 33).

``W @ h`` fails unless W's second dim equals h's first, so wherever the MatMul has run
(its own result, the blocks its block strictly dominates) the two are one dim, named by
the first argument's symbol.  Not before it, not on paths that skip it: an unannotated
RNN with ``T = 1`` and a non-square ``U`` is a valid NumPy program whose loop-carried ``h``
changes size, so no sound typing ties the Phi itself to ``h``'s argument dim.  The
oracles are plain NumPy (the same functions called directly).  The gradient of that RNN
on xla against torch autograd is ``tests/test_backends_xla.py``'s.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import sympy

import nexus as nx
from nexus.backends.base import NexusRuntimeError
from nexus.ir.graph import Graph
from nexus.ir.node import Node
from nexus.ir.types import TensorType
from nexus.passes.shapechecks import insert_shape_checks
from nexus.passes.shapes import assumed_dims, infer_shapes
from nexus.testing.extras import require


def carried(U, h, T):  # noqa: ANN001, ANN201, N803
    for t in range(T):
        u = U @ h
        if t % 2 == 0:
            h = np.tanh(u) + 0.5 * h
        else:
            h = np.tanh(u)
    return h


def after_matmul(W, x):  # noqa: ANN001, ANN201, N803
    z = W @ x
    if z[0] > 0:
        return x * W[0]
    return z


def in_one_branch(W, x, y, c):  # noqa: ANN001, ANN201, N803
    if c:
        x = np.tanh(W @ x)
    return x * y


def rnn(W, U, xs, h, T):  # noqa: ANN001, ANN201, N803
    for t in range(T):
        h = np.tanh(W @ xs[t] + U @ h)
    return np.sum(h * h)


def _inferred(fn: Any, *args: Any) -> Graph:
    g, _ = nx.script(fn).graph_for(*args).clone()
    return infer_shapes(g)


def _arg_dim(g: Graph, arg: int, axis: int) -> Any:
    t = g.args[arg].type
    assert isinstance(t, TensorType) and t.shape is not None
    return t.shape[axis]


def _only(g: Graph, op: str, block_prefix: str = "") -> Node:
    found = [n for n in g.nodes() if n.op.name == op and n.block is not None and n.block.name.startswith(block_prefix)]
    assert len(found) == 1, found
    return found[0]


def _shape(n: Node) -> tuple[Any, ...]:
    assert isinstance(n.type, TensorType) and n.type.shape is not None
    return n.type.shape


def _rng_args(fn: Any, rng: np.random.Generator) -> tuple[Any, ...]:
    if fn is carried:
        return rng.standard_normal((5, 5)) * 0.5, rng.standard_normal(5), 4
    if fn is after_matmul:
        return rng.standard_normal((3, 4)), rng.standard_normal(4)
    if fn is in_one_branch:
        return rng.standard_normal((4, 4)), rng.standard_normal(4), rng.standard_normal(4), True
    return (rng.standard_normal((6, 4)) * 0.4, rng.standard_normal((6, 6)) * 0.4, rng.standard_normal((5, 4)),
            rng.standard_normal(6), 5)


def test_the_loop_carried_value_is_tied_to_the_arguments_after_the_matmul() -> None:
    """``u = U @ h`` ties the carried h's dim to U's second dim in the blocks the body's
    first block dominates; the header's Phi keeps a dim of its own (T = 0 returns h as
    given, T = 1 a vector of U's first dim)."""
    g = _inferred(carried, *_rng_args(carried, np.random.default_rng(0)))
    u_cols = _arg_dim(g, 0, 1)
    half_h = _only(g, "Mul", "then")  # 0.5 * h, reading the header's Phi
    assert _shape(half_h) == (u_cols,)
    phi = half_h.input(1)
    assert phi.op.name == "Phi" and _shape(phi)[0] not in {_arg_dim(g, 0, 0), u_cols, _arg_dim(g, 1, 0)}


def test_a_fact_holds_in_the_blocks_the_op_dominates_and_not_elsewhere() -> None:
    g = _inferred(after_matmul, *_rng_args(after_matmul, np.random.default_rng(0)))
    assert _shape(_only(g, "Mul")) == (_arg_dim(g, 0, 1),)  # x's dim read as W's second
    g = _inferred(in_one_branch, *_rng_args(in_one_branch, np.random.default_rng(0)))
    # the MatMul runs in one branch only: after the join x may be any size
    mul = _only(g, "Mul")
    assert _arg_dim(g, 0, 1) not in sympy.sympify(_shape(mul)[0]).free_symbols


def test_the_op_that_proves_a_fact_still_checks_it() -> None:
    """The MatMul keeps the equality it assumed (its own check); ``x * W[0]`` after it,
    whose operand dims the fact makes equal, needs no broadcast check."""
    g = _inferred(after_matmul, *_rng_args(after_matmul, np.random.default_rng(0)))
    assumed = assumed_dims(g)
    matmul = _only(g, "MatMul")
    assert [(e.i, e.a, e.j, e.b, e.broadcast) for e in assumed[matmul]] == [(0, 1, 1, 0, False)]
    assert _only(g, "Mul") not in assumed
    insert_shape_checks(g)
    assert [n.attrs["broadcast"] for n in g.nodes() if n.op.name == "CheckDims"] == [False]


def test_unification_is_idempotent() -> None:
    g = _inferred(carried, *_rng_args(carried, np.random.default_rng(0)))
    before = {n: n.type for n in g.nodes()}
    infer_shapes(g)
    assert {n: n.type for n in g.nodes()} == before


def test_the_rnn_carried_h_stays_its_own_dim_where_a_run_changes_its_size() -> None:
    """Seed 001's RNN with T = 1 and a U of shape (3, 6): NumPy returns a 3-vector from a
    6-vector h.  Inference must not type the carried h as h's argument dim."""
    g = _inferred(rnn, *_rng_args(rnn, np.random.default_rng(0)))
    phi = next(n for n in g.nodes() if n.op.name == "Phi" and isinstance(n.type, TensorType) and n.type.shape)
    assert _shape(phi)[0] not in {_arg_dim(g, a, k) for a in range(4) for k in range(len(_shape(g.args[a])))}
    rng = np.random.default_rng(3)
    W, U, xs, h = rng.standard_normal((3, 4)), rng.standard_normal((3, 6)), rng.standard_normal((2, 4)), \
        rng.standard_normal(6)
    want = rnn(W, U, xs, h, 1)
    assert nx.run(g, W, U, xs, h, 1) == pytest.approx(want, rel=1e-12)


@pytest.mark.parametrize("backend", ["python", "llvm", "xla"])
@pytest.mark.parametrize("fn", [carried, after_matmul, in_one_branch, rnn], ids=lambda f: f.__name__)
def test_unified_and_checked_graphs_give_numpys_results(fn: Any, backend: str) -> None:
    if backend != "python":
        require({"llvm": "llvmlite", "xla": "jax"}[backend], backend)
    for seed in range(2):
        args = _rng_args(fn, np.random.default_rng(seed))
        g = insert_shape_checks(_inferred(fn, *args))
        got = nx.compile(g, backend=backend)(*args)
        np.testing.assert_allclose(np.asarray(got), np.asarray(fn(*args)), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("backend", ["python", "llvm", "xla"])
def test_a_mismatched_matmul_raises_numpys_error_class(backend: str) -> None:
    if backend != "python":
        require({"llvm": "llvmlite", "xla": "jax"}[backend], backend)
    rng = np.random.default_rng(0)
    W, x = rng.standard_normal((3, 4)), rng.standard_normal(5)
    with pytest.raises(Exception) as numpy_error:
        after_matmul(W, x)
    g = insert_shape_checks(_inferred(after_matmul, *_rng_args(after_matmul, rng)))
    with pytest.raises(NexusRuntimeError) as ours:
        nx.compile(g, backend=backend)(W, x)
    assert type(ours.value.__cause__) is type(numpy_error.value) is ValueError
    assert "MatMul" in str(ours.value)
    if backend == "python":  # the script as the user calls it: the kernel's own error
        with pytest.raises(NexusRuntimeError) as called:
            nx.script(after_matmul)(W, x)
        assert type(called.value.__cause__) is ValueError


def after_concat(a, b):  # noqa: ANN001, ANN201
    c = np.concatenate([a, b])
    if c[0, 0] > 0:
        return b + a[0]
    return c


def after_add(x, y):  # noqa: ANN001, ANN201
    z = x + y
    if z[0] > 0:
        return x * 2.0
    return z


def test_concat_ties_its_other_axes_and_broadcasting_ties_nothing() -> None:
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((2, 3)) + 2, rng.standard_normal((4, 3))
    g = _inferred(after_concat, a, b)
    add = _only(g, "Add")
    assert _shape(add) == (_arg_dim(g, 1, 0), _arg_dim(g, 0, 1)) and add not in assumed_dims(g)
    np.testing.assert_allclose(nx.run(insert_shape_checks(g), a, b), after_concat(a, b))
    # x + y with x of size 1 and y of size 5 is NumPy broadcasting: x stays its own size after it
    x, y = np.ones(1), np.ones(5)
    g = _inferred(after_add, x, y)
    assert _shape(_only(g, "Mul")) == (_arg_dim(g, 0, 0),)
    np.testing.assert_allclose(nx.run(g, x, y), after_add(x, y))


def masked_in_both_branches(W, a, b, c):  # noqa: ANN001, ANN201, N803
    if c:
        x = a[a > 0]
        y = W @ x
    else:
        x = b[b > 0]
        y = W @ x
    return x * W[0] + y[0]


@pytest.mark.parametrize("backend", ["python", "llvm"])
def test_data_dependent_sizes_proved_on_every_edge_join_as_the_arguments_dim(backend: str) -> None:
    """Each branch's mask has a size of its own; each branch's MatMul proves it equal to
    W's second dim, so after the join x is an f64[W_1] (a size known from the arguments)."""
    if backend != "python":
        require("llvmlite", backend)
    W, a, b = np.ones((3, 2)), np.array([1.0, -1.0, 2.0]), np.array([-1.0, 3.0, 4.0, -2.0])
    g = _inferred(masked_in_both_branches, W, a, b, True)
    x = _only(g, "Mul").input(0)
    assert x.op.name == "Phi" and _shape(x) == (_arg_dim(g, 0, 1),)
    exe = nx.compile(insert_shape_checks(g), backend=backend)
    for c in (True, False):
        np.testing.assert_allclose(exe(W, a, b, c), masked_in_both_branches(W, a, b, c))
    with pytest.raises(NexusRuntimeError) as ours:
        exe(W, np.array([1.0, 2.0, 3.0]), b, True)  # three positives against W's two columns
    with pytest.raises(ValueError):
        masked_in_both_branches(W, np.array([1.0, 2.0, 3.0]), b, True)
    assert type(ours.value.__cause__) is ValueError
