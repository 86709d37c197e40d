"""The ONNX Runtime peers: Loop/If models built with ``onnx.helper``."""

from __future__ import annotations

from typing import Any

import numpy as np

from bench.common import Skip


def _session(model: Any) -> Any:
    try:
        import onnx
        import onnxruntime as ort
    except ImportError as e:
        raise Skip(f"onnxruntime not installed: {e}") from None
    onnx.checker.check_model(model)
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    # ORT's worker threads spin after a run by default, stealing a core from whatever is
    # timed next; the other peers' threads sleep.
    opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
    opts.add_session_config_entry("session.inter_op.allow_spinning", "0")
    return ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])


def _model(graph: Any) -> Any:
    from onnx import helper

    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def seed_loop() -> Any:
    """W1: i, s = 1, 0; while i <= 10: (skip 5 via If) ...; break once s > 25.  Returns s."""
    from onnx import TensorProto as TP
    from onnx import helper as h

    i32 = TP.INT32
    c = lambda name, v, t=i32: h.make_node("Constant", [], [name], value=h.make_tensor(name + "_t", t, [], [v]))
    then_g = h.make_graph([h.make_node("Identity", ["s_in"], ["s_then"])], "skip", [],
                          [h.make_tensor_value_info("s_then", i32, [])])
    else_g = h.make_graph([h.make_node("Add", ["s_in", "i_in"], ["s_else"])], "add", [],
                          [h.make_tensor_value_info("s_else", i32, [])])
    body = h.make_graph(
        [c("five", 5), c("one", 1), c("ten", 10), c("lim", 25),
         h.make_node("Equal", ["i_in", "five"], ["skip"]),
         h.make_node("If", ["skip"], ["s_out"], then_branch=then_g, else_branch=else_g),
         h.make_node("Add", ["i_in", "one"], ["i_out"]),
         h.make_node("Greater", ["s_out", "lim"], ["over"]),
         h.make_node("Not", ["skip"], ["noskip"]),
         h.make_node("And", ["noskip", "over"], ["brk"]),
         h.make_node("LessOrEqual", ["i_out", "ten"], ["more"]),
         h.make_node("Not", ["brk"], ["nobrk"]),
         h.make_node("And", ["more", "nobrk"], ["cond_out"])],
        "body",
        [h.make_tensor_value_info("iter", TP.INT64, []), h.make_tensor_value_info("cond_in", TP.BOOL, []),
         h.make_tensor_value_info("i_in", i32, []), h.make_tensor_value_info("s_in", i32, [])],
        [h.make_tensor_value_info("cond_out", TP.BOOL, []), h.make_tensor_value_info("i_out", i32, []),
         h.make_tensor_value_info("s_out", i32, [])])
    g = h.make_graph(
        [c("i0", 1), c("s0", 0), c("go", True, TP.BOOL),
         h.make_node("Loop", ["", "go", "i0", "s0"], ["i_f", "s_f"], body=body)],
        "w1", [], [h.make_tensor_value_info("s_f", i32, [])])
    sess = _session(_model(g))
    return lambda: sess.run(None, {})[0]


def count_loop() -> Any:
    """W2: Loop with trip count n: s = (s + i*i) % 1000003."""
    from onnx import TensorProto as TP
    from onnx import helper as h

    i64 = TP.INT64
    body = h.make_graph(
        [h.make_node("Constant", [], ["m"], value=h.make_tensor("m_t", i64, [], [1000003])),
         h.make_node("Mul", ["iter", "iter"], ["sq"]),
         h.make_node("Add", ["s_in", "sq"], ["t"]),
         h.make_node("Mod", ["t", "m"], ["s_out"]),
         h.make_node("Identity", ["cond_in"], ["cond_out"])],
        "body",
        [h.make_tensor_value_info("iter", i64, []), h.make_tensor_value_info("cond_in", TP.BOOL, []),
         h.make_tensor_value_info("s_in", i64, [])],
        [h.make_tensor_value_info("cond_out", TP.BOOL, []), h.make_tensor_value_info("s_out", i64, [])])
    g = h.make_graph(
        [h.make_node("Constant", [], ["s0"], value=h.make_tensor("s0_t", i64, [], [0])),
         h.make_node("Constant", [], ["go"], value=h.make_tensor("go_t", TP.BOOL, [], [True])),
         h.make_node("Loop", ["n", "go", "s0"], ["s_f"], body=body)],
        "w2", [h.make_tensor_value_info("n", i64, [])], [h.make_tensor_value_info("s_f", i64, [])])
    sess = _session(_model(g))
    return lambda n: sess.run(None, {"n": np.array(n, np.int64)})[0]


def rnn_loop() -> Any:
    """W3: Loop over T: h = tanh(xs[t] @ W + h @ U) (xs, W, U from the outer scope)."""
    from onnx import TensorProto as TP
    from onnx import helper as h

    f32 = TP.FLOAT
    body = h.make_graph(
        [h.make_node("Gather", ["xs", "iter"], ["x_t"], axis=0),
         h.make_node("MatMul", ["x_t", "W"], ["a"]),
         h.make_node("MatMul", ["h_in", "U"], ["b"]),
         h.make_node("Add", ["a", "b"], ["pre"]),
         h.make_node("Tanh", ["pre"], ["h_out"]),
         h.make_node("Identity", ["cond_in"], ["cond_out"])],
        "body",
        [h.make_tensor_value_info("iter", TP.INT64, []), h.make_tensor_value_info("cond_in", TP.BOOL, []),
         h.make_tensor_value_info("h_in", f32, ["B", "H"])],
        [h.make_tensor_value_info("cond_out", TP.BOOL, []), h.make_tensor_value_info("h_out", f32, ["B", "H"])])
    g = h.make_graph(
        [h.make_node("Constant", [], ["go"], value=h.make_tensor("go_t", TP.BOOL, [], [True])),
         h.make_node("Loop", ["T", "go", "h0"], ["h_f"], body=body)],
        "w3",
        [h.make_tensor_value_info("xs", f32, ["T", "B", "D"]), h.make_tensor_value_info("W", f32, ["D", "H"]),
         h.make_tensor_value_info("U", f32, ["H", "H"]), h.make_tensor_value_info("h0", f32, ["B", "H"]),
         h.make_tensor_value_info("T", TP.INT64, [])],
        [h.make_tensor_value_info("h_f", f32, ["B", "H"])])
    sess = _session(_model(g))
    return lambda xs, w, u, h0, T: sess.run(None, {"xs": xs, "W": w, "U": u, "h0": h0,
                                                   "T": np.array(T, np.int64)})[0]
