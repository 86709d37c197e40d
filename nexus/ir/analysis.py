"""CFG analyses: predecessor/successor blocks, reverse postorder, dominators (Cooper,
Harvey and Kennedy, "A Simple, Fast Dominance Algorithm", 2001).  Results are cached on
the graph and recomputed after any mutation."""

from __future__ import annotations

from dataclasses import dataclass

from nexus.ir.graph import Graph
from nexus.ir.node import Block


def successors(block: Block) -> list[Block]:
    """Blocks entered from ``block``, one entry per control edge, in exit order."""
    return [b for _, b, _ in block.succ_edges]


def reverse_postorder(g: Graph) -> list[Block]:
    """Blocks reachable from the entry, in reverse postorder."""
    seen = {g.start_block}
    post: list[Block] = []
    stack = [(g.start_block, iter(successors(g.start_block)))]
    while stack:
        block, it = stack[-1]
        nxt = next(it, None)
        if nxt is None:
            stack.pop()
            post.append(block)
        elif nxt not in seen and nxt.graph is g:
            seen.add(nxt)
            stack.append((nxt, iter(successors(nxt))))
    return post[::-1]


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
