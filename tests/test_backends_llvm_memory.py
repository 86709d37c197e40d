"""SetItem on the llvm backend (``x[i] = v`` as a store): results against NumPy on copies,
arguments never written, in-place writes only where nothing can see them."""

from __future__ import annotations

import numpy as np
import pytest

from nexus.testing.extras import require

require("llvmlite", "llvm")

import nexus as nx  # noqa: E402
from nexus.backends.base import NexusRuntimeError  # noqa: E402
from nexus.backends.llvm.backend import LLVMExecutable  # noqa: E402


@nx.script
def _rows(a, i: int, v: float):
    b = a * 2.0
    b[i, 1] = v
    b[-1] = v + 1
    b[0] = a[2]
    return b


@nx.script
def _fill(x, n: int):
    y = x * 1.0
    z = y
    for i in range(n):
        y[i] = y[i] + 1.0
    return y, z


@nx.script
def _arg(x, i: int):
    x[i] = 7
    return x


def _numpy_rows(a: np.ndarray, i: int, v: float) -> np.ndarray:
    b = a * 2.0
    b[i, 1] = v
    b[-1] = v + 1
    b[0] = a[2]
    return b


def test_setitem_int_indices_and_row_broadcast_match_numpy() -> None:
    a = np.arange(12.0).reshape(3, 4)
    exe = nx.compile(_rows.graph_for(a, 1, 5.0), backend="llvm")
    assert isinstance(exe, LLVMExecutable)
    for i in (0, 1, -2, -3):
        np.testing.assert_array_equal(exe(a, i, 5.5), _numpy_rows(a, i, 5.5))
    with pytest.raises(NexusRuntimeError, match="IndexError"):
        exe(a, 3, 1.0)
    with pytest.raises(NexusRuntimeError, match="IndexError"):
        exe(a, -4, 1.0)


def test_setitem_in_a_loop_is_a_value_and_leaves_the_argument_alone() -> None:
    x = np.arange(6.0)
    keep = x.copy()
    exe = nx.compile(_fill.graph_for(x, 3), backend="llvm")
    assert isinstance(exe, LLVMExecutable)
    y, z = exe(x, 4)
    np.testing.assert_array_equal(y, [1, 2, 3, 4, 4, 5])
    np.testing.assert_array_equal(z, keep)  # SetItem is a value: the earlier name keeps the old one
    np.testing.assert_array_equal(x, keep)


def test_setitem_never_writes_into_an_argument() -> None:
    x = np.arange(5, dtype=np.int64)
    exe = nx.compile(_arg.graph_for(x, 1), backend="llvm")
    assert isinstance(exe, LLVMExecutable)
    np.testing.assert_array_equal(exe(x, -1), [0, 1, 2, 3, 7])
    np.testing.assert_array_equal(x, np.arange(5))


def test_setitem_in_a_loop_writes_in_place() -> None:
    # A copy per iteration would move 100,000 x 800 kB (seconds); in place it is microseconds.
    import time

    x = np.zeros(100_000)
    exe = nx.compile(_fill.graph_for(x, 3), backend="llvm")
    t0 = time.perf_counter()
    y, _ = exe(x, 100_000)
    assert time.perf_counter() - t0 < 1.0
    np.testing.assert_array_equal(y, np.ones(100_000))


@nx.script
def _lazy_reader(x, i: int):
    y = x + 1.0
    w = y * 2.0
    y[i] = 100.0
    return w, y


def test_setitem_copies_when_a_lazy_value_still_reads_the_buffer() -> None:
    x = np.arange(4.0)
    exe = nx.compile(_lazy_reader.graph_for(x, 0), backend="llvm")
    assert isinstance(exe, LLVMExecutable)
    w, y = exe(x, 2)
    np.testing.assert_array_equal(w, (x + 1.0) * 2.0)
    np.testing.assert_array_equal(y, [1, 2, 100, 4])
