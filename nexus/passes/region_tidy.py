"""Tidying a region tree after structurizing: drop the outputs, carried values and
results nothing reads (the structurizer makes a flag and a value for every pending jump,
whether or not a guard or a Phi needs it), drop Ifs left with nothing to do, and give a
merged value the name of the Phi it feeds instead of binding one to the other.

Data nodes are never dropped: they may have effects, and a region tree runs every node
the CFG ran.
"""

from __future__ import annotations

from collections.abc import Iterator

from nexus.ir.node import Node
from nexus.passes.regions import Bind, If, Loop, Merge, Name, RegionTree, Result, Seq, Value, Var, walk


def tidy(tree: RegionTree) -> None:
    """Tidy ``tree`` in place."""
    while _sweep(tree.body, _live(tree)):
        pass
    _fold_binds(tree)


# --- liveness ------------------------------------------------------------------------------------
def _definitions(tree: RegionTree) -> dict[Name, list[Value]]:
    """For each name bound by a region item, the values its binding reads."""
    defs: dict[Name, list[Value]] = {}
    for item in walk(tree.body):
        for name, reads in _binds(item):
            defs.setdefault(name, []).extend(reads)
    return defs


def _binds(item: object) -> Iterator[tuple[Name, list[Value]]]:
    if isinstance(item, Bind):
        yield item.target, [item.value]
    elif isinstance(item, If):
        for m in item.outputs:
            yield m.name, [m.then_value, m.else_value]
    elif isinstance(item, Loop):
        for c in item.carried:
            yield c.var, [c.init, c.next]
        for r in item.results:
            yield r.name, [r.var]


def _live(tree: RegionTree) -> set[object]:
    """Names some node, guard, loop test or the graph's results read, transitively."""
    roots: list[object] = list(tree.results)
    for item in walk(tree.body):
        if isinstance(item, If):
            roots.append(item.cond)
        elif isinstance(item, Loop):
            roots.append(item.test)
        elif not isinstance(item, Bind):
            roots.extend(item.inputs)
            roots.extend(item.deps)
    defs = _definitions(tree)
    live: set[object] = set()
    while roots:
        v = roots.pop()
        if v in live:
            continue
        live.add(v)
        if isinstance(v, (Node, Var)):
            roots.extend(defs.get(v, []))
    return live


def _sweep(seq: Seq, live: set[object]) -> bool:
    """Drop dead bindings and empty Ifs; whether anything changed."""
    changed = False
    kept = []
    for item in seq.items:
        if isinstance(item, Bind) and item.target not in live:
            changed = True
            continue
        if isinstance(item, If):
            changed |= _sweep(item.then, live) | _sweep(item.orelse, live)
            outputs = [m for m in item.outputs if m.name in live]
            changed |= len(outputs) != len(item.outputs)
            item.outputs = outputs
            if not (item.then.items or item.orelse.items or outputs):
                changed = True
                continue
        elif isinstance(item, Loop):
            changed |= _sweep(item.body, live)
            carried = [c for c in item.carried if c.var in live]
            results = [r for r in item.results if r.name in live]
            changed |= len(carried) != len(item.carried) or len(results) != len(item.results)
            item.carried, item.results = carried, results
        kept.append(item)
    seq.items = kept
    return changed


# --- naming merged values after their Phis ----------------------------------------------------------
def _fold_binds(tree: RegionTree) -> None:
    """``If -> (%v)`` then ``%phi := %v`` becomes ``If -> (%phi)`` when nothing else reads
    ``%v`` (likewise for a loop's results)."""
    uses: dict[Var, int] = {}
    for v in _reads(tree):
        if isinstance(v, Var):
            uses[v] = uses.get(v, 0) + 1
    definers: dict[Var, Merge | Result] = {}
    for item in walk(tree.body):
        if isinstance(item, If):
            definers.update((m.name, m) for m in item.outputs if isinstance(m.name, Var))
        elif isinstance(item, Loop):
            definers.update((r.name, r) for r in item.results if isinstance(r.name, Var))
    _fold(tree.body, uses, definers)


def _fold(seq: Seq, uses: dict[Var, int], definers: dict[Var, Merge | Result]) -> None:
    kept = []
    for item in seq.items:
        if isinstance(item, Bind) and isinstance(item.value, Var) and uses.get(item.value) == 1:
            definer = definers.get(item.value)
            if definer is not None:
                definer.name = item.target
                continue
        if isinstance(item, If):
            _fold(item.then, uses, definers)
            _fold(item.orelse, uses, definers)
        elif isinstance(item, Loop):
            _fold(item.body, uses, definers)
        kept.append(item)
    seq.items = kept


def _reads(tree: RegionTree) -> Iterator[Value]:
    """Every operand position of the tree's region items (data nodes read names only)."""
    yield from tree.results
    for item in walk(tree.body):
        if isinstance(item, Bind):
            yield item.value
        elif isinstance(item, If):
            yield item.cond
            for m in item.outputs:
                yield m.then_value
                yield m.else_value
        elif isinstance(item, Loop):
            yield item.test
            for c in item.carried:
                yield c.init
                yield c.next
            for r in item.results:
                yield r.var

