"""The llvm backend's shape rules (ShapeOf, ConstantOfShape, Reshape) against NumPy running
the same script: each graph compiles whole (no op left to Python) and agrees."""

from __future__ import annotations

import numpy as np
import pytest

import nexus as nx
from nexus.frontend.script import Tensor
from nexus.passes.shapes import infer_shapes
from nexus.testing.extras import require

require("llvmlite", "llvm")

from nexus.backends.llvm import LLVMExecutable  # noqa: E402


def flat_then_scale(x: Tensor["N", 4], a: float):  # noqa: F821, UP037, ANN201
    return np.reshape(x * a + 1.0, (x.shape[0] * 4,))


def rows(x: Tensor["N", 6]):  # noqa: F821, UP037, ANN201
    return np.reshape(x, (-1, 3)) - 1.0


def total(x: Tensor["N", 4]):  # noqa: F821, UP037, ANN201
    return np.sum(np.reshape(x * 2.0, (-1, 2)) * 1.5, axis=1)


def zeros_then_fill(x: Tensor["N"]):  # noqa: F821, UP037, ANN201
    out = np.zeros(x.shape[0], dtype=np.int64)
    for i in range(x.shape[0]):
        out[i] = i * 3
    return out, np.ones(x.shape) * 2.0


def transposed(x: Tensor["N", "M"], y: Tensor["M", "N"]):  # noqa: F821, UP037, ANN201
    return np.transpose(x * 2.0) + y, x.T - 1.0


def axes(x: Tensor["N", 3]):  # noqa: F821, UP037, ANN201
    return np.expand_dims(x, 0) * 2.0, np.squeeze(np.expand_dims(x + 1.0, 1), axis=1), np.transpose(
        np.reshape(x, (1, -1, 3)), (2, 0, 1))


# Reshapes of a lazy value (an elementwise chain, not yet in a buffer): the axes the reshape
# keeps at either end are read through, those between flattened and split again.
def split_heads(x: Tensor["N", 6, 8]):  # noqa: F821, UP037, ANN201
    return np.reshape(x * 2.0 + 1.0, (x.shape[0], 6, 2, 4)) - 1.0


def merge_rows(x: Tensor["N", 3, 4]):  # noqa: F821, UP037, ANN201
    return np.reshape(x + 1.0, (x.shape[0] * 3, 4)) * 2.0


def regroup(x: Tensor["N", 2, 3, 4, 5]):  # noqa: F821, UP037, ANN201
    return np.reshape(x - 0.5, (x.shape[0], 6, 2, 10)) * 3.0, np.reshape(x * 2.0, (x.shape[0], 2, 60))


@pytest.mark.parametrize("fn, args", [
    (split_heads, (np.arange(96.0).reshape(2, 6, 8),)),
    (merge_rows, (np.arange(24.0).reshape(2, 3, 4),)),
    (regroup, (np.arange(360.0).reshape(3, 2, 3, 4, 5),)),
    (transposed, (np.arange(6.0).reshape(2, 3), np.ones((3, 2)))),
    (axes, (np.arange(6.0).reshape(2, 3),)),
    (flat_then_scale, (np.arange(12.0).reshape(3, 4), 0.5)),
    (flat_then_scale, (np.zeros((0, 4)), 2.0)),
    (rows, (np.arange(12.0).reshape(2, 6),)),
    (total, (np.arange(8.0).reshape(2, 4),)),
    (zeros_then_fill, (np.arange(5.0),)),
])
def test_shape_ops_compile_whole_and_agree_with_numpy(fn, args) -> None:  # noqa: ANN001
    g = nx.script(fn).graph_for(*args)
    infer_shapes(g)  # dims from the shape inputs' values (a buffer sized by x's dim has x's dim)
    exe = nx.compile(g, backend="llvm")
    assert isinstance(exe, LLVMExecutable), getattr(exe, "stayed_out", None)
    want, got = fn(*args), exe(*args)
    for w, v in zip(want if isinstance(want, tuple) else (want,), got if isinstance(got, tuple) else (got,)):
        np.testing.assert_array_equal(v, w)
        assert np.asarray(v).dtype == np.asarray(w).dtype
