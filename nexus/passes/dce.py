"""Dead code elimination: unreachable blocks, then every pure node no live node needs.

Liveness starts from what must happen: control nodes (terminators, Start, End, the Cond
exits blocks use), effectful ops (``OpDef.pure`` false), nodes ordered by ``deps``, and
the graph's arguments; it flows backwards along data and ``deps`` edges.  Everything else,
dead Phi cycles included, is removed.
"""

from __future__ import annotations

from dataclasses import dataclass

from nexus.ir.cfg import role
from nexus.ir.graph import Graph
from nexus.ir.node import Block, Node
from nexus.passes.cfgutil import is_movable, remove_unreachable
from nexus.passes.manager import Pass


@dataclass(frozen=True)
class DCE(Pass):
    """Remove unreachable blocks and pure nodes whose results nothing live uses."""

    name = "dce"
    preserves = frozenset({"no_unreachable"})

    def apply(self, g: Graph) -> dict[str, int]:
        blocks = remove_unreachable(g)
        nodes = remove_dead_nodes(g)
        return {k: v for k, v in {"blocks": blocks, "nodes": nodes}.items() if v}


def _is_root(n: Node) -> bool:
    if not is_movable(n):
        return True
    # Exits are control flow; the arguments are the graph's signature.
    if role(n) in ("argument", "exit"):
        return True
    return any(isinstance(u, Block) for u in n.users)


def remove_dead_nodes(g: Graph) -> int:
    live: set[Node] = set()
    stack = [n for n in g.nodes() if _is_root(n)]
    live.update(stack)
    while stack:
        n = stack.pop()
        for v in (*n.inputs, *n.deps):
            if v not in live and not isinstance(v, Block):
                live.add(v)
                stack.append(v)
    dead = [n for n in g.nodes() if n not in live]
    if dead:
        g.erase_dead(dead)
    return len(dead)
