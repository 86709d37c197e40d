"""The OpDef record and the op registry.

Every op, control ops included, is one :class:`OpDef` in :data:`REGISTRY`.  The printer,
parser, verifier, interpreter, passes and docs all read it; nothing dispatches on op names
with ``isinstance`` chains.  Per-transformation rules that need optional dependencies
(XLA, LLVM, ONNX) live in tables of their own, keyed by op name.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from nexus.ir.types import DTYPES, Type

OP_KINDS = ("data", "control", "phi", "comm", "state", "meta")

# A type rule sees the input types, the attributes and, per input, a value known at build
# time (a NumPy array for constants) or None.  It returns the result type or raises
# OpTypeError.
TypeRule = Callable[[Sequence[Type], Mapping[str, Any], Sequence[Any]], Type]
Kernel = Callable[..., Any]


class OpTypeError(TypeError):
    """An op applied to inputs or attributes its type rule rejects."""


class _Required:
    def __repr__(self) -> str:
        return "REQUIRED"


REQUIRED: Any = _Required()

ATTR_KINDS = ("int", "float", "bool", "str", "dtype", "ints", "floats", "dims", "tensor", "graph")


@dataclass(frozen=True)
class Attr:
    """One attribute of an op: its kind (see ATTR_KINDS), default, and what it means."""

    kind: str
    default: Any = REQUIRED
    doc: str = ""

    def __post_init__(self) -> None:
        if self.kind not in ATTR_KINDS:
            raise ValueError(f"unknown attribute kind {self.kind!r}")


@dataclass(frozen=True, eq=False)
class OpDef:
    """Everything the core knows about one op.

    ``inputs`` names the data inputs; if ``variadic`` the last name repeats zero or more
    times.  ``pure`` ops may be folded, deduplicated, hoisted and run in parallel;
    impure ones are ordered by ``deps`` edges and never removed.  ``kernel`` is the
    reference semantics (NumPy) shared by the interpreter and constant folding:
    ``kernel(*input_values, **attrs)``.

    ``may_fail``: running the op can raise on values its input types allow (an index out
    of range, a shape tensor that does not fit, a failed assertion), so passes must not
    run it where the program would not (LICM does not hoist it out of a block that may
    not run).  ``may_fail_on_int``: only on integer values (division by zero, a negative
    integer power).  Failures on shapes the type rules cannot check (symbolic dims that
    do not broadcast) are not flags: passes look at the types.  ``commutative``: a binary
    op whose result does not depend on the order of its two inputs (CSE sorts them).
    """

    name: str
    kind: str
    inputs: tuple[str, ...] = ()
    attrs: Mapping[str, Attr] = field(default_factory=dict)
    type_rule: TypeRule | None = None
    kernel: Kernel | None = None
    pure: bool = True
    variadic: bool = False
    differentiable: bool = False
    doc: str = ""
    family: str = ""
    may_fail: bool = False
    may_fail_on_int: bool = False
    commutative: bool = False

    def __post_init__(self) -> None:
        if self.kind not in OP_KINDS:
            raise ValueError(f"op {self.name}: unknown kind {self.kind!r}")

    def __repr__(self) -> str:
        return f"<OpDef {self.name}>"

    def arity_ok(self, n: int) -> bool:
        if self.variadic:
            return n >= len(self.inputs) - 1
        return n == len(self.inputs)

    def arity_text(self) -> str:
        if self.variadic:
            return f"at least {len(self.inputs) - 1}"
        return str(len(self.inputs))

    def complete_attrs(self, attrs: Mapping[str, Any]) -> dict[str, Any]:
        """Check attribute names and kinds, fill defaults.  Raises OpTypeError."""
        unknown = set(attrs) - set(self.attrs) - UNIVERSAL_ATTRS
        if unknown:
            known = ", ".join(sorted(self.attrs)) or "none"
            raise OpTypeError(f"{self.name}: unknown attribute {sorted(unknown)[0]!r} (known: {known})")
        out: dict[str, Any] = {}
        for name, spec in self.attrs.items():
            if name in attrs:
                out[name] = check_attr(self.name, name, spec.kind, attrs[name])
            elif spec.default is REQUIRED:
                raise OpTypeError(f"{self.name}: missing required attribute {name!r}")
            elif spec.default is not None:
                out[name] = spec.default
        for name in UNIVERSAL_ATTRS & set(attrs):
            out[name] = attrs[name]
        return out


# Attributes any node may carry; placement is on every node (DESIGN section 1).
UNIVERSAL_ATTRS = frozenset({"device", "machine"})


def check_attr(op: str, name: str, kind: str, value: Any) -> Any:
    """Validate and normalise one attribute value."""

    def bad(expected: str) -> OpTypeError:
        return OpTypeError(f"{op}: attribute {name!r} must be {expected}, got {value!r}")

    if kind == "int":
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
            raise bad("an int")
        return int(value)
    if kind == "float":
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.number)):
            raise bad("a float")
        return float(value)
    if kind == "bool":
        if not isinstance(value, (bool, np.bool_)):
            raise bad("a bool")
        return bool(value)
    if kind == "str":
        if not isinstance(value, str):
            raise bad("a string")
        return value
    if kind == "dtype":
        if value not in DTYPES:
            raise bad(f"a dtype ({', '.join(DTYPES)})")
        return value
    if kind in ("ints", "floats", "dims"):
        if not isinstance(value, (tuple, list)):
            raise bad("a list")
        if kind == "ints":
            return tuple(check_attr(op, name, "int", v) for v in value)
        if kind == "floats":
            return tuple(check_attr(op, name, "float", v) for v in value)
        return tuple(value)
    if kind == "tensor":
        if not isinstance(value, np.ndarray):
            raise bad("a NumPy array")
        return value
    if kind == "graph":
        from nexus.ir.graph import Graph

        if not isinstance(value, Graph):
            raise bad("a Graph")
        return value
    raise AssertionError(kind)


REGISTRY: dict[str, OpDef] = {}


def register(op: OpDef) -> OpDef:
    if op.name in REGISTRY:
        raise ValueError(f"op {op.name!r} is registered twice")
    REGISTRY[op.name] = op
    return op


def get_op(name: str) -> OpDef:
    try:
        return REGISTRY[name]
    except KeyError:
        raise KeyError(f"unknown op {name!r}") from None


def all_ops() -> dict[str, OpDef]:
    return REGISTRY
