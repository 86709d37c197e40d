"""Shape arithmetic computed from the arguments' dims, not from the values it reads.

An exported model computes each Reshape's target at run time: ONNX files read
``Shape(x)`` of a hidden state, ``Gather`` one entry, ``Unsqueeze`` and ``Concat`` it with
constants, then spell Reshape's copy-a-zero rule as ``Where(Equal(t, 0), Shape(x), t)``
(BART: ~700 of its ~1000 nodes).  Shape inference (:mod:`nexus.passes.shapes`) knows each
such value in terms of the arguments' dims (``[batch, 32, -1, 32]``).
``materialize_shape_values`` replaces every integer value whose users are not all shape
arithmetic themselves by that expression, built from ``DimSize`` of the arguments: a
``Constant`` where the value is static, else ``Constant + mask * DimSize`` per dim symbol
(the python backend then memoises the few nodes left per batch size).  The arithmetic it
replaced is erased where nothing else reads it.

Sound only where the types are: a value is replaced only when no node it depends on had
its type rule *assume* a dim equality (:func:`nexus.passes.shapes.shape_values`), since a
broadcast the rule took for granted could give the value another size at run time.  Only
nodes whose value inference evaluated are erased: their kernels cannot fail (inference ran
the same computation); no other node is removed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import sympy

from nexus.ir.cfg import role
from nexus.ir.graph import Graph
from nexus.ir.node import Block, Node
from nexus.ir.types import TensorType, numpy_dtype
from nexus.passes.manager import Pass
from nexus.passes.shapes import ShapeInferenceError, shape_values

_MAX_ELEMENTS = 64


def reads_computed_shapes(g: Graph, least: int = 8) -> bool:
    """Whether ``g`` reads the shapes of at least ``least`` values other than its arguments
    (what an exported model's shape arithmetic starts from: worth the inference)."""
    count = 0
    for n in g.nodes():
        if n.op.shape_only and role(n.input(0)) not in ("argument", "constant"):
            count += 1
            if count >= least:
                return True
    return False


def materialize_shape_values(g: Graph) -> int:
    """Replace integer shape arithmetic by expressions of the arguments' dims (in place);
    the number of values replaced.  Infers shapes first (``g``'s types become exact);
    a graph inference rejects is left as it is."""
    try:
        values, assumed = shape_values(g)
    except ShapeInferenceError:
        return 0
    dims: dict[Any, tuple[Node, int]] = {}  # an argument's dim symbol -> (argument, axis)
    for a in g.args:
        if isinstance(a.type, TensorType) and a.type.shape:
            for axis, d in enumerate(a.type.shape):
                if isinstance(d, sympy.Symbol):
                    dims.setdefault(d, (a, axis))

    def known(n: Node) -> np.ndarray | None:
        v = values.get(n)
        t = n.type
        if v is None or n.op.name == "Constant" or not isinstance(t, TensorType) \
                or t.dtype not in ("i32", "i64") or v.size > _MAX_ELEMENTS:
            return None
        if not all(_linear(e, dims) is not None for e in v.reshape(-1)):
            return None
        return v

    clean: dict[Node, bool] = {}

    def trusted(n: Node) -> bool:
        """No node ``n`` depends on (itself included) assumed a dim equality: the nodes
        that did, and everything downstream of them in ``n``'s cone, are not."""
        if n in clean:
            return clean[n]
        cone: set[Node] = set()
        stack = [n]
        while stack:
            m = stack.pop()
            if m in cone or m in clean:
                continue
            cone.add(m)
            stack.extend(v for v in m.inputs if not isinstance(v, Block))
        bad = [m for m in cone if m in assumed
               or any(clean.get(v) is False for v in m.inputs if not isinstance(v, Block))]
        tainted = set(bad)
        while bad:
            for u in bad.pop().users:
                if u in cone and u not in tainted:
                    tainted.add(u)
                    bad.append(u)
        for m in cone:
            clean[m] = m not in tainted
        return clean[n]

    # Shape arithmetic: the nodes whose value inference followed (bools included: the
    # Equal of a Where); those of them that something else reads are replaced.
    shape_nodes = {n for n in g.nodes() if values.get(n) is not None and n.op.name != "Constant"}
    exports = [n for n in shape_nodes
               if known(n) is not None and not (n.op.name == "DimSize" and role(n.input(0)) == "argument")
               and any(isinstance(u, Block) or u not in shape_nodes for u in n.users)]
    sizes: dict[Any, Node] = {}
    replaced = 0
    for n in exports:
        if not trusted(n):
            continue
        value = values[n]
        assert isinstance(n.type, TensorType) and n.block is not None
        n.replace_all_uses_with(_expression(g, n.block, value, n.type.dtype, dims, sizes))
        replaced += 1
    if replaced:
        _erase_unused(g, shape_nodes)
        g.touch()
    return replaced


def _linear(e: Any, dims: dict[Any, tuple[Node, int]]) -> dict[Any, int] | None:
    """``e`` (an int or a dim expression) as ``{1: constant, symbol: coefficient}`` where it
    is linear in the arguments' dim symbols with int coefficients (``4*batch + 1``)."""
    if isinstance(e, int):
        return {1: e}
    terms = sympy.sympify(e).as_coefficients_dict()
    out: dict[Any, int] = {}
    for k, c in terms.items():
        if not (c.is_Integer and (k == 1 or k in dims)):
            return None
        out[1 if k == 1 else k] = int(c)
    return out


def _expression(g: Graph, block: Block, value: np.ndarray, dtype: str, dims: dict[Any, tuple[Node, int]],
                sizes: dict[Any, Node]) -> Node:
    """Nodes in ``block`` computing ``value`` (linear in the arguments' dims): the constant
    part, plus ``coefficients * DimSize`` for each dim symbol."""
    dt = numpy_dtype(dtype)
    terms = [_linear(e, dims) for e in value.reshape(-1)]
    assert all(t is not None for t in terms)
    base = np.array([t.get(1, 0) for t in terms if t is not None], dtype=dt).reshape(value.shape)
    out = g.add("Constant", [], block, {"value": base})
    symbols = dict.fromkeys(k for t in terms if t is not None for k in t if k != 1)
    for s in symbols:
        if s not in sizes:
            arg, axis = dims[s]
            sizes[s] = g.add("DimSize", [arg], g.start_block, {"axis": axis})
        size = sizes[s] if dtype == "i64" else g.add("Cast", [sizes[s]], block, {"to": dtype})
        coef = np.array([t.get(s, 0) for t in terms if t is not None], dtype=dt).reshape(value.shape)
        if value.shape == () and not base.any() and int(coef) == 1 and len(symbols) == 1:
            out = size  # the dim itself
            continue
        out = g.add("Add", [out, g.add("Mul", [g.add("Constant", [], block, {"value": coef}), size], block)], block)
    return out


def _erase_unused(g: Graph, erasable: set[Node]) -> None:
    """Erase the nodes of ``erasable`` (and the constants they read) that nothing reads."""
    todo = erasable | {v for n in erasable for v in n.inputs if not isinstance(v, Block) and v.op.name == "Constant"}
    dead: set[Node] = set()
    changed = True
    while changed:  # to a fixpoint: a chain dies from its end
        more = {n for n in todo - dead if all(u in dead for u in n.users)}
        dead |= more
        changed = bool(more)
    g.erase_dead(dead)


@dataclass(frozen=True)
class MaterializeShapeValues(Pass):
    """Shape arithmetic from the arguments' dims (see the module doc)."""

    name = "shape-values"

    def apply(self, g: Graph) -> dict[str, int]:
        replaced = materialize_shape_values(g)
        return {"replaced": replaced} if replaced else {}
