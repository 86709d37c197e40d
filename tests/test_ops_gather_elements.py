"""GatherElements against NumPy's take_along_axis and ONNX Runtime; its type rule."""

from __future__ import annotations

import numpy as np
import pytest

import nexus as nx
from nexus.ir.opdef import OpTypeError, get_op
from nexus.ir.types import TensorType
from nexus.testing.extras import require


def _run(data: np.ndarray, idx: np.ndarray, axis: int) -> np.ndarray:
    g = nx.Graph("ge", [TensorType(_dt(data), data.shape), TensorType("i64", idx.shape)])
    b = g.start_block
    y = g.add("GatherElements", list(g.args), b, {"axis": axis})
    g.end_block.append_input(g.add("Return", [y], b))
    return np.asarray(g(data, idx))


def _dt(a: np.ndarray) -> str:
    from nexus.ir.types import dtype_of

    return dtype_of(a.dtype)


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_matches_take_along_axis_and_onnxruntime(axis: int) -> None:
    rng = np.random.default_rng(axis + 5)
    data = rng.standard_normal((3, 4)).astype(np.float32)
    n = data.shape[axis]
    idx = rng.integers(-n, n, size=(3, 4) if axis == 0 else (3, 2)).astype(np.int64)
    if axis == 0:
        idx = idx[:2]
    got = _run(data, idx, axis)
    np.testing.assert_array_equal(got, np.take_along_axis(data, np.where(idx < 0, idx + n, idx), axis=axis))
    require("onnxruntime", "onnx")
    import onnxruntime as ort
    from onnx import TensorProto, helper

    graph = helper.make_graph([helper.make_node("GatherElements", ["d", "i"], ["y"], axis=axis)], "g",
                              [helper.make_tensor_value_info("d", TensorProto.FLOAT, list(data.shape)),
                               helper.make_tensor_value_info("i", TensorProto.INT64, list(idx.shape))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    (want,) = ort.InferenceSession(model.SerializeToString()).run(None, {"d": data, "i": idx})
    np.testing.assert_array_equal(got, want)


def test_rule() -> None:
    op = get_op("GatherElements")
    assert op.infer([TensorType("f32", (5, "N")), TensorType("i64", (2, 3))], {"axis": 0}, [None, None]).type \
        == TensorType("f32", (2, 3))
    with pytest.raises(OpTypeError, match="rank"):
        op.infer([TensorType("f32", (5, 4)), TensorType("i64", (2,))], {"axis": 0}, [None, None])
    with pytest.raises(OpTypeError):
        op.infer([TensorType("f32", (5, 4)), TensorType("f32", (2, 4))], {"axis": 0}, [None, None])


def test_out_of_range_index_fails() -> None:
    with pytest.raises(nx.NexusRuntimeError, match="out of range"):
        _run(np.zeros((2, 2), np.float32), np.array([[0, 2]], np.int64), 0)
