"""ONNX sequences and optionals: import, run and export, against ONNX Runtime.

Each model runs three ways: ONNX Runtime on the model (the oracle), Nexus on the imported
graph, and ONNX Runtime on the exported graph (ONNX -> Nexus -> ONNX).  The official node
tests of the sequence and optional family run through ``NexusBackend`` as the onnx
runner runs them."""

from __future__ import annotations

import importlib
from typing import Any

import numpy as np
import pytest

from nexus.testing.extras import require

onnx = require("onnx", "onnx")
ort = require("onnxruntime", "onnx")

from onnx import TensorProto, helper  # noqa: E402

import nexus as nx  # noqa: E402
from nexus.ir.types import OptionalType, SequenceType  # noqa: E402

F, I64, B = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL
rng = np.random.default_rng(13)


def seq_info(name: str, elem: int, shape: Any = None) -> Any:
    return helper.make_tensor_sequence_value_info(name, elem, shape)


def opt_info(name: str, inner: Any) -> Any:
    return helper.make_value_info(name, helper.make_optional_type_proto(inner))


def model(nodes: list[Any], inputs: list[Any], outputs: list[Any], opset: int = 18) -> Any:
    g = helper.make_graph(nodes, "m", inputs, outputs)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 10
    onnx.checker.check_model(m)
    return m


def ort_run(m: Any, feeds: dict[str, Any]) -> list[Any]:
    so = ort.SessionOptions()
    so.log_severity_level = 3
    sess = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return list(sess.run(None, feeds))


def same(got: Any, want: Any) -> None:
    if want is None:
        assert got is None
    elif isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want)
        for a, b in zip(got, want):
            same(a, b)
    else:
        got = np.asarray(got)
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-6)


def check(m: Any, feeds: list[dict[str, Any]]) -> nx.Graph:
    """Nexus and ONNX Runtime on the exported graph both agree with ONNX Runtime."""
    g = nx.from_onnx(m)
    nx.verify(g)
    assert nx.ir.structurally_equal(g, nx.parse(nx.print_graph(g)))
    exported = nx.to_onnx(g)
    names = [vi.name for vi in m.graph.input]
    for f in feeds:
        want = ort_run(m, f)
        got = g(*[f[n] for n in names])
        got = list(got) if isinstance(got, tuple) else [got]
        for a, b in zip(got, want):
            same(a, b)
        again = ort_run(exported, dict(zip([vi.name for vi in exported.graph.input], [f[n] for n in names])))
        for a, b in zip(again, want):
            same(a, b)
    return g


def test_sequence_ops() -> None:
    nodes = [
        helper.make_node("SequenceConstruct", ["x", "y"], ["s"]),
        helper.make_node("SequenceInsert", ["s", "x", "p"], ["s2"]),
        helper.make_node("SequenceInsert", ["s2", "y"], ["s3"]),
        helper.make_node("SequenceAt", ["s3", "p"], ["a"]),
        helper.make_node("SequenceErase", ["s3", "p"], ["e"]),
        helper.make_node("SequenceErase", ["e"], ["e2"]),
        helper.make_node("SequenceLength", ["s3"], ["n"]),
        helper.make_node("ConcatFromSequence", ["s3"], ["c"], axis=0),
        helper.make_node("SequenceEmpty", [], ["z"], dtype=F),
        helper.make_node("SequenceInsert", ["z", "y"], ["z1"]),
        helper.make_node("ConcatFromSequence", ["z1"], ["st"], axis=1, new_axis=1),
    ]
    m = model(nodes, [helper.make_tensor_value_info("x", F, ["N", 3]), helper.make_tensor_value_info("y", F, [2, 3]),
                      helper.make_tensor_value_info("p", I64, [])],
              [seq_info("s3", F), helper.make_tensor_value_info("a", F, ["A", 3]), seq_info("e2", F),
               helper.make_tensor_value_info("n", I64, []), helper.make_tensor_value_info("c", F, ["C", 3]),
               helper.make_tensor_value_info("st", F, [2, 1, 3])])
    y = rng.normal(size=(2, 3)).astype(np.float32)
    feeds = [{"x": rng.normal(size=(n, 3)).astype(np.float32), "y": y, "p": np.array(p, np.int64)}
             for n, p in [(1, 0), (4, -1), (0, 2), (2, -2)]]
    g = check(m, feeds)
    assert isinstance(g.result_types[0], SequenceType) and g.result_types[0].length == 4


@pytest.mark.parametrize(("split", "axis", "keepdims"), [(None, 0, 1), (None, 1, 0), (np.array(2), 0, 1),
                                                         (np.array([1, 3, 0], np.int64), 1, 1)])
def test_split_to_sequence(split: Any, axis: int, keepdims: int) -> None:
    ins = ["x"] if split is None else ["x", "split"]
    nodes = [helper.make_node("SplitToSequence", ins, ["s"], axis=axis, keepdims=keepdims),
             helper.make_node("SequenceLength", ["s"], ["n"])]
    inputs = [helper.make_tensor_value_info("x", F, [5, 4])]
    if split is not None:
        nodes.insert(0, helper.make_node("Constant", [], ["split"], value=onnx.numpy_helper.from_array(split)))
    m = model(nodes, inputs, [seq_info("s", F), helper.make_tensor_value_info("n", I64, [])])
    check(m, [{"x": np.arange(20, dtype=np.float32).reshape(5, 4)}])


def test_loop_carries_a_sequence() -> None:
    """A Loop appends to a sequence it carries (a Phi of sequence type), then concatenates."""
    body = helper.make_graph(
        [helper.make_node("Identity", ["c_in"], ["c_out"]),
         helper.make_node("Cast", ["i"], ["fi"], to=F),
         helper.make_node("Mul", ["x", "fi"], ["row"]),
         helper.make_node("SequenceInsert", ["s_in", "row"], ["s_out"])],
        "body", [helper.make_tensor_value_info("i", I64, []), helper.make_tensor_value_info("c_in", B, []),
                 seq_info("s_in", F)],
        [helper.make_tensor_value_info("c_out", B, []), seq_info("s_out", F)])
    nodes = [helper.make_node("SequenceEmpty", [], ["s0"], dtype=F),
             helper.make_node("Loop", ["m", "", "s0"], ["s"], body=body),
             helper.make_node("ConcatFromSequence", ["s"], ["c"], axis=0, new_axis=1)]
    m = model(nodes, [helper.make_tensor_value_info("m", I64, []), helper.make_tensor_value_info("x", F, [3])],
              [seq_info("s", F), helper.make_tensor_value_info("c", F, ["M", 3])])
    x = rng.normal(size=3).astype(np.float32)
    g = check(m, [{"m": np.array(4, np.int64), "x": x}, {"m": np.array(1, np.int64), "x": x}])
    phis = [n for n in g.nodes() if n.op.name == "Phi" and isinstance(n.type, SequenceType)]
    assert phis, "the carried sequence is a Phi of sequence type"
    nx.infer_shapes(g)  # converges over the loop, and the types stay sound
    nx.verify(g)
    assert isinstance(phis[0].type, SequenceType) and phis[0].type.elem.shape == (3,)
    same(g(np.array(2, np.int64), x)[1], np.stack([x * 0, x * 1]))


def test_sequence_map_becomes_a_loop() -> None:
    body = helper.make_graph([helper.make_node("Add", ["e", "t"], ["out"]), helper.make_node("Shape", ["e"], ["sh"])],
                             "map", [helper.make_tensor_value_info("e", F, ["K"]),
                                     helper.make_tensor_value_info("t", F, [1])],
                             [helper.make_tensor_value_info("out", F, ["K"]),
                              helper.make_tensor_value_info("sh", I64, [1])])
    m = model([helper.make_node("SequenceMap", ["s", "t"], ["o", "shapes"], body=body)],
              [seq_info("s", F, ["K"]), helper.make_tensor_value_info("t", F, [1])],
              [seq_info("o", F), seq_info("shapes", I64)])
    g = check(m, [{"s": [rng.normal(size=k).astype(np.float32) for k in (3, 0, 5)], "t": np.ones(1, np.float32)},
                  {"s": [], "t": np.ones(1, np.float32)}])
    assert not any(n.op.name == "SequenceMap" for n in g.nodes())
    assert any(n.op.name == "Cond" for n in g.nodes())


def test_optional_input_with_if() -> None:
    tensor = helper.make_tensor_type_proto(F, [2])
    then = helper.make_graph([helper.make_node("OptionalGetElement", ["o"], ["v"]),
                              helper.make_node("Add", ["v", "v"], ["r"])], "then", [],
                             [helper.make_tensor_value_info("r", F, [2])])
    other = helper.make_graph([helper.make_node("Constant", [], ["r2"], value=onnx.numpy_helper.from_array(
        np.full(2, -1, np.float32)))], "else", [], [helper.make_tensor_value_info("r2", F, [2])])
    nodes = [helper.make_node("OptionalHasElement", ["o"], ["has"]),
             helper.make_node("If", ["has"], ["out"], then_branch=then, else_branch=other),
             helper.make_node("Optional", [], ["none"], type=tensor),
             helper.make_node("OptionalHasElement", ["none"], ["none_has"])]
    m = model(nodes, [opt_info("o", tensor)], [helper.make_tensor_value_info("out", F, [2]),
                                               helper.make_tensor_value_info("none_has", B, [])])
    g = check(m, [{"o": np.array([1.5, 2.0], np.float32)}, {"o": None}])
    assert isinstance(g.arg_types[0], OptionalType)


# --- the official node tests of the family -----------------------------------------------------------
_MODULES = ("identity", "if_", "loop", "optionalgetelement", "optionalhaselement", "sequence_map", "sequenceinsert",
            "splittosequence")
_FAMILY = ("test_optional_", "test_sequence_map", "test_sequence_insert", "test_split_to_sequence",
           "test_identity_sequence", "test_identity_opt", "test_if_seq", "test_if_opt", "test_loop13_seq")


def family_cases() -> list[Any]:
    """The node tests of the sequence and optional family, built by importing only their
    generator modules (the whole set takes half a minute to build)."""
    from onnx.backend.test.case import node

    for name in _MODULES:
        importlib.import_module(f"onnx.backend.test.case.node.{name}")
    seen: set[str] = set()
    out = []
    for c in node._NodeTestCases:
        if c.name.startswith(_FAMILY) and c.name not in seen and c.model is not None:
            seen.add(c.name)
            out.append(c)
    return out


def test_the_official_sequence_models_pass() -> None:
    """The "simple" model tests test_sequence_model1..8 (sequence ops chained in one model)."""
    from onnx.backend.test.case import model as simple

    from nexus.backends.onnx.backend import NexusBackend
    from nexus.testing import onnx_conformance as conf

    importlib.import_module("onnx.backend.test.case.model.sequence")
    cases = [c for c in simple._SimpleModelTestCases if c.name.startswith("test_sequence_model")]
    assert len({c.name for c in cases}) == 8
    for c in cases:
        case = conf.Case(c.name, c.model, [(list(i), list(o)) for i, o in c.data_sets], c.rtol, c.atol)
        assert conf.run_case(NexusBackend, case) is None, c.name


def test_the_official_family_passes() -> None:
    from nexus.backends.onnx.backend import NexusBackend
    from nexus.testing import onnx_conformance as conf

    cases = family_cases()
    assert len(cases) == 28 + 5  # the family, identity on a sequence and an optional, If and Loop on them
    failed = {}
    for c in cases:
        case = conf.Case(c.name, c.model, [(list(i), list(o)) for i, o in c.data_sets], c.rtol, c.atol)
        why = conf.run_case(NexusBackend, case)
        if why is not None:
            failed[c.name] = why
    assert not failed, failed


def test_the_onnx_page_examples_run(tmp_path: Any) -> None:
    """docs/onnx.md's examples (the sequence one among them) run as the docs build runs them."""
    import runpy
    from pathlib import Path

    from nexus.testing.docs import examples_file

    page = Path(__file__).resolve().parents[1] / "docs" / "onnx.md"
    text = page.read_text(encoding="utf-8")
    assert "### Sequences and optionals" in text and "SplitToSequence" in text
    runpy.run_path(str(examples_file(page, tmp_path, at_least=4)), run_name="onnx_doc")


def test_export_names_the_opset_sequences_and_optionals_need() -> None:
    from nexus.backends.onnx.export import ExportError

    g = nx.from_onnx(model([helper.make_node("OptionalHasElement", ["o"], ["h"])],
                          [opt_info("o", helper.make_tensor_type_proto(F, [2]))],
                          [helper.make_tensor_value_info("h", B, [])]))
    with pytest.raises(ExportError, match=r"needs ONNX opset 15 or later \(OptionalType opt<f32\[2\]>\), not 13"):
        nx.to_onnx(g, opset=13)
    s = nx.from_onnx(model([helper.make_node("SequenceLength", ["s"], ["n"])], [seq_info("s", F)],
                           [helper.make_tensor_value_info("n", I64, [])]))
    with pytest.raises(ExportError, match="needs ONNX opset 11 or later"):
        nx.to_onnx(s, opset=10)
    assert nx.to_onnx(s, opset=11).opset_import[0].version == 11
