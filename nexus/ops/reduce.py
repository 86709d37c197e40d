"""Reductions over axes, with ``keepdims``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from nexus.ir.opdef import Attr, OpTypeError
from nexus.ir.types import TensorType, Type
from nexus.ops._rules import NUMERIC, check_dtype, define, normalize_axis, tensor

FAMILY = "reduce"
_ATTRS = {
    "axes": Attr("ints", None, "axes to reduce; all when absent"),
    "keepdims": Attr("bool", False, "keep reduced axes with size 1"),
}


def reduced_axes(op: str, rank: int, axes: tuple[int, ...] | None) -> tuple[int, ...]:
    if axes is None:
        return tuple(range(rank))
    out = tuple(sorted({normalize_axis(op, a, rank) for a in axes}))
    if len(out) != len(axes):
        raise OpTypeError(f"{op}: repeated axis in {list(axes)}")
    return out


def _rule(op: str, ins: Sequence[Type], attrs: Mapping[str, Any], _: Sequence[Any]) -> Type:
    t = tensor(op, ins[0], 0)
    check_dtype(op, t, NUMERIC)
    if t.shape is None:
        return t.with_shape(None)
    axes = reduced_axes(op, len(t.shape), attrs.get("axes"))
    if attrs["keepdims"]:
        shape = tuple(1 if i in axes else d for i, d in enumerate(t.shape))
    else:
        shape = tuple(d for i, d in enumerate(t.shape) if i not in axes)
    dtype = t.dtype if op != "ReduceMean" or t.dtype.startswith("f") else "f64"
    return TensorType(dtype, shape)


def _kernel(fn: Any) -> Any:
    def run(x: Any, axes: tuple[int, ...] | None = None, keepdims: bool = False) -> Any:
        if fn is np.mean and type(x) is np.ndarray and x.dtype in _SUMMED and x.size:
            # np.mean's own steps (a pairwise sum, divided by the count) without its wrapper's
            # ~4 us (MobileNet's squeeze-excite means at batch 1: a third of their time)
            out = _SUM(x, axis=axes, keepdims=keepdims)
            return np.true_divide(out, x.size // max(np.size(out), 1), out=out if type(out) is np.ndarray else None)
        if fn in _IDENTITY and np.size(x) == 0:
            # An empty set has no maximum: it reduces to the identity (-inf, or the least
            # int), as ONNX defines it, so that max(A u B) = max(max A, max B) still holds.
            out = fn(x, axis=axes, keepdims=keepdims, initial=_IDENTITY[fn](np.asarray(x).dtype))
        else:
            out = fn(x, axis=axes, keepdims=keepdims)
        return out.astype(x.dtype, copy=False) if fn is not np.mean else out

    return run


_SUMMED = (np.dtype(np.float32), np.dtype(np.float64))
_SUM: Any = np.add.reduce  # (NumPy's stubs have no overload for axes=None | tuple with keepdims)


def _extreme(dtype: np.dtype, high: bool) -> Any:
    if dtype.kind == "f":
        return np.inf if high else -np.inf
    info = np.iinfo(dtype)
    return info.max if high else info.min


_IDENTITY = {np.max: lambda d: _extreme(d, False), np.min: lambda d: _extreme(d, True)}


for _name, _fn, _doc in [
    ("ReduceSum", np.sum, "sum over axes"),
    ("ReduceMean", np.mean, "mean over axes (integer inputs give f64)"),
    ("ReduceMax", np.max, "maximum over axes (over none: -inf, or the least value of an int dtype)"),
    ("ReduceMin", np.min, "minimum over axes (over none: inf, or the greatest value of an int dtype)"),
    ("ReduceProd", np.prod, "product over axes"),
]:
    define(_name, FAMILY, ("x",), _rule, _kernel(_fn), attrs=_ATTRS, differentiable=True, doc=_doc,
           aliases={"ReduceSum": ("sum",), "ReduceMean": ("mean",)}.get(_name, ()))


# --- arg reductions and scans ------------------------------------------------------------
def _arg_rule(op: str, ins: Sequence[Type], attrs: Mapping[str, Any], _: Sequence[Any]) -> Type:
    t = tensor(op, ins[0], 0)
    check_dtype(op, t, NUMERIC)
    if t.shape is None:
        return TensorType("i64", None)
    if not t.shape:
        raise OpTypeError(f"{op}: needs rank >= 1, got a scalar")
    axis = normalize_axis(op, attrs["axis"], len(t.shape))
    if isinstance(t.shape[axis], int) and t.shape[axis] == 0:
        raise OpTypeError(f"{op}: axis {axis} has size 0, so there is no {op[3:].lower()}imum")
    if attrs["keepdims"]:
        return TensorType("i64", tuple(1 if i == axis else d for i, d in enumerate(t.shape)))
    return TensorType("i64", tuple(d for i, d in enumerate(t.shape) if i != axis))


def _arg_kernel(fn: Any) -> Any:
    method = fn.__name__  # "argmax" / "argmin", the ndarray method (no fromnumeric dispatch)

    def run(x: Any, axis: int = 0, keepdims: bool = False, select_last_index: bool = False) -> Any:
        arr = np.asarray(x)
        if not select_last_index and not keepdims and arr.ndim == 1:  # the common case, kept fast
            return np.int64(getattr(arr, method)())
        if select_last_index:
            # The last extremum is the first one of the reversed axis.
            n = arr.shape[axis]
            out = (n - 1) - fn(np.flip(arr, axis), axis=axis, keepdims=keepdims)
        else:
            out = fn(arr, axis=axis, keepdims=keepdims)
        out = np.asarray(out, dtype=np.int64)
        return out[()] if out.ndim == 0 else out

    return run


_ARG_ATTRS = {
    "axis": Attr("int", 0, "the axis searched"),
    "keepdims": Attr("bool", False, "keep the axis with size 1"),
    "select_last_index": Attr("bool", False, "on ties, the last index instead of the first"),
}
define("ArgMax", FAMILY, ("x",), _arg_rule, _arg_kernel(np.argmax), attrs=_ARG_ATTRS, aliases=("argmax",),
       doc="index (i64) of the maximum along `axis`")
define("ArgMin", FAMILY, ("x",), _arg_rule, _arg_kernel(np.argmin), attrs=_ARG_ATTRS, aliases=("argmin",),
       doc="index (i64) of the minimum along `axis`")


def _cumsum_rule(op: str, ins: Sequence[Type], attrs: Mapping[str, Any], _: Sequence[Any]) -> Type:
    t = tensor(op, ins[0], 0)
    check_dtype(op, t, NUMERIC)
    if t.shape is not None:
        if not t.shape:
            raise OpTypeError(f"{op}: needs rank >= 1, got a scalar")
        normalize_axis(op, attrs["axis"], len(t.shape))
    return t


def _cumsum(x: Any, axis: int = 0, exclusive: bool = False, reverse: bool = False) -> Any:
    arr = np.asarray(x)
    if reverse:
        arr = np.flip(arr, axis)
    # dtype= keeps small ints small (NumPy would widen i8 to i64).
    out = np.cumsum(arr, axis=axis, dtype=arr.dtype)
    if exclusive and arr.size:
        # Shift by one along the axis (exact; subtracting x would round for floats).
        out = np.roll(out, 1, axis)
        first = [slice(None)] * arr.ndim
        first[axis] = slice(0, 1)
        out[tuple(first)] = 0
    if reverse:
        out = np.flip(out, axis)
    return np.ascontiguousarray(out)


define("CumSum", FAMILY, ("x",), _cumsum_rule, _cumsum, differentiable=True, aliases=("cumsum",),
       attrs={
           "axis": Attr("int", 0, "the axis summed along"),
           "exclusive": Attr("bool", False, "leave out the element itself"),
           "reverse": Attr("bool", False, "sum from the end"),
       },
       doc="running sum along `axis` (ONNX CumSum)")


def _cumprod(x: Any, axis: int = 0) -> Any:
    arr = np.asarray(x)
    return np.cumprod(arr, axis=axis, dtype=arr.dtype)  # dtype= keeps small ints small


define("CumProd", FAMILY, ("x",), _cumsum_rule, _cumprod, differentiable=True, aliases=("cumprod",),
       attrs={"axis": Attr("int", 0, "the axis multiplied along")},
       doc="running product along `axis` (np.cumprod)")
