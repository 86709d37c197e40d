"""print -> parse round trips on generated graphs: odd names, calls, attributes, deps."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nexus.ir import Graph, TensorType, parse, print_graph, structurally_equal, verify
from nexus.ir.node import SourceLoc
from nexus.ir.printer import structural_diff

F32 = TensorType("f32", (2, 3))
UNARY = ["Neg", "Abs", "Exp", "Tanh", "Sigmoid", "Relu"]
BINARY = ["Add", "Sub", "Mul", "Maximum", "Minimum"]
# No control characters: the runtime's generated code quotes names in comments.
names = st.one_of(st.none(), st.text(st.characters(blacklist_categories=("Cc", "Cs")), min_size=1, max_size=6))
# Printable ASCII: the runtime's code generator turns graph names into identifiers.
graph_names = st.text(st.characters(min_codepoint=32, max_codepoint=126), min_size=1, max_size=8)


@st.composite
def graphs(draw: st.DrawFn) -> Graph:
    g = Graph(draw(graph_names), [F32, F32], [draw(names), draw(names)])
    e = g.start_block
    values = list(g.args)
    for _ in range(draw(st.integers(1, 12))):
        kind = draw(st.sampled_from(["unary", "binary", "const", "reduce"]))
        name = draw(names)
        loc = draw(st.one_of(st.none(), st.builds(SourceLoc, st.text(max_size=5), st.integers(1, 99),
                                                  st.integers(0, 9))))
        if kind == "unary":
            n = g.add(draw(st.sampled_from(UNARY)), [draw(st.sampled_from(values))], e, name=name, loc=loc)
        elif kind == "binary":
            a, b = draw(st.sampled_from(values)), draw(st.sampled_from(values))
            n = g.add(draw(st.sampled_from(BINARY)), [a, b], e, name=name, loc=loc)
        elif kind == "const":
            big = draw(st.booleans())
            arr = np.random.default_rng(draw(st.integers(0, 99))).standard_normal((2, 3)).astype(np.float32)
            n = g.add("Constant", [], e, {"value": np.broadcast_to(arr, (4, 2, 3)).copy()[0] if big else arr},
                      name=name)
        else:
            s = g.add("ReduceSum", [draw(st.sampled_from(values))], e, {"axes": (1,), "keepdims": True},
                      name=name)
            n = g.add("Add", [s, draw(st.sampled_from(values))], e, name=name)
        if draw(st.booleans()) and len(values) > 2:
            n.add_dep(draw(st.sampled_from(values[2:])))
        values.append(n)
    r = g.add("Return", [values[-1]], e)
    g.end_block.append_input(r)
    return verify(g)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(graphs())
def test_generated_graphs_round_trip(g: Graph) -> None:
    payload: dict[str, np.ndarray] = {}
    text = print_graph(g, payload)
    h = parse(text, payload)
    assert structural_diff(g, h) == ""
    assert print_graph(h, {}) == text
    assert [n.loc for n in g.nodes()] == [n.loc for n in h.nodes()]
    x = np.arange(6, dtype=np.float32).reshape(2, 3) / 7
    np.testing.assert_array_equal(g(x, -x), h(x, -x))


def test_quoted_graph_names_and_calls() -> None:
    callee = Graph("my-helper v2", [TensorType("f32", ())], ["v"])
    r = callee.add("Return", [callee.add("Neg", [callee.args[0]], callee.start_block)], callee.start_block)
    callee.end_block.append_input(r)
    g = Graph('model "x"', [TensorType("f32", ())], ["x"])
    c = g.add("Call", [g.args[0]], g.start_block, {"callee": callee})
    r = g.add("Return", [c], g.start_block)
    g.end_block.append_input(r)
    text = print_graph(g)
    assert text.startswith('graph @"my-helper v2" {') and '{callee = @"my-helper v2"}' in text
    h = parse(text)
    assert h.name == 'model "x"' and structurally_equal(g, h)
    assert float(h(np.float32(3.0))) == -3.0


def test_unnamed_results_print_by_their_names() -> None:
    """A Proj of a multi-output op without a name of its own is named after the result
    it reads (OpDef.results); Cond exits keep numbers."""
    g = Graph("topk", [TensorType("f32", (5,))], ["x"])
    e = g.start_block
    k = g.add("Constant", [], e, {"value": np.array(2, np.int64)}, name="two")
    t = g.add("TopK", [g.args[0], k], e, name="t")
    outs = [g.add("Proj", [t], e, {"num": i}) for i in range(3)]
    g.end_block.append_input(g.add("Return", outs, e, name="r"))
    text = print_graph(g)
    assert "\n".join(text.splitlines()[5:9]) == """\
  %t = TopK %x, %two {axis = -1, largest = true, sorted = true} : (f32[2], i64[2], i64)
  %values = Proj %t {num = 0} : f32[2]
  %indices = Proj %t {num = 1} : i64[2]
  %k = Proj %t {num = 2} : i64"""
    assert structurally_equal(g, parse(text))
