"""CFG analyses, one home each: the depth-first walk (reverse postorder, retreating
edges), the canonical order of blocks and of the nodes in a block, dominators (Cooper,
Harvey and Kennedy, "A Simple, Fast Dominance Algorithm", 2001) and SSA liveness.
Results that cost something are cached on the graph and recomputed after any mutation.

Successors are visited in exit order (a Cond's false exit before its true exit), so the
orders depend only on the graph's structure, never on the order nodes were created in:
a parsed graph orders its blocks as the printed one did.
"""

from __future__ import annotations

from dataclasses import dataclass

from nexus.ir.cfg import exits
from nexus.ir.graph import Graph
from nexus.ir.node import Block, Node
from nexus.ir.types import INT_DTYPES, TensorType, X


def successors(block: Block) -> list[Block]:
    """Blocks entered from ``block``, one entry per control edge, in exit order."""
    return [b for _, b, _ in block.succ_edges]


@dataclass
class DepthFirst:
    """A depth-first walk from the entry over the blocks of the graph."""

    postorder: list[Block]
    retreating: list[tuple[Block, Block]]  # (b, s): s was on the walk's stack when b reached it


def _depth_first(g: Graph) -> DepthFirst:
    seen = {g.start_block}
    on_stack = {g.start_block}
    post: list[Block] = []
    retreating: list[tuple[Block, Block]] = []
    stack = [(g.start_block, iter(successors(g.start_block)))]
    while stack:
        block, it = stack[-1]
        nxt = next(it, None)
        if nxt is None:
            stack.pop()
            on_stack.discard(block)
            post.append(block)
        elif nxt in on_stack:
            retreating.append((block, nxt))
        elif nxt not in seen and nxt.graph is g:
            seen.add(nxt)
            on_stack.add(nxt)
            stack.append((nxt, iter(successors(nxt))))
    return DepthFirst(post, retreating)


def depth_first(g: Graph) -> DepthFirst:
    """The depth-first walk of ``g`` (cached until the graph changes)."""
    result: DepthFirst = g.cached("depth_first", _depth_first)
    return result


def reverse_postorder(g: Graph) -> list[Block]:
    """Blocks reachable from the entry, in reverse postorder."""
    return depth_first(g).postorder[::-1]


def block_order(g: Graph) -> list[Block]:
    """The canonical block order: reverse postorder without the end block, then the
    unreachable blocks in creation order, the end block last."""
    rpo = reverse_postorder(g)
    reached = set(rpo)
    order = [b for b in rpo if b is not g.end_block]
    order += [b for b in g.blocks if b not in reached and b is not g.end_block]
    if g.end_block in g.blocks:
        order.append(g.end_block)
    return order


def node_order(block: Block) -> list[Node]:
    """The canonical order of a block: Phis first, then a stable topological order of the
    rest, the terminator (and a Cond's exits, by number) last."""
    members = list(block.members)
    phis = [n for n in members if n.op.kind == "phi"]
    term = block.terminator
    tail = [term] if term is not None else []
    if term is not None and term.op.forking:
        tail += [x for x in exits(term) if x.block is block]
    rest = [n for n in members if n.op.kind != "phi" and n not in tail]
    placed: set[Node] = set(phis)
    out: list[Node] = list(phis)
    pending = rest
    local = set(rest)
    while pending:
        progress = False
        nxt = []
        for n in pending:
            if all(d in placed or d not in local for d in (*n.inputs, *n.deps)):
                out.append(n)
                placed.add(n)
                progress = True
            else:
                nxt.append(n)
        if not progress:  # a cycle (an invalid graph): keep the members' order
            out.extend(nxt)
            break
        pending = nxt
    return out + tail


@dataclass
class DomTree:
    """Immediate dominators of the reachable blocks (the entry is its own idom)."""

    idom: dict[Block, Block]
    order: dict[Block, int]  # reverse-postorder index

    def reachable(self, b: Block) -> bool:
        return b in self.idom

    def dominates(self, a: Block, b: Block) -> bool:
        """Whether every path from the entry to ``b`` passes through ``a``."""
        if a not in self.idom or b not in self.idom:
            return False
        while True:
            if a is b:
                return True
            parent = self.idom[b]
            if parent is b:
                return False
            b = parent

    def children(self) -> dict[Block, list[Block]]:
        out: dict[Block, list[Block]] = {b: [] for b in self.idom}
        for b, p in self.idom.items():
            if p is not b:
                out[p].append(b)
        return out


def _compute_dominators(g: Graph) -> DomTree:
    rpo = reverse_postorder(g)
    order = {b: i for i, b in enumerate(rpo)}
    idom: dict[Block, Block] = {g.start_block: g.start_block}
    preds = {b: [p for p in b.pred_blocks if p in order] for b in rpo}

    def intersect(a: Block, b: Block) -> Block:
        while a is not b:
            while order[a] > order[b]:
                a = idom[a]
            while order[b] > order[a]:
                b = idom[b]
        return a

    changed = True
    while changed:
        changed = False
        for b in rpo[1:]:
            new = None
            for p in preds[b]:
                if p in idom:
                    new = p if new is None else intersect(p, new)
            if new is not None and idom.get(b) is not new:
                idom[b] = new
                changed = True
    return DomTree(idom, order)


def dominators(g: Graph) -> DomTree:
    result: DomTree = g.cached("dominators", _compute_dominators)
    return result


# --- liveness ------------------------------------------------------------------------------
@dataclass
class Liveness:
    """Values live on entry to and on exit from each reachable block.

    A value is used where it is *read*: as a data input, or as a Phi's input ``i`` at the
    end of the block that edge ``i`` leaves (not in the Phi's block).  Ordering edges
    (``deps``) read nothing and control values (X) are not values, so neither counts.
    """

    live_in: dict[Block, set[Node]]
    live_out: dict[Block, set[Node]]

    def is_live_out(self, v: Node, b: Block) -> bool:
        return v in self.live_out.get(b, set())


def _liveness(g: Graph) -> Liveness:
    rpo = reverse_postorder(g)
    gen: dict[Block, set[Node]] = {b: set() for b in rpo}
    defs: dict[Block, set[Node]] = {b: set(b.members) for b in rpo}
    phi_out: dict[Block, set[Node]] = {b: set() for b in rpo}  # Phi inputs read at b's end
    for b in rpo:
        for n in b.members:
            if n.op.kind == "phi":
                for i, v in enumerate(n.inputs):
                    pred = b.input(i).block
                    if pred in phi_out:
                        phi_out[pred].add(v)
                continue
            for v in n.inputs:
                if v.block is not b and v.type is not X:
                    gen[b].add(v)
    live_in = {b: set(gen[b]) for b in rpo}
    live_out: dict[Block, set[Node]] = {b: set() for b in rpo}
    succs = {b: [s for s in successors(b) if s in live_in] for b in rpo}
    changed = True
    while changed:
        changed = False
        for b in reversed(rpo):
            out = set(phi_out[b])
            for s in succs[b]:
                out |= live_in[s]
            new_in = gen[b] | (out - defs[b])
            if out != live_out[b] or new_in != live_in[b]:
                live_out[b], live_in[b] = out, new_in
                changed = True
    return Liveness(live_in, live_out)


def liveness(g: Graph) -> Liveness:
    """Live-in and live-out value sets per reachable block (cached until a mutation)."""
    result: Liveness = g.cached("liveness", _liveness)
    return result


def may_fail(n: Node) -> bool:
    """Whether running ``n`` on values its types allow could raise: the op says so
    (``OpDef.may_fail``, or ``may_fail_on_int`` with an integer result), or it combines
    inputs whose shapes are not all static (they may not broadcast at run time)."""
    op = n.op
    if op.may_fail:
        return True
    if op.may_fail_on_int and isinstance(n.type, TensorType) and n.type.dtype in INT_DTYPES:
        return True
    if len(n.inputs) > 1:
        for v in n.inputs:
            t = v.type
            if not isinstance(t, TensorType) or t.shape is None or not all(isinstance(d, int) for d in t.shape):
                return True
    return False
