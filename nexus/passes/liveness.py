"""SSA liveness: which values are live on entry to and exit from each block.

A Phi's input ``i`` is used at the end of the block that edge ``i`` leaves, not in the
Phi's block.  Data inputs and ``deps`` both count as uses.  Cached on the graph.
"""

from __future__ import annotations

from dataclasses import dataclass

from nexus.ir.analysis import reverse_postorder
from nexus.ir.graph import Graph
from nexus.ir.node import Block, Node
from nexus.ir.types import X


@dataclass
class Liveness:
    live_in: dict[Block, set[Node]]
    live_out: dict[Block, set[Node]]

    def is_live_out(self, v: Node, b: Block) -> bool:
        return v in self.live_out.get(b, set())


def _compute(g: Graph) -> Liveness:
    rpo = reverse_postorder(g)
    gen: dict[Block, set[Node]] = {b: set() for b in rpo}
    defs: dict[Block, set[Node]] = {b: set(b.members) for b in rpo}
    phi_out: dict[Block, set[Node]] = {b: set() for b in rpo}  # Phi inputs used at b's end
    for b in rpo:
        for n in b.members:
            if n.op.kind == "phi":
                for i, v in enumerate(n.inputs):
                    pred = b.input(i).block
                    if pred in phi_out:
                        phi_out[pred].add(v)
                continue
            for v in (*n.inputs, *n.deps):
                if v.block is not b and v.type != X:
                    gen[b].add(v)
    live_in = {b: set(gen[b]) for b in rpo}
    live_out: dict[Block, set[Node]] = {b: set() for b in rpo}
    changed = True
    while changed:
        changed = False
        for b in reversed(rpo):
            out = set(phi_out[b])
            for s in b.succs:
                if s in live_in:
                    out |= {v for v in live_in[s] if not (v.op.kind == "phi" and v.block is s)}
            new_in = gen[b] | (out - defs[b])
            if out != live_out[b] or new_in != live_in[b]:
                live_out[b], live_in[b] = out, new_in
                changed = True
    return Liveness(live_in, live_out)


def liveness(g: Graph) -> Liveness:
    """Live-in and live-out value sets per reachable block (cached until a mutation)."""
    result: Liveness = g.cached("liveness", _compute)
    return result
