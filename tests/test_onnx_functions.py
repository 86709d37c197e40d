"""ONNX ops imported as their schema's function body (Attention, RotaryEmbedding, Mish...),
the quantization ops, Hardmax/LpNormalization/EyeLike/LpPool, the inverse trigonometric
ops, and import-time evaluation of small
shape computations.  Oracles: the official node tests' data (produced by ONNX's reference
implementation) and ONNX Runtime."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import nexus as nx
from nexus.testing.extras import require

onnx = require("onnx", "onnx")
ort = require("onnxruntime", "onnx")
from onnx import TensorProto as T  # noqa: E402
from onnx import helper as h  # noqa: E402

from nexus.frontend.onnx.data import OnnxImportError  # noqa: E402
from nexus.testing import onnx_conformance as conf  # noqa: E402

OPS = {"Attention", "RotaryEmbedding", "Mish", "Shrink", "GroupNormalization", "SwiGLU", "HannWindow",
       "CenterCropPad", "DepthToSpace", "SpaceToDepth", "LinearAttention", "CausalConvWithState",
       "ai.onnx.preview.FlexAttention", "QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear",
       "QLinearMatMul", "Hardmax", "LpNormalization", "EyeLike", "RMSNormalization", "LpPool", "Asin", "Acos",
       "Atan", "Asinh", "Acosh", "Atanh"}
# Known misses: float16 attention outside the case's tolerance (the reference computes the
# softmax in float32, the body as written in float16).
KNOWN = {"test_attention_4d_causal_fp16", "test_attention_4d_causal_fp16_expanded"}
CASES = [c for c in conf.node_cases() if c.ops & OPS or "rms_normalization" in c.name]


def test_the_node_tests_of_these_ops_pass() -> None:
    from nexus.backends.onnx.backend import NexusBackend

    assert len(CASES) > 200
    failed = {c.name: why for c in CASES if (why := conf.run_case(NexusBackend, c)) is not None}
    assert set(failed) <= KNOWN, {k: v for k, v in failed.items() if k not in KNOWN}


def _model(nodes: list[Any], inputs: list[Any], outputs: list[str], opset: int = 22) -> Any:
    return h.make_model(h.make_graph(nodes, "m", inputs, [h.make_tensor_value_info(o, T.FLOAT, None)
                                                          for o in outputs]),
                        opset_imports=[h.make_opsetid("", opset)])


def test_a_function_op_matches_onnxruntime_and_leaves_ordinary_nexus_ops() -> None:
    m = _model([h.make_node("Mish", ["x"], ["y"]), h.make_node("Shrink", ["y"], ["z"], lambd=0.3, bias=0.1)],
               [h.make_tensor_value_info("x", T.FLOAT, [7])], ["z"])
    x = np.linspace(-3, 3, 7).astype(np.float32)
    g = nx.from_onnx(m)
    text = nx.print_graph(g)
    assert "= Mish" not in text and "= Softplus" in text  # the body: x * tanh(softplus(x))
    assert text == nx.print_graph(nx.from_onnx(m))  # names do not depend on what was imported before
    want = ort.InferenceSession(m.SerializeToString()).run(None, {"x": x})[0]
    np.testing.assert_allclose(g(x), want, rtol=1e-5, atol=1e-6)


def test_errors_inside_a_body_name_the_node() -> None:
    m = _model([h.make_node("RotaryEmbedding", ["x", "c", "s", "p"], ["y"])],
               [h.make_tensor_value_info("x", T.FLOAT, [1, 2, 3, 8]), h.make_tensor_value_info("c", T.FLOAT, [5]),
                h.make_tensor_value_info("s", T.FLOAT, [5]), h.make_tensor_value_info("p", T.INT64, [1, 3])],
               ["y"], opset=23)
    with pytest.raises(OnnxImportError, match=r"node 0 \(RotaryEmbedding\): in its function body, node \d+"):
        nx.from_onnx(m)


def test_an_op_without_rule_or_body_is_one_clear_error() -> None:
    m = _model([h.make_node("ImageDecoder", ["x"], ["y"])], [h.make_tensor_value_info("x", T.UINT8, [16])], ["y"],
               opset=20)
    with pytest.raises(OnnxImportError, match="ONNX op ImageDecoder has no Nexus import rule"):
        nx.from_onnx(m)


def test_shape_computations_are_known_at_import() -> None:
    """ReduceMean's axes computed from the input's static shape (as exported RMSNorm does)."""
    nodes = [h.make_node("Shape", ["x"], ["s"]), h.make_node("Size", ["s"], ["r"]),
             h.make_node("Constant", [], ["one"], value=onnx.numpy_helper.from_array(np.array(1, np.int64))),
             h.make_node("Range", ["one", "r", "one"], ["axes"]),
             h.make_node("ReduceMean", ["x", "axes"], ["y"])]
    m = _model(nodes, [h.make_tensor_value_info("x", T.FLOAT, [2, 3, 4])], ["y"], opset=18)
    x = np.random.default_rng(0).normal(size=(2, 3, 4)).astype(np.float32)
    want = ort.InferenceSession(m.SerializeToString()).run(None, {"x": x})[0]
    np.testing.assert_allclose(nx.from_onnx(m)(x), want, rtol=1e-6)


@pytest.mark.parametrize("storage_order", [0, 1])
def test_maxpool_indices_match_onnxruntime_and_export(storage_order: int) -> None:
    node = h.make_node("MaxPool", ["x"], ["y", "i"], kernel_shape=[2, 3], strides=[2, 1], pads=[1, 0, 0, 1],
                       storage_order=storage_order)
    m = h.make_model(h.make_graph([node], "m", [h.make_tensor_value_info("x", T.FLOAT, [2, 3, 5, 6])],
                                  [h.make_tensor_value_info("y", T.FLOAT, None),
                                   h.make_tensor_value_info("i", T.INT64, None)]),
                     opset_imports=[h.make_opsetid("", 12)])
    x = np.random.default_rng(1).normal(size=(2, 3, 5, 6)).astype(np.float32)
    want = ort.InferenceSession(m.SerializeToString()).run(None, {"x": x})
    g = nx.from_onnx(m)
    for a, b in zip(g(x), want):
        np.testing.assert_array_equal(a, b)
    exported = nx.to_onnx(g)
    onnx.checker.check_model(exported)
    again = ort.InferenceSession(exported.SerializeToString()).run(None, {exported.graph.input[0].name: x})
    for a, b in zip(again, want):
        np.testing.assert_array_equal(a, b)
