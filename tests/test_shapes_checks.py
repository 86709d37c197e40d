"""Run-time checks are inserted exactly where shape inference had to assume a fact."""

from __future__ import annotations

import numpy as np
import pytest

from nexus.backends.python import NexusRuntimeError
from nexus.ir.graph import Graph
from nexus.ir.node import Node
from nexus.ir.types import TensorType, sym
from nexus.passes.shapes import insert_shape_checks

N, M, K = sym("N"), sym("M"), sym("K")


def one_op(op: str, types: list[TensorType], **attrs: object) -> tuple[Graph, Node]:
    g = Graph("f", types, [f"x{i}" for i in range(len(types))])
    n = g.add(op, list(g.args), g.start_block, attrs, name="y")
    g.end_block.append_input(g.add("Return", [n], g.start_block))
    return g, n


def checks(g: Graph) -> list[Node]:
    return [n for n in g.nodes() if n.op.name == "CheckDims"]


def test_broadcast_of_two_symbols_is_checked_and_fails_clearly() -> None:
    g, y = one_op("Add", [TensorType("f32", (N,)), TensorType("f32", (M,))])
    insert_shape_checks(g)
    (c,) = checks(g)
    assert c in y.deps and c.attrs["broadcast"]
    np.testing.assert_array_equal(g(np.ones(3, np.float32), np.ones(3, np.float32)), np.full(3, 2, np.float32))
    np.testing.assert_array_equal(g(np.ones(3, np.float32), np.ones(1, np.float32)), np.full(3, 2, np.float32))
    with pytest.raises(NexusRuntimeError, match=r"Add %y .*dim 0 of input 0 \(N\) and dim 0 of input 1 \(M\).*"
                                                r"sizes 3 and 4 must be equal or 1"):
        g(np.ones(3, np.float32), np.ones(4, np.float32))


def test_proved_facts_need_no_check() -> None:
    for types in ([TensorType("f32", (N, 3)), TensorType("f32", (N, 3))],
                  [TensorType("f32", (N, 1)), TensorType("f32", (1, M))],
                  [TensorType("f32", (4,)), TensorType("f32", (4,))]):
        g, _ = one_op("Mul", types)
        assert checks(insert_shape_checks(g)) == []


def test_matmul_contraction_and_concat_dims_are_checked() -> None:
    g, _ = one_op("MatMul", [TensorType("f32", (N, K)), TensorType("f32", (M, 5))])
    (c,) = checks(insert_shape_checks(g))
    assert not c.attrs["broadcast"]
    with pytest.raises(NexusRuntimeError, match="sizes 2 and 3 must be equal"):
        g(np.ones((4, 2), np.float32), np.ones((3, 5), np.float32))
    g, _ = one_op("Concat", [TensorType("f32", (N, K)), TensorType("f32", (N, M))], axis=0)
    (c,) = checks(insert_shape_checks(g))
    assert g(np.ones((2, 3), np.float32), np.ones((2, 3), np.float32)).shape == (4, 3)


def test_checks_survive_text_round_trip() -> None:
    from nexus.ir import parse, print_graph, structurally_equal, verify

    g, _ = one_op("Add", [TensorType("f32", (N,)), TensorType("f32", (M,))])
    insert_shape_checks(g)
    verify(g)
    assert structurally_equal(g, parse(print_graph(g)))
