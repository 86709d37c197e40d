"""Inlining of ``Call`` nodes: the callee's blocks are copied into the caller.

The call's block is split: nodes that (transitively) use the call, and the terminator,
move to a continuation block.  The head jumps to the copied callee entry, whose argument
Projs are replaced by the call's inputs; each callee ``Return`` becomes a ``Jmp`` to the
continuation, where Phis merge the results when there are several Returns.  Ordering
edges on or to the call become control order (head, callee, continuation), which is
stronger.  Recursive calls (direct or through other graphs) are not inlined.
"""

from __future__ import annotations

from dataclasses import dataclass

from nexus.ir.analysis import node_order
from nexus.ir.cfg import exits
from nexus.ir.graph import Graph
from nexus.ir.node import Block, Node
from nexus.passes.manager import Pass


@dataclass(frozen=True)
class Inline(Pass):
    """Inline Call nodes (non-recursive callees), up to a node budget."""

    name = "inline"
    preserves = frozenset()

    max_nodes: int = 20000  # stop growing the caller beyond this many nodes

    def apply(self, g: Graph) -> dict[str, int]:
        count = 0
        skipped: set[Node] = set()
        while g.num_nodes() <= self.max_nodes:
            call = next((n for n in g.nodes() if n.op.name == "Call" and n not in skipped), None)
            if call is None:
                break
            if not can_inline(g, call):
                skipped.add(call)
                continue
            inline_call(g, call)
            count += 1
        return {"inlined": count} if count else {}


def can_inline(g: Graph, call: Node) -> bool:
    callee: Graph = call.attrs["callee"]
    if callee is g or g in callee.callees() or not callee.returns:
        return False
    return len(call.inputs) == len(callee.args)


def _tail(block: Block, call: Node) -> list[Node]:
    """Nodes of ``block`` that must run after the call: its users (transitively, through
    data and deps) and the terminator with its exits."""
    tail: set[Node] = set()
    stack = [call]
    while stack:
        n = stack.pop()
        for u in n.users:
            if u.block is block and u not in tail and u.op.kind != "phi" and not isinstance(u, Block):
                tail.add(u)
                stack.append(u)
    term = block.terminator
    if term is not None:
        tail.add(term)
        tail.update(x for x in exits(term) if x.block is block)
    return [n for n in node_order(block) if n in tail]


def inline_call(g: Graph, call: Node) -> None:
    block = call.block
    assert block is not None
    callee: Graph = call.attrs["callee"]
    cont = g.new_block(f"{block.name or 'bb'}.cont")
    for n in _tail(block, call):
        g.move(n, cont)

    cg, _ = callee.clone()
    for cb in list(cg.blocks):
        if cb is cg.end_block:
            continue
        cb.graph = g
        cb.name = f"{callee.name}.{cb.name}"
        g.blocks[cb] = None
        for n in cb.members:
            n.graph = g
    for a, v in zip(cg.args, call.inputs):
        a.replace_all_uses_with(v)
        g.erase(a)
    for a in cg.args[len(call.inputs):]:
        g.erase(a)
    g.erase(cg.start)
    cg.start_block.append_input(g.add("Jmp", [], block))

    rets = list(cg.end_block.inputs)
    cg.end_block.drop_inputs()
    values: list[list[Node]] = []
    for r in rets:
        assert r.block is not None
        values.append(list(r.inputs))
        cont.append_input(g.add("Jmp", [], r.block))
        r.drop_inputs()
        g.erase(r)
    if len(values) == 1:
        results = values[0]
    else:
        results = [g.add("Phi", [vs[k] for vs in values], cont) for k in range(len(values[0]))]

    # Ordering edges to and from the call are implied by control order now.
    for user, i in list(call.uses):
        if i < 0:
            user.set_deps([d for d in user.deps if d is not call])
    call.set_deps([])
    if len(results) == 1:
        call.replace_all_uses_with(results[0])
    else:
        for p in [u for u in call.users if u.op.name == "Proj"]:
            p.replace_all_uses_with(results[p.attrs["num"]])
            g.erase(p)
    g.erase(call)
    g.touch()
