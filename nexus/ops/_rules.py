"""Building blocks for op definitions: shared type rules and the op-family helpers."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from nexus.ir.opdef import Attr, OpDef, OpTypeError, register
from nexus.ir.types import FLOAT_DTYPES, INT_DTYPES, TensorType, Type, broadcast_shapes

NUMERIC = FLOAT_DTYPES | INT_DTYPES
ALL_DTYPES = NUMERIC | {"bool"}


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


# A family rule: ``rule(op_name, input_types, attrs, known_values) -> Type``.
Rule = Callable[[str, Sequence[Type], Mapping[str, Any], Sequence[Any]], Type]


def unary_rule(allowed: frozenset[str]) -> Rule:
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
) -> OpDef:
    """Register an op of a family; ``rule`` gets the op's name first, for its errors."""

    def type_rule(ins: Sequence[Type], a: Mapping[str, Any], values: Sequence[Any]) -> Type:
        return rule(name, ins, a, values)

    return register(
        OpDef(
            name,
            kind,
            inputs=inputs,
            attrs=dict(attrs or {}),
            type_rule=type_rule,
            kernel=kernel,
            pure=pure,
            variadic=variadic,
            differentiable=differentiable,
            doc=doc,
            family=family,
        )
    )


def normalize_axis(op: str, axis: int, rank: int) -> int:
    if not -rank <= axis < max(rank, 1):
        raise OpTypeError(f"{op}: axis {axis} is out of range for rank {rank}")
    return axis % rank if rank else 0


def as_array(value: Any) -> np.ndarray:
    return np.asarray(value)
