"""The OpDef record and the op registry.

Every op, control ops included, is one :class:`OpDef` in :data:`REGISTRY`.  The printer,
parser, verifier, interpreter, passes and docs all read it; nothing dispatches on op names
with ``isinstance`` chains.  Per-transformation rules that need optional dependencies
(XLA, LLVM, ONNX) live in tables of their own, keyed by op name.
"""

from __future__ import annotations

import keyword
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

from nexus.ir.types import ALL_DTYPE_NAMES, Type, X, is_dtype

OP_KINDS = ("data", "control", "phi", "comm", "state", "meta")
# The kinds of ops that compute on tensors with the data flow of their block.
DATAFLOW_KINDS = ("data", "comm")
# How frontends prepare an op's operands (OpDef.promotion).
PROMOTIONS = ("", "float", "arith", "logical")
# When the Python operator of an op (OpDef.operator) has the kernel's meaning on integers.
OPERATOR_ON_INTS = ("same", "nonzero divisor", "never")


class DimEq(NamedTuple):
    """A fact a type rule assumed without proof: dim ``a`` of input ``i`` and dim ``b`` of
    input ``j`` are equal (with ``broadcast``: dim ``b`` equals dim ``a`` or is 1, where
    dim ``a`` is the one the result type kept).  Shape checks
    (``nexus.passes.shapechecks``) guard each one at run time."""

    i: int
    a: int
    j: int
    b: int
    broadcast: bool = False


class Inferred(NamedTuple):
    """What a type rule may return instead of a bare Type: the result type and the dim
    equalities it assumed to get it (two symbols it could not prove equal)."""

    type: Type
    assumed: tuple[DimEq, ...] = ()


@dataclass(frozen=True)
class SizeOutput:
    """The result of a multi-output op that holds a data-dependent size (an i64 scalar),
    and the dim it is the size of: dim ``dim`` of result ``of``, where ``dim`` is an index
    or the name of the int attribute that gives it (TopK's ``"axis"``).  Shape inference
    gives the size value that dim's symbol.  Results are named as in ``OpDef.results``."""

    size: str
    of: str
    dim: int | str = 0


# A type rule sees the input types, the attributes and, per input, a value known at build
# time (a NumPy array for constants) or None.  It returns the result type (or an Inferred:
# the type and the dim equalities it assumed) or raises OpTypeError.
TypeRule = Callable[[Sequence[Type], Mapping[str, Any], Sequence[Any]], "Type | Inferred"]
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

    ``broadcasting``: elementwise, with NumPy broadcasting of all its inputs (the type
    rule then reports every pair of symbolic dims it took to broadcast, see ``infer``).
    ``operator``: the Python operator spelling that computes the kernel's result on NumPy
    values (binary ``a + b`` for two inputs, prefix ``-x`` for one), which a backend may
    emit instead of a kernel call.  ``operator_on_ints`` says when that holds for integer
    inputs: ``"same"``; ``"nonzero divisor"`` (the kernel raises on a zero divisor, input
    1, and the operator does not, so it is valid only where input 1 cannot hold a zero);
    ``"never"`` (another meaning: Python's ``/`` divides, the kernel truncates).
    ``results``: the names of the components of a tuple-valued op's result, in ``Proj``
    order.  ``size_output``: which of them is a data-dependent size, and of what.
    ``aliases``: public names of the op besides its snake_case name (``nx.matmul``,
    ``nx.sum``), the same in the DSL and in scripts.  ``multithreaded``: the kernel runs
    on several cores itself (BLAS), so a scheduler should not run two at once.
    ``shape_only``: the result depends on the input's type (shape, dtype) and never on
    its values, so it folds to a constant once the shape is static.

    ``promotion``: how the frontends prepare the operands, as Python and NumPy would:
    ``"float"`` converts integer operands to f64 (the op computes on floats: ``np.exp(3)``);
    ``"arith"`` unifies them to one dtype by NumPy's promotion, Python scalars weak and
    bools counting as ints (``True + True == 2``); ``"logical"`` the same with bools kept
    (comparisons, And, Or, Xor); ``""`` takes them as they are.

    ``terminator``: the op ends its block and leaves it by control edges (libFIRM's
    ``cfopcode``: Jmp, Cond, Return).  ``forking``: a terminator with several exits, each
    a Proj of it in ``results`` order (libFIRM's ``forking``: Cond).  :mod:`nexus.ir.cfg`
    reads both; nothing else asks an op's name for its control role.  ``kind="comm"``:
    the op communicates between devices or ranks (Send, Recv, the collectives); it runs
    with the data flow like a data op (``DATAFLOW_KINDS``).
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
    broadcasting: bool = False
    operator: str = ""
    operator_on_ints: str = "same"
    results: tuple[str, ...] = ()
    size_output: SizeOutput | None = None
    aliases: tuple[str, ...] = ()
    multithreaded: bool = False
    shape_only: bool = False
    promotion: str = ""
    terminator: bool = False
    forking: bool = False

    def __post_init__(self) -> None:
        if self.kind not in OP_KINDS:
            raise ValueError(f"op {self.name}: unknown kind {self.kind!r}")
        if self.promotion not in PROMOTIONS:
            raise ValueError(f"op {self.name}: promotion must be one of {PROMOTIONS}")
        if self.forking and not (self.terminator and self.results):
            raise ValueError(f"op {self.name}: a forking op is a terminator with named exits (results)")
        if self.operator_on_ints not in OPERATOR_ON_INTS:
            raise ValueError(f"op {self.name}: operator_on_ints must be one of {OPERATOR_ON_INTS}")
        if self.operator and (self.variadic or len(self.inputs) not in (1, 2)):
            raise ValueError(f"op {self.name}: an operator needs one or two inputs")
        if self.operator_on_ints == "nonzero divisor" and len(self.inputs) != 2:
            raise ValueError(f"op {self.name}: a divisor is input 1 of a binary op")
        so = self.size_output
        if so is not None and not {so.size, so.of} <= set(self.results):
            raise ValueError(f"op {self.name}: size_output names results not in {self.results}")
        bad = [a for a in self.aliases if not a.isidentifier() or a == snake_case(self.name)]
        if bad:
            raise ValueError(f"op {self.name}: bad alias {bad[0]!r}")

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

    @property
    def public_names(self) -> tuple[str, ...]:
        """``nx.<name>`` spellings of the op in the DSL and in scripts: the snake_case
        name first, then the aliases."""
        return (snake_case(self.name), *self.aliases)

    def infer(self, in_types: Sequence[Type], attrs: Mapping[str, Any], values: Sequence[Any]) -> Inferred:
        """Run the type rule: the result type and the dim equalities it assumed.
        Raises OpTypeError."""
        out = self.rule_output(in_types, attrs, values)
        return out if isinstance(out, Inferred) else Inferred(out)

    def rule_output(self, in_types: Sequence[Type], attrs: Mapping[str, Any], values: Sequence[Any]) -> Type | Inferred:
        """What the type rule returns (a Type, or an Inferred), after checking that no
        input is a control value.  Building a node needs only the type: this saves
        ``infer``'s wrapping on that hot path.  Raises OpTypeError."""
        if self.type_rule is None:
            raise OpTypeError(f"{self.name}: its result type must be given explicitly")
        for i, t in enumerate(in_types):
            if t is X or t.__class__ is _CONTROL and t == X:
                raise OpTypeError(f"{self.name}: input {i} is a control value (X); only blocks take those")
        return self.type_rule(in_types, attrs, values)

    def size_spec(self, attrs: Mapping[str, Any]) -> tuple[int, int, int] | None:
        """``size_output`` of a node with ``attrs`` as ``(Proj of the size, Proj it sizes,
        dim)``, the dim negative when an axis attribute counts from the end; None when
        the op has no size output."""
        so = self.size_output
        if so is None:
            return None
        dim = so.dim if isinstance(so.dim, int) else int(attrs[so.dim])
        return self.results.index(so.size), self.results.index(so.of), dim

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


_CONTROL = X.__class__


def snake_case(op_name: str) -> str:
    """``MatMul`` -> ``mat_mul``; Python keywords get a trailing underscore (``and_``)."""
    name = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", op_name).lower()
    return name + "_" if keyword.iskeyword(name) else name


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
        if not isinstance(value, str) or not is_dtype(value):
            raise bad(f"a dtype ({', '.join(ALL_DTYPE_NAMES)})")
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
