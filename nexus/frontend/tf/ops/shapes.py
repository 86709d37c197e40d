"""TensorFlow import rules: shapes, indexing, reductions and the nn ops."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from nexus.frontend.tf.ops import (
    INT64_MAX,
    INT64_MIN,
    Outs,
    _t,
    attr_b,
    attr_i,
    attr_type,
    cast,
    converts,
    i64,
    ints,
    scalar,
)
from nexus.frontend.tf.proto import TfImportError, TfNode
from nexus.ir.node import Node
from nexus.ir.static import static_value

if TYPE_CHECKING:
    from nexus.frontend.tf.importer import Importer


# --- shapes ------------------------------------------------------------------------------------
@converts("Shape")
def _shape(imp: Importer, n: TfNode) -> Outs:
    out = attr_type(n, "out_type") if "out_type" in n.attr else "i32"
    return [cast(imp, imp.emit("ShapeOf", [imp.arg(n, 0)], name=""), out)]


@converts("Reshape")
def _reshape(imp: Importer, n: TfNode) -> Outs:
    return [imp.emit("Reshape", [imp.arg(n, 0), i64(imp, imp.arg(n, 1))])]


@converts("Fill")
def _fill(imp: Importer, n: TfNode) -> Outs:
    dims, value = imp.args(n)
    return [imp.emit("Expand", [scalar(imp, value), i64(imp, dims)])]


@converts("Tile")
def _tile(imp: Importer, n: TfNode) -> Outs:
    return [imp.emit("Tile", [imp.arg(n, 0), i64(imp, imp.arg(n, 1))])]


@converts("Range")
def _range(imp: Importer, n: TfNode) -> Outs:
    start, limit, delta = (scalar(imp, v) for v in imp.args(n))
    out = attr_type(n, "Tidx") if "Tidx" in n.attr else _t(start).dtype
    return [imp.emit("Range", [cast(imp, start, out), cast(imp, limit, out), cast(imp, delta, out)])]


@converts("Pack")
def _pack(imp: Importer, n: TfNode) -> Outs:
    vals = imp.args(n)
    axis = attr_i(n, "axis")
    rank = len(_t(vals[0]).shape or ())
    axis = axis + rank + 1 if axis < 0 else axis
    rows = [imp.emit("Unsqueeze", [v], {"axes": (axis,)}, name="") for v in vals]
    return [imp.emit("Concat", rows, {"axis": axis})]


@converts("ConcatV2")
def _concat(imp: Importer, n: TfNode) -> Outs:
    axis = ints(imp, n, len(n.inputs) - 1, "the axis")[0]
    return [imp.emit("Concat", [imp.arg(n, i) for i in range(len(n.inputs) - 1)], {"axis": axis})]


@converts("ExpandDims")
def _expand_dims(imp: Importer, n: TfNode) -> Outs:
    x = imp.arg(n, 0)
    axis = ints(imp, n, 1, "the axis")[0]
    rank = len(_t(x).shape or ())
    return [imp.emit("Unsqueeze", [x], {"axes": (axis + rank + 1 if axis < 0 else axis,)})]


@converts("Squeeze")
def _squeeze(imp: Importer, n: TfNode) -> Outs:
    a = n.attr.get("squeeze_dims")
    axes = tuple(int(x) for x in a.list.i) if a is not None and len(a.list.i) else None
    return [imp.emit("Squeeze", [imp.arg(n, 0)], {"axes": axes} if axes else None)]


@converts("Transpose")
def _transpose(imp: Importer, n: TfNode) -> Outs:
    return [imp.emit("Transpose", [imp.arg(n, 0)], {"perm": tuple(ints(imp, n, 1, "the permutation"))})]


@converts("Roll")
def _roll(imp: Importer, n: TfNode) -> Outs:
    axes = tuple(ints(imp, n, 2, "the axes"))
    shift = imp.arg(n, 1)
    return [imp.emit("Roll", [imp.arg(n, 0), i64(imp, shift)], {"axes": axes})]


@converts("GatherV2")
def _gather(imp: Importer, n: TfNode) -> Outs:
    if attr_i(n, "batch_dims"):
        raise TfImportError("batch_dims is not supported")
    axis = ints(imp, n, 2, "the axis")[0]
    return [imp.emit("Gather", [imp.arg(n, 0), imp.arg(n, 1)], {"axis": axis})]


_REDUCE = {"Sum": "ReduceSum", "Mean": "ReduceMean", "Max": "ReduceMax", "Min": "ReduceMin", "Prod": "ReduceProd"}


@converts(*_REDUCE)
def _reduce(imp: Importer, n: TfNode) -> Outs:
    axes = tuple(ints(imp, n, 1, "the reduction axes"))
    x = imp.arg(n, 0)
    if not axes:  # TF reduces over no axis: the input itself
        return [imp.emit("Identity", [x])]
    return [imp.emit(_REDUCE[n.op], [x], {"axes": axes, "keepdims": attr_b(n, "keep_dims")})]


@converts("ArgMax", "ArgMin")
def _argmax(imp: Importer, n: TfNode) -> Outs:
    axis = ints(imp, n, 1, "the axis")[0]
    out = attr_type(n, "output_type") if "output_type" in n.attr else "i64"
    return [cast(imp, imp.emit(n.op, [imp.arg(n, 0)], {"axis": axis, "keepdims": False}, name=""), out)]


@converts("StridedSlice")
def _strided_slice(imp: Importer, n: TfNode) -> Outs:
    x = imp.arg(n, 0)
    shape = _t(x).shape
    if shape is None:
        raise TfImportError("the input's rank must be known")
    strides = ints(imp, n, 3, "the strides")
    begin, end = _entries(imp, n, 1, len(strides)), _entries(imp, n, 2, len(strides))
    bm, em, ell, new, shrink = (attr_i(n, k) for k in ("begin_mask", "end_mask", "ellipsis_mask", "new_axis_mask",
                                                        "shrink_axis_mask"))
    rank, axis, pos = len(shape), 0, 0
    sl_axes: list[int] = []
    starts: list[Any] = []
    ends: list[Any] = []
    steps: list[int] = []
    shrunk: list[tuple[int, Any]] = []
    new_axes: list[int] = []
    for i, s in enumerate(strides):
        bit = 1 << i
        if ell & bit:
            rest = sum(1 for j in range(i + 1, len(strides)) if not new & (1 << j))
            cover = rank - axis - rest
            axis, pos = axis + cover, pos + cover
        elif new & bit:
            new_axes.append(pos)
            pos += 1
        elif shrink & bit:
            shrunk.append((axis, begin[i]))
            axis += 1
        else:
            if s == 0:
                raise TfImportError("a stride is 0")
            sl_axes.append(axis)
            starts.append((0 if s > 0 else INT64_MAX) if bm & bit else begin[i])
            ends.append((INT64_MAX if s > 0 else INT64_MIN) if em & bit else end[i])
            steps.append(s)
            axis, pos = axis + 1, pos + 1
    if axis > rank:
        raise TfImportError(f"slices {axis} axes of a tensor of rank {rank}")
    if sl_axes:
        x = imp.emit("Slice", [x, _vector(imp, starts), _vector(imp, ends), imp.const(np.array(sl_axes, np.int64)),
                               imp.const(np.array(steps, np.int64))], name="")
    for ax, b in reversed(shrunk):
        x = imp.emit("Gather", [x, b if isinstance(b, Node) else imp.const(np.array(b, np.int64))], {"axis": ax},
                     name="")
    if new_axes:
        x = imp.emit("Unsqueeze", [x], {"axes": tuple(new_axes)}, name="")
    return [imp.emit("Identity", [x])]


def _entries(imp: Importer, n: TfNode, i: int, count: int) -> list[Any]:
    """The entries of a begin/end vector: ints where known, else scalar i64 nodes."""
    v = static_value(imp.arg(n, i))
    if v is not None:
        return [int(x) for x in np.asarray(v).reshape(-1)]
    vec = i64(imp, imp.arg(n, i))
    return [imp.emit("Gather", [vec, imp.const(np.array(k, np.int64))], {"axis": 0}, name="") for k in range(count)]


def _vector(imp: Importer, vals: list[Any]) -> Node:
    if all(not isinstance(v, Node) for v in vals):
        return imp.const(np.array(vals, np.int64))
    parts = [imp.emit("Unsqueeze", [v], {"axes": (0,)}, name="") if isinstance(v, Node)
             else imp.const(np.array([v], np.int64)) for v in vals]
    return imp.emit("Concat", parts, {"axis": 0}, name="")
