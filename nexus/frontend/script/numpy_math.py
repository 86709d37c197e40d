"""The NumPy math and linear-algebra functions of ``@nx.script`` that are no single op
(``clip``, ``isnan``, ``log1p``, ``logical_*``, ``einsum``, ``outer``...), composed from
registry ops with NumPy's defaults."""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING, Any

from nexus.frontend.script import expr
from nexus.frontend.script.numpy_creation import _flat, _static, _t
from nexus.frontend.script.values import Static, Val, _dtype
from nexus.ir.node import Node

if TYPE_CHECKING:
    from nexus.frontend.script.visitor import Lowering


# --- math --------------------------------------------------------------------------------


def npx_clip(low: Lowering, node: ast.Call, args: list[Val], kw: dict[str, Any]) -> Val:
    lo = args[1] if len(args) > 1 else Static(kw.pop("a_min", kw.pop("min", None)))
    hi = args[2] if len(args) > 2 else Static(kw.pop("a_max", kw.pop("max", None)))
    x = args[0]
    if not (isinstance(lo, Static) and lo.value is None):
        a, b = expr.unify(low, [x, lo], arith=True)
        x = low.emit("Maximum", [a, b])
    if not (isinstance(hi, Static) and hi.value is None):
        a, b = expr.unify(low, [x, hi], arith=True)
        x = low.emit("Minimum", [a, b])
    return x


def npx_isnan(low: Lowering, node: ast.Call, args: list[Val], kw: dict[str, Any]) -> Val:
    x, _ = _t(low, args[0])
    return low.emit("NotEqual", [x, x])


def npx_isinf(low: Lowering, node: ast.Call, args: list[Val], kw: dict[str, Any]) -> Val:
    x, _ = _t(low, args[0])
    return low.emit("Equal", [low.emit("Abs", [x]), low.static_const(float("inf"), _dtype(x))])


def npx_isfinite(low: Lowering, node: ast.Call, args: list[Val], kw: dict[str, Any]) -> Val:
    x, _ = _t(low, args[0])
    d = low.emit("Sub", [x, x])  # 0 where finite, nan where inf or nan
    return low.emit("Equal", [d, d])


def npx_log1p(low: Lowering, node: ast.Call, args: list[Val], kw: dict[str, Any]) -> Val:
    a, b = expr.unify(low, [args[0], Static(1.0)], arith=True)
    return low.emit("Log", [low.emit("Add", [a, b])])


def npx_expm1(low: Lowering, node: ast.Call, args: list[Val], kw: dict[str, Any]) -> Val:
    x, _ = _t(low, args[0])
    e = low.emit("Exp", [low.cast(x, "f64") if not _dtype(x).startswith("f") else x])
    return low.emit("Sub", [e, low.static_const(1.0, _dtype(e))])


def npx_power(low: Lowering, node: ast.Call, args: list[Val], kw: dict[str, Any]) -> Val:
    a, b = expr.unify(low, args[:2], arith=True)
    return low.emit("Pow", [a, b])


def npx_square(low: Lowering, node: ast.Call, args: list[Val], kw: dict[str, Any]) -> Val:
    x, _ = _t(low, args[0])
    return low.emit("Mul", [x, x])


def npx_logical_and(low: Lowering, node: ast.Call, args: list[Val], kw: dict[str, Any]) -> Val:
    return low.emit("And", [_bool(low, a) for a in args[:2]])


def npx_logical_or(low: Lowering, node: ast.Call, args: list[Val], kw: dict[str, Any]) -> Val:
    return low.emit("Or", [_bool(low, a) for a in args[:2]])


def npx_logical_xor(low: Lowering, node: ast.Call, args: list[Val], kw: dict[str, Any]) -> Val:
    return low.emit("Xor", [_bool(low, a) for a in args[:2]])


def npx_logical_not(low: Lowering, node: ast.Call, args: list[Val], kw: dict[str, Any]) -> Val:
    return low.emit("Not", [_bool(low, args[0])])


def _bool(low: Lowering, v: Val) -> Node:
    x = low.as_node(v)
    return x if _dtype(x) == "bool" else low.emit("NotEqual", [x, low.static_const(0, _dtype(x))])


# --- linear algebra ----------------------------------------------------------------------


def npx_einsum(low: Lowering, node: ast.Call, args: list[Val], kw: dict[str, Any]) -> Val:
    eq = _static(low, args[0], node, "the einsum equation")
    ops = expr.unify(low, args[1:], arith=True)
    return low.emit("Einsum", ops, {"equation": str(eq).replace(" ", "")})


def npx_outer(low: Lowering, node: ast.Call, args: list[Val], kw: dict[str, Any]) -> Val:
    a, b = expr.unify(low, args[:2], arith=True)
    return low.emit("Mul", [low.emit("Unsqueeze", [_flat(low, a)], {"axes": (1,)}),
                             low.emit("Unsqueeze", [_flat(low, b)], {"axes": (0,)})])
