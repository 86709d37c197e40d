"""Loop analysis: natural loops, their nesting, preheaders and exits, and a reducibility
check.  ``loop_forest(g)`` is cached on the graph until the next mutation.

A back edge is a CFG edge ``latch -> header`` where the header dominates the latch; the
natural loop of a header is every block that reaches one of its latches without passing
through the header.  A retreating edge (to a block on the DFS stack) whose target does
not dominate its source makes the CFG irreducible: such a cycle has several entries and
no natural loop describes it; lowering to XLA/ONNX needs reducible graphs.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from nexus.ir.analysis import DomTree, depth_first, dominators
from nexus.ir.graph import Graph
from nexus.ir.node import Block, Node


@dataclass(eq=False)
class Loop:
    """One natural loop."""

    header: Block
    blocks: set[Block]
    latches: list[Block]
    parent: Loop | None = None
    children: list[Loop] = field(default_factory=list)

    def __repr__(self) -> str:
        return f"<Loop ^{self.header.name}: {len(self.blocks)} blocks, depth {self.depth}>"

    @property
    def depth(self) -> int:
        d, p = 1, self.parent
        while p is not None:
            d, p = d + 1, p.parent
        return d

    def contains(self, b: Block) -> bool:
        return b in self.blocks

    def entry_edges(self) -> list[tuple[Node, int]]:
        """``(control value, input index of the header)`` for edges entering from outside."""
        return [(x, i) for i, x in enumerate(self.header.inputs) if x.block not in self.blocks]

    def exits(self) -> list[tuple[Node, Block]]:
        """``(control value, target block)`` for edges leaving the loop."""
        out = []
        for b in self.blocks:
            for x, succ, _ in b.succ_edges:
                if succ not in self.blocks:
                    out.append((x, succ))
        return out

    def exiting_blocks(self) -> list[Block]:
        return list(dict.fromkeys(x.block for x, _ in self.exits() if x.block is not None))

    def preheader(self) -> Block | None:
        """The single outside predecessor, if it jumps only to the header."""
        entries = self.entry_edges()
        if len(entries) != 1:
            return None
        x = entries[0][0]
        if x.op.name != "Jmp":
            return None
        return x.block


@dataclass
class LoopForest:
    """All natural loops of a graph, outermost first, and the irreducible edges found."""

    loops: list[Loop]
    innermost: dict[Block, Loop]
    irreducible_edges: list[tuple[Block, Block]]

    @property
    def reducible(self) -> bool:
        return not self.irreducible_edges

    @property
    def top_level(self) -> list[Loop]:
        return [lp for lp in self.loops if lp.parent is None]

    def loop_of(self, b: Block) -> Loop | None:
        return self.innermost.get(b)

    def postorder(self) -> list[Loop]:
        """Innermost loops first (the order LICM wants)."""
        return sorted(self.loops, key=lambda lp: -lp.depth)

    def describe(self) -> str:
        lines = []
        for lp in sorted(self.loops, key=lambda lp: (lp.depth, lp.header.name or "")):
            names = ", ".join(sorted(f"^{b.name}" for b in lp.blocks))
            lines.append(f"{'  ' * (lp.depth - 1)}loop ^{lp.header.name} (depth {lp.depth}): {names}")
        for a, b in self.irreducible_edges:
            lines.append(f"irreducible: edge ^{a.name} -> ^{b.name} enters a cycle that ^{b.name} does not dominate")
        return "\n".join(lines)


class IrreducibleError(ValueError):
    """A CFG with a multi-entry cycle where a reducible one is required."""


def _compute(g: Graph) -> LoopForest:
    dom = dominators(g)
    by_header: dict[Block, Loop] = {}
    for b in dom.idom:
        for s in b.succs:
            if s in dom.idom and dom.dominates(s, b):
                lp = by_header.get(s)
                if lp is None:
                    lp = by_header[s] = Loop(s, {s}, [])
                lp.latches.append(b)
                _grow(lp, b, dom)
    loops = sorted(by_header.values(), key=lambda lp: len(lp.blocks))
    innermost: dict[Block, Loop] = {}
    for lp in loops:  # smallest first: the first loop to claim a block is its innermost
        for b in lp.blocks:
            innermost.setdefault(b, lp)
    for lp in loops:
        for outer in loops:
            if outer is not lp and lp.header in outer.blocks and len(outer.blocks) > len(lp.blocks):
                lp.parent = outer
                break
        if lp.parent is not None:
            lp.parent.children.append(lp)
    ordered = sorted(loops, key=lambda lp: (lp.depth, dom.order.get(lp.header, 0)))
    return LoopForest(ordered, innermost, _irreducible_edges(g, dom))


def _grow(lp: Loop, latch: Block, dom: DomTree) -> None:
    stack = [latch]
    while stack:
        b = stack.pop()
        if b in lp.blocks and b is not latch:
            continue
        lp.blocks.add(b)
        if b is lp.header:
            continue
        for p in b.pred_blocks:
            if p not in lp.blocks and dom.reachable(p):
                stack.append(p)


def _irreducible_edges(g: Graph, dom: DomTree) -> list[tuple[Block, Block]]:
    """Retreating edges of the depth-first walk whose target does not dominate their
    source: edges into a cycle with more than one entry."""
    return [(b, s) for b, s in depth_first(g).retreating if not dom.dominates(s, b)]


def loop_forest(g: Graph) -> LoopForest:
    """The loops of ``g`` (cached until the graph changes)."""
    result: LoopForest = g.cached("loops", _compute)
    return result


def check_reducible(g: Graph) -> None:
    """Raise :class:`IrreducibleError` naming the offending edges if ``g`` is irreducible."""
    forest = loop_forest(g)
    if not forest.reducible:
        edges = ", ".join(f"^{a.name} -> ^{b.name}" for a, b in forest.irreducible_edges)
        raise IrreducibleError(f"graph @{g.name} has an irreducible CFG (multi-entry cycles via {edges})")
