"""Indexing ops: Slice (ONNX form, with runtime starts/ends/axes/steps), GatherND,
ScatterND, OneHot, GatherElements, ScatterElements, SetItem.  (Gather lives in shape.py.)"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import sympy

from nexus.ir.opdef import Attr, DimEq, Inferred, OpTypeError
from nexus.ir.types import INT_DTYPES, Type, fresh_dim, simplify_dim
from nexus.ops._rules import (
    ALL_DTYPES,
    assume_equal,
    assuming,
    check_dtype,
    check_int_scalar,
    check_int_vector,
    define,
    dims_value,
    normalize_axis,
    scalar_value,
    tensor,
)

FAMILY = "index"
# Ends at or beyond this mean "to the end" (ONNX exports use INT_MAX / INT64_MAX).
_TO_END = 2**31 - 1


# --- Slice -------------------------------------------------------------------------------
def slice_len(d: Any, start: Any, end: Any, step: int) -> Any:
    """The length of ``x[start:end:step]`` along a dim of size ``d`` (ints or sympy),
    with Python's (= ONNX's) clamping of out-of-range and negative indices."""
    if all(isinstance(v, int) for v in (d, start, end)):
        return len(range(*slice(start, end, step).indices(d)))
    if step > 0:
        lo = _clamp(_wrap(start, d), 0, d)
        hi = d if isinstance(end, int) and end >= _TO_END else _clamp(_wrap(end, d), 0, d)
        n = sympy.ceiling((hi - lo) / step)
    else:
        first = _clamp(_wrap(start, d), -1, d - 1)
        last = -1 if isinstance(end, int) and end <= -_TO_END else _clamp(_wrap(end, d), -1, d - 1)
        n = sympy.ceiling((first - last) / -step)
    return simplify_dim(sympy.Max(n, 0))


def _wrap(i: Any, d: Any) -> Any:
    if isinstance(i, int):
        return i + d if i < 0 else i
    return i  # a symbolic index is taken to be non-negative


def _clamp(i: Any, lo: Any, hi: Any) -> Any:
    return sympy.Min(sympy.Max(i, lo), hi)


def _slice_rule(op: str, ins: Sequence[Type], attrs: Mapping[str, Any], values: Sequence[Any]) -> Type:
    if len(ins) > 5:
        raise OpTypeError(f"{op}: takes 3 to 5 inputs (data, starts, ends, axes, steps), got {len(ins)}")
    x = tensor(op, ins[0], 0)
    names = ("data", "starts", "ends", "axes", "steps")
    for i in range(1, len(ins)):
        check_int_vector(op, tensor(op, ins[i], i), names[i])
    if x.shape is None:
        return x
    if not x.shape:
        raise OpTypeError(f"{op}: cannot slice a scalar")
    r = len(x.shape)
    starts, ends = dims_value(values[1]), dims_value(values[2])
    axes = dims_value(values[3]) if len(ins) > 3 else list(range(len(starts or ends or ())))
    steps = dims_value(values[4]) if len(ins) > 4 else None
    if axes is None or (len(ins) <= 3 and starts is None and ends is None):
        # Which axes change is unknown: every dim may.
        n = tensor(op, ins[1], 1).shape
        if len(ins) <= 3 and n is not None and isinstance(n[0], int):
            return x.with_shape(tuple(fresh_dim() if i < n[0] else d for i, d in enumerate(x.shape)))
        return x.with_shape(tuple(fresh_dim() for _ in x.shape))
    if any(not isinstance(a, int) for a in axes):
        return x.with_shape(tuple(fresh_dim() for _ in x.shape))
    norm = [normalize_axis(op, a, r) for a in axes]
    if len(set(norm)) != len(norm):
        raise OpTypeError(f"{op}: repeated axis in {axes}")
    for what, v in (("starts", starts), ("ends", ends), ("steps", steps)):
        if v is not None and len(v) != len(norm):
            raise OpTypeError(f"{op}: {what} has {len(v)} entries, axes has {len(norm)}")
    if steps is not None and any(isinstance(s, int) and s == 0 for s in steps):
        raise OpTypeError(f"{op}: a step is 0")
    shape = list(x.shape)
    for k, a in enumerate(norm):
        step = steps[k] if steps is not None else 1
        if starts is None or ends is None or not isinstance(step, int):
            shape[a] = fresh_dim()
        else:
            shape[a] = slice_len(x.shape[a], starts[k], ends[k], step)
    return x.with_shape(tuple(shape))


def _slice(data: Any, starts: Any, ends: Any, axes: Any = None, steps: Any = None) -> Any:
    arr = np.asarray(data)
    index = [slice(None)] * arr.ndim
    axes = range(len(starts)) if axes is None else axes
    for k, a in enumerate(axes):
        step = 1 if steps is None else int(steps[k])
        index[int(a)] = slice(int(starts[k]), int(ends[k]), step)
    return np.ascontiguousarray(arr[tuple(index)])


define("Slice", FAMILY, ("data", "starts", "ends", "axes_then_steps"), _slice_rule, _slice, variadic=True,
       differentiable=True,
       doc="data[starts:ends:steps] on `axes` (default: the first len(starts) axes), all four 1-D int tensors "
           "computed in the graph or constant; negative indices count from the end; out-of-range ones clamp "
           "(ONNX Slice). Inputs: data, starts, ends, optional axes, optional steps.", may_fail=True)


# --- GatherND / ScatterND ----------------------------------------------------------------
def _gather_nd_rule(op: str, ins: Sequence[Type], attrs: Mapping[str, Any], _: Sequence[Any]) -> Type:
    x, idx = tensor(op, ins[0], 0), tensor(op, ins[1], 1)
    check_dtype(op, idx, INT_DTYPES, 1)
    b = attrs["batch_dims"]
    if x.shape is None or idx.shape is None:
        return x.with_shape(None)
    if not idx.shape:
        raise OpTypeError(f"{op}: indices must have rank >= 1")
    k = idx.shape[-1]
    if not isinstance(k, int):
        return x.with_shape(None)
    if b < 0 or b >= len(idx.shape) or b + k > len(x.shape):
        raise OpTypeError(f"{op}: index depth {k} with batch_dims {b} does not fit data of rank {len(x.shape)}")
    return x.with_shape(idx.shape[:-1] + x.shape[b + k:])


def _gather_nd(data: Any, indices: Any, batch_dims: int = 0) -> Any:
    data, indices = np.asarray(data), np.asarray(indices)
    b = batch_dims
    batch = data.shape[:b]
    nb = int(np.prod(batch)) if b else 1
    d = data.reshape((nb,) + data.shape[b:])
    ix = indices.reshape((nb,) + indices.shape[b:])
    k = ix.shape[-1]
    out = np.stack([d[i][tuple(np.moveaxis(ix[i], -1, 0))] for i in range(nb)]) if nb else np.empty(
        (0,) + ix.shape[1:-1] + d.shape[1 + k:], d.dtype)
    return out.reshape(indices.shape[:-1] + data.shape[b + k:])


define("GatherND", FAMILY, ("data", "indices"), _gather_nd_rule, _gather_nd, differentiable=True,
       attrs={"batch_dims": Attr("int", 0, "leading dims shared by data and indices")},
       doc="Picks slices data[i_0, ..., i_{k-1}] for each index tuple in the last axis of `indices` (ONNX).",
       may_fail=True)

_REDUCTIONS = {"none": None, "add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}


def _scatter_nd_rule(op: str, ins: Sequence[Type], attrs: Mapping[str, Any], _: Sequence[Any]) -> Type | Inferred:
    x, idx, upd = (tensor(op, t, i) for i, t in enumerate(ins))
    check_dtype(op, idx, INT_DTYPES, 1)
    if upd.dtype != x.dtype:
        raise OpTypeError(f"{op}: updates are {upd.dtype}, data is {x.dtype}; insert a Cast")
    if attrs["reduction"] not in _REDUCTIONS:
        raise OpTypeError(f"{op}: reduction must be one of {', '.join(_REDUCTIONS)}, got {attrs['reduction']!r}")
    if x.shape is not None and idx.shape is not None and upd.shape is not None and idx.shape:
        k = idx.shape[-1]
        if isinstance(k, int):
            want = idx.shape[:-1] + x.shape[k:]
            if len(want) != len(upd.shape) or any(
                isinstance(a, int) and isinstance(b, int) and a != b for a, b in zip(want, upd.shape)
            ):
                raise OpTypeError(f"{op}: updates must have shape {list(want)}, got {list(upd.shape)}")
            # updates are [*indices.shape[:-1], *data.shape[k:]]
            lead = len(idx.shape) - 1
            assumed: list[DimEq] = assume_equal(ins, *((1, p, 2, p) for p in range(lead)),
                                                *((0, k + q, 2, lead + q) for q in range(len(x.shape) - k)))
            return assuming(x, assumed)
    return x


def _scatter_nd(data: Any, indices: Any, updates: Any, reduction: str = "none") -> Any:
    out = np.array(data, copy=True)
    indices = np.asarray(indices)
    k = indices.shape[-1]
    ix = tuple(np.moveaxis(indices.reshape(-1, k), -1, 0))
    upd = np.asarray(updates).reshape((-1,) + out.shape[k:])
    fn = _REDUCTIONS[reduction]
    if fn is None:
        out[ix] = upd
    else:
        fn.at(out, ix, upd)
    return out


define("ScatterND", FAMILY, ("data", "indices", "updates"), _scatter_nd_rule, _scatter_nd, differentiable=True,
       attrs={"reduction": Attr("str", "none", "none (duplicate indices: last wins), add, mul, max or min")},
       doc="A copy of data with data[indices[...]] = updates (or combined by `reduction`), as ONNX ScatterND.",
       may_fail=True)


# --- OneHot ------------------------------------------------------------------------------
def _one_hot_rule(op: str, ins: Sequence[Type], attrs: Mapping[str, Any], values: Sequence[Any]) -> Type:
    idx, depth, vals = (tensor(op, t, i) for i, t in enumerate(ins))
    check_dtype(op, idx, INT_DTYPES, 0)
    check_int_scalar(op, depth, "depth")
    check_dtype(op, vals, ALL_DTYPES, 2)
    if vals.shape is not None and vals.shape != (2,):
        raise OpTypeError(f"{op}: values must be [off, on], shape [2], got {vals}")
    if idx.shape is None:
        return vals.with_shape(None)
    d = scalar_value(values[1])
    shape = list(idx.shape)
    axis = normalize_axis(op, attrs["axis"], len(shape) + 1)
    shape.insert(axis, d if d is not None else fresh_dim())
    return vals.with_shape(tuple(shape))


def _one_hot(indices: Any, depth: Any, values: Any, axis: int = -1) -> Any:
    idx = np.asarray(indices).astype(np.int64)
    d = int(depth)
    vals = np.asarray(values)
    idx = np.where(idx < 0, idx + d, idx)  # ONNX: indices in [-depth, depth) wrap
    hot = idx[..., None] == np.arange(d)
    out = np.where(hot, vals[1], vals[0]).astype(vals.dtype)
    axis = axis if axis >= 0 else out.ndim + axis
    return np.moveaxis(out, -1, axis)


define("OneHot", FAMILY, ("indices", "depth", "values"), _one_hot_rule, _one_hot,
       attrs={"axis": Attr("int", -1, "where the new axis of size depth goes")},
       doc="values[1] where the index hits, values[0] elsewhere; a new axis of size depth (ONNX OneHot).",
       may_fail=True)


# --- GatherElements ------------------------------------------------------------------------
def _gather_elements_rule(op: str, ins: Sequence[Type], attrs: Mapping[str, Any], _: Sequence[Any]) -> Type:
    data, idx = tensor(op, ins[0], 0), tensor(op, ins[1], 1)
    check_dtype(op, idx, INT_DTYPES, 1)
    if idx.shape is None:
        return data.with_shape(None)
    if data.shape is not None:
        if len(data.shape) != len(idx.shape):
            raise OpTypeError(f"{op}: indices have rank {len(idx.shape)}, data has rank {len(data.shape)}; "
                              f"they must be equal")
        normalize_axis(op, attrs["axis"], len(data.shape))
    return data.with_shape(idx.shape)


def _gather_elements(data: Any, indices: Any, axis: int = 0) -> Any:
    arr = np.asarray(data)
    idx = np.asarray(indices).astype(np.int64)
    n = arr.shape[axis]
    if idx.size and (idx.min() < -n or idx.max() >= n):
        raise IndexError(f"GatherElements: an index is out of range for an axis of size {n}")
    return np.take_along_axis(arr, np.where(idx < 0, idx + n, idx), axis=axis)


define("GatherElements", FAMILY, ("data", "indices"), _gather_elements_rule, _gather_elements,
       attrs={"axis": Attr("int", 0, "the axis indexed")}, differentiable=True, may_fail=True,
       doc="out[i][j][k] = data[indices[i][j][k]][j][k] for axis 0 (and so on): picks one entry along `axis` "
           "per index, the result shaped like `indices` (ONNX GatherElements, NumPy take_along_axis); "
           "negative indices count from the end.")


# --- ScatterElements -----------------------------------------------------------------------
def _scatter_elements_rule(op: str, ins: Sequence[Type], attrs: Mapping[str, Any], _: Sequence[Any]) -> Type:
    data, idx, upd = (tensor(op, t, i) for i, t in enumerate(ins))
    check_dtype(op, idx, INT_DTYPES, 1)
    if upd.dtype != data.dtype:
        raise OpTypeError(f"{op}: updates are {upd.dtype}, data is {data.dtype}; insert a Cast")
    if attrs["reduction"] not in _REDUCTIONS:
        raise OpTypeError(f"{op}: reduction must be one of {', '.join(_REDUCTIONS)}, got {attrs['reduction']!r}")
    if data.shape is not None:
        normalize_axis(op, attrs["axis"], max(len(data.shape), 1))
        for t, what in ((idx, "indices"), (upd, "updates")):
            if t.shape is not None and len(t.shape) != len(data.shape):
                raise OpTypeError(f"{op}: {what} have rank {len(t.shape)}, data has rank {len(data.shape)}")
    if idx.shape is not None and upd.shape is not None and any(
            isinstance(a, int) and isinstance(b, int) and a != b for a, b in zip(idx.shape, upd.shape)):
        raise OpTypeError(f"{op}: updates {upd} must have the shape of indices {idx}")
    return data


def _scatter_elements(data: Any, indices: Any, updates: Any, axis: int = 0, reduction: str = "none") -> Any:
    out = np.array(data, copy=True)
    idx = np.asarray(indices).astype(np.int64)
    upd = np.asarray(updates)
    axis = axis % max(out.ndim, 1)
    n = out.shape[axis]
    if idx.size and (idx.min() < -n or idx.max() >= n):
        raise IndexError(f"ScatterElements: an index is out of range for an axis of size {n}")
    where: list[Any] = list(np.indices(idx.shape, sparse=True))
    where[axis] = np.where(idx < 0, idx + n, idx)
    fn = _REDUCTIONS[reduction]
    if fn is None:
        out[tuple(where)] = upd  # a repeated index keeps the last update, as ONNX Runtime
    else:
        fn.at(out, tuple(where), upd)
    return out


define("ScatterElements", FAMILY, ("data", "indices", "updates"), _scatter_elements_rule, _scatter_elements,
       may_fail=True,
       attrs={"axis": Attr("int", 0, "the axis indexed"),
              "reduction": Attr("str", "none", "none (a repeated index: the last update), add, mul, max or min")},
       doc="A copy of data with data[..., indices[i][j][k], ...] = updates[i][j][k] along `axis` (or combined "
           "by `reduction`): the inverse of GatherElements (ONNX ScatterElements, Scatter).")


# --- SetItem: NumPy's subscript assignment as a value ------------------------------------
# The index of ``x[...] = v`` is spelt by ``kinds``, one character per indexed axis: "i" an
# index input (an int, an int array or a bool mask), "s" a slice with three i64 inputs
# (start, stop, step; Python's clamping), ":" a whole axis.
_KINDS_DOC = ('one character per indexed axis: "i" one index input (int, int array or bool mask), '
              '"s" a slice given by three i64 scalar inputs start, stop, step, ":" the whole axis')


def index_tuple(kinds: str, idx: Sequence[Any]) -> tuple[Any, ...]:
    """The Python index that ``kinds`` and its inputs spell."""
    out: list[Any] = []
    k = 0
    for c in kinds:
        if c == "i":
            i = idx[k]
            out.append(i[()] if type(i) is np.ndarray and i.ndim == 0 and i.dtype != np.bool_ else i)
            k += 1
        elif c == "s":
            out.append(slice(int(idx[k]), int(idx[k + 1]), int(idx[k + 2])))
            k += 3
        else:
            out.append(slice(None))
    return tuple(out)


def _check_kinds(op: str, kinds: str, ins: Sequence[Type], first: int) -> None:
    if any(c not in "is:" for c in kinds):
        raise OpTypeError(f"{op}: kinds must be made of 'i', 's' and ':', got {kinds!r}")
    want = first + kinds.count("i") + 3 * kinds.count("s")
    if len(ins) != want:
        raise OpTypeError(f"{op}: kinds {kinds!r} needs {want} inputs, got {len(ins)}")
    for i in range(first, len(ins)):
        check_dtype(op, tensor(op, ins[i], i), INT_DTYPES | {"bool"}, i)


def _setitem_rule(op: str, ins: Sequence[Type], attrs: Mapping[str, Any], _: Sequence[Any]) -> Type:
    x, v = tensor(op, ins[0], 0), tensor(op, ins[1], 1)
    if v.dtype != x.dtype:
        raise OpTypeError(f"{op}: the value is {v.dtype}, data is {x.dtype}; insert a Cast")
    _check_kinds(op, attrs["kinds"], ins, 2)
    if x.shape is not None and len(attrs["kinds"]) > len(x.shape):
        raise OpTypeError(f"{op}: {len(attrs['kinds'])} indices for a tensor of rank {len(x.shape)}")
    return x


def _setitem(data: Any, value: Any, *idx: Any, kinds: str) -> Any:
    out = np.array(data, copy=True)
    out[index_tuple(kinds, idx)] = value
    return out


def _probe(a: Any, value: Any, *idx: Any, kinds: str) -> int:
    return sys.getrefcount(a)


def _held_once() -> int:
    a = np.zeros(1)
    return _probe(a, a, kinds="")  # `a` passed twice: one more reference than alone


# References to an array held by one local of the calling function, counted inside
# setitem_owned (calibrated here rather than assumed: it differs between CPython versions).
_OWNED_REFS = _held_once() - 1


def setitem_owned(data: Any, value: Any, *idx: Any, kinds: str) -> Any:
    """SetItem that writes into ``data`` when nothing else can see it: the python backend
    calls it only where ``data`` dies at this node, and the reference count proves no other
    variable, view, argument of the caller or constant holds it (else it copies)."""
    if (type(data) is np.ndarray and sys.getrefcount(data) <= _OWNED_REFS and data.base is None
            and data.flags.writeable and data.flags.owndata):
        # Only "i" kinds: the inputs are the index as they are (a 0-d int array indexes as its int
        # would, for a write); slices need index_tuple.
        data[idx[0] if kinds == "i" else idx if kinds.count("i") == len(kinds) else index_tuple(kinds, idx)] = value
        return data
    return _setitem(data, value, *idx, kinds=kinds)


define("SetItem", FAMILY, ("data", "value", "index"), _setitem_rule, _setitem, variadic=True,
       differentiable=True, may_fail=True,
       attrs={"kinds": Attr("str", "i", _KINDS_DOC)},
       doc="A copy of data with data[index] = value (NumPy's subscript assignment as a value, like JAX's "
           "x.at[index].set(value)): broadcasting, negative indices, masks and int arrays as NumPy "
           "(a repeated index keeps the last write). The python backend writes in place when data is dead.")


def _setitem_value_grad_rule(op: str, ins: Sequence[Type], attrs: Mapping[str, Any], _: Sequence[Any]) -> Type:
    tensor(op, ins[0], 0)
    _check_kinds(op, attrs["kinds"], ins, 2)
    return tensor(op, ins[1], 1)


def _setitem_value_grad(g: Any, value: Any, *idx: Any, kinds: str) -> Any:
    part = np.asarray(g[index_tuple(kinds, idx)])
    shape = np.shape(value)
    lead = part.ndim - len(shape)
    if lead:
        part = part.sum(axis=tuple(range(lead)))
    keep = tuple(i for i, d in enumerate(shape) if d == 1 and part.shape[i] != 1)
    if keep:
        part = part.sum(axis=keep, keepdims=True)
    return np.asarray(part, dtype=np.asarray(g).dtype).reshape(shape)


define("SetItemValueGrad", FAMILY, ("g", "value", "index"), _setitem_value_grad_rule, _setitem_value_grad,
       variadic=True, may_fail=True, attrs={"kinds": Attr("str", "i", _KINDS_DOC)},
       doc="The cotangent of SetItem's value: g[index] summed back to the shape of value.")
