"""CFG simplification, to a fixpoint:

- a ``Cond`` on a constant becomes a ``Jmp`` to the taken side (the other edge goes);
  so does a ``Cond`` whose exits enter the same block with equal Phi values;
- unreachable blocks are removed;
- trivial Phis (one value, or the Phi itself) are replaced by that value;
- a block whose only predecessor ends in a ``Jmp`` to it is merged into that predecessor;
- a block holding nothing but a ``Jmp`` is threaded: its predecessors jump straight on.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from nexus.ir.cfg import edge_of
from nexus.ir.graph import Graph
from nexus.ir.node import Block, Node
from nexus.passes.cfgutil import (
    add_edge,
    remove_edge,
    remove_trivial_phis,
    remove_unreachable,
)
from nexus.passes.manager import Pass


@dataclass(frozen=True)
class SimplifyCFG(Pass):
    """Fold constant branches, drop unreachable blocks and trivial Phis, merge and thread blocks."""

    name = "simplifycfg"
    preserves = frozenset({"no_unreachable"})

    max_rounds: int = 100

    def apply(self, g: Graph) -> dict[str, int]:
        stats = {"conds": 0, "unreachable": 0, "phis": 0, "merged": 0, "threaded": 0}
        for _ in range(self.max_rounds):
            before = dict(stats)
            stats["conds"] += fold_conds(g)
            stats["unreachable"] += remove_unreachable(g)
            stats["phis"] += remove_trivial_phis(g)
            stats["merged"] += merge_blocks(g)
            stats["threaded"] += thread_jumps(g)
            if stats == before:
                break
        return {k: v for k, v in stats.items() if v}


def _cond_exits(cond: Node) -> dict[int, Node]:
    return {u.attrs["num"]: u for u in cond.users if u.op.name == "Proj"}


def fold_conds(g: Graph) -> int:
    count = 0
    for b in list(g.blocks):
        term = b.terminator
        if term is None or term.op.name != "Cond":
            continue
        exits = _cond_exits(term)
        if set(exits) != {0, 1}:
            continue
        c = term.input(0)
        taken: int | None = None
        if c.op.name == "Constant" and np.asarray(c.attrs["value"]).size == 1:
            taken = int(bool(np.asarray(c.attrs["value"]).reshape(())))
        else:
            t0, t1 = edge_of(exits[0]), edge_of(exits[1])
            if t0 and t1 and t0[0] is t1[0] and all(p.input(t0[1]) is p.input(t1[1]) for p in t0[0].phis):
                taken = 1
        if taken is None:
            continue
        replace_cond_by_jmp(g, b, term, exits, taken)
        count += 1
    return count


def replace_cond_by_jmp(g: Graph, b: Block, cond: Node, exits: dict[int, Node], taken: int) -> None:
    """Keep only exit ``taken`` of ``cond``, as a Jmp; the other edge is removed."""
    keep, drop = exits[taken], exits[1 - taken]
    dropped = edge_of(drop)
    if dropped is not None:
        remove_edge(g, dropped[0], dropped[1])
    target = edge_of(keep)
    jmp = g.add("Jmp", [], b)
    if target is not None:
        target[0].set_input(target[1], jmp)
    g.erase(keep)
    g.erase(drop)
    g.erase(cond)
    g.touch()


def merge_blocks(g: Graph) -> int:
    """Merge each block into its only predecessor when that one jumps to it alone."""
    count = 0
    for b in list(g.blocks):
        if b.graph is not g or b is g.end_block or b is g.start_block or b.num_inputs != 1:
            continue
        jmp = b.input(0)
        pred = jmp.block
        if jmp.op.name != "Jmp" or pred is None or pred is b:
            continue
        for phi in b.phis:
            v = phi.input(0)
            if v is phi:
                continue
            phi.replace_all_uses_with(v)
            g.erase(phi)
        b.remove_input(0)
        g.erase(jmp)
        for n in list(b.members):
            g.move(n, pred)
        g.erase(b)
        count += 1
    return count


def thread_jumps(g: Graph) -> int:
    """Let the predecessors of a block that only jumps on enter its successor directly."""
    count = 0
    for b in list(g.blocks):
        if b.graph is not g or b is g.start_block or b is g.end_block or len(b.members) != 1:
            continue
        jmp = b.terminator
        if jmp is None or jmp.op.name != "Jmp" or not b.num_inputs:
            continue
        target = edge_of(jmp)
        if target is None or target[0] is b:
            continue
        succ, pos = target
        values = {phi: phi.input(pos) for phi in succ.phis}
        if any(v.block is b for v in values.values()):
            continue
        preds = list(b.inputs)
        b.drop_inputs()
        remove_edge(g, succ, pos)
        for x in preds:
            add_edge(g, succ, x, values)
        g.erase(jmp)
        g.erase(b)
        count += 1
    return count
