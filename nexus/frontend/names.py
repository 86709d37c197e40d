"""The public names of ops and the Python operators, one table each for the DSL and for scripts.

``nx.<name>`` is an op's snake_case name or one of its aliases (``OpDef.public_names``:
``nx.mat_mul`` and ``nx.matmul``, ``nx.reduce_sum`` and ``nx.sum``), whether it is called
on the module while building a DSL graph or inside an ``@nx.script`` function.  The
names come from the registry as it is when they are looked up, so an op registered
later has its names too.

:data:`BINARY` and :data:`COMPARE` are what Python's operators build (``+`` is Add): the
DSL's dunder methods and the script's expression lowering both read them.
"""

from __future__ import annotations

import ast
import operator
from collections.abc import Callable
from typing import Any, NamedTuple

from nexus.ir.opdef import DATAFLOW_KINDS, OpDef, all_ops

# Ops that are functions of the frontends: data and comm ops, except Constant (nx.constant builds
# one from a value; it is no function of tensors).
FUNCTION_KINDS = frozenset(DATAFLOW_KINDS)
NOT_FUNCTIONS = frozenset({"Constant"})

_cache: tuple[int, dict[str, OpDef]] = (-1, {})


def public_ops() -> dict[str, OpDef]:
    """Every public name -> its op (the first op to claim a name keeps it)."""
    global _cache
    ops = all_ops()
    if _cache[0] != len(ops):  # the registry only grows
        table: dict[str, OpDef] = {}
        for op in ops.values():
            if op.kind in FUNCTION_KINDS and op.name not in NOT_FUNCTIONS:
                for name in op.public_names:
                    table.setdefault(name, op)
        _cache = (len(ops), table)
    return _cache[1]


def op_for_name(name: str) -> OpDef | None:
    """The op called ``nx.<name>``, or None."""
    return public_ops().get(name)


class Operator(NamedTuple):
    """A Python operator: as written, its method name (``add`` for ``__add__`` and
    ``__radd__``), its ``ast`` class, the op it builds, the op it builds on bools instead
    (``&`` is And on bools, BitwiseAnd on integers), and Python's own function (which
    folds known numbers)."""

    symbol: str
    dunder: str
    syntax: type[ast.AST]
    op: str
    fn: Callable[[Any, Any], Any]
    on_bools: str = ""


BINARY: tuple[Operator, ...] = (
    Operator("+", "add", ast.Add, "Add", operator.add),
    Operator("-", "sub", ast.Sub, "Sub", operator.sub),
    Operator("*", "mul", ast.Mult, "Mul", operator.mul),
    Operator("/", "truediv", ast.Div, "Div", operator.truediv),
    Operator("//", "floordiv", ast.FloorDiv, "FloorDiv", operator.floordiv),
    Operator("%", "mod", ast.Mod, "Mod", operator.mod),
    Operator("**", "pow", ast.Pow, "Pow", operator.pow),
    Operator("@", "matmul", ast.MatMult, "MatMul", operator.matmul),
    Operator("&", "and", ast.BitAnd, "BitwiseAnd", operator.and_, on_bools="And"),
    Operator("|", "or", ast.BitOr, "BitwiseOr", operator.or_, on_bools="Or"),
    Operator("^", "xor", ast.BitXor, "BitwiseXor", operator.xor, on_bools="Xor"),
    Operator("<<", "lshift", ast.LShift, "LeftShift", operator.lshift),
    Operator(">>", "rshift", ast.RShift, "RightShift", operator.rshift),
)
COMPARE: tuple[Operator, ...] = (
    Operator("<", "lt", ast.Lt, "Less", operator.lt),
    Operator("<=", "le", ast.LtE, "LessEqual", operator.le),
    Operator(">", "gt", ast.Gt, "Greater", operator.gt),
    Operator(">=", "ge", ast.GtE, "GreaterEqual", operator.ge),
    Operator("==", "eq", ast.Eq, "Equal", operator.eq),
    Operator("!=", "ne", ast.NotEq, "NotEqual", operator.ne),
)
BY_DUNDER: dict[str, Operator] = {o.dunder: o for o in (*BINARY, *COMPARE)}
BY_SYNTAX: dict[type[ast.AST], Operator] = {o.syntax: o for o in (*BINARY, *COMPARE)}
