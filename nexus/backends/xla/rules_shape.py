"""The xla lowering table, part 2: shapes, indexing, gradient helpers, stacks, and the
ops that run their NumPy kernel on the host through ``jax.pure_callback``.

Shape inputs (Reshape's ``shape``, Tile's ``repeats``...) must be static (see
:mod:`nexus.backends.xla.trace`): XLA shapes are fixed when compiling.  A shape input
computed from traced data is a :class:`XlaLoweringError` naming the node.  (Slice's
bounds may be traced: :mod:`nexus.backends.xla.slicing`.)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from nexus.backends.base import register_lowering
from nexus.backends.xla import trace
from nexus.backends.xla.rules import out_dtype
from nexus.backends.xla.trace import BACKEND, Trace, is_static
from nexus.ir.kernels import kernel_attrs
from nexus.ir.node import Node
from nexus.ir.types import NARROW_DTYPES, TensorType, TupleType, numpy_dtype


def static_ints(node: Node, v: Any, what: str) -> tuple[int, ...]:
    if not is_static(v):
        raise ValueError(f"{what} must be known while compiling (XLA shapes are static); "
                         f"it is computed from run-time data here")
    return tuple(int(d) for d in np.reshape(v, (-1,)))


@register_lowering(BACKEND, "Proj")
def _proj(tr: Trace, node: Node, t: Any) -> Any:
    return t[int(node.attrs["num"])]


@register_lowering(BACKEND, "Reshape")
def _reshape(tr: Trace, node: Node, x: Any, shape: Any) -> Any:
    return jnp.reshape(x, static_ints(node, shape, "the shape"))


@register_lowering(BACKEND, "ReshapeLike")
def _reshape_like(tr: Trace, node: Node, x: Any, like: Any) -> Any:
    return jnp.reshape(x, jnp.shape(like))


@register_lowering(BACKEND, "Transpose")
def _transpose(tr: Trace, node: Node, x: Any) -> Any:
    perm = node.attrs.get("perm")
    return jnp.transpose(x, None if perm is None else tuple(perm))


@register_lowering(BACKEND, "Flatten")
def _flatten(tr: Trace, node: Node, x: Any) -> Any:
    shape = jnp.shape(x)
    axis = int(node.attrs["axis"]) % (len(shape) + 1) if shape else 0
    return jnp.reshape(x, (int(np.prod(shape[:axis])), int(np.prod(shape[axis:]))))


@register_lowering(BACKEND, "Squeeze")
def _squeeze(tr: Trace, node: Node, x: Any) -> Any:
    axes = node.attrs.get("axes")
    if axes is not None and not len(axes):
        return x
    return jnp.squeeze(x, None if axes is None else tuple(axes))


@register_lowering(BACKEND, "Unsqueeze")
def _unsqueeze(tr: Trace, node: Node, x: Any) -> Any:
    return jnp.reshape(x, tr.shape(_tensor(node)))


@register_lowering(BACKEND, "Concat")
def _concat(tr: Trace, node: Node, *xs: Any) -> Any:
    return jnp.concatenate(xs, axis=int(node.attrs["axis"]))


@register_lowering(BACKEND, "Split")
def _split(tr: Trace, node: Node, x: Any) -> Any:
    axis = int(node.attrs["axis"])
    t = node.type
    assert isinstance(t, TupleType)
    bounds = np.cumsum([0, *(tr.shape(e)[axis] for e in t.elems if isinstance(e, TensorType))])
    return tuple(lax.slice_in_dim(x, int(bounds[i]), int(bounds[i + 1]), axis=axis % jnp.ndim(x))
                 for i in range(len(bounds) - 1))


@register_lowering(BACKEND, "Expand")
def _expand(tr: Trace, node: Node, x: Any, shape: Any) -> Any:
    want = np.broadcast_shapes(jnp.shape(x), static_ints(node, shape, "the shape"))
    return jnp.broadcast_to(x, want)


@register_lowering(BACKEND, "BroadcastLike")
def _broadcast_like(tr: Trace, node: Node, x: Any, like: Any) -> Any:
    return jnp.broadcast_to(x, jnp.shape(like))


@register_lowering(BACKEND, "SumToLike")
def _sum_to_like(tr: Trace, node: Node, x: Any, like: Any) -> Any:
    shape, have = tuple(jnp.shape(like)), tuple(jnp.shape(x))
    if have == shape:
        return x
    lead = len(have) - len(shape)
    axes = tuple(range(lead)) + tuple(lead + i for i, d in enumerate(shape) if d == 1 and have[lead + i] != 1)
    out = jnp.sum(x, axis=axes, keepdims=True) if axes else x
    return jnp.reshape(out, shape)


@register_lowering(BACKEND, "UnreduceLike")
def _unreduce_like(tr: Trace, node: Node, g: Any, x: Any) -> Any:
    shape = tuple(jnp.shape(x))
    rank = len(shape)
    axes = node.attrs.get("axes")
    red = tuple(range(rank)) if axes is None else tuple(sorted(a % rank for a in axes)) if rank else ()
    kept = tuple(1 if i in red else d for i, d in enumerate(shape))
    out = jnp.broadcast_to(jnp.reshape(g, kept), shape)
    if node.attrs["mean"]:
        count = int(np.prod([shape[i] for i in red])) if red else 1
        out = out / out_dtype(node).type(max(count, 1))
    return out.astype(out_dtype(node))


@register_lowering(BACKEND, "ZerosLike", "OnesLike")
def _fill_like(tr: Trace, node: Node, x: Any) -> Any:
    return (jnp.zeros_like if node.op.name == "ZerosLike" else jnp.ones_like)(x)


@register_lowering(BACKEND, "Tile")
def _tile(tr: Trace, node: Node, x: Any, repeats: Any) -> Any:
    return jnp.tile(x, static_ints(node, repeats, "the repeats"))


@register_lowering(BACKEND, "Pad")
def _pad(tr: Trace, node: Node, x: Any, pads: Any) -> Any:
    p = static_ints(node, pads, "the pads")
    r = jnp.ndim(x)
    widths = [(max(p[i], 0), max(p[i + r], 0)) for i in range(r)]
    mode = node.attrs["mode"]
    if mode == "constant":
        out = jnp.pad(x, widths, constant_values=jnp.asarray(node.attrs["value"], jnp.result_type(x)))
    else:
        out = jnp.pad(x, widths, mode=mode)
    crop = tuple(slice(max(-p[i], 0), out.shape[i] - max(-p[i + r], 0)) for i in range(r))
    return out[crop]


@register_lowering(BACKEND, "ShapeOf")
def _shape_of(tr: Trace, node: Node, x: Any) -> Any:
    return np.array(jnp.shape(x), dtype=np.int64)


@register_lowering(BACKEND, "DimSize")
def _dim_size(tr: Trace, node: Node, x: Any) -> Any:
    return np.int64(jnp.shape(x)[int(node.attrs["axis"])])


@register_lowering(BACKEND, "ConstantOfShape")
def _constant_of_shape(tr: Trace, node: Node, shape: Any) -> Any:
    value = node.attrs["value"]
    return jnp.full(static_ints(node, shape, "the shape"), value.reshape(()), dtype=value.dtype)


@register_lowering(BACKEND, "Gather")
def _gather(tr: Trace, node: Node, x: Any, idx: Any) -> Any:
    axis = int(node.attrs["axis"]) % jnp.ndim(x)
    n = jnp.shape(x)[axis]
    if not is_static(idx) or np.any((np.asarray(idx) < -n) | (np.asarray(idx) >= n)):
        # NumPy raises where an index is out of range (XLA would clamp it).
        idx = jnp.asarray(idx)
        tr.fail_where(node, jnp.any((idx < -n) | (idx >= n)),
                      IndexError(f"index out of bounds for axis {axis} with size {n}"))
    idx = jnp.where(idx < 0, idx + n, idx)  # NumPy's negative indices
    return jnp.take(x, idx, axis=axis, mode="clip")


@register_lowering(BACKEND, "GatherGrad")
def _gather_grad(tr: Trace, node: Node, g: Any, data: Any, idx: Any) -> Any:
    axis = int(node.attrs["axis"]) % jnp.ndim(data)
    shape = tuple(jnp.shape(data))
    idx = jnp.reshape(jnp.asarray(idx), (-1,)) % shape[axis]
    gm = jnp.moveaxis(jnp.reshape(g, shape[:axis] + (idx.shape[0],) + shape[axis + 1:]), axis, 0)
    out = jnp.zeros((shape[axis], *shape[:axis], *shape[axis + 1:]), jnp.result_type(g)).at[idx].add(gm)
    return jnp.moveaxis(out, 0, axis)


@register_lowering(BACKEND, "Range")
def _range(tr: Trace, node: Node, start: Any, limit: Any, delta: Any) -> Any:
    # Static bounds are folded by the kernel before the rule runs (trace.Trace.node); this
    # is the same for a caller who calls the rule with static values directly.
    if is_static((start, limit, delta)):
        kernel = node.op.kernel
        assert kernel is not None
        return kernel(start, limit, delta)
    raise ValueError("Range with run-time bounds has a data-dependent size (XLA shapes are static); "
                     "its start, limit and delta must be known while compiling")


@register_lowering(BACKEND, "Roll")
def _roll(tr: Trace, node: Node, x: Any, shift: Any) -> Any:
    """tf2xla's roll (seed 003): per axis, x concatenated with itself, then one dynamic
    slice of the original size starting at ``n - shift mod n``."""
    x = jnp.asarray(x)
    shifts = jnp.reshape(jnp.asarray(shift, jnp.int64), (-1,))
    for k, a in enumerate(node.attrs["axes"]):
        a = a % x.ndim
        n = x.shape[a]
        if n == 0:
            continue
        offset = jnp.mod(shifts[k], n)  # Python's mod: in [0, n) for negative shifts too
        doubled = jnp.concatenate([x, x], axis=a)
        starts = [jnp.zeros((), jnp.int64)] * x.ndim
        starts[a] = n - offset
        x = lax.dynamic_slice(doubled, starts, x.shape)
    return x


def _tensor(node: Node) -> TensorType:
    t = node.type
    assert isinstance(t, TensorType)
    return t


# --- stacks: fixed-size buffers (see StackLayout) ---------------------------------------------
@register_lowering(BACKEND, "StackNew")
def _stack_new(tr: Trace, node: Node) -> Any:
    return tr.layout.empty(tr.heap is not None)


@register_lowering(BACKEND, "StackPush")
def _stack_push(tr: Trace, node: Node, stack: Any, value: Any) -> Any:
    value = jnp.asarray(value)
    k = tr.layout.index(tuple(value.shape), _dtype_name(node.input(1).type))
    peak, bufs = stack
    buf, count = bufs[k]
    if tr.heap is not None:
        buf = tr.heap[k]  # the buffers live apart (StackLayout)
    slot = jnp.minimum(count, buf.shape[0] - 1)  # past the capacity: lost, and the peak says so
    value = value.astype(buf.dtype)
    if tr.heap is not None and tr.predicate is not None:
        # An arm of a select (or an unrolled iteration) that may not be taken: write the
        # slot's old value back there, so that the arm that is taken wins.
        old = lax.dynamic_index_in_dim(buf, slot, 0, keepdims=False)
        value = jnp.where(tr.predicate, value, old)
    buf = lax.dynamic_update_index_in_dim(buf, value, slot, 0)
    new = list(bufs)
    if tr.heap is not None:
        tr.heap[k] = buf
        new[k] = (None, count + 1)
    else:
        new[k] = (buf, count + 1)
    return (jnp.maximum(peak, count + 1), tuple(new))


@register_lowering(BACKEND, "StackPop")
def _stack_pop(tr: Trace, node: Node, stack: Any) -> Any:
    t = node.type
    assert isinstance(t, TupleType) and isinstance(t.elems[1], TensorType)
    k = tr.layout.index(tr.shape(t.elems[1]), t.elems[1].dtype)
    peak, bufs = stack
    buf, count = bufs[k]
    if tr.heap is not None:
        buf = tr.heap[k]
    top = lax.dynamic_index_in_dim(buf, jnp.maximum(count - 1, 0), 0, keepdims=False)
    new = list(bufs)
    new[k] = (bufs[k][0], count - 1)
    return ((peak, tuple(new)), top)


def _dtype_name(t: Any) -> str:
    assert isinstance(t, TensorType)
    return t.dtype


# --- host kernels --------------------------------------------------------------------------
# Ops without a native rule yet whose result shape is static once the arguments' shapes
# are: XLA calls their NumPy reference kernel on the host (jax.pure_callback).  Correct,
# not fast; each is a candidate for a native rule.
HOST_OPS = (
    "AveragePoolGrad", "BooleanMaskGrad", "ConcatGrad", "ConvGradW", "ConvGradX", "ConvTransposeGradW",
    "GatherNDGrad", "MaxPoolGrad", "MaxPoolIndices", "RandomNormal", "RandomUniform", "Resize", "ResizeGrad",
    "ScatterND", "SetItem", "SetItemValueGrad", "SliceGrad", "TakeAlongAxisGrad", "TileGrad",
)


@register_lowering(BACKEND, "Cast")
def _cast(tr: Trace, node: Node, x: Any) -> Any:
    if node.attrs["to"] in _ON_HOST:  # ONNX's float8 saturation, E8M0 rounding, 4/2-bit wrap-around:
        return _host(tr, node, x)      # the reference kernel, on the host
    return jnp.asarray(x).astype(out_dtype(node))


_ON_HOST = frozenset(NARROW_DTYPES) - {"bf16"}  # float8, float4 and the 4- and 2-bit ints


trace.HOST_EFFECTS.update(HOST_OPS)


@register_lowering(BACKEND, *HOST_OPS)
def _host(tr: Trace, node: Node, *ins: Any) -> Any:
    kernel = node.op.kernel
    assert kernel is not None
    attrs = kernel_attrs(node)
    t = node.type
    types = t.elems if isinstance(t, TupleType) else (t,)
    shapes = tuple(jax.ShapeDtypeStruct(_result_shape(tr, node, e, ins), numpy_dtype(e.dtype))  # type: ignore[no-untyped-call]
                   for e in types if isinstance(e, TensorType))

    def host(*args: Any) -> Any:
        out = kernel(*(np.asarray(a) for a in args), **attrs)
        outs = out if isinstance(t, TupleType) else (out,)
        return tuple(np.asarray(o, dtype=s.dtype).reshape(s.shape) for o, s in zip(outs, shapes))

    res = tr.host(node, host, shapes, *ins)
    return tuple(res) if isinstance(t, TupleType) else res[0]


def _result_shape(tr: Trace, node: Node, t: TensorType, ins: Sequence[Any]) -> tuple[int, ...]:
    """The static shape of a host op's result of type ``t``.  Where its symbols are not
    known here (a loop-carried value's type, whose dims no value bound), a result of the
    same type as an input (SetItem's result is its data's type) has that input's shape."""
    try:
        return tr.shape(t)
    except ValueError:
        for i, v in zip(node.inputs, ins):
            if i.type == t and hasattr(v, "shape"):
                return tuple(v.shape)
        raise
