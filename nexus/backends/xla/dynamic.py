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
either keep it padded (elementwise ops, broadcasting a true size of 1 as NumPy does;
Cast, Gather with padded indices or of rows, Unsqueeze, Transpose, Squeeze of other axes,
a Reshape that keeps the real entries first) or need its true size and use it:
``ShapeOf`` / ``DimSize`` give the true size, reductions and cumulative sums over the
padded axis mask the padding with the identity (a mean divides by the true count),
Gather from a padded value and SetItem (on the host, on the real parts) resolve negative
indices with the true size, Slice counts from the true end
(:mod:`nexus.backends.xla.slicing`), Append and Concat onto a padded list extend it at
its true end, Pad puts the ``after`` entries there, and a graph result is sliced to its
true size after the call.  Any other op on a padded value is an error naming the op and
the value: padding would change its meaning.  A TopK whose k is known while tracing
(``np.sort``) is not padded.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import sympy
from jax import lax

from nexus.backends.base import register_lowering
from nexus.backends.xla import slicing, trace
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
    # TopK with a k known while tracing (np.sort is TopK of the whole axis): its size is k,
    # whatever symbol its type gave it; nothing is padded.
    known = int(ins[1]) if node.op.name == "TopK" and trace.is_static(ins[1]) and not isinstance(ins[0], Padded) \
        else None
    if known is not None:
        bound = known
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
    flat, real_parts = _to_host(ins)
    label = node.name or node.op.name

    def host(*args: Any) -> tuple[np.ndarray, ...]:
        out = kernel(*real_parts(args), **attrs)
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

    outs = tr.host(node, host, tuple(shapes), *flat)
    if known is not None:
        return tuple(np.int64(known) if i == size_at else o for i, o in enumerate(outs))
    size = outs[size_at]
    return tuple(o if ax is None or i == size_at else Padded(o, size, ax)
                 for i, (o, ax) in enumerate(zip(outs, axes)))


def _to_host(ins: Sequence[Any]) -> tuple[list[Any], Callable[[Sequence[Any]], list[np.ndarray]]]:
    """The arguments of a host callback for ``ins`` (a padded value as its data and its
    size), and the function that gives the kernel their real parts back on the host."""
    flat = [a for v in ins for a in ((v.data, v.size) if isinstance(v, Padded) else (v,))]
    layout = [v.axis if isinstance(v, Padded) else None for v in ins]

    def real_parts(args: Sequence[Any]) -> list[np.ndarray]:
        it = iter(args)
        real = []
        for axis in layout:
            a = np.asarray(next(it))
            real.append(a if axis is None else np.take(a, np.arange(int(next(it))), axis=axis))
        return real

    return flat, real_parts


def _set_item_on_host(tr: Trace, node: Node, ins: Sequence[Any]) -> Any:
    """SetItem (a host kernel, see rules_shape.HOST_OPS) with padded operands: the kernel
    gets their real parts (so negative indices and slices count from the true end); the
    result of a padded data is padded back to its bound."""
    kernel = node.op.kernel
    assert kernel is not None
    attrs = kernel_attrs(node)
    data = ins[0]
    shape = tuple(jnp.shape(_data(data)))
    dtype = numpy_dtype(_tensor_dtype(node))
    flat, real_parts = _to_host(ins)

    def host(*args: Any) -> tuple[np.ndarray]:
        out = np.asarray(kernel(*real_parts(args), **attrs), dtype)
        if isinstance(data, Padded):
            widths = [(0, 0)] * out.ndim
            widths[data.axis] = (0, shape[data.axis] - out.shape[data.axis])
            out = np.pad(out, widths)
        return (out.reshape(shape),)

    (out,) = tr.host(node, host, (jax.ShapeDtypeStruct(shape, dtype),), *flat)  # type: ignore[no-untyped-call]
    return Padded(out, data.size, data.axis) if isinstance(data, Padded) else out


def consume(tr: Trace, node: Node, ins: list[Any]) -> Any:
    """``node`` applied to inputs some of which are :class:`Padded` (see the module doc)."""
    op = node.op.name
    pads = [v for v in ins if isinstance(v, Padded)]
    p = pads[0]
    if op in _ELEMENTWISE:
        return _elementwise(tr, node, ins)
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
            idx = jnp.asarray(idx)
            tr.fail_where(node, jnp.any((idx < -x.size) | (idx >= x.size)),
                          IndexError(f"index out of bounds for axis {axis} with its size at run time"))
            idx = jnp.where(idx < 0, idx + x.size, idx)
            return tr.apply_rule(node, [x.data, idx])
        if isinstance(x, Padded) and not isinstance(idx, Padded):
            # Rows of a padded list (`ls[k]`): the padding stays on its axis, shifted by the index's rank.
            shift = jnp.ndim(idx) - 1 if x.axis > axis else 0
            return Padded(tr.apply_rule(node, [x.data, idx]), x.size, x.axis + shift)
        if isinstance(idx, Padded) and not isinstance(x, Padded):
            return Padded(tr.apply_rule(node, [x, idx.data]), idx.size, axis + idx.axis)
    if op in REDUCE and ins[0] is p:
        return _reduce(tr, node, p)
    if op == "Identity":
        return p
    if op == "Slice" and ins[0] is p and len(pads) == 1:
        return slicing.slice_value(tr, node, *ins)
    if op == "SetItem" and node.attrs["kinds"] == "i" and len(ins) == 3 and ins[1] is p and len(pads) == 1:
        out = _masked_set(ins[0], p, ins[2])
        if out is not None:
            return out
    if op == "SetItem":
        return _set_item_on_host(tr, node, ins)
    if op == "Append" and ins[0] is p and p.axis == 0 and len(pads) == 1:
        return _extend(p, jnp.asarray(ins[1])[None])
    if op == "Append" and isinstance(ins[1], Padded):
        out = _append_padded(ins[0], ins[1])
        if out is not None:
            return out
    if op in ("CumSum", "CumProd") and ins[0] is p:
        # The padding masked with the identity: a reversed sum starts at the true end.
        fill = jnp.asarray(0 if op == "CumSum" else 1, jnp.asarray(p.data).dtype)
        return Padded(tr.apply_rule(node, [jnp.where(p.mask(), p.data, fill)]), p.size, p.axis)
    if op in ("Unsqueeze", "Transpose", "Squeeze") and ins[0] is p:
        out = _moved(node, p)
        if out is not None:
            return out
    if op == "Reshape" and ins[0] is p and len(pads) == 1:
        out = _reshape(p, ins[1])
        if out is not None:
            return out
    if op == "Pad" and ins[0] is p and len(pads) == 1 and trace.is_static(ins[1]):
        out = _pad(tr, node, p, ins[1])
        if out is not None:
            return out
    if op == "Concat" and ins[0] is p and len(pads) == 1 and int(node.attrs["axis"]) % jnp.ndim(p.data) == p.axis:
        return _extend(p, jnp.concatenate([jnp.asarray(v) for v in ins[1:]], axis=p.axis))
    raise XlaLoweringError(f"op {op} reads a value whose size is data-dependent (padded to a bound in XLA); "
                           "the xla backend handles elementwise ops, Gather, Slice, reductions, ShapeOf, DimSize "
                           "and some shape ops on such values, and returns them, but padding would change what "
                           "this op computes",
                           node)


def _elementwise(tr: Trace, node: Node, ins: Sequence[Any]) -> Padded:
    """An elementwise op on padded operands, broadcast as NumPy does along the padded axis:
    an operand whose true size is 1 there (``x[i:i + 1] * x``) has its one entry spread
    over the bound, and the result's true size is the broadcast of the operands'.  Sizes
    that are neither equal nor 1 fail a run-time check (NumPy raises there).  Operands
    padded along two different axes of the result are an error naming the node (a Padded
    value has one padded axis)."""
    rank = max(jnp.ndim(_data(v)) for v in ins)
    # Broadcasting aligns trailing dims: a padded axis keeps its distance from the end.
    axes = {rank - jnp.ndim(v.data) + v.axis for v in ins if isinstance(v, Padded)}
    if len(axes) > 1:
        raise XlaLoweringError(f"op {node.op.name} combines values whose run-time sizes are along different axes "
                               "of its result: XLA pads one axis per value", node)
    axis = axes.pop()
    extents = {int(jnp.shape(v)[axis - rank + jnp.ndim(v)]) for v in ins
               if not isinstance(v, Padded) and axis - rank + jnp.ndim(v) >= 0}
    extent = max(extents - {1}, default=None)  # an unpadded operand's size along the axis, if not 1
    # Without one, operands padded to different bounds are padded to the largest: its
    # true size may be the result's (the others' 1).
    top = max(int(jnp.shape(v.data)[v.axis]) for v in ins if isinstance(v, Padded))
    sizes: list[Any] = [np.int64(e) for e in extents]
    datas = []
    for v in ins:
        if not isinstance(v, Padded):
            datas.append(v)
            continue
        d, bound = jnp.asarray(v.data), int(jnp.shape(v.data)[v.axis])
        if extent is None and 1 < bound < top:
            widths = [(0, 0)] * d.ndim
            widths[v.axis] = (0, top - bound)
            d, bound = jnp.pad(d, widths), top
        if bound > 1:
            d = jnp.where(v.size == 1, lax.slice_in_dim(d, 0, 1, axis=v.axis), d)
        if extent is not None and bound != extent:
            # Only a true size of 1 or `extent` broadcasts against it (any other raises in NumPy).
            d = lax.slice_in_dim(d, 0, 1 if bound < extent else extent, axis=v.axis)
        datas.append(d)
        sizes.append(v.size)
    out = tr.apply_rule(node, datas)
    # NumPy broadcasts sizes that are equal or 1 (the result's is the other), and raises
    # for any other pair: a run-time check where two sizes might differ.
    every = jnp.stack([jnp.asarray(s, jnp.int64) for s in sizes])
    big = jnp.max(jnp.where(every != 1, every, -1))
    if len({id(v) for v in ins if isinstance(v, Padded)} | (extents - {1})) > 1:
        tr.fail_where(node, jnp.any((every != 1) & (every != big)),
                      ValueError("operands could not be broadcast together (their sizes along one axis, known at "
                                 "run time, are neither equal nor 1)"))
    return Padded(out, jnp.where(big < 0, 1, big), axis)


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


def _append_padded(lst: Any, item: Padded) -> Padded | None:
    """A padded ``item`` appended to a list (``[v]`` where ``v`` is a slice of run-time
    length): the list's rows are padded along the item's axis.  Rows of one list share
    their shape (a list is a stacked tensor), so the item's true size is every row's."""
    row = tuple(jnp.shape(item.data))
    if isinstance(lst, Padded):
        if lst.axis != item.axis + 1 or tuple(jnp.shape(lst.data))[1:] != row:
            return None  # a list growing along its rows as well: two padded axes
        return Padded(jnp.concatenate([lst.data, jnp.asarray(item.data, lst.data.dtype)[None]]), lst.size, lst.axis)
    data = jnp.asarray(lst)
    if data.shape[0] and tuple(data.shape[1:]) != row:
        return None
    rows = jnp.asarray(item.data)[None]
    out = rows if data.shape[0] == 0 else jnp.concatenate([data, rows.astype(data.dtype)])
    return Padded(out, item.size, item.axis + 1)


def _moved(node: Node, p: Padded) -> Padded | None:
    """Unsqueeze, Transpose, or a Squeeze of other axes, of a padded value: the op on its
    data, the padding along wherever its axis goes.  None for a Squeeze that may drop the
    padded axis (without ``axes`` it drops it where the true size is 1, at run time)."""
    rank = jnp.ndim(p.data)
    data = jnp.asarray(p.data)
    if node.op.name == "Unsqueeze":
        new = sorted(int(a) % (rank + len(node.attrs["axes"])) for a in node.attrs["axes"])
        kept = [i for i in range(rank + len(new)) if i not in new]
        return Padded(jnp.expand_dims(data, tuple(new)), p.size, kept[p.axis])
    if node.op.name == "Transpose":
        perm = node.attrs.get("perm")
        order = list(reversed(range(rank))) if perm is None else [int(a) % rank for a in perm]
        return Padded(jnp.transpose(data, order), p.size, order.index(p.axis))
    axes = node.attrs.get("axes")
    if axes is None:
        return None
    drop = sorted({int(a) % rank for a in axes})
    if p.axis in drop:
        return None
    return Padded(jnp.squeeze(data, tuple(drop)) if drop else data, p.size, p.axis - sum(a < p.axis for a in drop))


def _reshape(p: Padded, shape: Any) -> Padded | None:
    """A Reshape that keeps the real entries apart from the padding: one that leaves the
    padded axis alone (the other dims as they are, the padded one written -1), or, where
    the padded axis leads, one to ``[-1, *w]`` (``v.reshape(-1)`` of a padded list of
    rows), since the real rows come first in row-major order; None for any other."""
    if not trace.is_static(shape):
        return None
    want = [int(d) for d in np.reshape(shape, (-1,))]
    have = [int(d) for d in jnp.shape(p.data)]
    if want.count(-1) != 1:
        return None
    if len(want) == len(have) and want.index(-1) == p.axis and \
            all(w == h for i, (w, h) in enumerate(zip(want, have)) if i != p.axis):
        return p
    rest, inner = int(np.prod(have[1:])), int(np.prod(want[1:]))
    if p.axis != 0 or want[0] != -1 or inner <= 0 or rest % inner:
        return None  # the real entries would not fill whole rows of the result
    factor = rest // inner
    return Padded(jnp.reshape(p.data, (have[0] * factor, *want[1:])), p.size * factor, 0)


def _pad(tr: Trace, node: Node, p: Padded, pads: Any) -> Padded | None:
    """np.pad of a padded value: the other axes as Pad does; along the padded one, the
    ``before`` rows go first and the ``after`` rows at the true end (constant or edge
    mode; a crop, or another mode, is None)."""
    widths = [int(v) for v in np.reshape(pads, (-1,))]
    rank = jnp.ndim(p.data)
    before, after = widths[p.axis], widths[p.axis + rank]
    mode = node.attrs["mode"]
    if min(widths) < 0 or mode not in ("constant", "edge"):
        return None
    rest = np.array(widths)
    rest[p.axis] = rest[p.axis + rank] = 0
    data = jnp.asarray(tr.apply_rule(node, [p.data, rest])) if rest.any() else jnp.asarray(p.data)
    bound = int(data.shape[p.axis])
    n = bound + before + after
    at = jnp.arange(n, dtype=jnp.int64) - before
    size = jnp.asarray(p.size, jnp.int64)
    src = jnp.clip(at, 0, jnp.maximum(size - 1, 0)) if mode == "edge" else jnp.clip(at, 0, max(bound - 1, 0))
    if bound == 0:
        data = jnp.zeros_like(data, shape=tuple(1 if i == p.axis else d for i, d in enumerate(data.shape)))
    out = jnp.take(data, src, axis=p.axis)
    if mode == "constant":
        shape = [1] * rank
        shape[p.axis] = n
        inside = jnp.reshape((at >= 0) & (at < size), shape)
        out = jnp.where(inside, out, jnp.asarray(node.attrs["value"], out.dtype))
    return Padded(out, size + before + after, p.axis)


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
