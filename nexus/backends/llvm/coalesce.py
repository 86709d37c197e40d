"""Tensor Phis that can share one buffer, so that a loop-carried array is not copied on
every edge.

Each tensor Phi has a buffer that the edges into its block write.  An if/else inside a
loop that may update an array (``if c: x[j] = v``) merges into a second Phi; with a buffer
of its own, every iteration copies the array twice (into the merge Phi, and back into the
header's).  A Phi ``q`` takes the buffer of a Phi ``p`` of another block when

- each input of ``q`` is ``p``, a Phi already sharing ``p``'s buffer, or a chain of
  SetItems rooted at one of them (so with in-place SetItems every incoming value already
  is in the buffer, and no edge copies);
- no Phi of the class is live into ``q``'s block nor ``q`` into theirs (they never hold
  different contents at once: SSA values defined below a block are not live into it);
- no other Phi of those blocks reads a member of the class or ``q``'s inputs (an edge that
  wrote the shared buffer would change what such a Phi reads on the same edge).
"""

from __future__ import annotations

from nexus.ir.analysis import liveness, reverse_postorder
from nexus.ir.graph import Graph
from nexus.ir.node import Node
from nexus.ir.types import TensorType


def coalesce(g: Graph) -> dict[Node, Node]:
    """Phi -> the Phi whose buffer it shares (which keeps its own).  Blocks are visited in
    reverse postorder, so a merge of merges (``continue`` and ``if`` in one loop body)
    finds the Phis before it already sharing."""
    live = liveness(g)
    out: dict[Node, Node] = {}
    members: dict[Node, list[Node]] = {}

    def root(v: Node) -> Node:
        while True:
            if v.op.name == "SetItem":
                v = v.input(0)
            elif v in out:
                v = out[v]
            else:
                return v

    for blk in reverse_postorder(g):
        for q in blk.members:
            if q.op.kind != "phi" or not isinstance(q.type, TensorType) or not q.type.shape:
                continue
            roots = {root(v) for v in q.inputs}
            if len(roots) != 1:
                continue
            p = roots.pop()
            if p.op.kind != "phi" or p is q or p in out:
                continue
            cls = members.setdefault(p, [p])
            if any(r.block is blk or r in live.live_in.get(blk, set())
                   or q in live.live_in.get(r.block, set())  # type: ignore[arg-type]
                   for r in cls):
                continue
            family = set(cls) | {q} | set(q.inputs)
            others = [r for c in (*cls, q) for r in c.block.members  # type: ignore[union-attr]
                      if r.op.kind == "phi" and r not in family]
            if any(v in family for r in others for v in r.inputs):
                continue
            out[q] = p
            cls.append(q)
    return out
