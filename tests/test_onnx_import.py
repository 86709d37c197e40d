"""ONNX import: control flow as blocks and Phis, names across scopes, symbols, constants,
optional inputs; external data only from inside the model's directory; malformed models
give one clear error naming the node.  The oracle is ONNX Runtime on the same model."""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import pytest

import nexus as nx
from nexus.testing.extras import require

onnx = require("onnx", "onnx")
ort = require("onnxruntime", "onnx")
from onnx import TensorProto as T  # noqa: E402
from onnx import helper as h  # noqa: E402

from nexus.frontend.onnx.data import ExternalDataError, OnnxImportError  # noqa: E402
from nexus.frontend.onnx.importer import from_onnx  # noqa: E402


def vi(name: str, elem: int = T.FLOAT, shape: Any = None) -> Any:
    return h.make_tensor_value_info(name, elem, shape)


def model(nodes: list[Any], inputs: list[Any], outputs: list[Any], inits: list[Any] = (), opset: int = 18) -> Any:
    return h.make_model(h.make_graph(nodes, "m", inputs, outputs, list(inits)),
                        opset_imports=[h.make_opsetid("", opset)])


def check(m: Any, *args: np.ndarray) -> nx.Graph:
    """Import ``m``, verify, run, compare with ONNX Runtime; also text round trip."""
    onnx.checker.check_model(m)
    g = from_onnx(m)
    nx.verify(g)
    assert nx.structurally_equal(nx.parse(nx.print_graph(g)), g)
    got = g(*args)
    got = got if isinstance(got, tuple) else (got,)
    names = [i.name for i in m.graph.input if i.name not in {t.name for t in m.graph.initializer}]
    want = ort.InferenceSession(m.SerializeToString()).run(None, dict(zip(names, args)))
    assert len(got) == len(want)
    for a, b in zip(got, want):
        np.testing.assert_allclose(np.asarray(a), b, rtol=1e-5, atol=1e-6)
    return g


X3 = np.array([1.5, -2.0, 3.0], np.float32)


def if_model() -> Any:
    then = h.make_graph([h.make_node("Add", ["x", "x"], ["y"])], "then", [], [vi("y", shape=[3])])
    els = h.make_graph([h.make_node("Mul", ["x", "w"], ["z"])], "else", [], [vi("z", shape=[3])])
    w = onnx.numpy_helper.from_array(np.array([2.0, 3.0, 4.0], np.float32), "w")
    return model([h.make_node("If", ["c"], ["out"], then_branch=then, else_branch=els)],
                 [vi("c", T.BOOL, []), vi("x", shape=[3])], [vi("out", shape=[3])], [w])


@pytest.mark.parametrize("c", [True, False])
def test_if_becomes_two_arms_and_a_phi(c: bool) -> None:
    g = check(if_model(), np.array(c), X3)
    ops = [n.op.name for n in g.nodes()]
    assert "Cond" in ops and ops.count("Phi") == 1


def loop_model(with_cond: bool) -> Any:
    """Sum x into acc M times (or until acc[0] > 20 with the condition), scanning acc * i;
    the body reads the outer x."""
    nodes = [h.make_node("Add", ["acc", "x"], ["acc2"]), h.make_node("Cast", ["i"], ["fi"], to=T.FLOAT),
             h.make_node("Mul", ["acc2", "fi"], ["sc"])]
    if with_cond:
        nodes += [h.make_node("Gather", ["acc2", "zero"], ["first"], axis=0),
                  h.make_node("Less", ["first", "limit"], ["cout"])]
    else:
        nodes.append(h.make_node("Identity", ["cin"], ["cout"]))
    inits = [onnx.numpy_helper.from_array(np.array(0, np.int64), "zero"),
             onnx.numpy_helper.from_array(np.array(20.0, np.float32), "limit")]
    body = h.make_graph(nodes, "body", [vi("i", T.INT64, []), vi("cin", T.BOOL, []), vi("acc", shape=[3])],
                        [vi("cout", T.BOOL, []), vi("acc2", shape=[3]), vi("sc", shape=[3])],
                        inits if with_cond else [])
    return model([h.make_node("Loop", ["M", "c0" if with_cond else "", "a0"], ["af", "scans"], body=body)],
                 [vi("M", T.INT64, []), *([vi("c0", T.BOOL, [])] if with_cond else []), vi("a0", shape=[3]),
                  vi("x", shape=[3])], [vi("af", shape=[3]), vi("scans", shape=[None, 3])])


@pytest.mark.parametrize("m", [0, 1, 5])
def test_loop_trip_count_and_scan_outputs(m: int) -> None:
    check(loop_model(False), np.array(m), X3, X3 + 1)


@pytest.mark.parametrize("c0", [True, False])
def test_loop_condition(c0: bool) -> None:
    g = check(loop_model(True), np.array(100), np.array(c0), X3, X3 + 1)
    assert sum(n.op.name == "Phi" for n in g.nodes()) >= 3  # i, cond, acc, the stack


def test_scan_reverse_and_axes() -> None:
    body = h.make_graph([h.make_node("Add", ["s", "xt"], ["s2"]), h.make_node("Mul", ["s2", "xt"], ["y"])], "body",
                        [vi("s", shape=[2]), vi("xt", shape=[2])], [vi("s2", shape=[2]), vi("y", shape=[2])])
    m = model([h.make_node("Scan", ["s0", "xs"], ["sf", "ys"], body=body, num_scan_inputs=1,
                           scan_input_directions=[1], scan_input_axes=[1], scan_output_axes=[1])],
              [vi("s0", shape=[2]), vi("xs", shape=[2, 4])], [vi("sf", shape=[2]), vi("ys", shape=[2, 4])])
    check(m, np.ones(2, np.float32), np.arange(8, dtype=np.float32).reshape(2, 4))


def test_nested_subgraphs_read_outer_names_and_siblings_reuse_names() -> None:
    """An If inside a Loop body reads the graph's input and the body's value; both arms
    define a value named `t` (sibling scopes)."""
    then = h.make_graph([h.make_node("Add", ["acc", "x"], ["t"])], "then", [], [vi("t", shape=[3])])
    els = h.make_graph([h.make_node("Sub", ["acc", "x"], ["t"])], "else", [], [vi("t", shape=[3])])
    body = h.make_graph([h.make_node("Less", ["i", "two"], ["small"]),
                         h.make_node("If", ["small"], ["acc2"], then_branch=then, else_branch=els),
                         h.make_node("Identity", ["cin"], ["cout"])], "body",
                        [vi("i", T.INT64, []), vi("cin", T.BOOL, []), vi("acc", shape=[3])],
                        [vi("cout", T.BOOL, []), vi("acc2", shape=[3])])
    two = onnx.numpy_helper.from_array(np.array(2, np.int64), "two")
    m = model([h.make_node("Loop", ["M", "", "a0"], ["af"], body=body)],
              [vi("M", T.INT64, []), vi("a0", shape=[3]), vi("x", shape=[3])], [vi("af", shape=[3])], [two])
    check(m, np.array(5), X3, X3 * 2)


def test_dim_param_becomes_a_symbol_and_initializers_constants() -> None:
    w = onnx.numpy_helper.from_array(np.arange(12, dtype=np.float32).reshape(3, 4), "w")
    m = model([h.make_node("MatMul", ["x", "w"], ["y"])], [vi("x", shape=["batch", 3])], [vi("y", shape=["batch", 4])],
              [w])
    g = check(m, np.ones((5, 3), np.float32))
    assert str(g.args[0].type) == "f32[batch, 3]" and len(g.args) == 1
    assert any(n.op.name == "Constant" for n in g.nodes())


@pytest.mark.parametrize(("target", "want"), [([0, 3, 5, 8], "f32[batch, 3, 5, 8]"),
                                               ([0, 0, 40], "f32[batch, 3, 40]")])
def test_reshape_copying_a_symbolic_dim_keeps_it(target: list[int], want: str) -> None:
    # a 0 in a constant target copies the input's dim: the result's type names ``batch``
    # again (a loop carrying it keeps one shape), not a fresh symbol
    shape = onnx.numpy_helper.from_array(np.array(target, np.int64), "shape")
    m = model([h.make_node("Reshape", ["x", "shape"], ["y"])], [vi("x", shape=["batch", 3, 40])],
              [vi("y", shape=[None] * len(target))], [shape])
    x = np.arange(2 * 3 * 40, dtype=np.float32).reshape(2, 3, 40)
    g = check(m, x)
    out = [n for n in g.nodes() if n.op.name == "Reshape"][-1]
    assert str(out.type) == want


def test_optional_inputs_and_outputs() -> None:
    m = model([h.make_node("Clip", ["x", "", "hi"], ["y"]), h.make_node("Dropout", ["y"], ["z", ""])],
              [vi("x", shape=[3])], [vi("z", shape=[3])],
              [onnx.numpy_helper.from_array(np.array(2.0, np.float32), "hi")])
    check(m, X3)


def test_unknown_op_names_the_node() -> None:
    m = model([h.make_node("Relu", ["x"], ["r"]), h.make_node("FancyOp", ["r"], ["y"], name="mine")],
              [vi("x", shape=[3])], [vi("y")])
    with pytest.raises(OnnxImportError, match=r"node 1 \(FancyOp 'mine'\): ONNX op FancyOp has no Nexus import rule"):
        from_onnx(m)


# --- malformed models --------------------------------------------------------------------------
def test_truncated_protobuf(tmp_path: Any) -> None:
    data = if_model().SerializeToString()
    p = tmp_path / "cut.onnx"
    p.write_bytes(data[: len(data) // 2])
    with pytest.raises(OnnxImportError, match="truncated or corrupt"):
        from_onnx(str(p))


def test_wrong_attribute_type() -> None:
    node = h.make_node("Softmax", ["x"], ["y"], name="sm")
    node.attribute.append(h.make_attribute("axis", "one"))
    m = model([node], [vi("x", shape=[3])], [vi("y")])
    with pytest.raises(OnnxImportError, match=r"node 0 \(Softmax 'sm'\): attribute 'axis' must be INT, got STRING"):
        from_onnx(m)


def test_input_naming_nothing() -> None:
    m = model([h.make_node("Add", ["x", "nope"], ["y"], name="add")], [vi("x", shape=[3])], [vi("y")])
    with pytest.raises(OnnxImportError, match=r"node 0 \(Add 'add'\): input 'nope' names nothing"):
        from_onnx(m)


def test_cycle() -> None:
    m = model([h.make_node("Add", ["x", "b"], ["a"], name="n1"), h.make_node("Relu", ["a"], ["b"], name="n2")],
              [vi("x", shape=[3])], [vi("b")])
    with pytest.raises(OnnxImportError, match=r"node 0 \(Add 'n1'\): input 'b' names nothing defined before"):
        from_onnx(m)


def test_subgraph_reads_a_name_defined_later() -> None:
    then = h.make_graph([h.make_node("Identity", ["later"], ["t"], name="inner")], "then", [], [vi("t")])
    els = h.make_graph([h.make_node("Identity", ["x"], ["e"])], "else", [], [vi("e")])
    m = model([h.make_node("If", ["c"], ["out"], then_branch=then, else_branch=els, name="branch"),
               h.make_node("Neg", ["x"], ["later"])], [vi("c", T.BOOL, []), vi("x", shape=[3])], [vi("out")])
    with pytest.raises(OnnxImportError, match=r"node 0 \(If 'branch'\) in then_branch: node 0 \(Identity 'inner'\): "
                                              r"input 'later' names nothing"):
        from_onnx(m)


# --- external data -------------------------------------------------------------------------------
def external_model(location: str, offset: int = 0, length: int = 12) -> Any:
    t = onnx.TensorProto()
    t.name, t.data_type = "w", T.FLOAT
    t.dims.extend([3])
    t.data_location = T.EXTERNAL
    for k, v in (("location", location), ("offset", str(offset)), ("length", str(length))):
        e = t.external_data.add()
        e.key, e.value = k, v
    return model([h.make_node("Add", ["x", "w"], ["y"])], [vi("x", shape=[3])], [vi("y", shape=[3])], [t])


def save(tmp_path: Any, m: Any) -> str:
    d = tmp_path / "model"
    d.mkdir(exist_ok=True)
    p = d / "m.onnx"
    p.write_bytes(m.SerializeToString())
    return str(p)


def test_external_data_inside_the_directory(tmp_path: Any) -> None:
    p = save(tmp_path, external_model("sub/w.bin", offset=4))
    os.makedirs(tmp_path / "model" / "sub")
    (tmp_path / "model" / "sub" / "w.bin").write_bytes(b"\0" * 4 + np.array([1, 2, 3], np.float32).tobytes())
    g = from_onnx(p)
    np.testing.assert_array_equal(g(X3), X3 + [1, 2, 3])
    want = ort.InferenceSession(p).run(None, {"x": X3})[0]
    np.testing.assert_array_equal(g(X3), want)


@pytest.mark.parametrize("location", ["../secret.bin", "sub/../../secret.bin", "/etc/passwd"])
def test_external_data_escaping_the_directory_is_refused(tmp_path: Any, location: str) -> None:
    (tmp_path / "secret.bin").write_bytes(np.ones(3, np.float32).tobytes())
    p = save(tmp_path, external_model(location))
    with pytest.raises(ExternalDataError, match="initializer 'w': external data location .* (climbs out|absolute)"):
        from_onnx(p)


def test_external_data_through_an_escaping_symlink_is_refused(tmp_path: Any) -> None:
    (tmp_path / "secret.bin").write_bytes(np.ones(3, np.float32).tobytes())
    p = save(tmp_path, external_model("link.bin"))
    os.symlink(tmp_path / "secret.bin", tmp_path / "model" / "link.bin")
    with pytest.raises(ExternalDataError, match="leads outside the model's directory"):
        from_onnx(p)


@pytest.mark.parametrize(("offset", "length", "what"), [(16, 12, "offset 16 is past the end"),
                                                         (4, 12, "length 12 at offset 4 runs past the end")])
def test_external_data_past_the_end_is_refused(tmp_path: Any, offset: int, length: int, what: str) -> None:
    p = save(tmp_path, external_model("w.bin", offset, length))
    (tmp_path / "model" / "w.bin").write_bytes(np.ones(3, np.float32).tobytes())
    with pytest.raises(ExternalDataError, match=what):
        from_onnx(p)
