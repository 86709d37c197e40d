"""Reductions, arg reductions, CumSum, Gemm and Einsum against PyTorch on random inputs."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from nexus.ir.opdef import OpTypeError
from nexus.ops.check import apply_op
from nexus.testing.extras import require

torch = require("torch", "torch")
RNG = np.random.default_rng(1)


def rand(shape: tuple, dtype: type) -> np.ndarray:
    if np.dtype(dtype).kind in "iu":
        return RNG.integers(-4 if np.dtype(dtype).kind == "i" else 0, 5, size=shape).astype(dtype)
    return RNG.uniform(-2, 2, size=shape).astype(dtype)


DTYPES = [np.float32, np.float64, np.int32, np.int64]


@pytest.mark.parametrize("op,fn", [("ReduceMin", torch.amin), ("ReduceMax", torch.amax), ("ReduceSum", torch.sum)])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("axes,keepdims", [(None, False), ((1,), True), ((0, -1), False)])
def test_reduce(op: str, fn, dtype: type, axes, keepdims: bool) -> None:  # type: ignore[no-untyped-def]
    x = rand((3, 4, 5), dtype)
    got = apply_op(op, x, axes=axes, keepdims=keepdims)
    dims = tuple(range(3)) if axes is None else axes
    want = fn(torch.from_numpy(x), dim=dims, keepdim=keepdims).numpy()
    assert np.asarray(got).dtype == dtype
    np.testing.assert_allclose(got, want, rtol=1e-5)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("axes,keepdims", [(None, False), ((1,), True), ((0, 2), False)])
def test_reduce_prod(dtype: type, axes, keepdims: bool) -> None:  # type: ignore[no-untyped-def]
    x = rand((2, 3, 2), dtype)
    got = apply_op("ReduceProd", x, axes=axes, keepdims=keepdims)
    t = torch.from_numpy(x)
    for a in sorted(axes or (0, 1, 2), reverse=True):
        t = torch.prod(t, dim=a, keepdim=keepdims)
    assert np.asarray(got).dtype == dtype
    np.testing.assert_allclose(got, t.numpy(), rtol=1e-5)


def test_reduce_prod_empty_is_one() -> None:
    got = apply_op("ReduceProd", np.zeros((0, 3), np.float32), axes=(0,))
    np.testing.assert_array_equal(got, torch.prod(torch.zeros(0, 3), dim=0).numpy())


@pytest.mark.parametrize("op,fn", [("ArgMax", torch.argmax), ("ArgMin", torch.argmin)])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("axis,keepdims", [(0, False), (-1, True), (1, False)])
def test_arg(op: str, fn, dtype: type, axis: int, keepdims: bool) -> None:  # type: ignore[no-untyped-def]
    x = RNG.permutation(60).reshape(3, 4, 5).astype(dtype)  # distinct: no ties
    got = apply_op(op, x, axis=axis, keepdims=keepdims)
    assert got.dtype == np.int64
    np.testing.assert_array_equal(got, fn(torch.from_numpy(x), dim=axis, keepdim=keepdims).numpy())


def test_arg_ties_first_and_last() -> None:
    x = np.array([[1, 3, 3, 0], [2, 2, 2, 2]], np.int32)
    # Independent formula: first / last position of the row maximum.
    first = [row.index(max(row)) for row in x.tolist()]
    last = [len(row) - 1 - row[::-1].index(max(row)) for row in x.tolist()]
    np.testing.assert_array_equal(apply_op("ArgMax", x, axis=1), first)
    np.testing.assert_array_equal(apply_op("ArgMax", x, axis=1, select_last_index=True), last)


def test_arg_empty_axis_is_a_type_error() -> None:
    with pytest.raises(OpTypeError, match="size 0"):
        apply_op("ArgMax", np.zeros((0, 3), np.float32), axis=0)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int8])
@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("exclusive,reverse", [(False, False), (True, False), (False, True), (True, True)])
def test_cumsum(dtype: type, axis: int, exclusive: bool, reverse: bool) -> None:
    x = rand((3, 4), dtype)
    got = apply_op("CumSum", x, axis=axis, exclusive=exclusive, reverse=reverse)
    t = torch.from_numpy(x.astype(np.float64))
    if reverse:
        t = torch.flip(t, [axis])
    want = torch.cumsum(t, dim=axis)
    if exclusive:
        want = want - t
    if reverse:
        want = torch.flip(want, [axis])
    assert got.dtype == dtype
    np.testing.assert_allclose(got.astype(np.float64), want.numpy(), rtol=1e-5, atol=1e-5)


def test_cumsum_empty() -> None:
    assert apply_op("CumSum", np.zeros((0, 2), np.float32), axis=0, exclusive=True).shape == (0, 2)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64])
@pytest.mark.parametrize("ta,tb", [(False, False), (True, False), (False, True), (True, True)])
@pytest.mark.parametrize("cshape", [None, (), (5,), (3, 1), (3, 5)])
def test_gemm(dtype: type, ta: bool, tb: bool, cshape) -> None:  # type: ignore[no-untyped-def]
    a = rand((4, 3) if ta else (3, 4), dtype)
    b = rand((5, 4) if tb else (4, 5), dtype)
    alpha, beta = (2.0, 3.0) if np.dtype(dtype).kind == "f" else (1.0, 1.0)
    args = [a, b] + ([] if cshape is None else [rand(cshape, dtype)])
    got = apply_op("Gemm", *args, alpha=alpha, beta=beta, transA=ta, transB=tb)
    ta_, tb_ = torch.from_numpy(a.astype(np.float64)), torch.from_numpy(b.astype(np.float64))
    want = alpha * ((ta_.T if ta else ta_) @ (tb_.T if tb else tb_))
    if cshape is not None:
        want = want + beta * torch.from_numpy(args[2].astype(np.float64))
    assert got.dtype == dtype
    np.testing.assert_allclose(got, want.numpy(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64])
@pytest.mark.parametrize("ta,tb", [(False, True), (True, True), (False, False)])
def test_python_backend_gemm_with_constant_weights(monkeypatch: pytest.MonkeyPatch, dtype: type, ta: bool,
                                                   tb: bool) -> None:
    """A Gemm whose b is a constant (a Linear layer's transposed weight) runs through a
    planned kernel on the python backend (a C-ordered copy of b's transpose), at two sizes
    of a symbolic batch; PyTorch in float64 is the oracle."""
    import nexus as nx
    from nexus.backends.python import lowering
    from nexus.ir.graph import Graph
    from nexus.ir.types import TensorType

    dt = {np.float32: "f32", np.float64: "f64", np.int64: "i64"}[dtype]
    w, c = rand((5, 4) if tb else (4, 5), dtype), rand((5,), dtype)
    g = Graph("gemm", [TensorType(dt, (4, "n") if ta else ("n", 4))], ["a"])
    blk = g.start_block
    alpha, beta = (2.0, 3.0) if np.dtype(dtype).kind == "f" else (1.0, 1.0)
    y = g.add("Gemm", [g.args[0], g.add("Constant", [], blk, {"value": w}), g.add("Constant", [], blk, {"value": c})],
              blk, {"alpha": alpha, "beta": beta, "transA": ta, "transB": tb})
    g.end_block.append_input(g.add("Return", [y], blk))
    nx.verify(g)
    planned: list[bool] = []
    plan = lowering.planned_gemm
    monkeypatch.setattr(lowering, "planned_gemm", lambda **kw: planned.append(True) or plan(**kw))
    exe = nx.compile(g, backend="python")
    for n in (3, 1, 3):
        a = rand((4, n) if ta else (n, 4), dtype)
        a_, w_ = torch.from_numpy(a.astype(np.float64)), torch.from_numpy(w.astype(np.float64))
        want = alpha * ((a_.T if ta else a_) @ (w_.T if tb else w_)) + beta * torch.from_numpy(c.astype(np.float64))
        got = exe(a)
        assert got.dtype == dtype
        np.testing.assert_allclose(got, want.numpy(), rtol=1e-5, atol=1e-5)
    assert planned == ([True] if tb else [])


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64])
@pytest.mark.parametrize("ta", [False, True])
def test_python_backend_gemm_of_a_transposed_constant(monkeypatch: pytest.MonkeyPatch, dtype: type, ta: bool) -> None:
    """A Gemm whose b is a Transpose of a constant (a Linear layer as PyTorch's graphs give
    it) runs through a planned kernel on a C-ordered copy of the view made once; PyTorch in
    float64 is the oracle, at three calls of two batch sizes."""
    import nexus as nx
    from nexus.backends.python import lowering
    from nexus.ir.graph import Graph
    from nexus.ir.types import TensorType

    dt = {np.float32: "f32", np.float64: "f64", np.int64: "i64"}[dtype]
    w, c = rand((5, 4), dtype), rand((5,), dtype)
    g = Graph("linear", [TensorType(dt, (4, "n") if ta else ("n", 4))], ["a"])
    blk = g.start_block
    wt = g.add("Transpose", [g.add("Constant", [], blk, {"value": w})], blk, {"perm": (1, 0)})
    y = g.add("Gemm", [g.args[0], wt, g.add("Constant", [], blk, {"value": c})], blk, {"transA": ta})
    g.end_block.append_input(g.add("Return", [y], blk))
    nx.verify(g)
    copies: list[bool] = []
    plan = lowering.planned_gemm
    monkeypatch.setattr(lowering, "planned_gemm", lambda **kw: copies.append(kw.get("constant_view", False)) or
                        plan(**kw))
    exe = nx.compile(g, backend="python")
    for n in (3, 1, 3):
        a = rand((4, n) if ta else (n, 4), dtype)
        a_, w_ = torch.from_numpy(a.astype(np.float64)), torch.from_numpy(w.astype(np.float64))
        want = (a_.T if ta else a_) @ w_.T + torch.from_numpy(c.astype(np.float64))
        got = exe(a)
        assert got.dtype == dtype
        np.testing.assert_allclose(got, want.numpy(), rtol=1e-5, atol=1e-5)
    assert copies == [True]


def test_planned_gemm_of_constant_views_copies_each_new_view() -> None:
    """The kept C-ordered copy serves only views of the same array with the same shape and
    strides: another view of it, or a view of another array, is copied again."""
    from nexus.ops.linalg import planned_gemm

    gemm = planned_gemm(constant_view=True)
    rng = np.random.default_rng(2)
    base, other = rng.standard_normal((6, 6)), rng.standard_normal((6, 6))
    a = rng.standard_normal((3, 6))
    for b in (base.T, base.T, base[:, ::2].T.T, base.T[:, :4], other.T, base.T, base):
        np.testing.assert_allclose(gemm(a[:, :b.shape[0]], b), a[:, :b.shape[0]] @ b, rtol=1e-12)


def test_gemm_errors() -> None:
    with pytest.raises(OpTypeError, match="contraction dims differ"):
        apply_op("Gemm", np.zeros((2, 3), np.float32), np.zeros((4, 2), np.float32))
    with pytest.raises(OpTypeError, match="dtype mismatch"):
        apply_op("Gemm", np.zeros((2, 3), np.float32), np.zeros((3, 2), np.float64))


@pytest.mark.parametrize("eq,shapes", [
    ("ij,jk->ik", [(2, 3), (3, 4)]),
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
    ("ii->i", [(3, 3)]),
    ("ij->", [(3, 4)]),
    ("ij,ij->ij", [(2, 3), (2, 3)]),
    ("ij,kj", [(2, 3), (4, 3)]),
    ("...ij,...jk->...ik", [(2, 1, 3, 4), (5, 4, 2)]),
    ("i,j->ij", [(0,), (3,)]),
])
@pytest.mark.parametrize("dtype", [np.float32, np.int64])
def test_einsum(eq: str, shapes: list, dtype: type) -> None:
    xs = [rand(s, dtype) for s in shapes]
    got = apply_op("Einsum", *xs, equation=eq)
    want = torch.einsum(eq, *[torch.from_numpy(x) for x in xs]).numpy()
    assert np.asarray(got).dtype == dtype
    np.testing.assert_allclose(got, want, rtol=1e-5)


def test_einsum_errors() -> None:
    with pytest.raises(OpTypeError, match="has 2 operands"):
        apply_op("Einsum", np.zeros((2, 2), np.float32), equation="ij,jk->ik")
    with pytest.raises(OpTypeError, match="subscript 'j' has sizes 3 and 4"):
        apply_op("Einsum", np.zeros((2, 3), np.float32), np.zeros((4, 5), np.float32), equation="ij,jk->ik")


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape,axes,keepdims", [
    ((2, 3, 4, 5), (2, 3), True), ((2, 3, 4, 5), None, False), ((2, 3, 4, 5), (-1, 0), False), ((7,), (0,), True),
    ((3, 4), (), False)])
def test_reduce_mean_of_floats_is_numpys_bit_for_bit(dtype: type, shape: tuple[int, ...], axes: Any,
                                                      keepdims: bool) -> None:
    """ReduceMean of floats sums and divides itself (without np.mean's wrapper): the same
    bits as np.mean, on a C-ordered and on a channels-last input, a scalar where np.mean
    gives one."""
    x = rand(shape, dtype)
    views = [x] + ([np.moveaxis(np.ascontiguousarray(np.moveaxis(x, 1, -1)), -1, 1)] if x.ndim == 4 else [])
    for v in views:
        got = apply_op("ReduceMean", v, axes=axes, keepdims=keepdims)
        want = np.mean(v, axis=axes, keepdims=keepdims)
        assert np.shape(got) == np.shape(want) and np.asarray(got).dtype == want.dtype
        np.testing.assert_array_equal(got, want)
