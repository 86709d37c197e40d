"""Graph editing keeps use-def lists right and programs' meaning unchanged."""

from __future__ import annotations

import numpy as np
import pytest

from nexus import seeds
from nexus.backends.python import run
from nexus.ir import Graph, parse, print_graph, structurally_equal, verify
from nexus.ir.graph import GraphError
from nexus.ir.node import Block, Node
from nexus.ir.verify import VerifyError


def check_use_lists(g: Graph) -> None:
    """Every edge is recorded at both ends, and nothing else is recorded."""
    edges: set[tuple[Node, Node, int]] = set()
    everything: list[Node] = [*g.blocks, *g.nodes()]
    for n in everything:
        for i, v in enumerate(n.inputs):
            edges.add((v, n, i))
        for k, v in enumerate(n.deps):
            edges.add((v, n, -1 - k))
    recorded = {(n, user, i) for n in everything for user, i in n.uses}
    assert recorded == edges
    for b in g.blocks:
        for n in b.members:
            assert n.block is b and n.graph is g


def find(g: Graph, name: str) -> Node:
    return next(n for n in [*g.blocks, *g.nodes()] if n.name == name)


def const(g: Graph, block: Block, value: float, name: str | None = None) -> Node:
    return g.add("Constant", [], block, {"value": np.array(value, np.float32)}, name=name)


def test_replace_all_uses_with() -> None:
    g = seeds.ifelse()
    c_then = find(g, "c_then")
    ten = const(g, find(g, "then"), 10.0, "ten")  # type: ignore[arg-type]
    users = c_then.users
    c_then.replace_all_uses_with(ten)
    assert not c_then.has_uses() and ten.users == users
    check_use_lists(g)
    g.erase(c_then)
    check_use_lists(g)
    verify(g)
    assert float(run(g)) == 10.0 * 2  # a < b takes the then side: d = 10 * 2


def test_replace_all_uses_with_deps_and_repeated_inputs() -> None:
    g = Graph("g")
    a, b = const(g, g.start_block, 1.0, "a"), const(g, g.start_block, 2.0, "b")
    s = g.add("Add", [a, a], g.start_block, name="s", deps=[a])
    a.replace_all_uses_with(b)
    assert s.inputs == (b, b) and s.deps == (b,) and not a.has_uses()
    check_use_lists(g)
    g.replace(b, a)  # and back, erasing b
    assert s.inputs == (a, a) and s.deps == (a,) and b.graph is None
    check_use_lists(g)


def test_erase_with_users_is_refused() -> None:
    g = seeds.ifelse()
    with pytest.raises(GraphError, match="cannot erase <Add %c_then>: still used by <Phi %c>"):
        g.erase(find(g, "c_then"))
    with pytest.raises(GraphError, match="cannot erase block \\^then: it still has"):
        find(g, "then").drop_inputs()
        g.erase(find(g, "then"))
    check_use_lists(g)


def test_erase_unused_node_updates_its_inputs_uses() -> None:
    g = seeds.ifelse()
    a = find(g, "a")
    before = a.num_uses
    extra = g.add("Neg", [a], g.start_block)
    assert a.num_uses == before + 1
    g.erase(extra)
    assert a.num_uses == before and extra.graph is None
    check_use_lists(g)
    verify(g)


def test_erase_dead_unreachable_region() -> None:
    g = seeds.skip5_loop()
    before = print_graph(g)
    # An unreachable loop: two blocks jumping to each other, with a value flowing around.
    b1 = g.new_block("dead1")
    b2 = g.new_block("dead2")
    k = const(g, b1, 1.0)
    j1 = g.add("Jmp", [], b1)
    b2.append_input(j1)
    phi = g.add("Phi", [k], b2)
    g.add("Neg", [phi], b2)
    b1.append_input(g.add("Jmp", [], b2))
    verify(g)
    region = [b1, b2, *b1.members, *b2.members]
    g.erase_dead(region)
    check_use_lists(g)
    assert print_graph(g) == before and int(run(g)) == 31


def test_move() -> None:
    g = seeds.ifelse()
    two = find(g, "two")
    g.move(two, find(g, "then"))  # type: ignore[arg-type]
    check_use_lists(g)
    with pytest.raises(VerifyError, match="Mul %d in \\^join: input 1 \\(Constant %two in \\^then\\) is used where"):
        verify(g)
    g.move(two, find(g, "join"))  # type: ignore[arg-type]
    verify(g)
    assert float(run(g)) == 6.0
    with pytest.raises(GraphError):
        g.move(find(g, "then"), find(g, "join"))  # type: ignore[arg-type]


@pytest.mark.parametrize("name", sorted(seeds.ALL))
def test_clone_is_equal_and_independent(name: str) -> None:
    g = seeds.ALL[name]()
    ret_block = g.returns[0].block
    assert ret_block is not None
    g.returns[0].add_dep(next(iter(ret_block.members)))  # deps are cloned too
    c, mapping = g.clone()
    assert structurally_equal(g, c) and print_graph(c) == print_graph(g)
    assert set(mapping) == {*g.blocks, *g.nodes()}
    assert all(m.graph is c for m in mapping.values())
    check_use_lists(c)
    check_use_lists(g)
    verify(c)
    assert run(c, max_iterations=100_000) == run(g, max_iterations=100_000)
    # Editing the clone leaves the original alone.
    text = print_graph(g)
    victim = next(n for n in c.nodes() if n.op.name == "Constant")
    victim.replace_all_uses_with(const(c, c.start_block, 123.0))
    assert print_graph(g) == text and not structurally_equal(g, c)


def _split_points(g: Graph) -> list[tuple[str, int]]:
    out = []
    for bi, b in enumerate(g.blocks):
        for ni, n in enumerate(b.members):
            if n.op.name not in ("Phi", "Proj", "Start", "End") and b is not g.end_block:
                out.append((b.name or str(bi), ni))
    return out


@pytest.mark.parametrize("name", sorted(seeds.ALL))
def test_split_block_keeps_semantics(name: str) -> None:
    build = seeds.ALL[name]
    want = run(build(), max_iterations=100_000)
    points = _split_points(build())
    assert len(points) > 5
    for block_name, index in points:
        g = build()
        block = next(b for b in g.blocks if b.name == block_name)
        node = list(block.members)[index]
        new = g.split_block(node, name="tail")
        assert node.block is new and new.pred_blocks == [block] and block.terminator is not None
        check_use_lists(g)
        verify(g)
        assert structurally_equal(parse(print_graph(g)), g)
        assert run(g, max_iterations=100_000) == want, (block_name, index)


def test_split_block_twice_and_at_a_phi() -> None:
    g = seeds.skip5_loop()
    header = find(g, "header")
    cmp = find(g, "loop_cond")
    tail = g.split_block(cmp)
    g.split_block(next(n for n in tail.members if n.op.name == "Cond"))
    verify(g)
    assert int(run(g)) == 31
    with pytest.raises(GraphError, match="at a Phi"):
        g.split_block(find(g, "i"))
    assert isinstance(header, Block)


def test_analysis_cache_is_invalidated_by_edits() -> None:
    from nexus.ir.analysis import dominators

    g = seeds.ifelse()
    d1 = dominators(g)
    assert dominators(g) is d1
    g.split_block(find(g, "d"))
    d2 = dominators(g)
    assert d2 is not d1 and len(d2.idom) == len(d1.idom) + 1


def test_block_input_edits_keep_phis_in_step() -> None:
    g = seeds.ifelse()
    join, phi = find(g, "join"), find(g, "c")
    j_else = join.input(1)
    join.remove_input(0)
    phi.remove_input(0)
    check_use_lists(g)
    # The then side now leads nowhere: route its Jmp into the join again, as the 2nd edge.
    j_then = find(g, "then").terminator  # type: ignore[attr-defined]
    join.append_input(j_then)
    phi.append_input(find(g, "c_then"))
    assert join.inputs == (j_else, j_then)
    check_use_lists(g)
    verify(g)
    assert float(run(g)) == 6.0


def test_split_block_keeps_late_phis_and_moves_dependent_members() -> None:
    # Members out of dataflow order: a Phi added last (as SSA construction does), the
    # Jmp created first, and a user created before the node it uses.
    g = Graph("g")
    entry = g.start_block
    one = const(g, entry, 1.0, "one")
    j0 = g.add("Jmp", [], entry)
    loop = g.new_block("loop", [j0])
    jmp = g.add("Jmp", [], loop)  # placeholder terminator, replaced below
    after_cond = g.new_block("after")
    x = g.add("Neg", [one], loop, name="x")
    early = g.add("Neg", [one], loop, name="early")
    late = g.add("Add", [x, one], loop, name="late")
    early.set_input(0, late)  # 'early' now uses a node created after it
    phi = g.add("Phi", [one], loop, name="p")
    x.set_input(0, phi)
    g.erase(jmp)
    loop.drop_inputs()
    loop.append_input(j0)
    lim = const(g, loop, -3.0, "lim")
    c = g.add("Cond", [g.add("Greater", [early, lim], loop)], loop)
    exit_f = g.add("Proj", [c], loop, {"num": 0})
    back = g.add("Proj", [c], loop, {"num": 1})
    loop.append_input(back)
    phi.append_input(early)
    after_cond.append_input(exit_f)
    r = g.add("Return", [early], after_cond)
    g.end_block.append_input(r)
    verify(g)
    want = run(g, max_iterations=1000)
    # Plain Python: p = 1; loop { early = -(-p + 1); if early > -3: p = early, again }
    p = 1.0
    while True:
        early_v = -((-p) + 1.0)
        if not early_v > -3.0:
            break
        p = early_v
    assert float(want) == early_v
    new = g.split_block(x)
    assert phi.block is loop and early.block is new and late.block is new
    check_use_lists(g)
    verify(g)
    assert float(run(g, max_iterations=1000)) == float(want) == -3.0


def test_erase_dead_refuses_without_changing_anything() -> None:
    g = seeds.ifelse()
    text = print_graph(g)
    then = find(g, "then")
    with pytest.raises(GraphError, match="still used by <Phi %c>, which is not erased with it"):
        g.erase_dead([then, *then.members])  # type: ignore[attr-defined]
    assert print_graph(g) == text
    check_use_lists(g)
    verify(g)
