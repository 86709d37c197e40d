"""nexus.ir.static: values known before the run, checked against NumPy."""

from __future__ import annotations

import numpy as np

import nexus  # noqa: F401  (registers the op families)
from nexus.ir.graph import Graph
from nexus.ir.static import evaluate, static_value
from nexus.ir.types import TensorType


def _const(g: Graph, v: np.ndarray):  # type: ignore[no-untyped-def]
    return g.add("Constant", [], g.start_block, {"value": v})


def test_shape_arithmetic_over_a_static_argument_is_known() -> None:
    g = Graph("f", [TensorType("f32", (2, 3, 5))])
    e = g.start_block
    (x,) = g.args
    shape = g.add("ShapeOf", [x], e)
    last = g.add("Gather", [shape, _const(g, np.array(-1, np.int64))], e, {"axis": 0})
    r = g.add("Range", [_const(g, np.array(0, np.int64)), last, _const(g, np.array(2, np.int64))], e)
    np.testing.assert_array_equal(static_value(r), np.arange(0, 5, 2))
    assert static_value(g.add("Exp", [x], e)) is None  # data: known only when it runs


def test_evaluate_leaves_failures_and_big_values_to_the_run() -> None:
    g = Graph("f", [])
    e = g.start_block
    a, b = _const(g, np.array([6, 7], np.int64)), _const(g, np.array([3, 0], np.int64))
    div = g.add("Div", [a, b], e)
    assert evaluate(div, [np.array([6, 7]), np.array([3, 0])]) is None  # integer division by zero
    np.testing.assert_array_equal(evaluate(div, [np.array([6, 7]), np.array([3, 7])]), [2, 1])
    big = g.add("Range", [_const(g, np.array(0, np.int64)), _const(g, np.array(10**9, np.int64)),
                          _const(g, np.array(1, np.int64))], e)
    assert evaluate(big, [np.array(0), np.array(10**9), np.array(1)]) is None  # counted before it allocates
