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
