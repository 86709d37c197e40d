"""Small CFG and node helpers shared by the passes.

Every helper that edits nodes directly calls ``g.touch()`` so cached analyses go stale.
"""

from __future__ import annotations

from nexus.ir.cfg import edge_of
from nexus.ir.cons import remove_trivial_phi
from nexus.ir.graph import Graph
from nexus.ir.node import Block, Node
from nexus.ir.types import compatible


def is_movable(n: Node) -> bool:
    """Pure dataflow with no ordering edges either way: may be folded, merged, hoisted,
    removed.  Effectful ops and anything ordered by ``deps`` stay where they are."""
    if not n.op.pure or n.op.kind not in ("data", "meta", "phi") or n.deps:
        return False
    if n.op.name == "Call" or isinstance(n, Block):
        return False
    return all(i >= 0 for _, i in n.uses)


def remove_edge(g: Graph, block: Block, i: int) -> None:
    """Drop predecessor ``i`` of ``block`` and the matching input of each of its Phis."""
    for phi in block.phis:
        phi.remove_input(i)
    block.remove_input(i)
    g.touch()


def add_edge(g: Graph, block: Block, x: Node, phi_values: dict[Node, Node]) -> None:
    """Add control value ``x`` as a new predecessor of ``block``; each Phi of the block
    gets ``phi_values[phi]``."""
    block.append_input(x)
    for phi in block.phis:
        phi.append_input(phi_values[phi])
    g.touch()


def reachable_blocks(g: Graph) -> set[Block]:
    seen = {g.start_block}
    stack = [g.start_block]
    while stack:
        b = stack.pop()
        for s in b.succs:
            if s not in seen and s.graph is g:
                seen.add(s)
                stack.append(s)
    return seen


def remove_unreachable(g: Graph) -> int:
    """Delete blocks the entry cannot reach (keeping the end block); returns how many."""
    live = reachable_blocks(g)
    dead = [b for b in g.blocks if b not in live and b is not g.end_block]
    if not dead:
        return 0
    dead_set = set(dead)
    for b in dead:
        for x, succ, _ in list(b.succ_edges):
            if succ not in dead_set:
                found = edge_of(x)
                assert found is not None
                remove_edge(g, found[0], found[1])
    doomed: list[Node] = []
    for b in dead:
        doomed.extend(b.members)
        doomed.append(b)
    # A dead block's value may still feed a Phi of a live block only through an edge we
    # just removed; anything else would have broken dominance already.
    g.erase_dead(doomed)
    return len(dead)


def remove_trivial_phis(g: Graph) -> int:
    """Replace Phis that select one value (or themselves) by that value, to a fixpoint
    (the SSA builder's routine, kept from changing a value's type)."""
    removed: dict[Node, Node] = {}
    for phi in [p for b in g.blocks for p in b.phis]:
        remove_trivial_phi(phi, removed, _same_kind)
    return len(removed)


def _same_kind(phi: Node, value: Node) -> bool:
    return compatible(value.type, phi.type)


def make_jmp(g: Graph, block: Block) -> Node:
    """A Jmp at the end of ``block`` (the caller wires it to its target)."""
    return g.add("Jmp", [], block)
