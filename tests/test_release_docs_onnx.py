"""What docs/onnx.md says about ONNX functions is what the importer does.

Model-local functions (a model's own ``FunctionProto``) are refused with one error naming
the node and its domain, and the workaround the page gives (ONNX's inliner) imports them;
the oracle for the inlined model is NumPy.  The site's build runs the page's example; this
test pins the claim in the default test run, so that the page changes when the importer does.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import nexus as nx
from nexus.testing.extras import require

onnx = require("onnx", "onnx")
require("onnx.inliner", "onnx")
from onnx import TensorProto, helper  # noqa: E402

PAGE = Path(__file__).resolve().parents[1] / "docs" / "onnx.md"


def local_function_model() -> onnx.ModelProto:
    """local.Double(x) = x + x, called once."""
    double = helper.make_function("local", "Double", ["x"], ["y"], [helper.make_node("Add", ["x", "x"], ["y"])],
                                  [helper.make_opsetid("", 18)])
    graph = helper.make_graph([helper.make_node("Double", ["a"], ["b"], domain="local")], "twice",
                              [helper.make_tensor_value_info("a", TensorProto.FLOAT, [3])],
                              [helper.make_tensor_value_info("b", TensorProto.FLOAT, [3])])
    model = helper.make_model(graph, functions=[double],
                              opset_imports=[helper.make_opsetid("", 18), helper.make_opsetid("local", 1)])
    onnx.checker.check_model(model)
    return model


def test_the_page_says_model_local_functions_are_refused_and_how_to_inline_them() -> None:
    text = PAGE.read_text(encoding="utf-8")
    assert "Model-local functions" in text and "are not imported" in text
    assert "onnx.inliner.inline_local_functions" in text


def test_a_model_local_function_is_refused_in_one_error_naming_node_and_domain() -> None:
    with pytest.raises(ValueError, match=r"^node 0 \(Double\): op domain 'local' is not supported"):
        nx.from_onnx(local_function_model())


def test_inlined_first_it_imports_and_runs() -> None:
    flat = onnx.inliner.inline_local_functions(local_function_model())
    g = nx.from_onnx(flat)
    a = np.array([1.0, 2.0, 3.0], np.float32)
    np.testing.assert_allclose(nx.run(g, a), a + a)
