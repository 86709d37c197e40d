"""Run-time checks of what shape inference assumed.

Type rules report the dim equalities they take for granted without proof
(:class:`~nexus.ir.opdef.DimEq`: ``Add(f32[N], f32[M])`` takes N and M to broadcast,
``MatMul(f32[B, 2, 3], f32[C, 3, 4])`` takes B and C to).  ``insert_shape_checks`` guards
every one of them with a ``CheckDims`` node that the op depends on, so a violation fails
there, naming the op, its line and both dims, instead of deep inside a kernel or not at
all.  Facts that inference proved (the same symbol, a path fact ``N == M``) need none.
"""

from __future__ import annotations

from dataclasses import dataclass

from nexus.ir.analysis import node_order, reverse_postorder
from nexus.ir.graph import Graph
from nexus.ir.node import Block, Node, node_where
from nexus.ir.types import TensorType, format_dim
from nexus.passes.manager import Pass
from nexus.passes.shapes import assumed_dims


def insert_shape_checks(g: Graph) -> Graph:
    """Infer shapes, then guard every dim equality the type rules assumed with a
    CheckDims node that the op depends on.  Edits ``g`` in place and returns it."""
    assumed = assumed_dims(g)
    sizes: dict[tuple[Block, Node, int], Node] = {}

    def size(block: Block, v: Node, axis: int) -> Node:
        # One DimSize per value, axis and block (a block's checks may not use another's).
        key = (block, v, axis)
        if key not in sizes:
            sizes[key] = g.add("DimSize", [v], block, {"axis": axis})
        return sizes[key]

    for n in [m for b in reverse_postorder(g) for m in node_order(b) if m in assumed]:
        block = n.block
        assert block is not None
        for eq in assumed[n]:
            x, y = n.input(eq.i), n.input(eq.j)
            msg = (f"{node_where(n)} assumes dim {eq.a} of input {eq.i} ({_dim(x, eq.a)}) and dim {eq.b} of "
                   f"input {eq.j} ({_dim(y, eq.b)}) agree")
            check = g.add("CheckDims", [size(block, x, eq.a), size(block, y, eq.b)], block,
                          {"broadcast": eq.broadcast, "message": msg}, loc=n.loc)
            n.add_dep(check)
    g.touch()
    return g


def _dim(v: Node, axis: int) -> str:
    t = v.type
    assert isinstance(t, TensorType) and t.shape is not None
    return format_dim(t.shape[axis])


@dataclass(frozen=True)
class InsertShapeChecks(Pass):
    """Guard every dim equality shape inference assumed with a run-time CheckDims."""

    name = "shapechecks"
    preserves = frozenset({"no_unreachable"})  # adds nodes to blocks, never blocks or edges

    def apply(self, g: Graph) -> dict[str, int]:
        before = sum(1 for n in g.nodes() if n.op.name == "CheckDims")
        insert_shape_checks(g)
        added = sum(1 for n in g.nodes() if n.op.name == "CheckDims") - before
        return {"checks": added} if added else {}
