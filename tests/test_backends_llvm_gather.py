"""Gathers of the llvm backend against NumPy's ``np.take``."""

from __future__ import annotations

import numpy as np
import pytest

import nexus as nx
from nexus.testing.extras import require

require("llvmlite", "llvm")

# Two Gathers of one run-time index along an axis whose size is known only at run time (the
# greedy suppression step of a detector as its ONNX import has it): the index is checked
# inside each Gather's loop nest, so the second may not reuse the first's check.
TWO_ROWS = """
graph @g {
^entry:
  %0 = Start : (bool[b, k, k], i64, bool[b, k])
  %a = Proj %0 {num = 0} : bool[b, k, k]
  %i = Proj %0 {num = 1} : i64
  %m = Proj %0 {num = 2} : bool[b, k]
  %one = Constant {value = tensor<i64[1]: [1]>} : i64[1]
  %r = Reshape %i, %one : i64[1]
  %row = Gather %m, %r {axis = 1} : bool[b, 1]
  %rows = Gather %a, %r {axis = 1} : bool[b, 1, k]
  %sq = Squeeze %rows {axes = [1]} : bool[b, k]
  %and = And %sq, %row : bool[b, k]
  %ret = Return %and : X
^exit(%ret):
  End : X
}
"""


@pytest.mark.parametrize("i", [0, 3, 6, -1, -7])
def test_two_gathers_of_one_run_time_index_agree_with_numpy(i: int) -> None:
    rng = np.random.default_rng(i + 10)
    a, m = rng.random((2, 7, 7)) > 0.5, rng.random((2, 7)) > 0.3
    exe = nx.compile(nx.parse(TWO_ROWS), backend="llvm")
    got = exe(a, np.int64(i), m)
    np.testing.assert_array_equal(got, np.take(a, [i], axis=1)[:, 0] & np.take(m, [i], axis=1))


def test_an_index_out_of_bounds_fails_as_on_the_python_backend() -> None:
    a, m = np.ones((1, 4, 4), bool), np.ones((1, 4), bool)
    g = nx.parse(TWO_ROWS)
    with pytest.raises(IndexError):
        np.take(a, [4], axis=1)
    for backend in ("python", "llvm"):
        with pytest.raises(nx.NexusRuntimeError, match="IndexError.*out of bounds"):
            nx.compile(g, backend=backend)(a, np.int64(4), m)


# GatherElements (np.take_along_axis): BERT's position ids are one of a constant's row,
# picked by a slice of another; here data and indices are run-time, data broadcast along
# an axis of size 1, indices negative and of i32.
ELEMENTS = """
graph @g {
^entry:
  %0 = Start : (f32[a, 5], IDT[b, 3])
  %x = Proj %0 {num = 0} : f32[a, 5]
  %i = Proj %0 {num = 1} : IDT[b, 3]
  %y = GatherElements %x, %i {axis = AXIS} : f32[b, 3]
  %ret = Return %y : X
^exit(%ret):
  End : X
}
"""


def _elements(axis: int, idt: str) -> nx.Graph:
    return nx.parse(ELEMENTS.replace("AXIS", str(axis)).replace("IDT", idt))


@pytest.mark.parametrize("idt", ["i64", "i32", "u8"])
@pytest.mark.parametrize("axis", [1, -1])
def test_gather_elements_is_np_take_along_axis(axis: int, idt: str) -> None:
    rng = np.random.default_rng(3)
    x = rng.normal(size=(1, 5)).astype(np.float32)
    low = 0 if idt == "u8" else -5
    i = rng.integers(low, 5, size=(4, 3)).astype({"i64": np.int64, "i32": np.int32, "u8": np.uint8}[idt])
    exe = nx.compile(_elements(axis, idt), backend="llvm")
    assert type(exe).__name__ == "LLVMExecutable"
    want = np.take_along_axis(np.broadcast_to(x, (4, 5)), np.where(i < 0, i + 5, i).astype(np.int64), axis=1)
    np.testing.assert_array_equal(exe(x, i), want)
    x4 = rng.normal(size=(4, 5)).astype(np.float32)  # data not broadcast
    want = np.take_along_axis(x4, np.where(i < 0, i + 5, i).astype(np.int64), axis=1)
    np.testing.assert_array_equal(exe(x4, i), want)


@pytest.mark.parametrize("bad", [5, -6])
def test_gather_elements_out_of_range_fails_as_on_the_python_backend(bad: int) -> None:
    x, i = np.ones((2, 5), np.float32), np.array([[0, bad, 1], [1, 2, 3]])
    with pytest.raises(IndexError):
        np.take_along_axis(x, i, axis=1)
    for backend in ("python", "llvm"):
        with pytest.raises(nx.NexusRuntimeError, match="IndexError") as e:
            nx.compile(_elements(1, "i64"), backend=backend)(x, i)
        assert "GatherElements" in str(e.value)


def test_gather_elements_of_data_neither_as_long_nor_1_fails_as_in_numpy() -> None:
    x, i = np.ones((3, 5), np.float32), np.zeros((2, 3), np.int64)
    with pytest.raises(IndexError, match="shape mismatch"):
        np.take_along_axis(x, i, axis=1)
    with pytest.raises(nx.NexusRuntimeError, match="IndexError.*shape mismatch"):
        nx.compile(_elements(1, "i64"), backend="llvm")(x, i)
