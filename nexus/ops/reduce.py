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
        out = fn(x, axis=axes, keepdims=keepdims)
        return out.astype(x.dtype, copy=False) if fn is not np.mean else out

    return run


for _name, _fn, _doc in [
    ("ReduceSum", np.sum, "sum over axes"),
    ("ReduceMean", np.mean, "mean over axes (integer inputs give f64)"),
    ("ReduceMax", np.max, "maximum over axes"),
]:
    define(_name, FAMILY, ("x",), _rule, _kernel(_fn), attrs=_ATTRS, differentiable=True, doc=_doc)
