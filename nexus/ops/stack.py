"""Stack ops for graph-mode autodiff: a functional (persistent) list value.

The forward part of a gradient graph pushes the values its reverse part needs and the
path it took; the reverse part pops them.  A stack is an ordinary SSA value: ``Push``
returns a new stack, ``Pop`` returns ``(rest, top)`` read with ``Proj``.  Nothing lives
outside the graph, so the gradient graph prints, parses and runs like any other.  At run
time a stack is a cons cell ``(top, rest)`` (``()`` when empty), so a push is O(1) and
nothing is copied.

A stack has the type :class:`~nexus.ir.types.StackType` (``stack`` in the text form).
The ops are impure so that constant folding and CSE leave them alone.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from nexus.ir.opdef import Attr, OpTypeError
from nexus.ir.types import STACK, StackType, TensorType, TupleType, Type
from nexus.ops._rules import define

FAMILY = "autodiff"

def _new_rule(op: str, ins: Sequence[Type], attrs: Mapping[str, Any], _: Sequence[Any]) -> Type:
    return STACK


def _push_rule(op: str, ins: Sequence[Type], attrs: Mapping[str, Any], _: Sequence[Any]) -> Type:
    if not isinstance(ins[0], StackType):
        raise OpTypeError(f"{op}: input 0 must be a stack, got {ins[0]}")
    if not isinstance(ins[1], TensorType):
        raise OpTypeError(f"{op}: only tensors can be pushed, got {ins[1]}")
    return STACK


def _pop_rule(op: str, ins: Sequence[Type], attrs: Mapping[str, Any], _: Sequence[Any]) -> Type:
    if not isinstance(ins[0], StackType):
        raise OpTypeError(f"{op}: input 0 must be a stack, got {ins[0]}")
    # The shape of the popped value is given on the node (the rule only knows its dtype).
    return TupleType((STACK, TensorType(attrs["dtype"], None)))


def _push(stack: Any, value: Any) -> Any:
    return (value, stack)


def _pop(stack: Any, dtype: str) -> Any:
    if not stack:
        raise IndexError("pop from an empty stack")
    value, rest = stack
    return (rest, value)


define("StackNew", FAMILY, (), _new_rule, lambda: (), pure=False,
       doc="An empty stack (a functional list value).")
define("StackPush", FAMILY, ("stack", "value"), _push_rule, _push, pure=False,
       doc="A new stack with `value` on top of `stack`.")
define("StackPop", FAMILY, ("stack",), _pop_rule, _pop, pure=False,
       attrs={"dtype": Attr("dtype", doc="the dtype of the popped value")}, results=("rest", "top"),
       doc="(rest, top) of a non-empty stack; read with Proj 0 and Proj 1.", may_fail=True)
