"""Loop-invariant code motion for pure ops, into a loop preheader.

Loops are handled innermost first.  Each gets a preheader (a block that only jumps to the
header, made when missing: the header's outside edges are rerouted through it, with Phis
for header Phis whose entry values differ).  A pure node without ordering edges whose
inputs are all defined outside the loop (or already hoisted) moves to the preheader.

The preheader runs whenever the loop is entered, but a body block may not run at all
(zero trips, an untaken branch).  So an op that can fail at run time (``OpDef.may_fail``:
Gather, Reshape...; ``OpDef.may_fail_on_int``: integer division; broadcasting of shapes
not known statically) is hoisted only from blocks that dominate every exit of the loop,
i.e. that run each time the loop is entered.  ``speculate=false`` applies that rule to every op.
"""

from __future__ import annotations

from dataclasses import dataclass

from nexus.ir.analysis import dominators, may_fail, node_order, reverse_postorder
from nexus.ir.graph import Graph
from nexus.ir.node import Block, Node
from nexus.passes.cfgutil import add_edge, is_movable, remove_edge
from nexus.passes.loops import Loop, loop_forest
from nexus.passes.manager import Pass


def ensure_preheader(g: Graph, loop: Loop) -> tuple[Block, bool]:
    """The loop's preheader, made if missing; and whether one was made."""
    ph = loop.preheader()
    if ph is not None:
        return ph, False
    header = loop.header
    entries = loop.entry_edges()
    idx = [i for _, i in entries]
    entry_values = {phi: [phi.input(i) for i in idx] for phi in header.phis}
    ph = g.new_block(f"{header.name or 'loop'}.preheader")
    for i in sorted(idx, reverse=True):
        remove_edge(g, header, i)
    for x, _ in entries:
        ph.append_input(x)
    phi_values: dict[Node, Node] = {}
    for phi, vals in entry_values.items():
        if all(v is vals[0] for v in vals):
            phi_values[phi] = vals[0]
        else:
            phi_values[phi] = g.add("Phi", vals, ph, type=phi.type, name=phi.name)
    jmp = g.add("Jmp", [], ph)
    add_edge(g, header, jmp, phi_values)
    return ph, True


@dataclass(frozen=True)
class LICM(Pass):
    """Hoist loop-invariant pure computations into loop preheaders."""

    name = "licm"
    requires = frozenset({"no_unreachable"})
    preserves = frozenset({"no_unreachable"})

    speculate: bool = True  # hoist ops that cannot fail out of conditionally run blocks

    def apply(self, g: Graph) -> dict[str, int]:
        hoisted = made = 0
        headers = [lp.header for lp in loop_forest(g).postorder()]
        for header in headers:
            loop = next((lp for lp in loop_forest(g).loops if lp.header is header), None)
            if loop is None:
                continue
            candidates = self.invariants(g, loop)
            if not candidates:
                continue
            ph, new = ensure_preheader(g, loop)
            made += new
            for n in candidates:
                g.move(n, ph)
            hoisted += len(candidates)
        return {k: v for k, v in {"hoisted": hoisted, "preheaders": made}.items() if v}

    def invariants(self, g: Graph, loop: Loop) -> list[Node]:
        dom = dominators(g)
        exiting = loop.exiting_blocks()
        out: list[Node] = []
        chosen: set[Node] = set()
        for b in reverse_postorder(g):
            if b not in loop.blocks:
                continue
            # With no exits (an endless loop) only the header surely runs.
            always = all(dom.dominates(b, e) for e in exiting) if exiting else b is loop.header
            for n in node_order(b):
                if not is_movable(n) or n.op.kind != "data":
                    continue
                if not all(v.block not in loop.blocks or v in chosen for v in n.inputs):
                    continue
                if not always and (not self.speculate or may_fail(n)):
                    continue
                out.append(n)
                chosen.add(n)
        return out
