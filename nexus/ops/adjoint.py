"""Helper ops the VJP rules emit: shape-following reductions and broadcasts whose target
shape is that of another value (so they work with symbolic and data-dependent shapes),
and the scatter-add that is the adjoint of Gather."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from nexus.ir.opdef import Attr
from nexus.ir.types import FLOAT_DTYPES, TensorType, Type
from nexus.ops._rules import define, normalize_axis, tensor, unary_rule

FAMILY = "autodiff"

def _like_rule(op: str, ins: Sequence[Type], attrs: Mapping[str, Any], _: Sequence[Any]) -> Type:
    x, like = tensor(op, ins[0], 0), tensor(op, ins[1], 1)
    return TensorType(x.dtype, like.shape)


def sum_to_shape(x: Any, shape: tuple[int, ...]) -> Any:
    """Sum ``x`` over the axes that broadcasting added or stretched to reach its shape."""
    x = np.asarray(x)
    if x.shape == shape:
        return x
    lead = x.ndim - len(shape)
    axes = tuple(range(lead)) + tuple(lead + i for i, d in enumerate(shape) if d == 1 and x.shape[lead + i] != 1)
    out = np.sum(x, axis=axes, keepdims=True) if axes else x
    return np.reshape(out, shape)


def _sum_to_like(x: Any, like: Any) -> Any:
    out = sum_to_shape(x, np.shape(like))
    return out[()] if np.ndim(out) == 0 else out


def _broadcast_like(x: Any, like: Any) -> Any:
    shape = np.shape(like)
    if np.shape(x) == shape:
        return x
    out = np.broadcast_to(x, shape).copy()
    return out[()] if out.ndim == 0 else out


def _reshape_like(x: Any, like: Any) -> Any:
    out = np.reshape(x, np.shape(like))
    return out[()] if np.ndim(out) == 0 else out


def _gather_grad_rule(op: str, ins: Sequence[Type], attrs: Mapping[str, Any], _: Sequence[Any]) -> Type:
    g, data = tensor(op, ins[0], 0), tensor(op, ins[1], 1)
    return TensorType(g.dtype, data.shape)


def _gather_grad(g: Any, data: Any, indices: Any, axis: int = 0) -> Any:
    """Adds the slices of ``g`` back at the positions Gather took them from."""
    data = np.asarray(data)
    axis = normalize_axis("GatherGrad", axis, data.ndim)
    out = np.zeros(data.shape, dtype=np.asarray(g).dtype)
    moved = np.moveaxis(out, axis, 0)
    idx = np.asarray(indices)
    gm = np.asarray(g)
    # g has shape data[:axis] + idx.shape + data[axis+1:]; bring the indexed dims first.
    gm = np.moveaxis(gm.reshape(data.shape[:axis] + (idx.size,) + data.shape[axis + 1:]), axis, 0)
    np.add.at(moved, idx.reshape(-1) % data.shape[axis], gm)
    return out


def _unreduce_rule(op: str, ins: Sequence[Type], attrs: Mapping[str, Any], _: Sequence[Any]) -> Type:
    g, x = tensor(op, ins[0], 0), tensor(op, ins[1], 1)
    return TensorType(g.dtype, x.shape)


def _unreduce_like(g: Any, x: Any, axes: tuple[int, ...] | None = None, keepdims: bool = False,
                   mean: bool = False) -> Any:
    """Spreads ``g`` (the adjoint of a reduction of ``x``) back over the reduced axes."""
    shape = np.shape(x)
    rank = len(shape)
    red = tuple(range(rank)) if axes is None else tuple(sorted(a % rank for a in axes)) if rank else ()
    kept = tuple(1 if i in red else d for i, d in enumerate(shape))
    out = np.broadcast_to(np.reshape(g, kept), shape)
    if mean:
        count = int(np.prod([shape[i] for i in red])) if red else 1
        out = out / np.asarray(g).dtype.type(max(count, 1))
    out = np.array(out, dtype=np.asarray(g).dtype)
    return out[()] if out.ndim == 0 else out


def _zeros_like(x: Any) -> Any:
    return np.zeros_like(x)[()] if np.ndim(x) == 0 else np.zeros_like(x)


def _ones_like(x: Any) -> Any:
    return np.ones_like(x)[()] if np.ndim(x) == 0 else np.ones_like(x)


_ALL = frozenset(FLOAT_DTYPES | {"i8", "i16", "i32", "i64", "u8", "bool"})


define("SumToLike", FAMILY, ("x", "like"), _like_rule, _sum_to_like,
                  doc="Sums `x` over broadcast axes down to the shape of `like` (adjoint of broadcasting).",
                  may_fail=True)
define("BroadcastLike", FAMILY, ("x", "like"), _like_rule, _broadcast_like,
                  doc="Broadcasts `x` to the shape of `like`.", may_fail=True)
define("ReshapeLike", FAMILY, ("x", "like"), _like_rule, _reshape_like,
                  doc="Gives `x` the shape of `like`.", may_fail=True)
define("GatherGrad", FAMILY, ("grad", "data", "indices"), _gather_grad_rule, _gather_grad,
                  attrs={"axis": Attr("int", 0, "the axis Gather indexed")},
                  doc="Zeros shaped like `data` with `grad` added at the gathered positions.", may_fail=True)
define("UnreduceLike", FAMILY, ("grad", "x"), _unreduce_rule, _unreduce_like,
                  attrs={"axes": Attr("ints", None, "the reduced axes; all when absent"),
                         "keepdims": Attr("bool", False, "whether the reduction kept the axes"),
                         "mean": Attr("bool", False, "divide by the number of reduced elements")},
                  doc="Broadcasts the adjoint of a reduction of `x` back to the shape of `x`.", may_fail=True)
define("ZerosLike", FAMILY, ("x",), unary_rule(_ALL), _zeros_like, doc="Zeros shaped like `x`.")
define("OnesLike", FAMILY, ("x",), unary_rule(_ALL), _ones_like, doc="Ones shaped like `x`.")



# --- adjoints of indexing and joining ops (scatter the cotangent back) -----------------
def _like1_rule(op: str, ins: Sequence[Type], attrs: Mapping[str, Any], _: Sequence[Any]) -> Type:
    g, x = tensor(op, ins[0], 0), tensor(op, ins[1], 1)
    return TensorType(g.dtype, x.shape)


def _slice_grad(g: Any, data: Any, starts: Any, ends: Any, axes: Any = None, steps: Any = None) -> Any:
    """Zeros shaped like ``data`` with ``g`` written where Slice read."""
    arr = np.asarray(data)
    out = np.zeros(arr.shape, dtype=np.asarray(g).dtype)
    index = [slice(None)] * arr.ndim
    axes = range(len(starts)) if axes is None else axes
    for k, a in enumerate(axes):
        step = 1 if steps is None else int(steps[k])
        index[int(a)] = slice(int(starts[k]), int(ends[k]), step)
    out[tuple(index)] = g
    return out


def _gather_nd_grad(g: Any, data: Any, indices: Any, batch_dims: int = 0) -> Any:
    data, indices, g = np.asarray(data), np.asarray(indices), np.asarray(g)
    b = batch_dims
    nb = int(np.prod(data.shape[:b])) if b else 1
    out = np.zeros(data.shape, dtype=g.dtype)
    o = out.reshape((nb,) + data.shape[b:])
    ix = indices.reshape((nb,) + indices.shape[b:])
    k = ix.shape[-1]
    gg = g.reshape((nb,) + ix.shape[1:-1] + data.shape[b + k:])
    for i in range(nb):
        np.add.at(o[i], tuple(np.moveaxis(ix[i], -1, 0)), gg[i])
    return out


def _tile_grad(g: Any, x: Any) -> Any:
    """Sums the tiles of ``g`` back onto one copy shaped like ``x``."""
    shape = np.shape(x)
    g = np.asarray(g)
    reps = [gd // d if d else 0 for gd, d in zip(g.shape, shape)]
    split = [v for r, d in zip(reps, shape) for v in (r, d)]
    out = g.reshape(split).sum(axis=tuple(range(0, 2 * len(shape), 2))) if shape else g
    return np.asarray(out, dtype=g.dtype).reshape(shape)


def _concat_grad(g: Any, *xs: Any, axis: int = 0, index: int = 0) -> Any:
    """The part of ``g`` that Concat took from input ``index``."""
    sizes = [np.shape(x)[axis] for x in xs]
    start = sum(sizes[:index])
    return np.ascontiguousarray(np.take(np.asarray(g), np.arange(start, start + sizes[index]), axis=axis))


def _concat_grad_rule(op: str, ins: Sequence[Type], attrs: Mapping[str, Any], _: Sequence[Any]) -> Type:
    g = tensor(op, ins[0], 0)
    x = tensor(op, ins[1 + attrs["index"]], 1 + attrs["index"])
    return TensorType(g.dtype, x.shape)


define("SliceGrad", FAMILY, ("grad", "data", "starts", "ends", "axes_then_steps"), _like1_rule, _slice_grad,
                  variadic=True, doc="Zeros shaped like `data` with `grad` where Slice read (adjoint of Slice).",
                  may_fail=True)
define("GatherNDGrad", FAMILY, ("grad", "data", "indices"), _like1_rule, _gather_nd_grad,
                  attrs={"batch_dims": Attr("int", 0, "as GatherND")},
                  doc="Zeros shaped like `data` with `grad` added where GatherND read.", may_fail=True)
define("TileGrad", FAMILY, ("grad", "x"), _like1_rule, _tile_grad,
                  doc="Sums the tiles of `grad` onto the shape of `x` (adjoint of Tile).", may_fail=True)
define("ConcatGrad", FAMILY, ("grad", "inputs"), _concat_grad_rule, _concat_grad, variadic=True,
                  attrs={"axis": Attr("int", doc="Concat's axis"), "index": Attr("int", doc="which input")},
                  doc="The slice of `grad` that Concat took from input `index` (adjoint of Concat).", may_fail=True)


def _cumprod_grad_rule(op: str, ins: Sequence[Type], attrs: Mapping[str, Any], _: Sequence[Any]) -> Type:
    x, g = tensor(op, ins[0], 0), tensor(op, ins[1], 1)
    if x.shape is not None:
        normalize_axis(op, attrs["axis"], len(x.shape))
    return TensorType(g.dtype, x.shape)


def _cumprod_grad(x: Any, g: Any, axis: int = 0) -> Any:
    """The VJP of y = cumprod(x) along ``axis``, exact where x has zeros:
    dx_i = prod(x[:i]) * s_i with s_i = g_i + x_{i+1} * s_{i+1} (so no division by x)."""
    x, g = np.moveaxis(np.asarray(x), axis, 0), np.moveaxis(np.asarray(g), axis, 0)
    n = x.shape[0]
    s = np.empty(np.broadcast_shapes(x.shape, g.shape), dtype=g.dtype)
    if n:
        s[n - 1] = g[n - 1]
        for i in range(n - 2, -1, -1):
            s[i] = g[i] + x[i + 1] * s[i + 1]
        before = np.concatenate([np.ones_like(x[:1]), np.cumprod(x[:-1], axis=0, dtype=x.dtype)])
        s = before * s
    return np.ascontiguousarray(np.moveaxis(s, 0, axis))


define("CumProdGrad", FAMILY, ("x", "g"), _cumprod_grad_rule, _cumprod_grad,
       attrs={"axis": Attr("int", 0, "the axis of the running product")},
       doc="VJP of CumProd: the cotangent of x given x and the cotangent g of cumprod(x) (exact at zeros)")
