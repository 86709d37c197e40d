"""Common-subexpression elimination / global value numbering across blocks.

A preorder walk of the dominator tree keeps a scoped table of value keys (op, inputs,
attributes, type); a pure node whose key is already in scope is replaced by the earlier
node, which dominates it.  Commutative ops (``OpDef.commutative``) sort their inputs first.  Phis are merged only
with Phis of the same block (their inputs mean "per edge of this block").
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any

import numpy as np

from nexus.ir.analysis import dominators, node_order
from nexus.ir.cfg import is_argument
from nexus.ir.graph import Graph
from nexus.ir.node import Block, Node
from nexus.passes.cfgutil import is_movable
from nexus.passes.manager import Pass


def _attr_key(v: Any) -> Hashable:
    if isinstance(v, np.ndarray):
        return ("tensor", v.dtype.str, v.shape, v.tobytes())
    if isinstance(v, (list, tuple)):
        return tuple(_attr_key(x) for x in v)
    if isinstance(v, float) and v != v:
        return ("nan",)
    if isinstance(v, float):
        return ("float", v, np.signbit(v))  # 0.0 and -0.0 differ
    try:
        hash(v)
    except TypeError:
        return ("id", id(v))
    return (type(v).__name__, v)


def value_key(n: Node) -> Hashable:
    ids = [id(v) for v in n.inputs]
    if n.op.commutative:
        ids.sort()
    attrs = tuple(sorted((k, _attr_key(v)) for k, v in n.attrs.items()))
    block = id(n.block) if n.op.kind == "phi" else None
    return (n.op.name, tuple(ids), attrs, str(n.type), block)


@dataclass(frozen=True)
class CSE(Pass):
    """Merge equal pure computations when one dominates the other (GVN over the dom tree)."""

    name = "cse"
    requires = frozenset({"no_unreachable"})
    preserves = frozenset({"no_unreachable"})

    def apply(self, g: Graph) -> dict[str, int]:
        dom = dominators(g)
        children = dom.children()
        table: dict[Hashable, Node] = {}
        removed = 0
        # Iterative preorder walk; each frame undoes its own table entries on exit.
        stack: list[tuple[Block, list[Hashable] | None]] = [(g.start_block, None)]
        while stack:
            block, added = stack.pop()
            if added is not None:
                for k in added:
                    del table[k]
                continue
            mine: list[Hashable] = []
            for n in node_order(block):
                if n.graph is not g or not is_movable(n) or is_argument(n):
                    continue
                key = value_key(n)
                prev = table.get(key)
                if prev is not None and prev.graph is g:
                    n.replace_all_uses_with(prev)
                    g.erase(n)
                    removed += 1
                else:
                    table[key] = n
                    mine.append(key)
            stack.append((block, mine))
            for c in reversed(children.get(block, [])):
                stack.append((c, None))
        return {"merged": removed} if removed else {}
