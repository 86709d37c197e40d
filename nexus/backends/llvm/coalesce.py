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
    """Phi -> the Phi whose buffer it shares (the first of its class in reverse postorder,
    which keeps its own).  Classes merge until nothing changes, so a loop header's Phi,
    whose back edge brings a value of its own class, joins the class of what enters it
    (the array of an enclosing loop: no copy on entering or leaving the inner loop)."""
    live = liveness(g)
    order = [q for blk in reverse_postorder(g) for q in blk.members
             if q.op.kind == "phi" and isinstance(q.type, TensorType) and q.type.shape]
    rank = {q: i for i, q in enumerate(order)}
    cls: dict[Node, Node] = {q: q for q in order}  # member -> representative
    members: dict[Node, list[Node]] = {q: [q] for q in order}

    def root(v: Node) -> Node | None:
        while v.op.name == "SetItem":
            v = v.input(0)
        return cls.get(v)

    def compatible(a: list[Node], b: list[Node]) -> bool:
        for r1 in a:
            for r2 in b:
                assert r1.block is not None and r2.block is not None
                if (r1.block is r2.block or r1 in live.live_in.get(r2.block, set())
                        or r2 in live.live_in.get(r1.block, set())):
                    return False
        group = set(a) | set(b)
        blocks = {r.block for r in group}
        for blk in blocks:  # another Phi reading the class on an edge that writes the buffer
            for r in blk.members:  # type: ignore[union-attr]
                if r.op.kind == "phi" and r not in group and any(root(v) in group for v in r.inputs):
                    return False
        return True

    changed = True
    while changed:
        changed = False
        for q in order:
            rq = cls[q]
            if rq is not q:
                continue  # a class moves as a whole, through the Phi that founded it
            roots = {root(v) for v in q.inputs} - {rq}
            if len(roots) != 1:
                continue
            rp = roots.pop()
            if rp is None or not compatible(members[rp], members[rq]):
                continue
            for m in members.pop(rq):
                cls[m] = rp
                members[rp].append(m)
            changed = True
    out: dict[Node, Node] = {}
    for ms in members.values():
        first = min(ms, key=lambda m: rank[m])
        for m in ms:
            if m is not first:
                out[m] = first
    return out
