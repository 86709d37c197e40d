"""Verifier fuzzing: random edits of valid graphs.  The verifier reports problems as
messages (never crashes), and whatever it accepts prints, parses back and runs (or
stops with a NexusRuntimeError), so it has no holes the interpreter falls into."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nexus import seeds
from nexus.backends.python import NexusRuntimeError, run
from nexus.ir import Graph, TensorType, X, parse, print_graph, structurally_equal
from nexus.ir.node import Block, Node
from nexus.ir.verify import problems

TYPES = [X, TensorType("f32", ()), TensorType("i32", ()), TensorType("bool", ()), TensorType("f32", (2,))]


def _all(g: Graph) -> list[Node]:
    return [*g.blocks, *g.nodes()]


@st.composite
def edited(draw: st.DrawFn) -> Graph:
    g = draw(st.sampled_from(list(seeds.ALL.values())))()
    for _ in range(draw(st.integers(1, 3))):
        nodes = _all(g)
        n = draw(st.sampled_from(nodes))
        v = draw(st.sampled_from(nodes))
        kind = draw(st.sampled_from(["set", "append", "remove", "move", "dep", "drop", "type"]))
        if kind == "set" and n.num_inputs:
            n.set_input(draw(st.integers(0, n.num_inputs - 1)), v)
        elif kind == "append":
            n.append_input(v)
        elif kind == "remove" and n.num_inputs:
            n.remove_input(draw(st.integers(0, n.num_inputs - 1)))
        elif kind == "move" and not isinstance(n, Block):
            g.move(n, draw(st.sampled_from(list(g.blocks))))
        elif kind == "dep" and not isinstance(n, Block):
            n.add_dep(v)
        elif kind == "drop" and not isinstance(n, Block) and n.block is not None:
            del n.block.members[n]  # a buggy pass forgetting the uses
            n.block = None
        elif kind == "type" and not isinstance(n, Block):
            n.type = draw(st.sampled_from(TYPES))
    return g


@settings(max_examples=300, deadline=5000, suppress_health_check=[HealthCheck.too_slow])
@given(edited())
def test_verifier_never_crashes_and_has_no_holes(g: Graph) -> None:
    found = problems(g)
    assert all(isinstance(p, str) and p for p in found)
    if found:
        return
    text = print_graph(g)
    assert structurally_equal(parse(text), g)
    try:
        result = run(g, max_iterations=2_000)
    except NexusRuntimeError:
        return
    if any(r.num_inputs == 0 for r in g.returns):
        assert result == ()
    else:
        assert np.asarray(result).dtype.kind in "biuf"
