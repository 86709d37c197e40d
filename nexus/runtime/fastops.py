"""Python expressions for common ops, used by the generated code instead of kernel calls.

A NumPy ufunc call on scalars costs ~0.6 us, the matching operator on NumPy scalars
~0.02-0.05 us, with the same result for same-dtype NumPy operands (``a + b`` on NumPy
values *is* ``np.add(a, b)``).  Where the reference kernel adds a check the operator
lacks (integer division by zero), the operator form is used only when the check cannot
fail (a constant non-zero divisor); otherwise the kernel runs.  Returns None for ops
without a faster form.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from nexus.ir.graph import known_value
from nexus.ir.node import Node
from nexus.ir.types import TensorType, numpy_dtype

BINARY = {
    "Add": "+", "Sub": "-", "Mul": "*", "Pow": "**", "MatMul": "@",
    "Less": "<", "LessEqual": "<=", "Greater": ">", "GreaterEqual": ">=", "Equal": "==", "NotEqual": "!=",
    "And": "&", "Or": "|", "Xor": "^",
}
INT_CHECKED = {"Mod": "%", "FloorDiv": "//"}  # operators whose int form lacks the zero check
UNARY = {"Neg": "-", "Not": "~"}


def _dtype_kind(node: Node) -> str | None:
    t = node.type
    return numpy_dtype(t.dtype).kind if isinstance(t, TensorType) else None


def _nonzero_constant(node: Node) -> bool:
    value: Any = known_value(node)
    return value is not None and bool(np.all(value != 0))


def fast_expr(node: Node, args: list[str]) -> str | None:
    """A Python expression computing ``node`` from the variables ``args``, or None."""
    name = node.op.name
    if name in BINARY:
        return f"{args[0]} {BINARY[name]} {args[1]}"
    if name in UNARY:
        return f"{UNARY[name]}{args[0]}"
    if name == "Div" and _dtype_kind(node.input(0)) == "f":
        return f"{args[0]} / {args[1]}"
    if name in INT_CHECKED:
        if _dtype_kind(node.input(0)) == "f" or _nonzero_constant(node.input(1)):
            return f"{args[0]} {INT_CHECKED[name]} {args[1]}"
        return None
    if name == "Identity":
        return args[0]
    if name == "Proj":
        return f"{args[0]}[{int(node.attrs['num'])}]"
    if name == "Gather":
        idx = node.input(1).type
        if isinstance(idx, TensorType) and idx.shape == ():
            # x[i] is np.take(x, i, axis) for a scalar index (a view instead of a copy;
            # values are never written in place, so nobody can tell).
            lead = ":, " * int(node.attrs.get("axis", 0))
            if int(node.attrs.get("axis", 0)) >= 0:
                return f"{args[0]}[{lead}{args[1]}]"
    return None
