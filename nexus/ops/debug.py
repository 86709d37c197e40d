"""Run-time checks: ``Assert`` (made by ``@nx.script``'s ``assert``).

``Assert`` is impure (never folded away or removed): it checks a bool scalar at run time
and raises ``AssertionError`` with its message; it returns the condition so that later
checks may depend on it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from nexus.ir.opdef import Attr, OpTypeError
from nexus.ir.types import TensorType, Type
from nexus.ops._rules import define, tensor


def _assert_rule(op: str, ins: Sequence[Type], attrs: Mapping[str, Any], _: Sequence[Any]) -> Type:
    t = tensor(op, ins[0], 0)
    if t.dtype != "bool" or t.shape != ():
        raise OpTypeError(f"{op}: the condition must be a bool scalar, got {t}")
    return TensorType("bool", ())


def _assert(cond: Any, message: str = "") -> Any:
    if not bool(cond):
        raise AssertionError(message)
    return cond


define("Assert", "debug", ("condition",), _assert_rule, _assert, pure=False,
           attrs={"message": Attr("str", "", "raised with AssertionError when the condition is false")},
           doc="Raises AssertionError(message) when the bool condition is false; returns it.", may_fail=True)
