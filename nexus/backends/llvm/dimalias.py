"""Dims of tensor Phis, bound to the dims of what enters them (and TopK's k dim, when k
is the length of the axis: ``np.argsort``).

The type of a tensor Phi (a loop-carried array) may carry fresh symbols, since its shape
could change from one iteration to the next.  The llvm backend gives each tensor Phi one
buffer, allocated on entry, so it needs the shape fixed: every symbol of a Phi's type is
unified with the same dim of each incoming value.  A symbol may be unified with another
symbol or with an int; an expression (a growing array: ``n + 1``) or two different ints
make the graph unsupported.  The representative of each class is a symbol an argument
binds (or an int) when the class has one.
"""

from __future__ import annotations

from typing import Any

import sympy

from nexus.backends.llvm.dtypes import Unsupported
from nexus.ir.graph import Graph
from nexus.ir.types import TensorType


def phi_dim_aliases(g: Graph) -> dict[Any, Any]:
    """Symbol -> the dim (an argument's symbol or an int) it equals, for Phi symbols."""
    parent: dict[Any, Any] = {}

    def find(d: Any) -> Any:
        while d in parent:
            d = parent[d]
        return d

    bound = {d for t in g.arg_types if isinstance(t, TensorType) and t.shape for d in t.shape
             if isinstance(d, sympy.Symbol)}

    def union(a: Any, b: Any, where: str) -> None:
        ra, rb = find(a), find(b)
        if ra == rb:
            return
        if not isinstance(ra, sympy.Symbol) and not isinstance(rb, sympy.Symbol):
            raise Unsupported(f"{where}: dims {ra} and {rb} differ between iterations")
        if not isinstance(ra, sympy.Symbol) or ra in bound:
            ra, rb = rb, ra  # keep the int / the argument's symbol as the representative
        parent[ra] = rb

    for n in g.nodes():
        if n.op.name == "TopK":  # np.argsort: k = DimSize(x, axis), so k's dim is x's
            _topk_dims(n, union)
        if n.op.kind != "phi" or not isinstance(n.type, TensorType) or not n.type.shape:
            continue
        for v in n.inputs:
            t = v.type
            if not isinstance(t, TensorType) or t.shape is None or len(t.shape) != len(n.type.shape):
                raise Unsupported(f"Phi %{n.name or '?'}: an input of another rank")
            for a, b in zip(n.type.shape, t.shape):
                if a == b:
                    continue
                for d in (a, b):
                    if not isinstance(d, int | sympy.Symbol) and not sympy.sympify(d).is_Integer:
                        raise Unsupported(f"Phi %{n.name or '?'}: dim {d} changes between iterations")
                union(int(a) if not isinstance(a, sympy.Symbol) else a,
                      int(b) if not isinstance(b, sympy.Symbol) else b, f"Phi %{n.name or '?'}")
    return {s: find(s) for s in parent}


def _topk_dims(n: Any, union: Any) -> None:
    x, k = n.input(0), n.input(1)
    xt, out = x.type, n.type.elems[0] if hasattr(n.type, "elems") else None
    if k.op.name != "DimSize" or k.input(0) is not x or not isinstance(xt, TensorType) or not xt.shape:
        return
    if not isinstance(out, TensorType) or out.shape is None:
        return
    rank = len(xt.shape)
    axis, kaxis = int(n.attrs.get("axis", -1)), int(k.attrs["axis"])
    axis, kaxis = axis % rank, kaxis % rank
    if axis == kaxis and isinstance(out.shape[axis], sympy.Symbol) and out.shape[axis] != xt.shape[axis]:
        d = xt.shape[axis]
        if not isinstance(d, int | sympy.Symbol) and not sympy.sympify(d).is_Integer:
            # an expression (the length of a list grown in a loop, 2 * n): no one buffer size
            raise Unsupported(f"TopK %{n.name or '?'}: the sorted axis has length {d}")
        union(out.shape[axis], d if isinstance(d, sympy.Symbol) else int(d), f"TopK %{n.name or '?'}")
