"""The python backend's lowering table: Python expressions for common ops.

The generated code runs a node as ``kernel(*inputs)`` (the op's reference kernel, with its
attributes bound) unless a rule here gives a Python expression for it.  A NumPy ufunc
call on scalars costs ~0.6 us, the matching operator on NumPy scalars ~0.02-0.05 us, with
the same result for same-dtype NumPy operands (``a + b`` on NumPy values *is*
``np.add(a, b)``).  Where the reference kernel adds a check the operator lacks (integer
division by zero), the operator form is used only when the check cannot fail (a constant
non-zero divisor).  A rule returns None to fall back to the kernel.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from nexus.backends.base import register_lowering
from nexus.ir.graph import known_value
from nexus.ir.node import Node
from nexus.ir.types import TensorType, numpy_dtype

BACKEND = "python"
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


@register_lowering(BACKEND, *BINARY)
def _binary(node: Node, args: list[str]) -> str:
    return f"{args[0]} {BINARY[node.op.name]} {args[1]}"


@register_lowering(BACKEND, *UNARY)
def _unary(node: Node, args: list[str]) -> str:
    return f"{UNARY[node.op.name]}{args[0]}"


@register_lowering(BACKEND, "Div")
def _div(node: Node, args: list[str]) -> str | None:
    return f"{args[0]} / {args[1]}" if _dtype_kind(node.input(0)) == "f" else None


@register_lowering(BACKEND, *INT_CHECKED)
def _int_checked(node: Node, args: list[str]) -> str | None:
    if _dtype_kind(node.input(0)) == "f" or _nonzero_constant(node.input(1)):
        return f"{args[0]} {INT_CHECKED[node.op.name]} {args[1]}"
    return None


@register_lowering(BACKEND, "Identity")
def _identity(node: Node, args: list[str]) -> str:
    return args[0]


@register_lowering(BACKEND, "Proj")
def _proj(node: Node, args: list[str]) -> str:
    return f"{args[0]}[{int(node.attrs['num'])}]"


@register_lowering(BACKEND, "Gather")
def _gather(node: Node, args: list[str]) -> str | None:
    idx = node.input(1).type
    axis = int(node.attrs.get("axis", 0))
    if isinstance(idx, TensorType) and idx.shape == () and axis >= 0:
        # x[i] is np.take(x, i, axis) for a scalar index (a view instead of a copy;
        # values are never written in place, so nobody can tell).
        return f"{args[0]}[{':, ' * axis}{args[1]}]"
    return None
