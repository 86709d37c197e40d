"""The path of one run: how often each block was entered and each control edge taken.

The python backend runs the graph under :func:`nexus.backends.python.trace.follow`, which
reports every generated line that runs a node.  A block's nodes run in one pass of
increasing lines (each block is generated once), so the path is read off the sequence:

* a node of another block means control moved there;
* a node of the same block on a line at or before the previous one means the block was
  entered again (a loop of one block, or one through blocks that run no line);
* a Phi copy (a line that writes a Phi of block B, run at the edge into B) means an edge
  into B, whatever block runs next.

Blocks that run no line at all (an empty ``else`` that only jumps on, a latch without
Phis) are found between two blocks that do by the shortest path through such blocks in
the CFG.  Where two edges join the same two blocks (both exits of a Cond lead to one
block) the count goes to the first; :attr:`RunPath.ambiguous` says so.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from nexus.backends.python.interpreter import prepare
from nexus.backends.python.trace import follow
from nexus.ir.graph import Graph
from nexus.ir.node import Block, Node

MAX_LINES = 5_000_000  # a run longer than this is cut off (the page shows the path so far)


class _Stop(Exception):
    pass


@dataclass
class RunPath:
    """Counts of one run: blocks entered, control edges ``(block, input index)`` taken."""

    blocks: Counter[Block] = field(default_factory=Counter)
    edges: Counter[tuple[Block, int]] = field(default_factory=Counter)
    result: Any = None
    error: str | None = None  # why the run stopped early, if it did
    ambiguous: bool = False


def _visible(g: Graph) -> set[Block]:
    """Blocks whose entry the trace shows: they run a line, or have Phis (copied on entry)."""
    gen = prepare(g).variant(False, "off")
    return {n.block for n in gen.line_nodes.values() if n.block is not None}


def run_path(g: Graph, args: Sequence[Any] = (), *, max_lines: int = MAX_LINES) -> RunPath:
    """Run ``g`` on ``args`` with the python backend and return the path it took.  A run
    that fails (or passes ``max_lines`` traced lines) keeps the path up to there."""
    path = RunPath()
    visible = _visible(g)
    succ: dict[Block, list[tuple[Block, int]]] = {
        b: [(s, i) for _, s, i in b.succ_edges] for b in g.blocks}
    state: dict[str, Any] = {"cur": g.start_block, "line": -1, "into": None, "n": 0}
    path.blocks[g.start_block] += 1

    def move(dst: Block) -> None:
        hops = _hops(succ, visible, state["cur"], dst)
        if hops is None:  # not reachable through silent blocks: count the block, not the edge
            path.blocks[dst] += 1
        else:
            for b, i in hops:
                path.edges[b, i] += 1
                path.blocks[b] += 1
            if len(hops) == 1 and sum(s is dst for s, _ in succ[state["cur"]]) > 1:
                path.ambiguous = True
        state["cur"] = dst

    def visit(line: int, node: Node) -> None:
        state["n"] += 1
        if state["n"] > max_lines:
            raise _Stop
        b = node.block
        if b is None:
            return
        if node.op.kind == "phi":
            if state["into"] is not b:  # the first copy of an edge into b
                move(b)
                state["into"] = b
                state["line"] = -1
            return
        if b is not state["cur"] or (line <= state["line"] and state["into"] is not b):
            move(b)
        state["into"] = None
        state["line"] = line

    try:
        path.result = follow(g, args, visit)
        end = state["cur"].terminator
        if end is not None and end.op.name == "Return":  # and the edge into the end block
            for _, b, i in state["cur"].succ_edges:
                path.edges[b, i] += 1
                path.blocks[b] += 1
    except _Stop:
        path.error = f"stopped after {max_lines} traced lines"
    except Exception as e:  # noqa: BLE001  (the failure is shown on the page with the path so far)
        path.error = f"{type(e).__name__}: {e}"
    return path


def _hops(succ: dict[Block, list[tuple[Block, int]]], visible: set[Block], src: Block,
          dst: Block) -> list[tuple[Block, int]] | None:
    """The control edges ``(block entered, input index)`` of the shortest path from
    ``src`` to ``dst`` whose inner blocks run no traced line; None when there is none."""
    parent: dict[Block, tuple[Block, int]] = {}  # block -> (the block before it, edge index)
    queue: deque[Block] = deque([src])
    while queue:
        b = queue.popleft()
        for s, i in succ.get(b, []):
            if s is dst:
                hops = [(s, i)]
                while b is not src:
                    before, k = parent[b]
                    hops.append((b, k))
                    b = before
                return hops[::-1]
            if s not in visible and s not in parent and s is not src:
                parent[s] = (b, i)
                queue.append(s)
    return None
