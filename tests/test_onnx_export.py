"""ONNX export: graphs from the DSL, @nx.script and nx.grad, and imported models (an RNN
as Loop, detection post-processing with NMS inside If) become checked ONNX models that
ONNX Runtime runs to the oracle's numbers (plain Python, NumPy, ONNX Runtime on the
original)."""

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


def ort_run(m: Any, *args: Any) -> list[np.ndarray]:
    sess = ort.InferenceSession(m.SerializeToString())
    return sess.run(None, {i.name: np.asarray(a) for i, a in zip(sess.get_inputs(), args)})


def skip5_python() -> int:
    s, i = 0, 1
    while i <= 10:
        if i == 5:
            i += 1
            continue
        s += i
        i += 1
        if s > 25:
            break
    return s


def test_dsl_loop_with_break_and_continue() -> None:
    with nx.function("skip5") as f:
        s = nx.constant(0, dtype="i32")
        i = nx.constant(1, dtype="i32")
        with nx.while_loop(nx.less_equal(i, 10)):
            with nx.if_cond(nx.equal(i, 5)):
                with nx.then():
                    i = nx.add(i, 1)
                    nx.continue_()
            s = nx.add(s, i)
            i = nx.add(i, 1)
            with nx.if_cond(nx.greater(s, 25)):
                with nx.then():
                    nx.break_()
        f.returns(s)
    m = nx.to_onnx(f.graph)
    assert {n.op_type for n in m.graph.node} >= {"Loop"}
    assert ort_run(m)[0] == skip5_python() == 31


@nx.script
def collatz_steps(x: Any, limit: Any) -> Any:
    steps = 0
    while x != 1 and steps < limit:
        if x % 2 == 0:
            x = x // 2
        else:
            x = 3 * x + 1
        steps = steps + 1
    return steps


def collatz_python(x: int, limit: int) -> int:
    steps = 0
    while x != 1 and steps < limit:
        x = x // 2 if x % 2 == 0 else 3 * x + 1
        steps += 1
    return steps


@pytest.mark.parametrize(("x", "limit"), [(27, 1000), (6, 3), (1, 10)])
def test_script_while_and_if(x: int, limit: int) -> None:
    g, _ = collatz_steps.specialize((x, limit))
    m = nx.to_onnx(g)
    assert ort_run(m, np.int64(x), np.int64(limit))[0] == collatz_python(x, limit)


@nx.script
def smooth(x: Any) -> Any:
    return nx.reduce_sum(nx.tanh(x) * x)


def test_grad_graph_exports() -> None:
    from nexus.autodiff.api import gradient_graph

    x = np.array([0.5, -1.0, 2.0], np.float32)
    g, _ = smooth.specialize((x,))
    dg = gradient_graph(g, [0])
    m = nx.to_onnx(dg)
    got = ort_run(m, x, np.float32(1.0))
    t = np.tanh(x)
    np.testing.assert_allclose(got[-1], (1 - t * t) * x + t, rtol=1e-5)


@nx.script
def doubling(x: Any, n: Any) -> Any:
    i = 0
    while i < n:
        x = x * 2.0
        i = i + 1
    return nx.reduce_sum(x)


def test_grad_through_a_loop_exports() -> None:
    """The tape becomes ONNX sequences (tests/test_onnx_export_grad.py has more)."""
    from nexus.autodiff.api import gradient_graph

    x = np.array([0.5, -1.0, 2.0], np.float32)
    g, _ = doubling.specialize((x, 3))
    got = ort_run(nx.to_onnx(gradient_graph(g, [0])), x, np.int64(3), np.float32(0.5))
    np.testing.assert_allclose(got[-1], np.full(3, 4.0, np.float32))  # d sum(8x) / dx times 0.5


def vi(name: str, elem: int = T.FLOAT, shape: Any = None) -> Any:
    return h.make_tensor_value_info(name, elem, shape)


def rnn_model() -> Any:
    """h_t = tanh(W x_t + U h_{t-1}) over T steps as an ONNX Loop, all hidden states scanned."""
    rng = np.random.default_rng(0)
    w = onnx.numpy_helper.from_array(rng.standard_normal((4, 3)).astype(np.float32) * 0.5, "W")
    u = onnx.numpy_helper.from_array(rng.standard_normal((4, 4)).astype(np.float32) * 0.5, "U")
    body = h.make_graph([
        h.make_node("Gather", ["xs", "t"], ["xt"], axis=0),
        h.make_node("MatMul", ["W", "xt"], ["wx"]),
        h.make_node("MatMul", ["U", "hprev"], ["uh"]),
        h.make_node("Add", ["wx", "uh"], ["pre"]),
        h.make_node("Tanh", ["pre"], ["hnew"]),
        h.make_node("Identity", ["cin"], ["cout"]),
        h.make_node("Identity", ["hnew"], ["hscan"]),
    ], "cell", [vi("t", T.INT64, []), vi("cin", T.BOOL, []), vi("hprev", shape=[4])],
        [vi("cout", T.BOOL, []), vi("hnew", shape=[4]), vi("hscan", shape=[4])])
    graph = h.make_graph([h.make_node("Shape", ["xs"], ["shp"], start=0, end=1),
                          h.make_node("Squeeze", ["shp"], ["steps"]),
                          h.make_node("Loop", ["steps", "", "h0"], ["hT", "hs"], body=body)],
                         "rnn", [vi("xs", shape=["T", 3]), vi("h0", shape=[4])],
                         [vi("hT", shape=[4]), vi("hs", shape=["T", 4])], [w, u])
    return h.make_model(graph, opset_imports=[h.make_opsetid("", 18)])


def test_rnn_loop_roundtrip() -> None:
    m = rnn_model()
    xs = np.random.default_rng(1).standard_normal((5, 3)).astype(np.float32)
    h0 = np.zeros(4, np.float32)
    want = ort_run(m, xs, h0)
    g = nx.from_onnx(m)
    for a, b in zip(g(xs, h0), want):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    for a, b in zip(ort_run(nx.to_onnx(g), xs, h0), want):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def nms_model() -> Any:
    """Detection post-processing: run NMS only when some score passes the threshold."""
    nms = h.make_graph([h.make_node("NonMaxSuppression", ["boxes", "scores", "maxk", "iou", "thr"], ["sel"])],
                       "then", [], [vi("sel", T.INT64, [None, 3])])
    empty = h.make_graph([h.make_node("Constant", [], ["none"],
                                      value=onnx.numpy_helper.from_array(np.zeros((0, 3), np.int64)))],
                         "else", [], [vi("none", T.INT64, [None, 3])])
    inits = [onnx.numpy_helper.from_array(np.array([3], np.int64), "maxk"),
             onnx.numpy_helper.from_array(np.array([0.5], np.float32), "iou"),
             onnx.numpy_helper.from_array(np.array([0.3], np.float32), "thr")]
    graph = h.make_graph([h.make_node("ReduceMax", ["scores"], ["best"], keepdims=0),
                          h.make_node("Greater", ["best", "thr0"], ["any"]),
                          h.make_node("If", ["any"], ["selected"], then_branch=nms, else_branch=empty)],
                         "detect", [vi("boxes", shape=[1, 6, 4]), vi("scores", shape=[1, 1, 6])],
                         [vi("selected", T.INT64, [None, 3])],
                         inits + [onnx.numpy_helper.from_array(np.array(0.3, np.float32), "thr0")])
    return h.make_model(graph, opset_imports=[h.make_opsetid("", 18)])


@pytest.mark.parametrize("scale", [1.0, 0.1])
def test_nms_inside_if_roundtrip(scale: float) -> None:
    m = nms_model()
    boxes = np.array([[[0, 0, 1, 1], [0, 0.1, 1, 1.1], [0, -0.1, 1, 0.9], [0, 10, 1, 11], [0, 10.1, 1, 11.1],
                       [0, 100, 1, 101]]], np.float32)
    scores = np.array([[[0.9, 0.75, 0.6, 0.95, 0.5, 0.3]]], np.float32) * scale
    (want,) = ort_run(m, boxes, scores)
    g = nx.from_onnx(m)
    np.testing.assert_array_equal(g(boxes, scores), want)
    (got,) = ort_run(nx.to_onnx(g), boxes, scores)
    np.testing.assert_array_equal(got, want)


def test_a_reshape_whose_run_time_shape_copies_dims_is_written_back_as_onnx_reshape() -> None:
    # Import spells ONNX's Reshape (a 0 in a run-time shape copies the input's dim) as five
    # more ops; written back, they ran on every call (BART from an ONNX file: 570 -> 650 us
    # at batch 1 on ONNX Runtime), dead or alive.
    nodes = [h.make_node("Shape", ["x"], ["s"]),
             h.make_node("Gather", ["s", "i0"], ["b"], axis=0),
             h.make_node("Unsqueeze", ["b", "ax"], ["bu"]),
             h.make_node("Concat", ["zero", "bu", "minus"], ["t"], axis=0),  # [0, batch, -1]
             h.make_node("Reshape", ["x", "t"], ["y"])]
    inits = [h.make_tensor("i0", T.INT64, [], [0]), h.make_tensor("ax", T.INT64, [1], [0]),
             h.make_tensor("zero", T.INT64, [1], [0]), h.make_tensor("minus", T.INT64, [1], [-1])]
    graph = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", T.FLOAT, ["n", 4, 6])],
                         [h.make_tensor_value_info("y", T.FLOAT, None)], inits)
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    back = nx.to_onnx(nx.from_onnx(model.SerializeToString()))
    ops = [n.op_type for n in back.graph.node]
    assert "Where" not in ops and "Slice" not in ops, ops
    read = {i for n in back.graph.node for i in n.input} | {o.name for o in back.graph.output}
    assert all(o in read for n in back.graph.node for o in n.output)  # no dead node left to run
    x = np.random.default_rng(0).standard_normal((3, 4, 6)).astype(np.float32)
    np.testing.assert_array_equal(ort_run(back, x)[0], ort_run(model, x)[0])
