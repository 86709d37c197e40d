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


# Slice with bounds known only at run time (an ONNX import's x[:, :seq] with seq from Shape):
# the bounds are clamped as Python clamps them, in registers.  (A result whose size depends on
# the data cannot be sized by the caller: the slice is summed and its ArgMax taken, which
# tells its elements' order.)
RUN_TIME_SLICE = """
graph @g {
^entry:
  %0 = Start : (f64[n, 12], i64[1], i64[1])
  %x = Proj %0 {num = 0} : f64[n, 12]
  %s = Proj %0 {num = 1} : i64[1]
  %e = Proj %0 {num = 2} : i64[1]
  %ax = Constant {value = tensor<i64[1]: [1]>} : i64[1]
  %st = Constant {value = tensor<i64[1]: [STEP]>} : i64[1]
  %y = Slice %x, %s, %e, %ax, %st : f64[n, SIZE]
  %sum = ReduceSum %y {axes = [1], keepdims = false} : f64[n]
  %arg = ArgMax %y {axis = 1, keepdims = false} : i64[n]
  %ret = Return %sum, %arg : X
^exit(%ret):
  End : X
}
"""


@pytest.mark.parametrize("step", [1, 2, -1, -3])
def test_slice_with_run_time_bounds_is_python_slicing(step: int) -> None:
    g = nx.parse(RUN_TIME_SLICE.replace("STEP", str(step)).replace("SIZE", "k"))
    exe = nx.compile(g, backend="llvm")
    assert isinstance(exe, LLVMExecutable), getattr(exe, "reason", None)
    x = np.random.default_rng(step + 5).permutation(36).reshape(3, 12).astype(np.float64)
    big = 2**63 - 1
    for s, e in ((0, 12), (2, 9), (-5, -1), (9, 2), (-100, 100), (100, -100), (-big - 1, big), (big, -big - 1)):
        want = x[:, s:e:step]
        if want.shape[1] == 0:
            with pytest.raises(nx.NexusRuntimeError, match="ValueError"):
                exe(x, np.array([s]), np.array([e]))
            continue
        total, arg = exe(x, np.array([s]), np.array([e]))
        np.testing.assert_array_equal(total, want.sum(axis=1))
        np.testing.assert_array_equal(arg, want.argmax(axis=1))


def test_slice_with_run_time_bounds_checks_the_size_its_type_fixes() -> None:
    g = nx.parse(RUN_TIME_SLICE.replace("STEP", "1").replace("SIZE", "4"))
    exe = nx.compile(g, backend="llvm")
    assert isinstance(exe, LLVMExecutable), getattr(exe, "reason", None)
    x = np.arange(36.0).reshape(3, 12)
    np.testing.assert_array_equal(exe(x, np.array([3]), np.array([7]))[0], x[:, 3:7].sum(axis=1))
    with pytest.raises(nx.NexusRuntimeError, match="ValueError.*size along axis 1"):
        exe(x, np.array([3]), np.array([8]))


@pytest.mark.parametrize("axis", [0, 1, 2, 3, -1, -3])
@pytest.mark.parametrize("lazy", [False, True])
def test_flatten_of_a_buffer_and_of_a_lazy_tensor(axis: int, lazy: bool) -> None:
    """ONNX's Flatten (the CNNs' last step before Gemm), whole on llvm, against NumPy's
    reshape; ``lazy``: of an elementwise expression of a transposed input, read through the
    unravelled index."""
    rng = np.random.default_rng(axis + 7)
    with nx.function("flat", x=("f32", ("N", 3, 4))) as f:
        (x,) = f.args
        y = nx.transpose(x, perm=(0, 2, 1)) * 2.0 + 1.0 if lazy else x
        f.returns(nx.flatten(y, axis=axis))
    exe = nx.compile(f.graph, backend="llvm")
    assert isinstance(exe, LLVMExecutable), getattr(exe, "reason", exe)
    for n in (1, 5):
        xv = rng.standard_normal((n, 3, 4)).astype(np.float32)
        yv = np.transpose(xv, (0, 2, 1)) * 2 + 1 if lazy else xv
        k = axis + 3 if axis < 0 else axis
        want = yv.reshape(int(np.prod(yv.shape[:k])), -1)
        np.testing.assert_allclose(exe(xv), want, rtol=1e-6)
