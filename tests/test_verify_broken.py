"""Deliberately broken graphs: each fails verification with its own message, naming the
node, its block and the rule broken."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from nexus import seeds
from nexus.ir import Graph, TensorType, X, verify
from nexus.ir.node import Block, Node
from nexus.ir.opdef import get_op
from nexus.ir.verify import VerifyError, problems

F32 = TensorType("f32", ())


def _find(g: Graph, name: str) -> Node:
    for b in g.blocks:
        if b.name == name:
            return b
        for n in b.members:
            if n.name == name:
                return n
    raise KeyError(name)


def _block(g: Graph, name: str) -> Block:
    b = _find(g, name)
    assert isinstance(b, Block)
    return b


def _const(g: Graph, block: Block, value: float = 1.0, dtype: type = np.float32, name: str | None = None) -> Node:
    return g.add("Constant", [], block, {"value": np.array(value, dtype)}, name=name)


def _ret(g: Graph, block: Block, *values: Node) -> Node:
    r = g.add("Return", list(values), block)
    g.end_block.append_input(r)
    return r


# Each case: (builder of a broken graph, the message verify must give).
def use_not_dominated() -> Graph:
    g = seeds.ifelse()
    _find(g, "d").set_input(0, _find(g, "c_then"))  # the join reads the then-side value
    return g


def phi_input_not_dominating_its_edge() -> Graph:
    g = seeds.ifelse()
    phi = _find(g, "c")
    then_v, else_v = phi.inputs
    phi.set_input(0, else_v)
    phi.set_input(1, then_v)
    return g


def phi_arity_wrong() -> Graph:
    g = seeds.ifelse()
    _find(g, "c").remove_input(1)
    return g


def missing_terminator() -> Graph:
    g = Graph("g")
    j = g.add("Jmp", [], g.start_block)
    b = g.new_block("body", [j])
    g.add("Constant", [], b, {"value": np.array(1.0, np.float32)}, name="k")
    return g


def two_terminators() -> Graph:
    g = Graph("g")
    _ret(g, g.start_block)
    j = g.add("Jmp", [], g.start_block)
    _ret(g, g.new_block("other", [j]))
    return g


def control_value_used_as_data() -> Graph:
    g = Graph("g")
    j = g.add("Jmp", [], g.start_block, name="j")
    b = g.new_block("next", [j])
    neg = g.add("Neg", [j], b, type=F32, name="bad")
    _ret(g, b, neg)
    return g


def tuple_used_as_data() -> Graph:
    g = seeds.ifelse()
    cond = next(n for n in g.start_block.members if n.op.name == "Cond")
    _find(g, "d").set_input(1, g.add("Neg", [cond], g.start_block, type=F32, name="bad"))
    return g


def type_mismatch_f32_i64() -> Graph:
    g = Graph("g")
    a = _const(g, g.start_block, 1.0, np.float32, "a")
    b = _const(g, g.start_block, 2, np.int64, "b")
    _ret(g, g.start_block, g.add("Add", [a, b], g.start_block, type=F32, name="sum"))
    return g


def result_type_wrong() -> Graph:
    g = Graph("g")
    a = _const(g, g.start_block, 1.0, np.float32, "a")
    _ret(g, g.start_block, g.add("Neg", [a], g.start_block, type=TensorType("i32", ()), name="neg"))
    return g


def dangling_use_after_erase() -> Graph:
    g = seeds.ifelse()
    c_then = _find(g, "c_then")
    # Graph.erase refuses (the Phi still reads it); a buggy pass drops it by hand.
    with pytest.raises(Exception, match="still used by <Phi %c>"):
        g.erase_dead([c_then])
    assert c_then.block is not None
    del c_then.block.members[c_then]
    c_then.block = None
    return g


def phi_in_entry_block() -> Graph:
    g = Graph("g")
    a = _const(g, g.start_block, name="a")
    p = g.add("Phi", [a], g.start_block, type=F32, name="p")
    _ret(g, g.start_block, p)
    return g


def data_node_in_end_block() -> Graph:
    g = seeds.ifelse()
    _const(g, g.end_block, name="stray")
    return g


def dangling_cond_exit() -> Graph:
    g = seeds.ifelse()
    # The else block is entered from a new block instead of the Cond's false exit.
    j = g.add("Jmp", [], g.new_block("detour"))
    _block(g, "else").set_input(0, j)
    return g


def cond_missing_an_exit() -> Graph:
    g = Graph("g")
    a = _const(g, g.start_block, 1.0, np.bool_, "a")
    c = g.add("Cond", [a], g.start_block, name="c")
    _ret(g, g.new_block("yes", [g.add("Proj", [c], g.start_block, {"num": 1})]))
    return g


def jmp_entering_two_blocks() -> Graph:
    g = Graph("g")
    j = g.add("Jmp", [], g.start_block, name="j")
    a, b = g.new_block("a", [j]), g.new_block("b", [j])
    _ret(g, a)
    _ret(g, b)
    return g


def return_entering_a_non_exit_block() -> Graph:
    g = Graph("g")
    r = _ret(g, g.start_block)
    g.new_block("wrong", [r])
    return g


def jmp_entering_the_end_block() -> Graph:
    g = Graph("g")
    g.end_block.append_input(g.add("Jmp", [], g.start_block))
    return g


def unknown_attribute() -> Graph:
    g = Graph("g")
    a = _const(g, g.start_block, name="a")
    neg = g.add("Neg", [a], g.start_block, name="neg")
    neg.attrs = {**neg.attrs, "colour": "blue"}
    _ret(g, g.start_block, neg)
    return g


def missing_required_attribute() -> Graph:
    g = Graph("g", [F32], ["x"])
    g.args[0].attrs = {}
    _ret(g, g.start_block, g.args[0])
    return g


def wrong_arity() -> Graph:
    g = Graph("g")
    a = _const(g, g.start_block, name="a")
    add = g.add("Add", [a, a], g.start_block, name="add")
    add.append_input(a)
    _ret(g, g.start_block, add)
    return g


def data_cycle_inside_a_block() -> Graph:
    g = Graph("g")
    a = _const(g, g.start_block, name="a")
    x = g.add("Add", [a, a], g.start_block, name="x")
    y = g.add("Add", [x, a], g.start_block, name="y")
    x.set_input(1, y)
    _ret(g, g.start_block, y)
    return g


def cond_exit_in_another_block() -> Graph:
    g = seeds.ifelse()
    g.move(_find(g, "true"), _block(g, "else"))
    return g


def returns_disagree() -> Graph:
    g = seeds.ifelse()
    then = _block(g, "then")
    jmp = then.terminator
    assert jmp is not None
    join = _block(g, "join")
    join.remove_input(0)
    _find(g, "c").remove_input(0)
    g.erase(jmp)
    c_then = _find(g, "c_then")
    _ret(g, then, c_then, c_then)
    return g


def start_block_with_a_predecessor() -> Graph:
    g = Graph("g")
    b = g.new_block("loop", [g.add("Jmp", [], g.start_block)])
    g.start_block.append_input(g.add("Jmp", [], b))
    return g


def block_entered_by_data() -> Graph:
    g = Graph("g")
    a = _const(g, g.start_block, name="a")
    _ret(g, g.start_block, a)
    g.new_block("odd", [a])
    return g


def block_entered_by_end() -> Graph:
    """End is typed X, but it is no exit: printed without a name, such a graph could not be
    read back (the verifier fuzz found it)."""
    g = seeds.ifelse()
    then = next(b for b in g.blocks if b.name == "then")
    then.append_input(next(iter(g.end_block.members)))
    return g


def node_of_another_graph() -> Graph:
    g, other = Graph("g"), Graph("other")
    outside = _const(other, other.start_block, name="outside")
    neg = Node(get_op("Neg"), [outside], {}, F32, "neg")
    neg.graph, neg.block = g, g.start_block
    g.start_block.members[neg] = None
    _ret(g, g.start_block, neg)
    return g


CASES: dict[str, tuple[Callable[[], Graph], str]] = {
    "use not dominated": (use_not_dominated, "Mul %d in ^join: input 0 (Add %c_then in ^then) is used where its "
                                             "definition does not dominate"),
    "phi input vs edge": (phi_input_not_dominating_its_edge,
                          "Phi %c in ^join: input 0 (Sub %c_else in ^else) does not dominate predecessor 0 (^then)"),
    "phi arity": (phi_arity_wrong, "Phi %c in ^join: Phi has 1 inputs but its block has 2 predecessors"),
    "missing terminator": (missing_terminator, "block ^body: has no terminator (Jmp, Cond or Return)"),
    "two terminators": (two_terminators, "block ^entry: has 2 terminators (Return, Jmp); exactly one allowed"),
    "control as data": (control_value_used_as_data,
                        "Neg %bad in ^next: input 0 is a control value (Jmp); control values only feed blocks"),
    "tuple as data": (tuple_used_as_data, "Neg %bad in ^entry: input 0 is a tuple (Cond); read its parts with Proj"),
    "type mismatch": (type_mismatch_f32_i64, "Add %sum in ^entry: type rule: Add: dtype mismatch, input 0 is f32 "
                                             "and input 1 is i64; insert a Cast"),
    "result type": (result_type_wrong, "Neg %neg in ^entry: has type i32 but its op's rule gives f32"),
    "use after erase": (dangling_use_after_erase,
                        "Phi %c in ^join: input 0 is a node that was erased or belongs to another graph"),
    "phi in entry": (phi_in_entry_block, "Phi %p in ^entry: the start block cannot hold a Phi"),
    "data in end block": (data_node_in_end_block, "Constant %stray in ^exit: the end block holds only End"),
    "dangling exit": (dangling_cond_exit,
                      "Proj %false in ^entry: this control value enters no block (a dangling exit)"),
    "cond missing exit": (cond_missing_an_exit,
                          "Cond %c in ^entry: a Cond needs exactly one Proj per exit (num 0 = false, 1 = true); "
                          "has [1]"),
    "jmp into two blocks": (jmp_entering_two_blocks,
                            "Jmp %j in ^entry: this control value enters 2 block inputs; exactly one allowed"),
    "return elsewhere": (return_entering_a_non_exit_block, "block ^wrong: Return must enter the end block"),
    "jmp into end": (jmp_entering_the_end_block, "block ^exit: the end block is entered by Jmp; only Return may enter"),
    "unknown attribute": (unknown_attribute, "Neg %neg in ^entry: Neg: unknown attribute 'colour'"),
    "missing attribute": (missing_required_attribute, "Proj %x in ^entry: Proj: missing required attribute 'num'"),
    "wrong arity": (wrong_arity, "Add %add in ^entry: Add takes 2 inputs, has 3"),
    "data cycle": (data_cycle_inside_a_block, "in ^entry: is part of a cycle of data edges inside its block"),
    "cond exit elsewhere": (cond_exit_in_another_block,
                            "Proj %true in ^else: a Proj of a Cond must be in the Cond's block"),
    "returns disagree": (returns_disagree, "returns 2 values; another Return returns 1"),
    "start has preds": (start_block_with_a_predecessor, "block ^entry: the start block must have no predecessors"),
    "block entered by data": (block_entered_by_data,
                              "block ^odd: predecessor 0 (Constant %a in ^entry) is not a control value (X)"),
    "block entered by End": (block_entered_by_end,
                             "block ^then: predecessor 1 (End %5 in ^exit) is no exit"),
    "foreign node": (node_of_another_graph,
                     "Neg %neg in ^entry: input 0 is a node that was erased or belongs to another graph"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_broken_graph_fails_with_its_message(case: str) -> None:
    build, message = CASES[case]
    g = build()
    with pytest.raises(VerifyError) as info:
        verify(g)
    assert any(message in p for p in info.value.problems), "\n".join(info.value.problems)
    assert message in str(info.value)


def test_each_case_has_its_own_message() -> None:
    firsts = {}
    for case, (build, message) in CASES.items():
        found = problems(build())
        assert found, case
        firsts[case] = next(p for p in found if message in p)
    assert len(set(firsts.values())) == len(CASES) >= 12


def test_messages_show_the_node_line_and_source_location() -> None:
    from nexus.ir.node import SourceLoc

    g = phi_arity_wrong()
    _find(g, "c").loc = SourceLoc("model.py", 12, 4)
    (msg,) = problems(g)
    assert "\n    %c = Phi %c_then : f32" in msg and "created at model.py:12:4" in msg


def test_valid_graphs_pass() -> None:
    for build in seeds.ALL.values():
        assert problems(build()) == []
    g = Graph("empty_return")
    _ret(g, g.start_block)
    assert verify(g) is g
    assert X == X  # control type singleton
