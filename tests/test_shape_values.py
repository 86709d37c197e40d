"""Shape arithmetic computed from the arguments' dims (``nexus.passes.shapevalues``), as the
python backend runs an exported model's Reshape targets.  The oracle is ONNX Runtime on the
same model, at several batch sizes (0 included: ONNX's Reshape copies a 0 from the input)."""

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
from onnx import numpy_helper  # noqa: E402

from nexus.backends.python.interpreter import prepare  # noqa: E402
from nexus.passes.shapes import infer_shapes  # noqa: E402
from nexus.passes.shapevalues import materialize_shape_values  # noqa: E402


def _init(name: str, value: Any) -> Any:
    return numpy_helper.from_array(np.asarray(value), name)


def _exported_reshapes(layers: int) -> Any:
    """What torch.onnx.export writes for ``y.view(y.shape[0], 2, 3).view(y.shape[0], -1)``
    after a MatMul, ``layers`` times: Shape of a hidden state, Gather, Unsqueeze, Concat;
    then a Reshape whose target holds a 0 (copy the input's dim).  The importer spells the
    first Reshape's run-time target with Where(Equal(t, 0), ...), too."""
    rng = np.random.default_rng(0)
    nodes, inits = [], [_init("zero", np.array(0, np.int64)), _init("axes0", np.array([0], np.int64)),
                        _init("c23", np.array([2, 3], np.int64)), _init("keep", np.array([0, 6], np.int64))]
    y = "x"
    for k in range(layers):
        inits.append(_init(f"w{k}", rng.standard_normal((6, 6)).astype(np.float32)))
        nodes += [h.make_node("MatMul", [y, f"w{k}"], [f"h{k}"]),
                  h.make_node("Shape", [f"h{k}"], [f"s{k}"]),
                  h.make_node("Gather", [f"s{k}", "zero"], [f"b{k}"], axis=0),
                  h.make_node("Unsqueeze", [f"b{k}", "axes0"], [f"u{k}"]),
                  h.make_node("Concat", [f"u{k}", "c23"], [f"t{k}"], axis=0),
                  h.make_node("Reshape", [f"h{k}", f"t{k}"], [f"r{k}"]),
                  h.make_node("Reshape", [f"r{k}", "keep"], [f"y{k}"])]
        y = f"y{k}"
    graph = h.make_graph(nodes, "m", [h.make_tensor_value_info("x", T.FLOAT, ["batch", 6])],
                         [h.make_tensor_value_info(y, T.FLOAT, ["batch", 6])], inits)
    return h.make_model(graph, opset_imports=[h.make_opsetid("", 18)])


def _ort(m: Any, *args: np.ndarray) -> list[np.ndarray]:
    names = [i.name for i in m.graph.input]
    return ort.InferenceSession(m.SerializeToString()).run(None, dict(zip(names, args)))  # type: ignore[no-any-return]


@pytest.mark.parametrize("batch", [1, 3, 0])
def test_the_python_backend_runs_an_exported_models_reshapes_from_the_batch_dim(batch: int) -> None:
    m = _exported_reshapes(8)
    g = nx.from_onnx(m)
    x = np.random.default_rng(batch).standard_normal((batch, 6)).astype(np.float32)
    np.testing.assert_allclose(nx.run(g, x), _ort(m, x)[0], rtol=1e-5, atol=1e-6)
    # The generated code reads no hidden state's shape: every target comes from DimSize(x).
    ran = prepare(g).plan.graph
    assert not [n for n in ran.nodes() if n.op.name in ("ShapeOf", "Where", "Equal")]
    assert sum(1 for n in g.nodes() if n.op.name == "ShapeOf") >= 8  # the caller's graph: as imported


def test_the_importers_copy_a_zero_reshape_gets_exact_dims() -> None:
    # ONNX's Reshape reads a 0 as "the input's dim": the importer spells it with Where and
    # Equal, whose symbolic value is the batch dim on either side.
    g = infer_shapes(nx.from_onnx(_exported_reshapes(1)))
    assert [str(d) for d in g.result_types[0].shape] == ["batch", "6"]


def _broadcast_then_reshape() -> Any:
    """``s = x + y`` (x of n, y of m: the type rule takes n for the result and assumes m
    broadcasts) then a Reshape to ``[len(s), 1]`` read from Shape(s)."""
    nodes = [h.make_node("Add", ["x", "y"], ["s"]),
             h.make_node("Shape", ["s"], ["shape"]),
             h.make_node("Concat", ["shape", "one"], ["t"], axis=0),
             h.make_node("Reshape", ["s", "t"], ["out"])]
    graph = h.make_graph(nodes, "m", [h.make_tensor_value_info("x", T.FLOAT, ["n"]),
                                      h.make_tensor_value_info("y", T.FLOAT, ["m"])],
                         [h.make_tensor_value_info("out", T.FLOAT, None)], [_init("one", np.array([1], np.int64))])
    return h.make_model(graph, opset_imports=[h.make_opsetid("", 18)])


@pytest.mark.parametrize("n, m", [(3, 3), (1, 3), (3, 1)])
def test_a_shape_behind_an_assumed_broadcast_is_read_at_run_time(n: int, m: int) -> None:
    # With n = 1 and m = 3 the sum has 3 elements, not n: its shape must not come from n.
    model = _broadcast_then_reshape()
    g = nx.from_onnx(model)
    materialize_shape_values(g)
    x, y = np.arange(n, dtype=np.float32), np.arange(m, dtype=np.float32) * 10
    np.testing.assert_array_equal(nx.run(g, x, y), _ort(model, x, y)[0])
