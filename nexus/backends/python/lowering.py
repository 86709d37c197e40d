"""The python backend's lowering table: Python expressions for common ops.

The generated code runs a node as ``kernel(*inputs)`` (the op's reference kernel, with its
attributes bound) unless a rule here gives a Python expression for it.  A NumPy ufunc
call on scalars costs ~0.6 us, the matching operator on NumPy scalars ~0.02-0.05 us, with
the same result for same-dtype NumPy operands (``a + b`` on NumPy values *is*
``np.add(a, b)``), so every op with an ``OpDef.operator`` is emitted as that operator.
Where the reference kernel adds a check the operator lacks (integer division by zero),
the operator form is used only when the check cannot fail (a constant non-zero divisor);
where the operator means something else on integers (``/``), only on floats
(``OpDef.operator_on_ints``).  A rule returns None to fall back to the kernel.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from nexus.backends.base import register_lowering
from nexus.ir.graph import known_value
from nexus.ir.kernels import kernel_attrs
from nexus.ir.node import Node
from nexus.ir.opdef import all_ops
from nexus.ir.types import TensorType, numpy_dtype
from nexus.ops.linalg import planned_gemm
from nexus.ops.nn import depthwise_channels_last, planned_conv

BACKEND = "python"


def _dtype_kind(node: Node) -> str | None:
    t = node.type
    return numpy_dtype(t.dtype).kind if isinstance(t, TensorType) else None


def _nonzero_constant(node: Node) -> bool:
    value: Any = known_value(node)
    return value is not None and bool(np.all(value != 0))


def _operator(node: Node, args: list[str]) -> str | None:
    """``a + b`` / ``-x`` from ``OpDef.operator`` where it computes the kernel's result."""
    op = node.op
    if op.operator_on_ints != "same" and _dtype_kind(node.input(0)) in ("i", "u"):
        if op.operator_on_ints == "never" or not _nonzero_constant(node.input(1)):
            return None
    if len(args) == 1:
        return f"{op.operator}{args[0]}"
    return f"{args[0]} {op.operator} {args[1]}"


register_lowering(BACKEND, *(op.name for op in all_ops().values() if op.operator))(_operator)


@register_lowering(BACKEND, "Pow")
def _pow(node: Node, args: list[str]) -> str | None:
    """``a ** b`` for a constant exponent, with the kernel's special case decided here once
    (a float cubed is ``a * a * a``, see ``nexus.ops.math._pow``); a run-time exponent
    goes to the kernel."""
    e: Any = known_value(node.input(1))
    if e is None or np.ndim(e) != 0:
        return None
    if e == 3 and _dtype_kind(node.input(0)) == "f":
        return f"{args[0]} * {args[0]} * {args[0]}"
    return f"{args[0]} ** {args[1]}"


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


@register_lowering(BACKEND, "Maximum", "Minimum")
def _max_min(node: Node, args: list[str]) -> str | None:
    """Two scalars of one dtype: a conditional expression (~0.1 us) instead of the ufunc call
    (~1 us; NMS does six per inner step).  NumPy's semantics, kept exactly: a NaN operand
    gives NaN, and of two equal values (0.0 and -0.0) the second is the result."""
    a, b = node.input(0).type, node.input(1).type
    if not (isinstance(a, TensorType) and isinstance(b, TensorType) and a.shape == () == b.shape
            and a.dtype == b.dtype and numpy_dtype(a.dtype).kind in "iuf"):
        return None
    x, y = args
    cmp = ">" if node.op.name == "Maximum" else "<"
    nan = f" or {x} != {x}" if numpy_dtype(a.dtype).kind == "f" else ""
    return f"{x} if {x} {cmp} {y}{nan} else {y}"


@register_lowering(BACKEND, "Transpose")
def _transpose(node: Node, args: list[str]) -> str | None:
    """An array's transpose as the array method: ``np.transpose``'s dispatch costs ~1 us
    more per call (a gradient's reverse step transposes saved inputs for each MatMul)."""
    t = node.input(0).type
    if not (isinstance(t, TensorType) and t.shape is not None and len(t.shape) >= 1):
        return None
    perm = node.attrs.get("perm")
    return f"{args[0]}.T" if perm is None else f"{args[0]}.transpose({tuple(int(p) for p in perm)!r})"


@register_lowering(BACKEND, "ArgMax", "ArgMin")
def _arg_extremum(node: Node, args: list[str]) -> str | None:
    """The index of a vector's extremum as the array method (no kernel call: Viterbi's inner
    step takes one); the kernel's result type, i64, through ``_i64``."""
    t = node.input(0).type
    a = node.attrs
    if not (isinstance(t, TensorType) and t.shape is not None and len(t.shape) == 1
            and int(a.get("axis", 0)) in (0, -1) and not a.get("keepdims") and not a.get("select_last_index")):
        return None
    return f"_i64({args[0]}.{'argmax' if node.op.name == 'ArgMax' else 'argmin'}())"


# A stack is a cons cell ``(top, rest)`` (see nexus.ops.stack): building and taking apart
# a tuple inline costs what a list append/pop does, a kernel call several times that.
@register_lowering(BACKEND, "StackPush")
def _stack_push(node: Node, args: list[str]) -> str:
    return f"({args[1]}, {args[0]})"


@register_lowering(BACKEND, "StackPop")
def _stack_pop(node: Node, args: list[str]) -> str:
    return f"({args[0]}[1], {args[0]}[0])"  # IndexError on an empty stack, as the kernel


# Kernels planned per node: op -> the callable that runs a node in place of its kernel
# with its attributes (None: the kernel), made once when the code is generated.
PLANNED: dict[str, Callable[[Node], Callable[..., Any] | None]] = {}


def _constant(node: Node) -> bool:
    """Whether ``node`` is a constant, or an Identity of one (this backend runs an Identity
    as its input: ONNX files share an initializer through them)."""
    while node.op.name == "Identity":
        node = node.input(0)
    return known_value(node) is not None


def _planned_conv(node: Node) -> Callable[..., Any] | None:
    """A Conv with constant weights (and bias) runs a kernel that plans its work once per
    input shape (``nexus.ops.nn.planned_conv``): the weights are the same on every call.
    A layer whose result goes only to depthwise layers that compute channels-last (through
    ops that keep its shape) leaves it channels-last (``channels_last``)."""
    if not all(_constant(v) for v in node.inputs[1:]):
        return None
    return planned_conv(**kernel_attrs(node), channels_last=_feeds_channels_last(node))  # type: ignore[no-any-return]


def _feeds_channels_last(node: Node, depth: int = 3) -> bool:
    """Whether every user of ``node`` is a Conv that computes channels-last taking it as
    its input (``nexus.ops.nn.depthwise_channels_last``), or an op of one input, or an
    elementwise op (``OpDef.broadcasting``), of the same type whose users are (``depth``
    such ops at most: the activations between the layers, SiLU's Sigmoid and Mul
    included).  Only a question of speed: every kernel takes either layout, and NumPy's
    elementwise ops keep it."""
    users = node.users
    for u in users:
        if u.op.name == "Conv" and len(u.inputs) >= 2 and u.input(0) is node and node not in u.inputs[1:]:
            x, w = u.input(0).type, u.input(1).type
            if not (isinstance(x, TensorType) and isinstance(w, TensorType) and x.shape and w.shape
                    and depthwise_channels_last(x.shape, w.shape, int(u.attrs.get("group", 1)),
                                                 tuple(u.attrs.get("strides") or (1,) * (len(x.shape) - 2)))):
                return False
        elif not (depth and (len(u.inputs) == 1 or u.op.broadcasting) and u.type == node.type
                  and _feeds_channels_last(u, depth - 1)):
            return False
    return bool(users)


PLANNED["Conv"] = _planned_conv


def _planned_gemm(node: Node) -> Callable[..., Any] | None:
    """A Gemm with a constant, transposed ``b`` (a Linear layer's weight) runs on a C-ordered
    copy of its transpose, made once (``nexus.ops.linalg.planned_gemm``), and so does one
    whose ``b`` is a Transpose of a constant (as PyTorch's graphs give a Linear layer)."""
    attrs = kernel_attrs(node)
    b = node.input(1)
    if attrs.get("transB") and _constant(b):
        return planned_gemm(**attrs)  # type: ignore[no-any-return]
    if not attrs.get("transB") and b.op.name == "Transpose" and _constant(b.input(0)):
        return planned_gemm(**attrs, constant_view=True)  # type: ignore[no-any-return]
    return None


PLANNED["Gemm"] = _planned_gemm
