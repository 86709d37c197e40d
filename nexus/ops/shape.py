"""Shape and indexing ops."""

from __future__ import annotations

import math
import sys
import weakref
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import sympy

from nexus.ir.opdef import Attr, Inferred, OpTypeError
from nexus.ir.types import (
    INT_DTYPES,
    Dim,
    TensorType,
    TupleType,
    Type,
    broadcast_shapes,
    dtype_of,
    fresh_dim,
    simplify_dim,
)
from nexus.ops._rules import (
    as_dim,
    assume_equal,
    assuming,
    check_int_vector,
    check_same_dtype,
    define,
    dims_value,
    fresh_shape,
    normalize_axis,
    tensor,
    vector_len,
)

FAMILY = "shape"


def _reshape_rule(op: str, ins: Sequence[Type], attrs: Mapping[str, Any], values: Sequence[Any]) -> Type:
    x, s = tensor(op, ins[0], 0), tensor(op, ins[1], 1)
    check_int_vector(op, s, "the shape input")
    target = dims_value(values[1])
    if target is None:
        return TensorType(x.dtype, fresh_shape(vector_len(s)))
    dims: list[Dim] = list(target)
    holes = [i for i, d in enumerate(dims) if isinstance(d, int) and d == -1]
    if len(holes) > 1 or any(isinstance(d, int) and d < -1 for d in dims):
        raise OpTypeError(f"{op}: bad target shape {dims}")
    if holes and x.shape is not None:
        known = _prod(d for d in dims if not (isinstance(d, int) and d == -1))
        total = _prod(x.shape)
        if isinstance(known, int) and known == 0:
            raise OpTypeError(f"{op}: cannot infer -1 in {dims} with a zero-sized dim")
        if isinstance(total, int) and isinstance(known, int):
            if total % known:
                raise OpTypeError(f"{op}: cannot reshape {list(x.shape)} to {dims}")
            dims[holes[0]] = total // known
        else:
            dims[holes[0]] = simplify_dim(total / known)  # within the simplify budget
    elif holes:
        dims[holes[0]] = fresh_dim()
    if x.is_static and not holes and all(isinstance(d, int) for d in dims):
        if math.prod(x.shape or ()) != math.prod(dims):  # type: ignore[arg-type]
            raise OpTypeError(f"{op}: cannot reshape {list(x.shape or ())} to {dims}")
    return TensorType(x.dtype, tuple(dims))


def _prod(dims: Any) -> Any:
    out: Any = 1
    for d in dims:
        out = out * d
    return out if not isinstance(out, sympy.Basic) else simplify_dim(out)


def _reshape(x: Any, shape: Any) -> Any:
    # tolist() gives Python ints ten times faster than a generator of int() (a hot kernel).
    dims = shape.tolist() if type(shape) is np.ndarray else [int(d) for d in shape]
    return np.asarray(x).reshape(dims)


define("Reshape", FAMILY, ("data", "shape"), _reshape_rule, _reshape, differentiable=True,
       doc="Gives `data` the shape held in the 1-D integer tensor `shape` (one -1 is inferred).", may_fail=True)


def _transpose_rule(op: str, ins: Sequence[Type], attrs: Mapping[str, Any], _: Sequence[Any]) -> Type:
    x = tensor(op, ins[0], 0)
    if x.shape is None:
        return x
    perm = attrs.get("perm")
    rank = len(x.shape)
    if perm is None:
        perm = tuple(reversed(range(rank)))
    if sorted(perm) != list(range(rank)):
        raise OpTypeError(f"{op}: perm {list(perm)} is not a permutation of {rank} axes")
    return TensorType(x.dtype, tuple(x.shape[p] for p in perm))


define("Transpose", FAMILY, ("x",), _transpose_rule, lambda x, perm=None: np.transpose(x, perm),
       attrs={"perm": Attr("ints", None, "the order of axes; reversed when absent")},
       differentiable=True, doc="Permutes axes.")


def _gather_rule(op: str, ins: Sequence[Type], attrs: Mapping[str, Any], _: Sequence[Any]) -> Type:
    x, idx = tensor(op, ins[0], 0), tensor(op, ins[1], 1)
    if idx.dtype not in INT_DTYPES:
        raise OpTypeError(f"{op}: indices must be integers, got {idx.dtype}")
    if x.shape is None or idx.shape is None:
        return TensorType(x.dtype, None)
    if not x.shape:
        raise OpTypeError(f"{op}: cannot index a scalar")
    axis = normalize_axis(op, attrs["axis"], len(x.shape))
    return TensorType(x.dtype, x.shape[:axis] + idx.shape + x.shape[axis + 1:])


def _gather(x: Any, idx: Any, axis: int = 0) -> Any:
    return np.take(x, idx, axis=axis)


define("Gather", FAMILY, ("data", "indices"), _gather_rule, _gather,
       attrs={"axis": Attr("int", 0, "the axis indexed")}, differentiable=True,
       doc="Picks entries along `axis` (negative indices count from the end): `x[t]`.", may_fail=True)


# --- Append: a Python list built by ``append`` in a script, held as its stacked tensor ----
def _append_rule(op: str, ins: Sequence[Type], attrs: Mapping[str, Any], _: Sequence[Any]) -> Type:
    lst, x = tensor(op, ins[0], 0), tensor(op, ins[1], 1)
    check_same_dtype(op, [lst, x])
    if x.shape is None or lst.shape is None:
        return TensorType(x.dtype, None)
    if len(lst.shape) != len(x.shape) + 1:
        raise OpTypeError(f"{op}: the list (input 0) must have rank {len(x.shape) + 1} to take a value of "
                          f"rank {len(x.shape)}, got {lst}")
    n = lst.shape[0]
    return TensorType(x.dtype, (_sum([n, 1]), *x.shape))


def _append(lst: Any, x: Any) -> Any:
    x = np.asarray(x)
    if np.shape(lst)[0] == 0:  # an empty list has no element shape: the first value gives it
        return x[None].copy()
    if np.shape(lst)[1:] != x.shape:
        raise ValueError(f"Append: a value of shape {x.shape} joins a list of values of shape {np.shape(lst)[1:]}")
    return np.concatenate([lst, x[None]])


# Buffers made by append_owned: id -> (a weak reference to the buffer, rows in use).  A
# list value the python backend grows in place is the view ``buffer[:rows]``.
_GROWN: dict[int, tuple[weakref.ref[np.ndarray], int]] = {}


def _grown(buf: np.ndarray, rows: int) -> np.ndarray:
    key = id(buf)
    _GROWN[key] = (weakref.ref(buf, lambda _: _GROWN.pop(key, None)), rows)
    return buf[:rows]


def _probe(lst: Any, x: Any) -> int:
    return sys.getrefcount(lst)


def _base_refs(lst: Any) -> int:
    buf = lst.base
    return sys.getrefcount(buf)


_a = np.zeros(2)
# References held by one local of the calling function, counted inside append_owned (`_a`
# passed twice: one more than alone); and those of a buffer that only one view holds.
_OWNED_REFS, _BUF_REFS = _probe(_a, _a) - 1, _base_refs(np.zeros(2)[:1])
del _a


def append_owned(lst: Any, x: Any) -> Any:
    """Append for a list value that dies at this node (the python backend calls it only
    then): amortised O(1).  The list is a view of a buffer with spare rows; the value goes
    into the next row when the reference counts prove that no other variable holds this
    view and no other view of the buffer exists, and the view is the buffer's rows in use;
    else the list is copied into a new buffer of twice the rows.  The result is the same
    value as :func:`_append`'s."""
    if type(lst) is np.ndarray and sys.getrefcount(lst) <= _OWNED_REFS:
        buf = lst.base
        entry = _GROWN.get(id(buf))
        if (entry is not None and buf is not None and entry[0]() is buf and entry[1] == lst.shape[0] < buf.shape[0]
                and lst.strides == buf.strides and sys.getrefcount(buf) <= _BUF_REFS):
            x = np.asarray(x)
            if x.shape == lst.shape[1:] and x.dtype == lst.dtype:
                n = entry[1]
                buf[n] = x
                return _grown(buf, n + 1)
    out = _append(lst, x)
    new = np.empty((max(2 * out.shape[0], 4), *out.shape[1:]), out.dtype)
    new[:out.shape[0]] = out
    return _grown(new, out.shape[0])


define("Append", FAMILY, ("list", "value"), _append_rule, _append, differentiable=True, may_fail=True,
       doc="A Python list extended by `value`, the list held as its stacked tensor [n, *shape]: "
           "`np.stack(lst + [value])`; an empty list ([0, ...], any trailing dims) takes its element shape from "
           "`value`.")


# --- rank changes ------------------------------------------------------------------------
def _flatten_rule(op: str, ins: Sequence[Type], attrs: Mapping[str, Any], _: Sequence[Any]) -> Type:
    x = tensor(op, ins[0], 0)
    if x.shape is None:
        return TensorType(x.dtype, (fresh_dim(), fresh_dim()))
    r = len(x.shape)
    axis = attrs["axis"]
    if not -r <= axis <= r:
        raise OpTypeError(f"{op}: axis {axis} is out of range for rank {r}")
    axis = axis if axis >= 0 else r + axis
    return TensorType(x.dtype, (_prod(x.shape[:axis]), _prod(x.shape[axis:])))


def _flatten(x: Any, axis: int = 1) -> Any:
    arr = np.asarray(x)
    axis = axis if axis >= 0 else arr.ndim + axis
    return arr.reshape(math.prod(arr.shape[:axis]), math.prod(arr.shape[axis:]))


define("Flatten", FAMILY, ("x",), _flatten_rule, _flatten, differentiable=True,
       attrs={"axis": Attr("int", 1, "dims before it form the rows, the rest the columns")},
       doc="A matrix [prod(d[:axis]), prod(d[axis:])] (ONNX Flatten).")


def _squeeze_rule(op: str, ins: Sequence[Type], attrs: Mapping[str, Any], _: Sequence[Any]) -> Type:
    x = tensor(op, ins[0], 0)
    if x.shape is None:
        return x
    axes = attrs.get("axes")
    if axes is None:
        if any(not isinstance(d, int) for d in x.shape):
            # A symbolic dim may or may not be 1: the rank is unknown until run time.
            return x.with_shape(None)
        return x.with_shape(tuple(d for d in x.shape if d != 1))
    norm = {normalize_axis(op, a, len(x.shape)) for a in axes}
    for a in norm:
        if isinstance(x.shape[a], int) and x.shape[a] != 1:
            raise OpTypeError(f"{op}: axis {a} has size {x.shape[a]}, not 1")
    return x.with_shape(tuple(d for i, d in enumerate(x.shape) if i not in norm))


def _squeeze(x: Any, axes: tuple[int, ...] | None = None) -> Any:
    arr = np.asarray(x)
    out = np.squeeze(arr, axis=axes) if axes is None or len(axes) else arr
    return out


define("Squeeze", FAMILY, ("x",), _squeeze_rule, _squeeze, differentiable=True,
       attrs={"axes": Attr("ints", None, "axes of size 1 to drop; all size-1 axes when absent")},
       doc="Drops axes of size 1.")


def _unsqueeze_axes(op: str, axes: tuple[int, ...], rank: int) -> list[int]:
    out_rank = rank + len(axes)
    norm = sorted(normalize_axis(op, a, out_rank) for a in axes)
    if len(set(norm)) != len(norm):
        raise OpTypeError(f"{op}: repeated axis in {list(axes)}")
    return norm


def _unsqueeze_rule(op: str, ins: Sequence[Type], attrs: Mapping[str, Any], _: Sequence[Any]) -> Type:
    x = tensor(op, ins[0], 0)
    if x.shape is None:
        return x
    shape = list(x.shape)
    for a in _unsqueeze_axes(op, attrs["axes"], len(shape)):
        shape.insert(a, 1)
    return x.with_shape(tuple(shape))


def _unsqueeze(x: Any, axes: tuple[int, ...]) -> Any:
    arr = np.asarray(x)
    return np.expand_dims(arr, tuple(_unsqueeze_axes("Unsqueeze", axes, arr.ndim)))


define("Unsqueeze", FAMILY, ("x",), _unsqueeze_rule, _unsqueeze, differentiable=True,
       attrs={"axes": Attr("ints", doc="positions of the new size-1 axes in the result")},
       doc="Inserts axes of size 1.")


# --- joining and splitting ---------------------------------------------------------------
def _concat_rule(op: str, ins: Sequence[Type], attrs: Mapping[str, Any], _: Sequence[Any]) -> Type | Inferred:
    if not ins:
        raise OpTypeError(f"{op}: needs at least one input")
    ts = [tensor(op, t, i) for i, t in enumerate(ins)]
    dtype = check_same_dtype(op, ts)
    known = [t for t in ts if t.shape is not None]
    if not known:
        return TensorType(dtype, None)
    rank = len(known[0].shape or ())
    if rank == 0:
        raise OpTypeError(f"{op}: cannot concatenate scalars; Unsqueeze them first")
    axis = normalize_axis(op, attrs["axis"], rank)
    for i, t in enumerate(ts):
        if t.shape is not None and len(t.shape) != rank:
            raise OpTypeError(f"{op}: input {i} has rank {len(t.shape)}, input 0 has rank {rank}")
    if len(known) != len(ts):
        shape = list(known[0].shape or ())
        shape[axis] = fresh_dim()
        return TensorType(dtype, tuple(shape))
    out: list[Any] = []
    for k in range(rank):
        dims = [(t.shape or ())[k] for t in ts]
        if k == axis:
            out.append(_sum(dims))
            continue
        static = {d for d in dims if isinstance(d, int)}
        if len(static) > 1:
            raise OpTypeError(f"{op}: inputs differ in dim {k}: {', '.join(str(d) for d in dims)}")
        out.append(static.pop() if static else dims[0])
    assumed = assume_equal(ins, *((0, k, j, k) for k in range(rank) if k != axis for j in range(1, len(ts))))
    return assuming(TensorType(dtype, tuple(out)), assumed)


def _sum(dims: Sequence[Any]) -> Any:
    total: Any = 0
    for d in dims:
        total = total + d
    return simplify_dim(total)


def _concat(*xs: Any, axis: int) -> Any:
    return np.concatenate([np.asarray(x) for x in xs], axis=axis)


define("Concat", FAMILY, ("inputs",), _concat_rule, _concat, variadic=True, differentiable=True,
       aliases=("concatenate",),
       attrs={"axis": Attr("int", doc="the axis joined along")},
       doc="Joins tensors of one dtype along `axis`; the other dims must agree.")


def _split_sizes(op: str, dim: Any, split: tuple[int, ...] | None, n: int | None) -> list[Any]:
    if split is not None:
        if any(s < 0 for s in split):
            raise OpTypeError(f"{op}: negative size in split {list(split)}")
        if isinstance(dim, int) and sum(split) != dim:
            raise OpTypeError(f"{op}: split {list(split)} sums to {sum(split)}, the axis has size {dim}")
        return list(split)
    if n is None or n < 1:
        raise OpTypeError(f"{op}: give either split (sizes) or num_outputs >= 1")
    # ONNX 18: every part has ceil(dim / n) elements except a smaller last one.
    if isinstance(dim, int):
        size = -(-dim // n)
        sizes = [min(size, max(dim - i * size, 0)) for i in range(n)]
        return sizes
    size = sympy.ceiling(dim / n)
    return [size] * (n - 1) + [simplify_dim(dim - (n - 1) * size)]


def _split_rule(op: str, ins: Sequence[Type], attrs: Mapping[str, Any], _: Sequence[Any]) -> Type:
    x = tensor(op, ins[0], 0)
    split, n = attrs.get("split"), attrs.get("num_outputs")
    count = len(split) if split is not None else n
    if count is None:
        raise OpTypeError(f"{op}: give either split (sizes) or num_outputs")
    if x.shape is None:
        return TupleType(tuple(TensorType(x.dtype, None) for _ in range(count)))
    axis = normalize_axis(op, attrs["axis"], len(x.shape))
    sizes = _split_sizes(op, x.shape[axis], split, n)
    return TupleType(tuple(x.with_shape(x.shape[:axis] + (s,) + x.shape[axis + 1:]) for s in sizes))


def _split(x: Any, axis: int = 0, split: tuple[int, ...] | None = None, num_outputs: int | None = None) -> Any:
    arr = np.asarray(x)
    sizes = _split_sizes("Split", arr.shape[axis], split, num_outputs)
    bounds = np.cumsum([0, *sizes])
    return tuple(np.take(arr, np.arange(bounds[i], bounds[i + 1]), axis=axis) for i in range(len(sizes)))


define("Split", FAMILY, ("x",), _split_rule, _split, differentiable=True,
       attrs={
           "axis": Attr("int", 0, "the axis split"),
           "split": Attr("ints", None, "the sizes of the parts"),
           "num_outputs": Attr("int", None, "split into this many parts of ceil(dim / n) (last smaller)"),
       },
       doc="Splits along `axis`; a tuple of parts, read with Proj.")


# --- broadcasting and repeating ----------------------------------------------------------
def _target_dims(op: str, ins: Sequence[Type], values: Sequence[Any], i: int, what: str) -> list[Any] | None:
    s = tensor(op, ins[i], i)
    check_int_vector(op, s, what)
    return dims_value(values[i])


def _expand_rule(op: str, ins: Sequence[Type], attrs: Mapping[str, Any], values: Sequence[Any]) -> Type:
    x = tensor(op, ins[0], 0)
    target = _target_dims(op, ins, values, 1, "the shape input")
    if x.shape is None:
        return x.with_shape(None)
    if target is None:
        n = vector_len(tensor(op, ins[1], 1))
        if not isinstance(n, int):
            return x.with_shape(None)
        target = [fresh_dim() for _ in range(n)]
    try:
        return x.with_shape(broadcast_shapes(x.shape, tuple(target)))
    except ValueError as e:
        raise OpTypeError(f"{op}: {e}") from None


def _expand(x: Any, shape: Any) -> Any:
    arr = np.asarray(x)
    src = arr if arr.flags.c_contiguous else np.ascontiguousarray(arr)
    out = np.broadcast_to(src, np.broadcast_shapes(arr.shape, tuple(int(d) for d in shape)))
    # A C-ordered copy: np.array keeps the view's stride order, which puts a broadcast
    # (stride-0) axis innermost, and a batched MatMul over that layout misses BLAS (40x).
    return out.copy()


define("Expand", FAMILY, ("x", "shape"), _expand_rule, _expand, differentiable=True,
       doc="Broadcasts x against the shape held in `shape` (NumPy rules both ways, as ONNX Expand).", may_fail=True)


def _tile_rule(op: str, ins: Sequence[Type], attrs: Mapping[str, Any], values: Sequence[Any]) -> Type:
    x = tensor(op, ins[0], 0)
    reps = _target_dims(op, ins, values, 1, "repeats")
    if x.shape is None:
        return x
    n = vector_len(tensor(op, ins[1], 1))
    if isinstance(n, int) and n != len(x.shape):
        raise OpTypeError(f"{op}: repeats has {n} entries, x has rank {len(x.shape)}")
    if reps is None:
        return x.with_shape(tuple(fresh_dim() for _ in x.shape))
    return x.with_shape(tuple(simplify_dim(d * r) for d, r in zip(x.shape, reps)))


def _tile(x: Any, repeats: Any) -> Any:
    return np.tile(np.asarray(x), tuple(int(r) for r in repeats))


define("Tile", FAMILY, ("x", "repeats"), _tile_rule, _tile, differentiable=True,
       doc="Repeats x `repeats[i]` times along axis i (one entry per axis).", may_fail=True)


_PAD_MODES = ("constant", "reflect", "edge", "wrap")


def _pad_rule(op: str, ins: Sequence[Type], attrs: Mapping[str, Any], values: Sequence[Any]) -> Type:
    x = tensor(op, ins[0], 0)
    pads = _target_dims(op, ins, values, 1, "pads")
    if attrs["mode"] not in _PAD_MODES:
        raise OpTypeError(f"{op}: mode must be one of {', '.join(_PAD_MODES)}, got {attrs['mode']!r}")
    if x.shape is None:
        return x
    r = len(x.shape)
    n = vector_len(tensor(op, ins[1], 1))
    if isinstance(n, int) and n != 2 * r:
        raise OpTypeError(f"{op}: pads has {n} entries, rank {r} needs {2 * r} (all begins, then all ends)")
    if pads is None:
        return x.with_shape(tuple(fresh_dim() for _ in x.shape))
    return x.with_shape(tuple(simplify_dim(d + pads[i] + pads[i + r]) for i, d in enumerate(x.shape)))


def _pad(x: Any, pads: Any, mode: str = "constant", value: float = 0.0) -> Any:
    arr = np.asarray(x)
    r = arr.ndim
    p = [int(v) for v in pads]
    widths = [(max(p[i], 0), max(p[i + r], 0)) for i in range(r)]
    if mode == "constant":
        out = np.pad(arr, widths, mode="constant", constant_values=np.asarray(value, dtype=arr.dtype))
    else:
        out = np.pad(arr, widths, mode=mode)  # type: ignore[call-overload]
    # Negative pads crop (ONNX).
    crop = tuple(slice(max(-p[i], 0), out.shape[i] - max(-p[i + r], 0)) for i in range(r))
    return np.ascontiguousarray(out[crop])


define("Pad", FAMILY, ("x", "pads"), _pad_rule, _pad, differentiable=True,
       attrs={
           "mode": Attr("str", "constant", "constant, reflect, edge or wrap (as if x were a torus)"),
           "value": Attr("float", 0.0, "the fill value in constant mode"),
       },
       doc="Pads (negative: crops) by `pads` = [begin_0..begin_{r-1}, end_0..end_{r-1}] (ONNX Pad).", may_fail=True)


# --- shapes as values --------------------------------------------------------------------
def _shape_of_rule(op: str, ins: Sequence[Type], attrs: Mapping[str, Any], _: Sequence[Any]) -> Type:
    x = tensor(op, ins[0], 0)
    return TensorType("i64", (len(x.shape),) if x.shape is not None else (fresh_dim(),))


define("ShapeOf", FAMILY, ("x",), _shape_of_rule, lambda x: np.array(np.shape(x), dtype=np.int64),
       aliases=("shape",), shape_only=True, doc="The shape of x as a 1-D i64 tensor.")


def _dim_size_rule(op: str, ins: Sequence[Type], attrs: Mapping[str, Any], _: Sequence[Any]) -> Type:
    x = tensor(op, ins[0], 0)
    if x.shape is not None:
        normalize_axis(op, attrs["axis"], len(x.shape))
        if not x.shape:
            raise OpTypeError(f"{op}: a scalar has no dims")
    return TensorType("i64", ())


define("DimSize", FAMILY, ("x",), _dim_size_rule, lambda x, axis: np.int64(np.shape(x)[axis]), shape_only=True,
       attrs={"axis": Attr("int", doc="the dim asked for")}, doc="The size of one dim of x as an i64 scalar.")


def _const_of_shape_rule(op: str, ins: Sequence[Type], attrs: Mapping[str, Any], values: Sequence[Any]) -> Type:
    dims = _target_dims(op, ins, values, 0, "the shape input")
    value = attrs["value"]
    if value.size != 1:
        raise OpTypeError(f"{op}: value must hold one element, got shape {list(value.shape)}")
    dtype = dtype_of(value.dtype)
    if dims is None:
        return TensorType(dtype, fresh_shape(vector_len(tensor(op, ins[0], 0))))
    return TensorType(dtype, tuple(dims))


def _const_of_shape(shape: Any, value: Any) -> Any:
    return np.full(tuple(int(d) for d in shape), value.reshape(()), dtype=value.dtype)


define("ConstantOfShape", FAMILY, ("shape",), _const_of_shape_rule, _const_of_shape,
       attrs={"value": Attr("tensor", np.zeros((), np.float32), "the fill value (one element; gives the dtype)")},
       doc="A tensor of the shape held in `shape`, filled with `value`.", may_fail=True)


def _range_rule(op: str, ins: Sequence[Type], attrs: Mapping[str, Any], values: Sequence[Any]) -> Type:
    ts = [tensor(op, t, i) for i, t in enumerate(ins)]
    dtype = check_same_dtype(op, ts)
    for i, t in enumerate(ts):
        if t.shape is not None and t.shape != ():
            raise OpTypeError(f"{op}: input {i} must be a scalar, got {t}")
    if dtype == "bool":
        raise OpTypeError(f"{op}: bool has no range")
    known = [_scalar_known(v) for v in values]
    if any(k is None for k in known):
        return TensorType(dtype, (fresh_dim(),))
    start, limit, delta = known
    if isinstance(delta, (int, float)) and delta == 0:
        raise OpTypeError(f"{op}: delta is 0")
    n = sympy.Max(sympy.ceiling((sympy.sympify(limit) - start) / delta), 0)
    n = simplify_dim(n)
    if not isinstance(n, int) and not n.free_symbols:
        n = int(n)
    return TensorType(dtype, (n,))


def _scalar_known(v: Any) -> Any:
    if v is None:
        return None
    arr = np.asarray(v)
    if arr.size != 1:
        return None
    x = arr.reshape(-1)[0]
    if arr.dtype.kind == "f":
        return sympy.Rational(str(float(x)))
    return as_dim(x)


def _range(start: Any, limit: Any, delta: Any) -> np.ndarray:
    dt = np.asarray(start).dtype
    n = max(math.ceil((float(limit) - float(start)) / float(delta)) if dt.kind == "f"
            else -((int(start) - int(limit)) // int(delta)), 0)
    return (np.asarray(start, dt) + np.arange(n, dtype=dt) * np.asarray(delta, dt)).astype(dt)


define("Range", FAMILY, ("start", "limit", "delta"), _range_rule, _range,
       doc="start, start + delta, ... below limit (above for delta < 0): max(ceil((limit - start) / delta), 0) "
           "elements of the inputs' dtype.", may_fail=True)


# --- run-time shape checks ---------------------------------------------------------------
def _check_dims_rule(op: str, ins: Sequence[Type], attrs: Mapping[str, Any], _: Sequence[Any]) -> Type:
    for i, t in enumerate(ins):
        tt = tensor(op, t, i)
        if tt.dtype != "i64" or tt.shape not in ((), None):
            raise OpTypeError(f"{op}: input {i} must be an i64 scalar (a DimSize), got {t}")
    return TensorType("bool", ())


def _check_dims(a: Any, b: Any, broadcast: bool = False, message: str = "") -> np.bool_:
    a, b = int(a), int(b)
    if a == b or (broadcast and b == 1):
        return np.bool_(True)
    if broadcast:
        raise ValueError(f"{message}: sizes {a} and {b}; the second must equal the first (the result's) or be 1")
    raise ValueError(f"{message}: sizes {a} and {b} must be equal")


define("CheckDims", FAMILY, ("a", "b"), _check_dims_rule, _check_dims, pure=False,
       attrs={
           "broadcast": Attr("bool", False, "also accept b = 1 (a is the size the result has)"),
           "message": Attr("str", "", "what was assumed (named in the error)"),
       },
       doc="Fails at run time unless two sizes agree; inserted by insert_shape_checks where shape inference "
           "had to assume it. The op it guards depends on it (deps).", may_fail=True)


# --- Roll (seed 003's example: tf.roll) ----------------------------------------------------
def _roll_rule(op: str, ins: Sequence[Type], attrs: Mapping[str, Any], _: Sequence[Any]) -> Type:
    x, shift = tensor(op, ins[0], 0), tensor(op, ins[1], 1)
    axes = attrs["axes"]
    if shift.dtype not in INT_DTYPES:
        raise OpTypeError(f"{op}: the shift (input 1) must be an integer tensor, got {shift}")
    if shift.shape is not None and len(shift.shape) > 1:
        raise OpTypeError(f"{op}: the shift (input 1) must be a scalar or 1-D, got {shift}")
    n = 1 if shift.shape == () else vector_len(shift)
    if isinstance(n, int) and n != len(axes):
        raise OpTypeError(f"{op}: {n} shift(s) for {len(axes)} axes {list(axes)}")
    if x.shape is not None:
        for a in axes:
            normalize_axis(op, a, len(x.shape))
    return x


def _roll(x: Any, shift: Any, axes: tuple[int, ...]) -> Any:
    out = np.roll(x, tuple(int(s) for s in np.reshape(shift, (-1,))), tuple(axes))
    return out[()] if np.ndim(out) == 0 else out


define("Roll", FAMILY, ("x", "shift"), _roll_rule, _roll, differentiable=True,
       attrs={"axes": Attr("ints", doc="the axes rolled, one per shift")},
       doc="np.roll(x, shift, axes): elements shifted by `shift` (a scalar or 1-D int tensor, one per axis, "
           "negative to the left) along `axes`, wrapping around (tf.roll).")
