"""Data-dependent sizes in XLA: a static bound, padding, and the true size beside it.

NonMaxSuppression, NonZero, Unique, BooleanMask and TopK with a run-time k return a
result whose size XLA cannot know while compiling.  Their rule (:func:`_dynamic`) runs the
op's NumPy kernel on the host (``jax.pure_callback``) and pads that result with zeros to a
static *bound*: the op's own bound derived from its input's static shape (NonZero and
Unique: the number of elements; BooleanMask: the mask's; NMS: the number of boxes times
batches and classes; TopK: the axis), or the smaller ``dynamic_bound`` the caller gives
(``nx.compile(f, backend="xla", dynamic_bound=N)``; a result larger than that is a
run-time error naming the node).  The op's size result (``Proj`` of its last output) is
the true size, a traced i64 scalar.

The padded value travels as a :class:`Padded` ``(data, size, axis)`` (a JAX pytree, so
``lax.cond`` and ``lax.while_loop`` carry it).  Ops that consume one (:func:`consume`)
either keep it padded (elementwise ops, Cast, Gather with padded indices) or need its
true size and use it: ``ShapeOf`` / ``DimSize`` give the true size, reductions over the
padded axis mask the padding with the reduction's identity (a mean divides by the true
count), Gather from a padded value resolves negative indices with the true size, and a
graph result is sliced to its true size after the call.  Any other op on a padded value
is an error naming the op and the value: padding would change its meaning.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import sympy
from jax import lax

from nexus.backends.base import register_lowering
from nexus.backends.xla import trace
from nexus.backends.xla.rules import BINARY, REDUCE, UNARY
from nexus.backends.xla.trace import BACKEND, Padded, Trace, XlaLoweringError
from nexus.ir.kernels import kernel_attrs
from nexus.ir.node import Node
from nexus.ir.opdef import REGISTRY
from nexus.ir.types import TensorType, TupleType, numpy_dtype

# The ops with a data-dependent size (OpDef.size_output), run on the host and padded.
DYNAMIC_OPS = tuple(name for name, op in REGISTRY.items() if op.size_output is not None)
# Ops whose output is padded where an input is, elementwise (the padding is garbage that
# later consumers mask or slice away).
_ELEMENTWISE = frozenset({*UNARY, *BINARY, "Where", "Clip", "Cast"}) - {"MatMul"}


def natural_bound(op: str, ins: Sequence[Any], attrs: dict[str, Any]) -> int:
    """The largest size the op's data-dependent dim can have, from its inputs' static shapes."""
    shape = tuple(jnp.shape(_data(ins[0])))
    if op in ("NonZero", "Unique"):
        return int(np.prod(shape))
    if op == "BooleanMask":
        return int(np.prod(jnp.shape(_data(ins[1]))))
    if op == "TopK":
        return int(shape[int(attrs["axis"]) % len(shape)])
    # NonMaxSuppression: every box of every batch and class at most once.
    boxes, scores = shape, tuple(jnp.shape(_data(ins[1])))
    return int(boxes[-2]) if len(boxes) == 2 else int(boxes[0] * scores[1] * boxes[1])


def _data(v: Any) -> Any:
    return v.data if isinstance(v, Padded) else v


@register_lowering(BACKEND, *DYNAMIC_OPS)
def _dynamic(tr: Trace, node: Node, *ins: Any) -> Any:
    """The kernel on the host; each result of data-dependent size padded to the bound."""
    kernel = node.op.kernel
    spec = node.op.size_output
    assert kernel is not None and spec is not None
    attrs = kernel_attrs(node)
    t = node.type
    assert isinstance(t, TupleType)
    names = list(node.op.results)
    of = t.elems[names.index(spec.of)]
    assert isinstance(of, TensorType) and of.shape is not None
    dim = spec.dim if isinstance(spec.dim, int) else int(attrs[spec.dim])
    sym = of.shape[dim % len(of.shape)]
    bound = natural_bound(node.op.name, ins, attrs)
    if tr.dynamic_bound is not None:
        bound = min(bound, int(tr.dynamic_bound))
    if isinstance(sym, sympy.Symbol):
        tr.dims[sym] = bound  # later types that mention the size see the padded one
    # Per result: the axis it is padded along (or None) and its padded shape and dtype.
    axes: list[int | None] = []
    shapes = []
    for e in t.elems:
        assert isinstance(e, TensorType) and e.shape is not None
        axis = next((i for i, d in enumerate(e.shape) if d == sym), None) if isinstance(sym, sympy.Symbol) else None
        axes.append(axis)
        shapes.append(jax.ShapeDtypeStruct(tr.shape(e), numpy_dtype(e.dtype)))  # type: ignore[no-untyped-call]
    size_at = names.index(spec.size)
    flat = [a for v in ins for a in ((v.data, v.size) if isinstance(v, Padded) else (v,))]
    padded_in = [isinstance(v, Padded) for v in ins]
    in_axes = [v.axis if isinstance(v, Padded) else 0 for v in ins]
    label = node.name or node.op.name

    def host(*args: Any) -> tuple[np.ndarray, ...]:
        it = iter(args)
        real = []
        for was, ax in zip(padded_in, in_axes):
            a = np.asarray(next(it))
            real.append(np.take(a, np.arange(int(next(it))), axis=ax) if was else a)
        out = kernel(*real, **attrs)
        res = []
        for o, s, pad_axis in zip(out, shapes, axes):
            o = np.asarray(o, dtype=s.dtype)
            if pad_axis is not None:
                if o.shape[pad_axis] > bound:
                    raise ValueError(f"{node.op.name} %{label} has {o.shape[pad_axis]} results, more than the "
                                     f"bound {bound} it was compiled for (dynamic_bound)")
                widths = [(0, 0)] * o.ndim
                widths[pad_axis] = (0, bound - o.shape[pad_axis])
                o = np.pad(o, widths)
            res.append(o.reshape(s.shape))
        return tuple(res)

    outs = trace.host_callback(host, tuple(shapes), *flat)
    size = outs[size_at]
    return tuple(o if ax is None or i == size_at else Padded(o, size, ax)
                 for i, (o, ax) in enumerate(zip(outs, axes)))


def consume(tr: Trace, node: Node, ins: list[Any]) -> Any:
    """``node`` applied to inputs some of which are :class:`Padded` (see the module doc)."""
    op = node.op.name
    pads = [v for v in ins if isinstance(v, Padded)]
    p = pads[0]
    datas = [_data(v) for v in ins]
    if op in _ELEMENTWISE:
        out = tr.apply_rule(node, datas)
        rank = jnp.ndim(out)
        # Broadcasting aligns trailing dims: the padded axis keeps its distance from the end.
        return Padded(out, p.size, rank - jnp.ndim(p.data) + p.axis)
    if op == "ShapeOf" and ins[0] is p:
        return jnp.asarray(np.array(jnp.shape(p.data), np.int64)).at[p.axis].set(p.size)
    if op == "DimSize" and ins[0] is p:
        axis = int(node.attrs["axis"]) % jnp.ndim(p.data)
        return p.size if axis == p.axis else np.int64(jnp.shape(p.data)[axis])
    if op == "Gather":
        x, idx = ins
        axis = int(node.attrs["axis"]) % jnp.ndim(_data(x))
        if isinstance(x, Padded) and not isinstance(idx, Padded) and x.axis == axis:
            # NumPy's negative indices count from the true end, not the bound's.
            idx = jnp.where(jnp.asarray(idx) < 0, idx + x.size, idx)
            return tr.apply_rule(node, [x.data, idx])
        if isinstance(idx, Padded) and not isinstance(x, Padded):
            return Padded(tr.apply_rule(node, [x, idx.data]), idx.size, axis + idx.axis)
    if op in REDUCE and ins[0] is p:
        return _reduce(tr, node, p)
    if op == "Identity":
        return p
    if op == "SetItem" and node.attrs["kinds"] == "i" and len(ins) == 3 and ins[1] is p and len(pads) == 1:
        out = _masked_set(ins[0], p, ins[2])
        if out is not None:
            return out
    if op == "Append" and ins[0] is p and p.axis == 0 and len(pads) == 1:
        return _extend(p, jnp.asarray(ins[1])[None])
    if op == "Concat" and ins[0] is p and len(pads) == 1 and int(node.attrs["axis"]) % jnp.ndim(p.data) == p.axis:
        return _extend(p, jnp.concatenate([jnp.asarray(v) for v in ins[1:]], axis=p.axis))
    raise XlaLoweringError(f"op {op} reads a value whose size is data-dependent (padded to a bound in XLA); "
                           "the xla backend handles elementwise ops, Gather, reductions, ShapeOf and DimSize "
                           "on such values, and returns them, but padding would change what this op computes",
                           node)


def _masked_set(data: Any, value: Padded, mask: Any) -> Any:
    """``data[mask] = value`` where ``value`` has one entry per true entry of ``mask`` (it
    comes padded from ``data[mask]``, a BooleanMask: ``v[v > y] *= c``): the k-th true
    position takes ``value``'s k-th entry.  None where the operands are not of that form."""
    data, mask = jnp.asarray(data), jnp.asarray(mask)
    if mask.dtype != jnp.bool_ or mask.shape != data.shape or value.axis != 0 or jnp.ndim(value.data) != 1:
        return None
    flat = jnp.reshape(mask, (-1,))
    at = jnp.clip(jnp.cumsum(flat.astype(jnp.int64)) - 1, 0, max(jnp.shape(value.data)[0] - 1, 0))
    vals = jnp.asarray(value.data, data.dtype)
    picked = jnp.take(vals, at) if jnp.shape(vals)[0] else jnp.zeros(jnp.shape(flat), data.dtype)
    return jnp.where(mask, jnp.reshape(picked, data.shape), data)


def _extend(p: Padded, tail: Any) -> Padded:
    """A padded list (one grown in a loop or an If arm, see Trace.agree) extended by
    ``tail`` (rows along its padded axis) at its true end: Append, or a Concat onto it.
    The bound grows by the rows added, so that the value's shape says that it grew: a
    loop that carries it pads it to the bound for all its trips (Trace.loop_bound), and
    its iterations drop the spare rows again."""
    data = jnp.asarray(p.data)
    tail = tail.astype(data.dtype)
    data = jnp.concatenate([data, jnp.zeros_like(tail)], axis=p.axis)
    rows = jnp.shape(tail)[p.axis]
    return Padded(lax.dynamic_update_slice_in_dim(data, tail, p.size, p.axis), p.size + rows, p.axis)


_IDENTITY = {"ReduceSum": 0, "ReduceMean": 0, "ReduceProd": 1}


def _reduce(tr: Trace, node: Node, p: Padded) -> Any:
    rank = jnp.ndim(p.data)
    axes = node.attrs.get("axes")
    red = set(range(rank)) if axes is None else {a % rank for a in axes}
    keep = bool(node.attrs["keepdims"])
    if p.axis not in red:
        out = tr.apply_rule(node, [p.data])
        return Padded(out, p.size, p.axis if keep else p.axis - sum(1 for a in red if a < p.axis))
    op = node.op.name
    data = jnp.asarray(p.data)
    if op in _IDENTITY:
        fill: Any = _IDENTITY[op]
    elif jnp.issubdtype(data.dtype, jnp.floating):
        fill = -jnp.inf if op == "ReduceMax" else jnp.inf
    else:
        info = np.iinfo(data.dtype)
        fill = info.min if op == "ReduceMax" else info.max
    masked = jnp.where(p.mask(), data, jnp.asarray(fill, data.dtype))
    if op != "ReduceMean":
        return tr.apply_rule(node, [masked])
    total = jnp.sum(masked, axis=tuple(sorted(red)), keepdims=keep)
    count = p.size * int(np.prod([jnp.shape(data)[a] for a in red if a != p.axis]))
    return (total / count.astype(total.dtype)).astype(numpy_dtype(_tensor_dtype(node)))


def _tensor_dtype(node: Node) -> str:
    t = node.type
    assert isinstance(t, TensorType)
    return t.dtype


trace.PADDED_CONSUMER = consume
trace.HOST_EFFECTS.update(DYNAMIC_OPS)
