"""Linear algebra."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from nexus.ir.opdef import OpTypeError
from nexus.ir.types import TensorType, Type, broadcast_shapes
from nexus.ops._rules import NUMERIC, check_dtype, define, tensor

FAMILY = "linalg"


def matmul_shape(op: str, a: tuple, b: tuple) -> tuple:
    """NumPy matmul shapes: 1-D operands are promoted and the added dim dropped."""
    if not a or not b:
        raise OpTypeError(f"{op}: operands must have rank >= 1, got ranks {len(a)} and {len(b)}")
    a2 = (1,) + a if len(a) == 1 else a
    b2 = b + (1,) if len(b) == 1 else b
    k1, k2 = a2[-1], b2[-2]
    if isinstance(k1, int) and isinstance(k2, int) and k1 != k2:
        raise OpTypeError(f"{op}: contraction dims differ: {a} @ {b}")
    try:
        batch = broadcast_shapes(a2[:-2], b2[:-2])
    except ValueError as e:
        raise OpTypeError(f"{op}: batch dims: {e}") from None
    out = batch + (a2[-2], b2[-1])
    if len(a) == 1:
        out = out[:-2] + out[-1:]
    if len(b) == 1:
        out = out[:-1]
    return out


def _matmul_rule(op: str, ins: Sequence[Type], attrs: Mapping[str, Any], _: Sequence[Any]) -> Type:
    a, b = tensor(op, ins[0], 0), tensor(op, ins[1], 1)
    check_dtype(op, a, NUMERIC - {"bool"})
    if a.dtype != b.dtype:
        raise OpTypeError(f"{op}: dtype mismatch, {a.dtype} @ {b.dtype}; insert a Cast")
    if a.shape is None or b.shape is None:
        return TensorType(a.dtype, None)
    return TensorType(a.dtype, matmul_shape(op, a.shape, b.shape))


define("MatMul", FAMILY, ("a", "b"), _matmul_rule, np.matmul, differentiable=True,
       doc="Matrix product with NumPy's batching and 1-D promotion.")
