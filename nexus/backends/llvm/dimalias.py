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

import math
import operator
from typing import Any

import numpy as np
import sympy

from nexus.backends.llvm.dtypes import Unsupported
from nexus.ir.analysis import node_order, reverse_postorder
from nexus.ir.graph import Graph
from nexus.ir.node import Node
from nexus.ir.types import TensorType


def phi_dim_aliases(g: Graph) -> dict[Any, Any]:
    """Symbol -> the dim (an argument's symbol or an int) it equals, for Phi symbols."""
    aliases: dict[Any, Any] = g.cached("llvm.phi_dims", _phi_classes)[0]
    return aliases


def phi_dim_checks(g: Graph) -> list[tuple[Any, Any, Node]]:
    """``(a, b, phi)``: two dims that arguments bind (symbols, or an int) which a Phi's one
    buffer takes to be equal (``h = U @ h`` carries ``h``'s dim in and ``U``'s out); the
    call checks them on entry (Python would run on with another size: the backend refuses
    the call there rather than read past a buffer)."""
    checks: list[tuple[Any, Any, Node]] = g.cached("llvm.phi_dims", _phi_classes)[1]
    return checks


def _phi_classes(g: Graph) -> tuple[dict[Any, Any], list[tuple[Any, Any, Node]]]:
    parent: dict[Any, Any] = {}
    checks: list[tuple[Any, Any, Node]] = []

    def find(d: Any) -> Any:
        while d in parent:
            d = parent[d]
        return d

    bound = {d for t in g.arg_types if isinstance(t, TensorType) and t.shape for d in t.shape
             if isinstance(d, sympy.Symbol)}

    def union(a: Any, b: Any, what: str, phi: Node | None = None) -> None:
        ra, rb = find(a), find(b)
        if ra == rb:
            return
        if not isinstance(ra, sympy.Symbol) and not isinstance(rb, sympy.Symbol):
            raise Unsupported(f"{what}: dims {ra} and {rb} differ between iterations")
        if phi is not None and (not isinstance(ra, sympy.Symbol) or ra in bound) \
                and (not isinstance(rb, sympy.Symbol) or rb in bound):
            checks.append((ra, rb, phi))  # two sizes the call gives: equal only if it says so
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
                      int(b) if not isinstance(b, sympy.Symbol) else b, f"Phi %{n.name or '?'}", n)
    return {s: find(s) for s in parent}, checks


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


# --- dims computed from shapes --------------------------------------------------------------
# An imported model computes shapes at run time: ``Reshape(x, Concat(Unsqueeze(Gather(
# ShapeOf(h), 0)), [64, 2, 64]))``, ``Where(Equal(s, -1), ones, s)``...  The importer's
# types give such a result fresh symbols (``f32[s111, s112, s113, s114]``), which no
# argument binds.  Here the small integer vectors of those chains are evaluated on
# symbolic dims (``[batch, 64, 2, 64]``), so that a dim an op computes from them is known
# as an expression of the arguments' dims: bound on entry like an argument's, a result
# sized before the call.  The ops' rules still compute their dims from the values at run
# time; the emitter checks that they agree (nexus.backends.llvm.emit).

MAX_VECTOR = 64  # longer integer vectors are data, not shapes


def shape_dim_aliases(g: Graph, known: dict[Any, Any] | None = None) -> dict[Any, Any]:
    """Symbol -> the expression of the arguments' dims it equals, for the symbols of types
    that shape ops compute (Reshape, ConstantOfShape, Expand, Slice) from integer vectors
    known symbolically.  ``known``: aliases found before (the Phis')."""
    bound = {d for t in g.arg_types if isinstance(t, TensorType) and t.shape for d in t.shape
             if isinstance(d, sympy.Symbol)}
    alias: dict[Any, Any] = {s: sympy.sympify(r) for s, r in (known or {}).items()
                             if sympy.sympify(r).free_symbols <= bound}
    vals: dict[Any, list[Any]] = {}

    def dim(d: Any) -> Any:
        e = sympy.sympify(sympy.sympify(d).xreplace(alias))
        return e if e.free_symbols <= bound else None

    for blk in reverse_postorder(g):
        for n in node_order(blk):
            t = n.type
            if isinstance(t, TensorType) and t.shape:
                computed = _computed_dims(n, vals, dim)
                for d, c in zip(t.shape, computed or ()):
                    if (c is not None and isinstance(d, sympy.Symbol) and d not in bound and d not in alias
                            and _polynomial(c)):
                        alias[d] = c
            try:
                v = _value(n, vals, dim)
            except (TypeError, ValueError, IndexError, KeyError):
                v = None
            if v is not None and len(v) <= MAX_VECTOR:
                vals[n] = v
    return {s: int(e) if e.is_Integer else e for s, e in alias.items() if known is None or s not in known}


def dim_aliases(g: Graph) -> dict[Any, Any]:
    """Every alias of a dim the backend can bind on entry: the Phis' (an argument's symbol or
    an int) and the dims computed from shapes (an expression of the arguments' dims)."""
    phis = phi_dim_aliases(g)
    return {**phis, **shape_dim_aliases(g, phis)}


def _polynomial(e: Any) -> bool:
    e = sympy.sympify(e)
    if e.is_Integer:
        return int(e) >= 0
    return bool(e.is_Symbol or ((e.is_Add or e.is_Mul) and all(_polynomial(a) or a.is_Integer for a in e.args)))


def _ints(v: list[Any] | None) -> bool:
    return v is not None and all(isinstance(x, sympy.Integer) for x in v)


def _computed_dims(n: Any, vals: dict[Any, list[Any]], dim: Any) -> list[Any] | None:
    """The dims of ``n``'s result as expressions of the arguments' dims (None where one is
    not known), for the shape ops whose dims come from a vector's values."""
    op = n.op.name
    x = n.input(0) if n.inputs else None
    xt = x.type if x is not None else None
    xdims = [dim(d) for d in xt.shape] if isinstance(xt, TensorType) and xt.shape is not None else None
    if op == "ConstantOfShape":
        return vals.get(n.input(0))
    if op == "Reshape" and xdims is not None:
        target = vals.get(n.input(1))
        if target is None or any(v is None or isinstance(v, bool) for v in target):
            return None
        holes = [i for i, v in enumerate(target) if v == -1]
        if len(holes) > 1 or any(v.is_Integer and int(v) < -1 for v in target):
            return None
        out = list(target)
        if holes:
            if any(d is None for d in xdims):
                return None
            rest = sympy.Mul(*[v for i, v in enumerate(target) if i != holes[0]])
            solved = sympy.cancel(sympy.Mul(*xdims) / rest) if rest != 0 else None
            out[holes[0]] = solved if solved is not None and sympy.fraction(solved)[1] == 1 else None
        return out
    if op == "Expand" and xdims is not None:
        shape = vals.get(n.input(1))
        if shape is None:
            return None
        rank = max(len(xdims), len(shape))
        xs = [sympy.Integer(1)] * (rank - len(xdims)) + xdims
        ss: list[Any] = [sympy.Integer(1)] * (rank - len(shape)) + list(shape)
        out = []
        for a, s in zip(xs, ss):
            if s is None or isinstance(s, bool):
                out.append(None)
            elif s == 1:
                out.append(a)
            elif a is not None and (a == 1 or a == s):
                out.append(s)
            else:
                out.append(None)
        return out
    if op == "Slice" and xdims is not None:
        starts, ends = vals.get(n.input(1)), vals.get(n.input(2))
        axes = vals.get(n.input(3)) if len(n.inputs) > 3 else None
        steps = vals.get(n.input(4)) if len(n.inputs) > 4 else None
        if not (_ints(starts) and _ints(ends)) or (len(n.inputs) > 3 and not _ints(axes)) or \
                (len(n.inputs) > 4 and not _ints(steps)):
            return None
        assert starts is not None and ends is not None
        axes_ = [int(a) for a in axes] if axes is not None else list(range(len(starts)))
        steps_ = [int(s) for s in steps] if steps is not None else [1] * len(axes_)
        out = list(xdims)
        for a, s, e, st in zip(axes_, starts, ends, steps_):
            a %= len(xdims)
            d = xdims[a]
            if d is None or not d.is_Integer:
                out[a] = None  # a symbolic dim clamps to Min / Max: left to the run time
                continue
            out[a] = sympy.Integer(len(range(int(d))[slice(int(s), int(e), st)]))
        return out
    return None


def _broadcast(a: list[Any], b: list[Any]) -> tuple[list[Any], list[Any]] | None:
    if len(a) == len(b):
        return a, b
    if len(a) == 1:
        return a * len(b), b
    if len(b) == 1:
        return a, b * len(a)
    return None


def _divmod(a: Any, b: Any, op: str) -> Any:
    """Integer Div (truncated, as the Div op) or Mod (Python's) of ``a`` by the int ``b``:
    None where ``a`` is symbolic and not a multiple of ``b`` (the result would be a floor)."""
    d = int(b)
    if d == 0:
        return None
    if a.is_Integer:
        x = int(a)
        q = abs(x) // abs(d) * (1 if (x < 0) == (d < 0) else -1)
        return sympy.Integer(q if op == "Div" else x % d)
    q = sympy.expand(a / d)
    if not all(t.as_coeff_Mul()[0].is_Integer for t in sympy.Add.make_args(q)):
        return None  # not an exact multiple: truncation and floor differ with the sign
    return q if op == "Div" else sympy.Integer(0)


def _equal(a: Any, b: Any) -> bool | None:
    if a is None or b is None or isinstance(a, bool) or isinstance(b, bool):
        return None
    z = (sympy.sympify(a) - sympy.sympify(b)).is_zero  # dims are non-negative integers
    return None if z is None else bool(z)


def _value(n: Any, vals: dict[Any, list[Any]], dim: Any) -> list[Any] | None:
    """The elements of ``n``'s value where it is a small integer (or bool) vector or scalar
    known as expressions of the arguments' dims, else None."""
    op = n.op.name
    t = n.type
    if not isinstance(t, TensorType) or t.dtype not in ("i64", "i32", "bool") or t.shape is None or len(t.shape) > 1:
        return None
    ins = [vals.get(v) for v in n.inputs]
    if op == "Constant":
        arr = np.asarray(n.attrs["value"])
        if arr.size > MAX_VECTOR:
            return None
        return [bool(x) if arr.dtype.kind == "b" else sympy.Integer(int(x)) for x in arr.reshape(-1)]
    if op == "ShapeOf":
        xt = n.input(0).type
        if not isinstance(xt, TensorType) or xt.shape is None or n.attrs.get("start") or n.attrs.get("end"):
            return None
        dims = [dim(d) for d in xt.shape]
        return None if any(d is None for d in dims) else dims
    if op == "DimSize":
        xt = n.input(0).type
        if not isinstance(xt, TensorType) or not xt.shape:
            return None
        d = dim(xt.shape[int(n.attrs["axis"]) % len(xt.shape)])
        return None if d is None else [d]
    if any(v is None for v in ins):
        return None
    if op in ("Identity", "Unsqueeze", "Squeeze", "Reshape", "Flatten") or (op == "Cast" and t.dtype != "bool"):
        return [sympy.Integer(int(x)) if isinstance(x, bool) and t.dtype != "bool" else x for x in ins[0]]  # type: ignore[union-attr]
    if op == "Gather" and int(n.attrs.get("axis", 0)) == 0 and _ints(ins[1]):
        data, idx = ins[0], ins[1]
        assert data is not None and idx is not None
        return [data[int(i)] for i in idx]
    if op == "Concat":
        return [x for v in ins for x in v]  # type: ignore[union-attr]
    if op == "Slice" and all(_ints(v) for v in ins[1:]):
        starts, ends = ins[1], ins[2]
        steps = ins[4] if len(ins) > 4 else [1]
        assert starts is not None and ends is not None and steps is not None and ins[0] is not None
        if len(starts) != 1 or len(ends) != 1 or len(steps) != 1:
            return None
        return ins[0][int(starts[0]):int(ends[0]):int(steps[0])]
    if op == "ConstantOfShape" and _ints(ins[0]):
        count: int = math.prod([int(v) for v in ins[0]])  # type: ignore[union-attr, misc]
        value = np.asarray(n.attrs["value"]).reshape(-1)[0]
        one = bool(value) if t.dtype == "bool" else sympy.Integer(int(value))
        return [one] * count if count <= MAX_VECTOR else None
    if op in ("Div", "Mod") and len(ins) == 2 and _ints(ins[1]):
        pair = _broadcast(ins[0], ins[1])  # type: ignore[arg-type]
        if pair is None or any(x is None or isinstance(x, bool) for x in pair[0]):
            return None
        return [_divmod(a, b, op) for a, b in zip(*pair)]
    if op in ("Add", "Sub", "Mul", "Equal") and len(ins) == 2:
        pair = _broadcast(ins[0], ins[1])  # type: ignore[arg-type]
        if pair is None or any(isinstance(x, bool) or (x is None and op != "Equal") for v in pair for x in v) \
                and op != "Equal":
            return None
        if op == "Equal":  # an element unknown (a dim that may be 0 against 0) stays None
            return [_equal(a, b) for a, b in zip(*pair)]
        fn = {"Add": operator.add, "Sub": operator.sub, "Mul": operator.mul}[op]
        return [sympy.expand(fn(a, b)) for a, b in zip(*pair)]
    if op == "Where" and len(ins) == 3:
        c, a, b = ins
        assert c is not None and a is not None and b is not None
        size = max(len(c), len(a), len(b))
        if any(len(v) not in (1, size) for v in (c, a, b)):
            return None
        out = []
        for i in range(size):
            p, x, y = c[i % len(c)], a[i % len(a)], b[i % len(b)]
            # an unknown condition picks alike where both sides are the same dim
            out.append(x if p is True or (p is None and x is not None and _equal(x, y)) else y if p is False else None)
        return out
    return None
