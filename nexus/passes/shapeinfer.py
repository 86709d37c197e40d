"""The ``shapes`` pass: re-infer every node's type over the CFG (see
:mod:`nexus.passes.shapes`), e.g. after a frontend left shapes unknown; constant folding
can then fold ``ShapeOf`` / ``DimSize`` of values whose shapes became static."""

from __future__ import annotations

from dataclasses import dataclass

from nexus.ir.graph import Graph
from nexus.passes.manager import Pass


@dataclass(frozen=True)
class InferShapes(Pass):
    """Recompute node types (symbolic shapes) from the argument types to a fixpoint."""

    name = "shapes"
    preserves = frozenset({"all"})

    def apply(self, g: Graph) -> dict[str, int]:
        from nexus.passes.shapes import infer_shapes

        before = {n: n.type for n in g.nodes()}
        infer_shapes(g)
        changed = sum(1 for n, t in before.items() if n.graph is g and n.type != t)
        if changed:
            g.touch()
        return {"retyped": changed} if changed else {}
