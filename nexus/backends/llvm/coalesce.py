"""Tensor Phis that can share one buffer, so that a loop-carried array is not copied on
every edge.

Each tensor Phi has a buffer that the edges into its block write.  An if/else inside a
loop that may update an array (``if c: x[j] = v``) merges into a second Phi; with a buffer
of its own, every iteration copies the array twice (into the merge Phi, and back into the
header's).  A Phi ``q`` takes the buffer of a Phi ``p`` of another block when

- each input of ``q`` is ``p`` or a chain of SetItems rooted at ``p`` (so with in-place
  SetItems every incoming value already is in the buffer, and no edge copies);
- ``p`` is not live into ``q``'s block and ``q`` not live into ``p``'s (they never hold
  different contents at once: SSA values defined below a block are not live into it);
- no other Phi of either block reads ``p``, ``q`` or a member of the chain (an edge that
  wrote the shared buffer would change what such a Phi reads on the same edge).
"""

from __future__ import annotations

from nexus.ir.analysis import liveness
from nexus.ir.graph import Graph
from nexus.ir.node import Node
from nexus.ir.types import TensorType


def _root(v: Node) -> Node:
    while v.op.name == "SetItem":
        v = v.input(0)
    return v


def coalesce(g: Graph) -> dict[Node, Node]:
    """Phi -> the Phi whose buffer it shares (which keeps its own)."""
    live = liveness(g)
    out: dict[Node, Node] = {}
    for q in g.nodes():
        if q.op.kind != "phi" or not isinstance(q.type, TensorType) or not q.type.shape:
            continue
        roots = {_root(v) for v in q.inputs}
        if len(roots) != 1:
            continue
        p = roots.pop()
        if p.op.kind != "phi" or p is q or p.block is q.block or p in out:
            continue
        assert p.block is not None and q.block is not None
        if p in live.live_in.get(q.block, set()) or q in live.live_in.get(p.block, set()):
            continue
        family = {p, q} | {v for v in q.inputs}
        others = [r for blk in (p.block, q.block) for r in blk.members
                  if r.op.kind == "phi" and r not in (p, q)]
        if any(v in family for r in others for v in r.inputs):
            continue
        out[q] = p
    return out
