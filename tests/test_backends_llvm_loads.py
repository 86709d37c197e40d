"""Loads on the llvm backend: bounds checks of scalar indices (one compare for an in-bounds
index, negative ones counted from the end) and elements of arguments read ahead at a loop's
header (``nexus.backends.llvm.ahead``), against plain Python and NumPy indexing; and the
inline check of a symbol shared by several arguments at the call boundary."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from nexus.testing.extras import require

require("llvmlite", "llvm")

import nexus as nx  # noqa: E402
from nexus.backends.base import NexusRuntimeError  # noqa: E402
from nexus.backends.llvm import ahead  # noqa: E402
from nexus.backends.llvm.backend import LLVMExecutable  # noqa: E402
from nexus.ir.binding import BindingError, signature  # noqa: E402
from nexus.ir.graph import Graph  # noqa: E402
from nexus.ir.types import TensorType, sym  # noqa: E402


def _python(fn: Any, *args: Any) -> Any:
    """What plain Python (with NumPy arrays) gives: the value, or 'IndexError'."""
    try:
        return fn(*args)
    except IndexError:
        return "IndexError"


def _native(exe: Any, *args: Any) -> Any:
    try:
        return exe(*args)
    except NexusRuntimeError as e:
        assert "IndexError" in str(e), e
        return "IndexError"


def _gather_graph(index_dtype: str) -> Graph:
    g = Graph("t", [TensorType("f32", (sym("N"),)), TensorType(index_dtype, ())], ["x", "i"])
    x, i = g.args
    out = g.add("Gather", [x, i], g.start_block, {"axis": 0})
    g.end_block.append_input(g.add("Return", [out], g.start_block))
    return g


@pytest.mark.parametrize("dtype", ["i64", "i32", "i8", "u8", "u64"])
def test_gather_scalar_index_matches_numpy_on_every_sign_and_width(dtype: str) -> None:
    exe = nx.compile(_gather_graph(dtype), backend="llvm")
    assert isinstance(exe, LLVMExecutable)
    np_dt = np.dtype({"i64": "int64", "i32": "int32", "i8": "int8", "u8": "uint8", "u64": "uint64"}[dtype])
    info = np.iinfo(np_dt)
    for n in (0, 1, 5, 200):
        x = np.arange(n, dtype=np.float32) * 3 + 1
        for i in {-n - 1, -n, -1, 0, 1, n - 1, n, 130, 250, info.min, info.max}:
            if not info.min <= i <= info.max:
                continue
            want = _python(lambda x, i: x.tolist()[i], x, i)  # a Python list's indexing
            assert _native(exe, x, np_dt.type(i)) == want, (dtype, n, i)


@nx.script
def _set(x, i: int, j: int, v: float):
    y = x * 1.0
    y[i, j] = v
    return y


def _set_py(x: np.ndarray, i: int, j: int, v: float) -> np.ndarray:
    y = x * 1.0
    y[i, j] = v
    return y


def test_setitem_indices_negative_and_out_of_bounds_match_numpy() -> None:
    x = np.arange(12.0).reshape(3, 4)
    exe = nx.compile(_set.graph_for(x, 0, 0, 1.0), backend="llvm")
    assert isinstance(exe, LLVMExecutable)
    for i in (-4, -3, -1, 0, 2, 3):
        for j in (-5, -4, -1, 0, 3, 4):
            want, got = _python(_set_py, x, i, j, 9.0), _native(exe, x, i, j, 9.0)
            if isinstance(want, str):
                assert got == want, (i, j)
            else:
                np.testing.assert_array_equal(got, want)


# --- elements read ahead ---------------------------------------------------------------------
@nx.script
def _weighted(x, w, i: int, n: int):
    s = 0.0
    for m in range(n):
        s += float(x[i] * w[m])
    return s


def _weighted_py(x: np.ndarray, w: np.ndarray, i: int, n: int) -> float:
    s = 0.0
    for m in range(n):
        s += float(x[i] * w[m])
    return s


@nx.script
def _pairs(b, i: int, j: int, n: int):
    s = 0.0
    for m in range(n):
        s += float(max(b[i, 0], b[m, 0]) + b[i][1] * b[j, -1]) - m
    return s


def _pairs_py(b: np.ndarray, i: int, j: int, n: int) -> float:
    s = 0.0
    for m in range(n):
        s += float(np.maximum(b[i, 0], b[m, 0]) + b[i][1] * b[j, -1]) - m
    return s


def _plan_sizes(g: Graph) -> list[int]:
    return sorted(len(v) for v in ahead.plan(g).values())


def test_invariant_elements_are_read_ahead_and_match_python() -> None:
    x, w = np.arange(1, 6, dtype=np.float32), np.arange(1, 8, dtype=np.float32) / 4
    g = _weighted.graph_for(x, w, 0, 0)
    assert _plan_sizes(g) == [1]  # x[i]; w[m] changes with m
    exe = nx.compile(g, backend="llvm")
    assert isinstance(exe, LLVMExecutable)
    for i in (-6, -5, -1, 0, 4, 5, 99):
        for n in (0, 1, 7, 8):
            want, got = _python(_weighted_py, x, w, i, n), _native(exe, x, w, i, n)
            assert got == want, (i, n)  # an index out of bounds fails only if the loop runs


def test_read_ahead_through_a_row_and_two_indices() -> None:
    b = np.array([[1.0, 2.0, 3.0], [4.0, 0.0, -2.0], [-0.0, 7.0, 1.0], [np.nan, -1.0, 0.5]], np.float32)
    g = _pairs.graph_for(b, 0, 0, 0)
    assert _plan_sizes(g) == [3]  # b[i, 0], b[i][1], b[j, -1]
    exe = nx.compile(g, backend="llvm")
    for i in (-5, -4, -1, 0, 1, 3, 4):
        for j in (-1, 2, 4):
            for n in (0, 2, 3, 4, 5):  # the last row is NaN
                want, got = _python(_pairs_py, b, i, j, n), _native(exe, b, i, j, n)
                assert got == want or (np.isnan(got) and np.isnan(want)), (i, j, n, got, want)


def test_read_ahead_of_an_empty_argument_when_the_loop_does_not_run() -> None:
    x, w = np.zeros(0, np.float32), np.zeros(0, np.float32)
    exe = nx.compile(_weighted.graph_for(x, w, 0, 0), backend="llvm")
    assert exe(x, w, 3, 0) == 0.0
    with pytest.raises(NexusRuntimeError, match="IndexError"):
        exe(x, w, 0, 1)


_TABLE = np.array([[0.5, 1.5], [2.5, 3.5], [4.5, 5.5]], np.float32)


@nx.script
def _lookup(i: int, n: int):
    s = 0.0
    for m in range(n):
        s += float(_TABLE[i, 1]) * m
    return s


def test_elements_of_a_constant_array_are_read_ahead() -> None:
    g = _lookup.graph_for(0, 0)
    assert _plan_sizes(g) == [1]
    exe = nx.compile(g, backend="llvm")
    assert isinstance(exe, LLVMExecutable)
    for i in (-4, -3, -1, 0, 2, 3):
        for n in (0, 1, 4):
            assert _native(exe, i, n) == _python(_lookup.fn, i, n), (i, n)


def test_nms_loop_reads_the_current_box_ahead() -> None:
    from bench.w5_llvm import nms_kept
    from nexus.backends.llvm.partition import Partitioned

    rng = np.random.default_rng(1)
    xy = rng.uniform(0, 50, (60, 2)).astype(np.float32)
    boxes = np.concatenate([xy, xy + rng.uniform(1, 20, (60, 2)).astype(np.float32)], axis=1)
    scores = rng.uniform(0, 1, 60).astype(np.float32)
    exe = nx.compile(nms_kept.graph_for(boxes, scores, np.float32(0.5)), backend="llvm")
    assert isinstance(exe, Partitioned) and len(exe.kernels) == 1
    # boxes[i, 0..3] and area[i] inside the inner loop: five elements read ahead
    assert _plan_sizes(exe.kernels[0].graph) == [5]
    np.testing.assert_array_equal(exe(boxes, scores, 0.5), nms_kept.fn(boxes, scores, 0.5))


# --- the call boundary -------------------------------------------------------------------------
def test_a_shared_symbol_is_checked_inline_and_a_conflict_names_both_arguments() -> None:
    n = sym("n")
    g = Graph("t", [TensorType("f32", (n, 4)), TensorType("f32", (n,))], ["boxes", "area"])
    g.end_block.append_input(g.add("Return", [g.args[1]], g.start_block))
    conv = signature(g).convert
    a, b = np.zeros((3, 4), np.float32), np.zeros(3, np.float32)
    assert [v.shape for v in conv([a, b])] == [(3, 4), (3,)]
    with pytest.raises(BindingError, match=r"'area'.*n = 2.*|'boxes'.*n = 3") as e:
        conv([a, np.zeros(2, np.float32)])
    assert "'boxes'" in str(e.value) and "'area'" in str(e.value)
