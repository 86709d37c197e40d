"""Building blocks for op definitions: shared type rules and the op-family helpers."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from nexus.ir.opdef import Attr, DimEq, Inferred, OpDef, OpTypeError, SizeOutput, register
from nexus.ir.types import (
    FLOAT_DTYPES,
    INT_DTYPES,
    NARROW_DTYPES,
    TensorType,
    Type,
    broadcast_shapes,
    dims_may_differ,
)

NUMERIC = FLOAT_DTYPES | INT_DTYPES
ALL_DTYPES = NUMERIC | {"bool"}
# Every dtype, the narrow storage dtypes included: what Cast converts between and what
# ops that only move data (Identity, Reshape, Concat...) may carry.
ANY_DTYPES = ALL_DTYPES | frozenset(NARROW_DTYPES)


def tensor(op: str, t: Type, i: int) -> TensorType:
    if not isinstance(t, TensorType):
        raise OpTypeError(f"{op}: input {i} must be a tensor, got {t}")
    return t


def check_dtype(op: str, t: TensorType, allowed: frozenset[str] | set[str], i: int = 0) -> None:
    if t.dtype not in allowed:
        raise OpTypeError(f"{op}: input {i} has dtype {t.dtype}; {op} takes {', '.join(sorted(allowed))}")


def broadcast(op: str, ins: Sequence[Type], same_dtype: bool = True) -> tuple[str, tuple | None]:
    """The common dtype and broadcast shape of elementwise inputs."""
    ts = [tensor(op, t, i) for i, t in enumerate(ins)]
    dtype = ts[0].dtype
    if same_dtype:
        for i, t in enumerate(ts[1:], 1):
            if t.dtype != dtype:
                raise OpTypeError(
                    f"{op}: dtype mismatch, input 0 is {dtype} and input {i} is {t.dtype}; insert a Cast"
                )
    if any(t.shape is None for t in ts):
        return dtype, None
    shape: tuple = ts[0].shape  # type: ignore[assignment]
    for t in ts[1:]:
        try:
            shape = broadcast_shapes(shape, t.shape)  # type: ignore[arg-type]
        except ValueError as e:
            raise OpTypeError(f"{op}: {e}") from None
    return dtype, shape


def broadcast_assumed(ins: Sequence[Type]) -> tuple[DimEq, ...]:
    """The dims of elementwise inputs taken to broadcast without proof, as
    ``broadcast_shapes`` decides them folding the inputs left to right: for each result
    dim, the input dim it kept against every other input's dim there that may differ
    (``[N]`` and ``[M]``, ``[N]`` and ``[3]``; not ``[N]`` and ``[1]``)."""
    shapes: list[tuple[Any, ...]] = []
    symbolic = False
    for t in ins:
        s = t.shape if isinstance(t, TensorType) else None
        if s is None:
            return ()
        shapes.append(s)
        symbolic = symbolic or any(type(d) is not int for d in s)
    if not symbolic:
        return ()  # the common case, and int dims that differ are a type error already
    rank = max(len(s) for s in shapes)
    out: list[DimEq] = []
    for k in range(1, rank + 1):  # result dims from the right
        column = [(i, len(s) - k) for i, s in enumerate(shapes) if len(s) >= k]
        kept = column[0]
        for i, a in column[1:]:  # the fold: a 1 gives way, an int wins over a symbol
            dk, d = shapes[kept[0]][kept[1]], shapes[i][a]
            if (type(dk) is int and dk == 1) or (type(d) is int and d != 1 and type(dk) is not int):
                kept = (i, a)
        dk = shapes[kept[0]][kept[1]]
        for i, a in column:
            if (i, a) != kept and dims_may_differ(dk, shapes[i][a], broadcast=True):
                out.append(DimEq(kept[0], kept[1], i, a, broadcast=True))
    return tuple(out)


def assume_equal(ins: Sequence[Type], *pairs: tuple[int, int, int, int], broadcast: bool = False) -> list[DimEq]:
    """The equalities ``(i, a, j, b)``, dim ``a`` of input ``i`` = dim ``b`` of input
    ``j``, that a rule takes for granted, less those the types prove (the same dim, two
    ints, with ``broadcast`` a 1).  Negative axes count from the end."""
    out: list[DimEq] = []
    for i, a, j, b in pairs:
        ti, tj = ins[i], ins[j]
        if not (isinstance(ti, TensorType) and isinstance(tj, TensorType)) or ti.shape is None or tj.shape is None:
            continue
        if not (-len(ti.shape) <= a < len(ti.shape) and -len(tj.shape) <= b < len(tj.shape)):
            continue
        a, b = a % len(ti.shape), b % len(tj.shape)
        if dims_may_differ(ti.shape[a], tj.shape[b], broadcast):
            out.append(DimEq(i, a, j, b, broadcast))
    return out


def assuming(t: Type | Inferred, assumed: Sequence[DimEq]) -> Type | Inferred:
    """``t`` (a rule's result) with ``assumed`` added to the dim equalities it reports."""
    if not assumed:
        return t
    if isinstance(t, Inferred):
        return Inferred(t.type, t.assumed + tuple(assumed))
    return Inferred(t, tuple(assumed))


# A family rule: ``rule(op_name, input_types, attrs, known_values) -> Type`` (or an
# Inferred: the type and the dim equalities it assumed).
Rule = Callable[[str, Sequence[Type], Mapping[str, Any], Sequence[Any]], "Type | Inferred"]
PlainRule = Callable[[str, Sequence[Type], Mapping[str, Any], Sequence[Any]], Type]


def unary_rule(allowed: frozenset[str]) -> PlainRule:
    def rule(op: str, ins: Sequence[Type], attrs: Mapping[str, Any], _: Sequence[Any]) -> Type:
        t = tensor(op, ins[0], 0)
        check_dtype(op, t, allowed)
        return t

    return rule


def define(
    name: str,
    family: str,
    inputs: tuple[str, ...],
    rule: Rule,
    kernel: Callable[..., Any] | None,
    *,
    attrs: Mapping[str, Attr] | None = None,
    doc: str = "",
    differentiable: bool = False,
    pure: bool = True,
    variadic: bool = False,
    kind: str = "data",
    may_fail: bool = False,
    may_fail_on_int: bool = False,
    commutative: bool = False,
    broadcasting: bool = False,
    operator: str = "",
    operator_on_ints: str = "same",
    results: tuple[str, ...] = (),
    size_output: SizeOutput | None = None,
    aliases: tuple[str, ...] = (),
    multithreaded: bool = False,
    shape_only: bool = False,
    promotion: str | None = None,
) -> OpDef:
    """Register an op of a family; ``rule`` gets the op's name first, for its errors.
    The keyword flags are the OpDef's properties that passes, backends and frontends
    read (see :class:`~nexus.ir.opdef.OpDef`).  For a ``broadcasting`` op the type rule
    also reports the dims it took to broadcast (:func:`broadcast_assumed`); its operands are
    promoted (``promotion="arith"``) unless ``promotion`` says otherwise."""

    def type_rule(ins: Sequence[Type], a: Mapping[str, Any], values: Sequence[Any]) -> Type | Inferred:
        return rule(name, ins, a, values)

    def broadcasting_rule(ins: Sequence[Type], a: Mapping[str, Any], values: Sequence[Any]) -> Type | Inferred:
        out = rule(name, ins, a, values)
        assumed = broadcast_assumed(ins)
        return assuming(out, assumed) if assumed else out

    return register(
        OpDef(
            name,
            kind,
            inputs=inputs,
            attrs=dict(attrs or {}),
            type_rule=broadcasting_rule if broadcasting else type_rule,
            kernel=kernel,
            pure=pure,
            variadic=variadic,
            differentiable=differentiable,
            doc=doc,
            family=family,
            may_fail=may_fail,
            may_fail_on_int=may_fail_on_int,
            commutative=commutative,
            broadcasting=broadcasting,
            operator=operator,
            operator_on_ints=operator_on_ints,
            results=results,
            size_output=size_output,
            aliases=aliases,
            multithreaded=multithreaded,
            shape_only=shape_only,
            promotion=("arith" if broadcasting else "") if promotion is None else promotion,
        )
    )


def normalize_axis(op: str, axis: int, rank: int) -> int:
    if not -rank <= axis < max(rank, 1):
        raise OpTypeError(f"{op}: axis {axis} is out of range for rank {rank}")
    return axis % rank if rank else 0


# --- shape values ------------------------------------------------------------------------
# A rule's ``values[i]`` is what is known about input ``i`` before running: a NumPy array
# for constants, or (from shape inference) an object array of ints and sympy expressions
# for integer tensors computed from shapes (ShapeOf, DimSize, the size output of NMS...).


def as_dim(x: Any) -> Any:
    """One element of a known value as a dim: a Python int or a sympy expression."""
    if isinstance(x, (int, np.integer)):
        return int(x)
    import sympy

    if isinstance(x, sympy.Basic):
        return int(x) if isinstance(x, sympy.Integer) else x
    return int(x)


def dims_value(value: Any) -> list[Any] | None:
    """A known 1-D (or scalar) integer value as a list of dims, else None."""
    if value is None:
        return None
    arr = np.asarray(value)
    if arr.dtype.kind not in "iuO":
        return None
    return [as_dim(x) for x in arr.reshape(-1)]


def scalar_value(value: Any) -> Any:
    """A known scalar integer value as a dim, else None."""
    dims = dims_value(value)
    if dims is None or len(dims) != 1:
        return None
    return dims[0]


def check_same_dtype(op: str, ts: Sequence[TensorType], first: int = 0) -> str:
    """All tensors share one dtype; raises naming the first mismatching input."""
    dtype = ts[0].dtype
    for i, t in enumerate(ts[1:], 1):
        if t.dtype != dtype:
            raise OpTypeError(
                f"{op}: dtype mismatch, input {first} is {dtype} and input {first + i} is {t.dtype}; insert a Cast"
            )
    return dtype


def check_int_vector(op: str, t: TensorType, what: str) -> None:
    if t.dtype not in INT_DTYPES or (t.shape is not None and len(t.shape) != 1):
        raise OpTypeError(f"{op}: {what} must be a 1-D integer tensor, got {t}")


def check_int_scalar(op: str, t: TensorType, what: str) -> None:
    if t.dtype not in INT_DTYPES or (t.shape is not None and len(t.shape) != 0):
        raise OpTypeError(f"{op}: {what} must be an integer scalar, got {t}")


def vector_len(t: TensorType) -> Any:
    """The length of a 1-D tensor type (an int, a symbol, or None when unknown)."""
    if t.shape is None or len(t.shape) != 1:
        return None
    return t.shape[0]


def fresh_shape(n: Any) -> tuple | None:
    """``n`` fresh dims when ``n`` is a known int, else an unknown rank."""
    from nexus.ir.types import fresh_dim

    return tuple(fresh_dim() for _ in range(n)) if isinstance(n, int) else None


def like(x: Any, ref: Any) -> Any:
    """``x`` with the dtype of ``ref``, kept a NumPy scalar when 0-d."""
    dt = np.asarray(ref).dtype
    out = np.asarray(x, dtype=dt)
    return out[()] if out.ndim == 0 else out
