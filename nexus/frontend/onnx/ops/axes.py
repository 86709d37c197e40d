"""Axes that arrive at run time (graph inputs, values computed in the model).

Nexus ops take their axes as attributes; when an ONNX model gives them as a tensor that
only the run knows, the importer composes the op from ops that take data instead: the
result shape is computed in the graph (a Reshape to a run-time shape, a Slice with
run-time bounds), so its dims are fresh symbols and one imported graph runs for every
value.  Only the number of axes must be static (the axes tensor's length): it fixes the
result's rank.  Constant axes never come here; they keep the plain op.

The helpers take normalized axes (``norm``: each axis modulo the rank, as ONNX's negative
axes count from the end) and a mask ``is_axis`` [r] of the positions they name.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from nexus.frontend.onnx.ops import INT64_MAX, _cast, _t
from nexus.ir.node import Node

if TYPE_CHECKING:
    from nexus.frontend.onnx.importer import Importer


def count(imp: Importer, axes: Node, what: str) -> int:
    """The static number of run-time ``axes`` (a NeedsConstant error when even that is unknown)."""
    shape = _t(axes).shape
    if shape is not None and len(shape) <= 1 and all(isinstance(d, int) for d in shape):
        return int(np.prod(shape)) if shape else 1
    imp.need_value(axes, what)  # raises: nothing is known about it
    raise AssertionError("unreachable")


def _i64(imp: Importer, *v: int) -> Node:
    return imp.const(np.array(v, np.int64))


def _scalar(imp: Importer, v: int) -> Node:
    return imp.const(np.array(v, np.int64))


def norm(imp: Importer, axes: Node, rank: int) -> Node:
    """The axes as an i64 vector, each modulo ``rank`` (-1 is the last axis)."""
    a = imp.emit("Reshape", [_cast(imp, axes, "i64"), _i64(imp, -1)])
    return imp.emit("Mod", [a, _scalar(imp, max(rank, 1))])


def mask(imp: Importer, axes_n: Node, rank: int) -> Node:
    """[rank] bool: which positions the normalized axes name."""
    positions = imp.emit("Unsqueeze", [imp.const(np.arange(rank, dtype=np.int64))], {"axes": (1,)})
    hits = imp.emit("Equal", [positions, imp.emit("Unsqueeze", [axes_n], {"axes": (0,)})])
    n = imp.emit("ReduceSum", [_cast(imp, hits, "i64")], {"axes": (1,), "keepdims": False})
    return imp.emit("Greater", [n, _scalar(imp, 0)])


def _kept_positions(imp: Importer, is_axis: Node, rank: int, k: int) -> Node:
    """The positions [rank - k] not in the mask, in order: the rank - k smallest of
    position + rank * is_axis (TopK with a static k)."""
    key = imp.emit("Add", [imp.const(np.arange(rank, dtype=np.int64)),
                           imp.emit("Mul", [_cast(imp, is_axis, "i64"), _scalar(imp, rank)])])
    t = imp.emit("TopK", [key, _scalar(imp, rank - k)], {"axis": 0, "largest": False, "sorted": True})
    return imp.emit("Proj", [t], {"num": 1}, name=None)


def without_axes(imp: Importer, x: Node, is_axis: Node, rank: int, k: int) -> Node:
    """``x`` reshaped to drop the masked dims (size 1): Squeeze at run-time axes."""
    if rank == k:
        return imp.emit("Reshape", [x, imp.const(np.zeros(0, np.int64))])
    shape = imp.emit("Gather", [imp.emit("ShapeOf", [x]), _kept_positions(imp, is_axis, rank, k)], {"axis": 0})
    return imp.emit("Reshape", [x, shape])


def unsqueeze(imp: Importer, x: Node, axes: Node, rank: int, k: int) -> Node:
    """Unsqueeze at run-time axes: a Reshape to x's dims with a 1 at each axis."""
    out_rank = rank + k
    is_axis = mask(imp, norm(imp, axes, out_rank), out_rank)
    if rank == 0:
        return imp.emit("Reshape", [x, imp.const(np.ones(out_rank, np.int64))])
    # Output position j takes x's dim j - (axes at or before j), where it is not an axis.
    before = imp.emit("CumSum", [_cast(imp, is_axis, "i64")], {"axis": 0})
    src = imp.emit("Sub", [imp.const(np.arange(out_rank, dtype=np.int64)), before])
    src = imp.emit("Clip", [src, _scalar(imp, 0), _scalar(imp, rank - 1)])
    dims = imp.emit("Gather", [imp.emit("ShapeOf", [x]), src], {"axis": 0})
    shape = imp.emit("Where", [is_axis, imp.const(np.ones(out_rank, np.int64)), dims])
    return imp.emit("Reshape", [x, shape])


def squeeze(imp: Importer, x: Node, axes: Node, rank: int, k: int) -> Node:
    return without_axes(imp, x, mask(imp, norm(imp, axes, rank), rank), rank, k)


def reduce(imp: Importer, op: str, x: Node, axes: Node, rank: int, k: int, keepdims: bool) -> Node:
    """``op`` (a Nexus reduction) over run-time axes: each position j in turn reduced (kept
    with size 1) where the mask says so.  Concat of the reduced and the unreduced value,
    then a Slice of the part wanted, so an empty axis reduces to its identity too."""
    is_axis = mask(imp, norm(imp, axes, rank), rank)
    y = x
    for j in range(rank):
        red = imp.emit(op, [y], {"axes": (j,), "keepdims": True})
        both = imp.emit("Concat", [red, y], {"axis": j})
        on = imp.emit("Reshape", [imp.emit("Gather", [is_axis, _scalar(imp, j)], {"axis": 0}), _i64(imp, 1)])
        start = imp.emit("Where", [on, _i64(imp, 0), _i64(imp, 1)])
        end = imp.emit("Where", [on, _i64(imp, 1), _i64(imp, INT64_MAX)])
        y = imp.emit("Slice", [both, start, end, _i64(imp, j)])
    return y if keepdims else without_axes(imp, y, is_axis, rank, k)


def per_axis(imp: Importer, x: Node, axis: Node, rank: int, make: Callable[[int], Node]) -> Node:
    """``make(j)`` for the run-time scalar ``axis`` = j (an op that keeps x's shape, as
    CumSum): every candidate computed, the one asked for selected."""
    a = imp.emit("Reshape", [norm(imp, axis, rank), imp.const(np.zeros(0, np.int64))])
    out = make(0)
    for j in range(1, rank):
        out = imp.emit("Where", [imp.emit("Equal", [a, _scalar(imp, j)]), make(j), out])
    return out


def pad_positions(imp: Importer, axes: Node, rank: int) -> Node:
    """Where Pad's pads for run-time ``axes`` go in the full [2 * rank] pads: [2k, 1]."""
    a = norm(imp, axes, rank)
    both = imp.emit("Concat", [a, imp.emit("Add", [a, _scalar(imp, rank)])], {"axis": 0})
    return imp.emit("Unsqueeze", [both], {"axes": (1,)})
