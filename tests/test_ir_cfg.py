"""nexus.ir.cfg: the roles of nodes and the control edges, read from the op facts.

The expected roles come from how the graph is built (its arguments are ``g.args``, the
Cond's exits are the Projs the builder made for it), not from the module under test.
"""

from __future__ import annotations

import numpy as np
import pytest

from nexus.ir import cfg
from nexus.ir.graph import Graph
from nexus.ir.node import Node
from nexus.ir.opdef import REGISTRY
from nexus.ir.types import TensorType
from nexus.ir.verify import verify

I64 = TensorType("i64", ())


def _diamond() -> tuple[Graph, dict[str, Node]]:
    """f(a, b) = a + b if a < b else a * b, with a data tuple (TopK) on one side."""
    g = Graph("f", [I64, I64])
    a, b = g.args
    entry = g.start_block
    c = g.add("Constant", [], entry, {"value": np.array(2, np.int64)})
    less = g.add("Less", [a, b], entry)
    cond = g.add("Cond", [less], entry)
    false, true = (g.add("Proj", [cond], entry, {"num": i}) for i in (0, 1))
    then = g.new_block("then", [true])
    s = g.add("Add", [a, b], then)
    j1 = g.add("Jmp", [], then)
    other = g.new_block("else", [false])
    m = g.add("Mul", [a, c], other)
    j2 = g.add("Jmp", [], other)
    join = g.new_block("join", [j1, j2])
    phi = g.add("Phi", [s, m], join)
    ret = g.add("Return", [phi], join)
    g.end_block.append_input(ret)
    verify(g)
    return g, {"a": a, "b": b, "c": c, "less": less, "cond": cond, "false": false, "true": true, "s": s,
               "m": m, "j1": j1, "j2": j2, "phi": phi, "ret": ret}


def test_roles() -> None:
    g, n = _diamond()
    want = {"a": "argument", "b": "argument", "c": "constant", "less": "data", "cond": "terminator",
            "false": "exit", "true": "exit", "s": "data", "m": "data", "j1": "terminator",
            "j2": "terminator", "phi": "phi", "ret": "terminator"}
    assert {k: cfg.role(n[k]) for k in want} == want
    assert cfg.role(g.start) == "control"
    assert all(cfg.role(x) in cfg.ROLES for x in g.nodes())


def test_exits_and_edges() -> None:
    g, n = _diamond()
    assert cfg.exits(n["cond"]) == [n["false"], n["true"]]  # Proj order: false, then true
    assert cfg.exits(n["j1"]) == [n["j1"]]
    then, other, join = (b for b in g.blocks if b.name in ("then", "else", "join"))
    assert cfg.edge_of(n["true"]) == (then, 0)
    assert cfg.edge_of(n["false"]) == (other, 0)
    assert cfg.edge_of(n["j2"]) == (join, 1)
    assert cfg.edge_of(n["ret"]) == (g.end_block, 0)
    assert [cfg.is_control_value(n[k]) for k in ("true", "j1", "ret", "cond", "s")] == [True] * 3 + [False] * 2
    assert g.start_block.succ_edges == [(n["false"], other, 0), (n["true"], then, 0)]


def test_kahn_groups_keep_independent_nodes_together() -> None:
    g, n = _diamond()
    entry = g.start_block
    x = g.add("Add", [n["a"], n["b"]], entry)
    y = g.add("Mul", [n["a"], n["b"]], entry)
    z = g.add("Sub", [x, y], entry)
    assert cfg.kahn_groups([x, y, z], entry) == [[x, y], [z]]
    x.set_input(0, z)  # a cycle inside the block
    with pytest.raises(cfg.CycleError) as e:
        cfg.kahn_groups([x, y, z], entry)
    assert set(e.value.stuck) == {x, z}


def test_control_facts_are_on_the_op() -> None:
    assert {name for name, op in REGISTRY.items() if op.terminator} == {"Jmp", "Cond", "Return"}
    assert {name for name, op in REGISTRY.items() if op.forking} == {"Cond"}
