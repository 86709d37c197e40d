"""Subscripts in ``@nx.script``: ``x[i]``, slices, ``np.newaxis``, bool masks, and the
indices of an assignment into an element (``x[i, 1:3] = v``)."""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING

import numpy as np

from nexus.frontend.script import lists
from nexus.frontend.script.annotations import I64_MAX, is_int
from nexus.frontend.script.values import Static, TupleVal, Val
from nexus.ir.node import Node
from nexus.ir.types import TensorType, TupleType

if TYPE_CHECKING:
    from nexus.frontend.script.visitor import Lowering

INT64_BIG = I64_MAX  # slice bounds meaning "to the end" (ONNX clamps them)


def load(low: Lowering, node: ast.Subscript) -> Val:
    base = low.expr(node.value)
    if isinstance(base, TupleVal):
        idx = low.expr(node.slice)
        if isinstance(idx, Static) and isinstance(idx.value, int):
            try:
                return base.items[idx.value]
            except IndexError:
                raise low.error(node, "tuple index out of range") from None
        raise low.error(node, "tuples can only be indexed by constant ints")
    x = low.as_node(base)
    if lists.is_seq(x):
        return lists.subscript(low, x, node)
    t = x.type
    if not isinstance(t, TensorType) or t.shape is None:
        raise low.error(node, f"indexing needs a tensor of known rank, got {t}",
                         "annotate the argument with its dims, e.g. Tensor['T', 'D']")
    items = list(node.slice.elts) if isinstance(node.slice, ast.Tuple) else [node.slice]
    real = [i for i in items if not (isinstance(i, ast.Constant) and i.value is None)]
    if len(real) > len(t.shape):
        raise low.error(node, f"too many indices ({len(real)}) for a tensor of rank {len(t.shape)}",
                         "index each axis at most once")
    axis = 0
    for item in items:
        if isinstance(item, ast.Slice):
            x = slice_axis(low, x, axis, item)
            axis += 1
            continue
        idx = low.expr(item)
        if isinstance(idx, Static) and idx.value is None:  # np.newaxis
            x = low.emit("Unsqueeze", [x], {"axes": (axis,)})
            axis += 1
            continue
        if not isinstance(idx, Static) and axis == 0 and len(real) == 1:
            m = low.as_node(idx)
            if isinstance(m.type, TensorType) and m.type.dtype == "bool":
                out = low.emit("BooleanMask", [x, m])  # x[mask]: the selected rows, in order
                if isinstance(out.type, TupleType):  # (values, count)
                    out = low.emit("Proj", [out], {"num": 0})
                return out
        i = index_value(low, idx, item)
        x = low.emit("Gather", [x, i], {"axis": axis})
    return x


def index_value(low: Lowering, v: Val, node: ast.AST) -> Node:
    if isinstance(v, Static) and isinstance(v.value, bool):
        raise low.error(node, "bool indices are not supported", "use an int index")
    if isinstance(v, Static) and isinstance(v.value, int):
        return low.static_const(v.value)
    n = low.as_node(v)
    t = n.type
    if not isinstance(t, TensorType) or not is_int(t.dtype):
        raise low.error(node, f"an index must be an integer, got {t}", "convert with int(...)")
    return n


def slice_axis(low: Lowering, x: Node, axis: int, s: ast.Slice) -> Node:
    step_v = low.expr(s.step) if s.step is not None else Static(1)
    if isinstance(step_v, Static) and step_v.value == 0:
        raise low.error(s, "slice step cannot be zero")
    negative = isinstance(step_v, Static) and isinstance(step_v.value, int) and step_v.value < 0
    if not isinstance(step_v, Static) and s.lower is None or not isinstance(step_v, Static) and s.upper is None:
        raise low.error(s, "a slice with a runtime step needs explicit bounds", "write x[a:b:step]")
    lo = low.expr(s.lower) if s.lower is not None else Static(INT64_BIG if negative else 0)
    hi = low.expr(s.upper) if s.upper is not None else Static(-INT64_BIG - 1 if negative else INT64_BIG)
    if (isinstance(lo, Static) and lo.value in (0, None) and isinstance(hi, Static) and hi.value == INT64_BIG
            and isinstance(step_v, Static) and step_v.value == 1):
        return x  # `:` keeps the axis
    parts = [bound_1d(low, v, s) for v in (lo, hi, Static(axis), step_v)]
    return low.emit("Slice", [x, *parts])


def store_index(low: Lowering, x: Node, node: ast.Subscript) -> tuple[str, list[Node]]:
    """The ``kinds`` and index inputs of SetItem for ``x[...] = v``."""
    t = x.type
    if not isinstance(t, TensorType) or t.shape is None:
        raise low.error(node, f"assigning into an element needs a tensor of known rank, got {t}",
                         "create it with np.zeros(...) or annotate the argument, e.g. Tensor['T', 'D']")
    items = list(node.slice.elts) if isinstance(node.slice, ast.Tuple) else [node.slice]
    if len(items) > len(t.shape):
        raise low.error(node, f"too many indices ({len(items)}) for a tensor of rank {len(t.shape)}",
                         "index each axis at most once")
    kinds, inputs = "", []
    for item in items:
        if isinstance(item, ast.Slice):
            step = low.expr(item.step) if item.step is not None else Static(1)
            if isinstance(step, Static) and step.value == 0:
                raise low.error(item, "slice step cannot be zero")
            neg = isinstance(step, Static) and isinstance(step.value, int) and step.value < 0
            if not isinstance(step, Static) and (item.lower is None or item.upper is None):
                raise low.error(item, "a slice with a runtime step needs explicit bounds", "write x[a:b:step]")
            if item.lower is None and item.upper is None and isinstance(step, Static) and step.value == 1:
                kinds += ":"
                continue
            lo = low.expr(item.lower) if item.lower is not None else Static(INT64_BIG if neg else 0)
            hi = low.expr(item.upper) if item.upper is not None else \
                Static(-INT64_BIG - 1 if neg else INT64_BIG)
            kinds += "s"
            inputs += [low.cast(index_value(low, v, item), "i64") for v in (lo, hi, step)]
            continue
        idx = low.expr(item)
        if isinstance(idx, Static) and (idx.value is None or idx.value is Ellipsis):
            raise low.error(item, "`None` and `...` in an assigned subscript are not supported",
                             "index every axis with ints, slices, int arrays or a bool mask")
        if not isinstance(idx, Static):
            n = low.as_node(idx)
            if isinstance(n.type, TensorType) and n.type.dtype == "bool":
                kinds += "i"
                inputs.append(n)
                continue
        kinds += "i"
        inputs.append(index_value(low, idx, item))
    return kinds, inputs


def bound_1d(low: Lowering, v: Val, node: ast.AST) -> Node:
    if isinstance(v, Static) and isinstance(v.value, int) and not isinstance(v.value, bool):
        return low.const(np.array([v.value], np.int64), "i64")
    n = index_value(low, v, node)
    return low.emit("Reshape", [low.cast(n, "i64"), low.const(np.array([1], np.int64), "i64")])
