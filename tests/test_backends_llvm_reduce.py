"""Reductions, Arg*, TopK and MatMul on the llvm backend against NumPy (the oracle)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from nexus.testing.extras import require

require("llvmlite", "llvm")

import nexus as nx  # noqa: E402
from nexus.backends.base import NexusRuntimeError  # noqa: E402
from nexus.backends.llvm.backend import LLVMExecutable  # noqa: E402
from nexus.ir.graph import Graph  # noqa: E402
from nexus.ir.types import TensorType, sym  # noqa: E402


def _one(op: str, dtype: str, rank: int, **attrs: Any) -> LLVMExecutable:
    """A graph of one op on an argument of ``rank`` symbolic dims (an Exp in front for floats,
    so the reduction reads a fused elementwise input), compiled whole."""
    g = Graph("t", [TensorType(dtype, tuple(sym(f"d{i}") for i in range(rank)))])
    x = g.args[0]
    if dtype.startswith("f"):
        x = g.add("Exp", [x], g.start_block)
    y = g.add(op, [x], g.start_block, {k: list(v) if isinstance(v, tuple) else v for k, v in attrs.items()
                                       if v is not None})
    g.end_block.append_input(g.add("Return", [y], g.start_block))
    exe = nx.compile(g, backend="llvm")
    assert isinstance(exe, LLVMExecutable), getattr(exe, "reason", "")
    return exe


_NP = {"ReduceSum": np.sum, "ReduceMean": np.mean, "ReduceMax": np.max, "ReduceMin": np.min, "ReduceProd": np.prod}


@pytest.mark.parametrize("op", list(_NP))
@pytest.mark.parametrize("axes, keepdims", [(None, False), ((1,), False), ((0, 2), True), ((-1,), True)])
def test_reductions_match_numpy(op: str, axes: Any, keepdims: bool) -> None:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(3, 4, 5)) * 0.3
    exe = _one(op, "f64", 3, axes=axes, keepdims=keepdims)
    want = _NP[op](np.exp(x), axis=axes, keepdims=keepdims)
    np.testing.assert_allclose(exe(x), want, rtol=1e-12)
    xi = rng.integers(-1000, 1000, (3, 4, 5)).astype(np.int32)
    exe = _one(op, "i32", 3, axes=axes, keepdims=keepdims)
    got = exe(xi)
    if op == "ReduceMean":
        np.testing.assert_allclose(got, np.mean(xi, axis=axes, keepdims=keepdims), rtol=1e-12)
    else:  # wraps in int32, as the kernel's astype does
        np.testing.assert_array_equal(got, _NP[op](xi, axis=axes, keepdims=keepdims).astype(np.int32))


@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize("dtype", ["f16", "f32", "f64"])
def test_first_float_extremum_agrees_with_numpy_on_rows_of_specials(op: str, dtype: str) -> None:
    # the first extremum in two passes (the extremum, then where it first is): rows with
    # ties, infinities, signed zeros, NaNs early and late, rows of one element; keepdims
    fn = np.argmax if op == "ArgMax" else np.argmin
    np_dt = {"f16": np.float16, "f32": np.float32, "f64": np.float64}[dtype]
    rng = np.random.default_rng(7)
    pool = np.array([0.0, -0.0, 1.0, -1.0, 2.5, np.inf, -np.inf, -3.0, 2.5, np.nan])
    for shape in ((40, 17), (6, 1), (1, 300)):
        x = rng.choice(pool, size=shape, p=[.1, .1, .15, .15, .1, .05, .05, .15, .1, .05])
        x[0] = pool[8]  # a row of ties
        x = x.astype(np_dt)
        for axis, keep in ((1, False), (0, True), (-1, True)):
            exe = _one(op, dtype, 2, axis=axis, keepdims=keep)
            with np.errstate(over="ignore"):
                e = np.exp(x)  # _one reads its argument through an Exp
            want = fn(e, axis=axis, keepdims=keep)
            np.testing.assert_array_equal(exe(x), want)


@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize("dtype", ["f32", "f64"])
def test_first_float_extremum_of_long_rows_read_as_vectors(op: str, dtype: str) -> None:
    # rows over the last axis are scanned a vector at a time, the remainder in scalars: the
    # extremum (twice, the first wins) and a NaN first or last in a vector, in the
    # remainder, at the very end; rows shorter than a vector
    fn = np.argmax if op == "ArgMax" else np.argmin
    np_dt = np.float32 if dtype == "f32" else np.float64
    exe = _one(op, dtype, 2, axis=-1, keepdims=False)
    size = 1003
    spots = [0, 7, 8, 9, 500, 999, 1000, 1002]
    x = np.random.default_rng(3).normal(size=(2 * len(spots) + 1, size))
    big = 9.0 if op == "ArgMax" else -9.0
    for r, i in enumerate(spots):
        x[r, i] = x[r, min(i + 3, size - 1)] = big
        x[len(spots) + r, i] = np.nan
    x[-1] = big  # all tied
    x = x.astype(np_dt)
    np.testing.assert_array_equal(exe(x), fn(np.exp(x), axis=-1))
    np.testing.assert_array_equal(exe(x[:, :5]), fn(np.exp(x[:, :5]), axis=-1))


def test_max_propagates_nan_and_empty_max_fails() -> None:
    exe = _one("ReduceMax", "f64", 1)
    assert np.isnan(exe(np.array([1.0, np.nan, 3.0])))
    with pytest.raises(NexusRuntimeError, match="zero-size array"):
        exe(np.zeros(0))
    assert _one("ReduceSum", "f64", 1)(np.zeros(0)) == 0.0


@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize("last", [False, True])
def test_arg_reductions_match_numpy_with_ties_and_nan(op: str, last: bool) -> None:
    fn = np.argmax if op == "ArgMax" else np.argmin
    rng = np.random.default_rng(1)
    x = rng.integers(0, 3, (4, 6)).astype(np.float64)  # many ties
    for axis in (0, 1, -1):
        exe = _one(op, "f64", 2, axis=axis, select_last_index=last)
        want = fn(np.flip(np.exp(x), axis), axis=axis)
        want = (x.shape[axis] - 1 - want) if last else fn(np.exp(x), axis=axis)
        np.testing.assert_array_equal(exe(x), want)
    v = np.array([1.0, np.nan, 5.0, np.nan])
    exe = _one(op, "f64", 1, select_last_index=last)
    assert exe(v) == (3 if last else 1)  # NaN wins, as NumPy's argmax/argmin
    xi = rng.integers(-3, 3, 9).astype(np.int64)
    exe = _one(op, "i64", 1, select_last_index=last, keepdims=True)
    want = (8 - fn(xi[::-1])) if last else fn(xi)
    np.testing.assert_array_equal(exe(xi), [want])
    with pytest.raises(NexusRuntimeError, match="empty sequence"):
        exe(np.zeros(0, np.int64))


def _topk_graph(dtype: str, rank: int, k: int, **attrs: Any) -> LLVMExecutable:
    g = Graph("t", [TensorType(dtype, tuple(sym(f"d{i}") for i in range(rank)))])
    kk = g.add("Constant", [], g.start_block, {"value": np.array(k, np.int64)})
    t = g.add("TopK", [g.args[0], kk], g.start_block, attrs)
    v, i = (g.add("Proj", [t], g.start_block, {"num": j}) for j in (0, 1))
    g.end_block.append_input(g.add("Return", [v, i], g.start_block))
    exe = nx.compile(g, backend="llvm")
    assert isinstance(exe, LLVMExecutable), getattr(exe, "reason", "")
    return exe


def _numpy_topk(x: np.ndarray, k: int, axis: int, largest: bool, srt: bool) -> tuple[np.ndarray, np.ndarray]:
    key = x.astype(np.float64) if x.dtype.kind == "u" else x
    idx = np.take(np.argsort(-key if largest else key, axis=axis, kind="stable"), np.arange(k), axis=axis)
    if not srt:
        idx = np.sort(idx, axis=axis)
    return np.take_along_axis(x, idx, axis=axis), idx


@pytest.mark.parametrize("dtype", ["f64", "f32", "i8", "u8"])
def test_topk_matches_a_stable_numpy_argsort(dtype: str) -> None:
    rng = np.random.default_rng(3)
    npdt = np.dtype({"f64": "float64", "f32": "float32", "i8": "int8", "u8": "uint8"}[dtype])
    for largest, srt, axis, shape, k in [(False, True, 0, (9,), 9), (True, True, 1, (3, 6), 4),
                                        (True, False, 0, (5, 2), 3), (False, False, 1, (2, 7), 7)]:
        x = rng.integers(-3, 3, shape).astype(npdt)
        if dtype == "i8":
            x.flat[0] = -128  # -x wraps to -128: NumPy's order of the negated key
        if dtype == "f64":
            x.flat[1] = np.nan  # NaN sorts last, either way
        exe = _topk_graph(dtype, len(shape), k, axis=axis, largest=largest, sorted=srt)
        vals, idx = exe(x)
        want_v, want_i = _numpy_topk(x, k, axis, largest, srt)
        np.testing.assert_array_equal(idx, want_i)
        np.testing.assert_array_equal(vals, want_v)


@nx.script
def _argsort(x):
    o = np.argsort(-x)
    return o, np.sort(x), x[o[0]]


def test_argsort_in_a_script_compiles_whole() -> None:
    x = np.array([3.0, 1.0, 3.0, np.nan, -2.0, 0.0, -0.0])
    exe = nx.compile(_argsort.graph_for(x), backend="llvm")
    assert isinstance(exe, LLVMExecutable)
    o, s, top = exe(x)
    np.testing.assert_array_equal(o, np.argsort(-x, kind="stable"))
    np.testing.assert_array_equal(s, np.sort(x))
    assert top == 3.0


@nx.script
def _sort_of_a_strided_repeat(v):
    return np.sort(np.repeat(v, 2)[::2])


def test_sort_over_an_axis_whose_length_is_an_expression() -> None:
    """The sorted axis has length ceil(2n / 2), an expression: no one buffer size, so the
    sort stays on the python backend (it raised a bare TypeError; found by the fuzzer)."""
    v = np.array([3.0, -1.0, 2.0])
    np.testing.assert_array_equal(nx.compile(_sort_of_a_strided_repeat, backend="llvm")(v), np.sort(v))


@pytest.mark.parametrize("strategy", ["loops", "auto"])
def test_matmul_matches_numpy(strategy: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from nexus.backends.llvm import matmul

    monkeypatch.setattr(matmul, "STRATEGY", strategy)
    rng = np.random.default_rng(4)
    for dtype, npdt in [("f64", np.float64), ("f32", np.float32), ("i32", np.int32)]:
        for sa, sb in [((3, 4), (4, 5)), ((4,), (4, 5)), ((3, 4), (4,)), ((4,), (4,)), ((0, 3), (3, 2)),
                       ((2, 0), (0, 3))]:
            g = Graph("t", [TensorType(dtype, tuple(sym(f"a{i}") for i in range(len(sa)))),
                            TensorType(dtype, tuple(sym(f"b{i}") for i in range(len(sb))))])
            y = g.add("MatMul", list(g.args), g.start_block)
            g.end_block.append_input(g.add("Return", [y], g.start_block))
            exe = nx.compile(g, backend="llvm")
            assert isinstance(exe, LLVMExecutable), getattr(exe, "reason", "")
            a, b = rng.integers(-5, 5, sa).astype(npdt), rng.integers(-5, 5, sb).astype(npdt)
            got = exe(a, b)
            assert np.shape(got) == np.shape(a @ b)
            np.testing.assert_array_equal(got, a @ b)  # small integers: exact in any order


@pytest.mark.parametrize("dtype", ["i8", "i16", "i32", "i64"])
def test_floor_div_and_mod_by_a_positive_constant_match_python(dtype: str) -> None:
    # The non-negative side is a magic multiply (nexus.backends.llvm.rules.magic), the
    # negative side the floor fix-up: compare both with Python's // and % on every sign.
    npdt = np.dtype(dtype.replace("i", "int"))
    info = np.iinfo(npdt)
    rng = np.random.default_rng(5)
    xs = np.concatenate([np.array([0, 1, -1, info.min, info.max, info.min + 1, info.max - 1]),
                         rng.integers(info.min, info.max, 300, endpoint=True)]).astype(npdt)
    for d in (1, 2, 3, 7, 10, 100, int(info.max)):
        for op, fn in (("FloorDiv", lambda a, b: a // b), ("Mod", lambda a, b: a % b)):
            g = Graph("t", [TensorType(dtype, (sym("n"),))])
            c = g.add("Constant", [], g.start_block, {"value": np.array(d, npdt)})
            y = g.add(op, [g.args[0], c], g.start_block)
            g.end_block.append_input(g.add("Return", [y], g.start_block))
            exe = nx.compile(g, backend="llvm")
            assert isinstance(exe, LLVMExecutable)
            want = np.array([fn(int(v), d) for v in xs]).astype(npdt)  # Python ints, wrapped
            np.testing.assert_array_equal(exe(xs), want, err_msg=f"{op} by {d}")
