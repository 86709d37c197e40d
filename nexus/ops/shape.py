"""Shape and indexing ops."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from nexus.ir.opdef import Attr, OpTypeError
from nexus.ir.types import INT_DTYPES, Dim, TensorType, Type, fresh_dim
from nexus.ops._rules import define, normalize_axis, tensor

FAMILY = "shape"


def _reshape_rule(op: str, ins: Sequence[Type], attrs: Mapping[str, Any], values: Sequence[Any]) -> Type:
    x, s = tensor(op, ins[0], 0), tensor(op, ins[1], 1)
    if s.dtype not in INT_DTYPES or s.shape is None or len(s.shape) != 1:
        raise OpTypeError(f"{op}: the shape input must be a 1-D integer tensor, got {s}")
    target = values[1]
    if target is None:
        n = s.shape[0]
        return TensorType(x.dtype, tuple(fresh_dim() for _ in range(n)) if isinstance(n, int) else None)
    dims: list[Dim] = [int(d) for d in np.asarray(target).reshape(-1)]
    if sum(d == -1 for d in dims) > 1 or any(d < -1 for d in dims):
        raise OpTypeError(f"{op}: bad target shape {dims}")
    if -1 in dims and x.shape is not None:
        known = math.prod(d for d in dims if d != -1)
        total = math.prod(x.shape) if x.shape else 1
        if known == 0:
            raise OpTypeError(f"{op}: cannot infer -1 in {dims} with a zero-sized dim")
        rest = total / known if not isinstance(total, int) else total // known
        if isinstance(total, int) and total % known:
            raise OpTypeError(f"{op}: cannot reshape {x.shape} to {dims}")
        dims[dims.index(-1)] = rest
    elif -1 in dims:
        dims[dims.index(-1)] = fresh_dim()
    if x.is_static and -1 not in dims and all(isinstance(d, int) for d in dims):
        if math.prod(x.shape or ()) != math.prod(dims):  # type: ignore[arg-type]
            raise OpTypeError(f"{op}: cannot reshape {list(x.shape or ())} to {dims}")
    return TensorType(x.dtype, tuple(dims))


def _reshape(x: Any, shape: Any) -> Any:
    return np.reshape(x, tuple(int(d) for d in shape))


define("Reshape", FAMILY, ("data", "shape"), _reshape_rule, _reshape, differentiable=True,
       doc="Gives `data` the shape held in the 1-D integer tensor `shape` (one -1 is inferred).")


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
       doc="Picks entries along `axis` (negative indices count from the end): `x[t]`.")
