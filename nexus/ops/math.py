"""Elementwise ops: constants, arithmetic, transcendental functions, activations,
comparisons, logic, integer bitwise ops and casts.  Binary ops broadcast like NumPy and
require equal dtypes (frontends give Python scalars the dtype of the tensor they meet)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from nexus.ir.opdef import Attr, OpTypeError
from nexus.ir.types import (
    FLOAT_DTYPES,
    INT_DTYPES,
    NARROW_FLOAT_DTYPES,
    UNSIGNED_DTYPES,
    TensorType,
    Type,
    dtype_of,
    is_container,
    numpy_dtype,
)
from nexus.ops._rules import ANY_DTYPES, NUMERIC, broadcast, check_dtype, define, tensor, unary_rule
from nexus.ops._special import erf

FAMILY = "math"
FLOATS = frozenset(FLOAT_DTYPES)
SIGNED = frozenset(FLOAT_DTYPES | (INT_DTYPES - UNSIGNED_DTYPES))
BOOL = frozenset({"bool"})


# --- constants and identity -----------------------------------------------------------
def _constant_rule(op: str, ins: Sequence[Type], attrs: Mapping[str, Any], _: Sequence[Any]) -> Type:
    value = attrs["value"]
    try:
        return TensorType(dtype_of(value.dtype), value.shape)
    except ValueError as e:
        raise OpTypeError(f"Constant: {e}") from None


define("Constant", FAMILY, (), _constant_rule, lambda value: value,
       attrs={"value": Attr("tensor", doc="the tensor (0-d for scalars)")},
       doc="A tensor known when the graph is built.")
# Identity also passes a sequence or an optional through (ONNX's Identity does).
define("Identity", FAMILY, ("x",), lambda op, ins, a, v: ins[0] if is_container(ins[0]) else tensor(op, ins[0], 0),
       lambda x: x, differentiable=True, doc="Returns its input.")


# --- binary arithmetic ------------------------------------------------------------------
def _binary(allowed: frozenset[str]) -> Callable[..., Type]:
    def rule(op: str, ins: Sequence[Type], attrs: Mapping[str, Any], _: Sequence[Any]) -> Type:
        dtype, shape = broadcast(op, ins)
        check_dtype(op, tensor(op, ins[0], 0), allowed)
        return TensorType(dtype, shape)

    return rule


def _check_int_divisor(b: Any) -> None:
    if np.ndim(b) == 0:
        if b == 0:
            raise ZeroDivisionError("integer division by zero")
    elif not np.all(b):
        raise ZeroDivisionError("integer division by zero")


def _div(a: Any, b: Any) -> Any:
    """True division for floats; for ints, truncation toward zero (as C and ONNX)."""
    if a.dtype.kind in "iu":
        _check_int_divisor(b)
        q = np.floor_divide(a, b)
        fix = (np.remainder(a, b) != 0) & ((a < 0) != (b < 0))
        return (q + fix.astype(q.dtype)) if np.ndim(q) else q.dtype.type(q + int(fix))
    return np.true_divide(a, b)


def _floordiv(a: Any, b: Any) -> Any:
    if a.dtype.kind in "iu":
        _check_int_divisor(b)
    return np.floor_divide(a, b)


def _mod(a: Any, b: Any) -> Any:
    """Python's modulo: the result has the sign of the divisor (ONNX Mod with fmod=0)."""
    if a.dtype.kind in "iu":
        _check_int_divisor(b)
    return np.mod(a, b)


def _pow(a: Any, b: Any) -> Any:
    """``a ** b``; a float cubed is ``a * a * a``, as PyTorch and ONNX Runtime compute it:
    libm's pow takes a slow path on negative bases (16 ms against 0.06 ms for GPT-2's GELU
    on [8, 64, 512] f32), and the product differs from it by at most an ulp or two."""
    if getattr(b, "ndim", 0) == 0 and np.asarray(b).dtype.kind in "fiu" and b == 3 and np.asarray(a).dtype.kind == "f":
        a = np.asarray(a)
        return np.asarray(a * a * a, np.result_type(a, b))
    return np.power(a, b)


_BINARY: list[tuple[str, Callable[..., Any], frozenset[str], bool, str]] = [
    ("Add", np.add, NUMERIC, True, "a + b"),
    ("Sub", np.subtract, NUMERIC, True, "a - b"),
    ("Mul", np.multiply, NUMERIC, True, "a * b"),
    ("Div", _div, NUMERIC, True, "a / b; integers truncate toward zero"),
    ("FloorDiv", _floordiv, NUMERIC, False, "floor(a / b), Python's //"),
    ("Mod", _mod, NUMERIC, False, "a mod b with the sign of b, Python's %"),
    ("Pow", _pow, NUMERIC, True, "a ** b"),
    ("Maximum", np.maximum, NUMERIC, True, "elementwise max(a, b)"),
    ("Minimum", np.minimum, NUMERIC, True, "elementwise min(a, b)"),
]
# Integer division by zero raises (see _check_int_divisor), and NumPy refuses negative
# integer powers; on floats these give inf or nan instead.
_INT_MAY_FAIL = frozenset({"Div", "FloorDiv", "Mod", "Pow"})
# Binary ops whose two inputs may be swapped (CSE merges a + b with b + a).
# Not Maximum/Minimum: NumPy's maximum(0.0, -0.0) is -0.0 but maximum(-0.0, 0.0) is 0.0,
# and the passes promise bit-identical results.
_COMMUTATIVE = frozenset({"Add", "Mul", "Equal", "NotEqual", "And", "Or", "Xor"})

# The Python operator that computes each op's kernel on NumPy values, so that the python
# backend can emit ``a + b`` instead of a kernel call (``a + b`` on NumPy values *is*
# ``np.add(a, b)``).  On integers Python's ``/`` divides where Div truncates, and ``//``
# and ``%`` give 0 on a zero divisor where the kernels raise.  Pow has a rule of its own
# there (nexus.backends.python.lowering), for _pow's special case.
_OPERATOR = {"Add": "+", "Sub": "-", "Mul": "*", "Div": "/", "FloorDiv": "//", "Mod": "%",
             "Less": "<", "LessEqual": "<=", "Greater": ">", "GreaterEqual": ">=", "Equal": "==", "NotEqual": "!=",
             "Neg": "-"}
_OPERATOR_ON_INTS = {"Div": "never", "FloorDiv": "nonzero divisor", "Mod": "nonzero divisor"}
# Public names besides the snake_case one (nx.subtract, nx.floor_divide...), TensorFlow's
# and NumPy's spellings.
_ALIASES = {"Sub": ("subtract",), "Mul": ("multiply",), "Div": ("divide", "truediv"),
            "FloorDiv": ("floordiv", "floor_divide"), "Pow": ("power",), "Neg": ("negative",)}

for _name, _fn, _allowed, _diff, _doc in _BINARY:
    define(_name, FAMILY, ("a", "b"), _binary(frozenset(_allowed)), _fn, differentiable=_diff, doc=_doc,
           may_fail_on_int=_name in _INT_MAY_FAIL, commutative=_name in _COMMUTATIVE, broadcasting=True,
           operator=_OPERATOR.get(_name, ""), operator_on_ints=_OPERATOR_ON_INTS.get(_name, "same"),
           aliases=_ALIASES.get(_name, ()))


# --- unary math --------------------------------------------------------------------------
def _sigmoid(x: Any) -> Any:
    return 1 / (1 + np.exp(-x))


def _relu(x: Any) -> Any:
    return np.maximum(x, 0)


def _rsqrt(x: Any) -> Any:
    return 1 / np.sqrt(x)


def _reciprocal(x: Any) -> Any:
    return 1 / x


_UNARY: list[tuple[str, Callable[..., Any], frozenset[str], bool, str]] = [
    ("Neg", np.negative, SIGNED, True, "-x"),
    ("Abs", np.abs, NUMERIC, True, "|x|"),
    ("Exp", np.exp, FLOATS, True, "e ** x"),
    ("Log", np.log, FLOATS, True, "natural logarithm"),
    ("Tanh", np.tanh, FLOATS, True, "hyperbolic tangent"),
    ("Sigmoid", _sigmoid, FLOATS, True, "1 / (1 + exp(-x))"),
    ("Relu", _relu, NUMERIC, True, "max(x, 0)"),
    ("Sqrt", np.sqrt, FLOATS, True, "square root"),
    ("Rsqrt", _rsqrt, FLOATS, True, "1 / sqrt(x)"),
    ("Reciprocal", _reciprocal, FLOATS, True, "1 / x"),
    ("Sin", np.sin, FLOATS, True, "sine"),
    ("Cos", np.cos, FLOATS, True, "cosine"),
    ("Erf", erf, FLOATS, True, "the error function"),
    ("Asin", np.arcsin, FLOATS, True, "arcsine (NaN outside [-1, 1])"),
    ("Acos", np.arccos, FLOATS, True, "arccosine (NaN outside [-1, 1])"),
    ("Atan", np.arctan, FLOATS, True, "arctangent"),
    ("Asinh", np.arcsinh, FLOATS, True, "inverse hyperbolic sine"),
    ("Acosh", np.arccosh, FLOATS, True, "inverse hyperbolic cosine (NaN below 1)"),
    ("Atanh", np.arctanh, FLOATS, True, "inverse hyperbolic tangent (NaN outside [-1, 1])"),
    # Piecewise-constant functions: their derivative is zero where it exists, so they
    # are not marked differentiable (autodiff treats them as constants).
    ("Floor", np.floor, FLOATS, False, "round toward -inf"),
    ("Ceil", np.ceil, FLOATS, False, "round toward +inf"),
    ("Round", np.round, FLOATS, False, "round half to even (as ONNX and NumPy)"),
    ("Sign", np.sign, NUMERIC, False, "-1, 0 or 1 (0 for 0; NaN stays NaN)"),
]
# Unary ops whose integer operands frontends convert to f64 first (as math and NumPy do).
_ON_FLOATS = frozenset({"Exp", "Log", "Tanh", "Sigmoid", "Sin", "Cos", "Sqrt", "Rsqrt", "Erf", "Reciprocal"})
for _name, _fn, _allowed, _diff, _doc in _UNARY:
    define(_name, FAMILY, ("x",), unary_rule(frozenset(_allowed)), _fn, differentiable=_diff, doc=_doc,
           operator=_OPERATOR.get(_name, ""), aliases=_ALIASES.get(_name, ()),
           promotion="float" if _name in _ON_FLOATS else "")


# --- selection -----------------------------------------------------------------------------
def _clip_rule(op: str, ins: Sequence[Type], attrs: Mapping[str, Any], _: Sequence[Any]) -> Type:
    dtype, shape = broadcast(op, ins)
    check_dtype(op, tensor(op, ins[0], 0), NUMERIC)
    return TensorType(dtype, shape)


def _clip(x: Any, lo: Any, hi: Any) -> Any:
    # max then min: where lo > hi every element becomes hi (as torch.clamp and ONNX).
    return np.minimum(np.maximum(x, lo), hi)


define("Clip", FAMILY, ("x", "min", "max"), _clip_rule, _clip, differentiable=True, broadcasting=True,
       aliases=("clip_by_value",), doc="min(max(x, min), max), broadcasting; min and max have the dtype of x.")


def _where_rule(op: str, ins: Sequence[Type], attrs: Mapping[str, Any], _: Sequence[Any]) -> Type:
    c = tensor(op, ins[0], 0)
    if c.dtype != "bool":
        raise OpTypeError(f"{op}: the condition (input 0) must be bool, got {c.dtype}")
    dtype, _s = broadcast(op, ins[1:])
    _d, shape = broadcast(op, [c.with_dtype(dtype), *ins[1:]])
    return TensorType(dtype, shape)


def _where(c: Any, a: Any, b: Any) -> Any:
    out = np.where(c, a, b)
    return out[()] if out.ndim == 0 else out


define("Where", FAMILY, ("condition", "a", "b"), _where_rule, _where, differentiable=True, broadcasting=True,
       doc="a where condition else b, broadcasting all three; a and b share a dtype.")


# --- comparisons and logic ---------------------------------------------------------------
def _compare(op: str, ins: Sequence[Type], attrs: Mapping[str, Any], _: Sequence[Any]) -> Type:
    _, shape = broadcast(op, ins)
    return TensorType("bool", shape)


for _name, _fn in [
    ("Less", np.less),
    ("LessEqual", np.less_equal),
    ("Greater", np.greater),
    ("GreaterEqual", np.greater_equal),
    ("Equal", np.equal),
    ("NotEqual", np.not_equal),
]:
    define(_name, FAMILY, ("a", "b"), _compare, _fn, doc=f"elementwise {_fn.__name__}, a bool tensor",
           commutative=_name in _COMMUTATIVE, broadcasting=True, operator=_OPERATOR[_name], promotion="logical")

# On bools, &, | and ^ are NumPy's logical ops, and ~ is logical not.
define("And", FAMILY, ("a", "b"), _binary(BOOL), np.logical_and, doc="logical and of bools", commutative=True,
       broadcasting=True, operator="&", aliases=("logical_and",), promotion="logical")
define("Or", FAMILY, ("a", "b"), _binary(BOOL), np.logical_or, doc="logical or of bools", commutative=True,
       broadcasting=True, operator="|", aliases=("logical_or",), promotion="logical")
define("Xor", FAMILY, ("a", "b"), _binary(BOOL), np.logical_xor, doc="logical xor of bools", commutative=True,
       broadcasting=True, operator="^", aliases=("logical_xor",), promotion="logical")
define("Not", FAMILY, ("x",), unary_rule(BOOL), np.logical_not, doc="logical not of a bool", operator="~",
       aliases=("logical_not",))


# --- bitwise ops on integers ---------------------------------------------------------------
# Python's operators on ints, in the dtype's two's complement.  The logical ops above
# (And, Or, Xor, Not) are the bool versions; a frontend picks by dtype.
INTS = frozenset(INT_DTYPES)


def _shift_count(op: str, b: Any) -> None:
    # Python raises on a negative count; NumPy would quietly give 0 or -1.
    if np.any(b < 0):
        raise ValueError(f"{op}: negative shift count {int(np.min(b))}")


def _left_shift(a: Any, b: Any) -> Any:
    """a * 2**b wrapped to the dtype: bits shifted out are lost, so a count >= the width
    gives 0 (NumPy's definition; C and LLVM leave it undefined, so a backend must clamp)."""
    _shift_count("LeftShift", b)
    return np.left_shift(a, b)


def _right_shift(a: Any, b: Any) -> Any:
    """floor(a / 2**b): arithmetic for signed ints, so a count >= the width gives 0 or -1,
    exactly Python's >> (NumPy's definition; C and LLVM leave it undefined)."""
    _shift_count("RightShift", b)
    return np.right_shift(a, b)


for _name, _fn, _op, _doc in [
    ("BitwiseAnd", np.bitwise_and, "&", "a & b on integers, bit by bit (Python's & on ints)"),
    ("BitwiseOr", np.bitwise_or, "|", "a | b on integers, bit by bit (Python's | on ints)"),
    ("BitwiseXor", np.bitwise_xor, "^", "a ^ b on integers, bit by bit (Python's ^ on ints)"),
]:
    define(_name, FAMILY, ("a", "b"), _binary(INTS), _fn, doc=_doc, commutative=True, broadcasting=True,
           operator=_op)
define("BitwiseNot", FAMILY, ("x",), unary_rule(INTS), np.invert, operator="~",
       doc="~x on integers: -x - 1 for signed ints (Python's ~), 255 - x for u8")
# The shifts keep their kernels: NumPy's << and >> do not refuse a negative count.
define("LeftShift", FAMILY, ("a", "b"), _binary(INTS), _left_shift, may_fail_on_int=True, broadcasting=True,
       doc="a << b on integers: a * 2**b wrapped to the dtype (bits shifted out are lost; a count >= "
           "the bit width gives 0, where Python's ints would grow); a negative count raises ValueError")
define("RightShift", FAMILY, ("a", "b"), _binary(INTS), _right_shift, may_fail_on_int=True, broadcasting=True,
       doc="a >> b on integers: floor(a / 2**b), arithmetic for signed ints, as Python's >> (a count >= "
           "the bit width gives 0 or -1); a negative count raises ValueError")


# --- casts ---------------------------------------------------------------------------------
def _cast_rule(op: str, ins: Sequence[Type], attrs: Mapping[str, Any], _: Sequence[Any]) -> Type:
    t = tensor(op, ins[0], 0)
    check_dtype(op, t, ANY_DTYPES)
    if attrs.get("round_mode") not in (None, "up", "down", "nearest"):
        raise OpTypeError(f"{op}: round_mode must be up, down or nearest, not {attrs['round_mode']!r}")
    return t.with_dtype(attrs["to"])


def _cast(x: Any, to: str, saturate: bool = True, round_mode: str = "up") -> Any:
    if to in NARROW_FLOAT_DTYPES and to not in ("bf16", "f4e2m1fn"):
        y = _to_float8(np.asarray(x), to, saturate, round_mode)
        return y[()] if np.ndim(x) == 0 else y
    return np.asarray(x).astype(numpy_dtype(to))[()] if np.ndim(x) == 0 else x.astype(numpy_dtype(to))


def _to_float8(x: np.ndarray, to: str, saturate: bool, round_mode: str) -> np.ndarray:
    """Float8 conversion as ONNX defines it: saturating (the default) clamps finite and
    infinite values to the largest finite one (NaN stays NaN); without it, what is out of
    range becomes inf or NaN, as the format has them.  E8M0 holds only powers of two
    (see _to_e8m0)."""
    dt = numpy_dtype(to)
    xf = x.astype(np.float64)  # exact for every source dtype, so the one rounding is the last cast
    if to == "f8e8m0fnu":
        return _to_e8m0(x, saturate, round_mode).view(dt)
    if saturate:
        big = float(_finfo_max(to))
        xf = np.where(np.isnan(xf), xf, np.clip(xf, -big, big))
    return xf.astype(dt)


def _to_e8m0(x: np.ndarray, saturate: bool, round_mode: str) -> np.ndarray:
    """The E8M0 codes of ``x`` as ONNX computes them: from the float32 bits, the biased
    exponent (the sign ignored, as the format has none), one up when the mantissa asks
    for it (up: any fraction; nearest: at least half, ties away unless subnormal; down:
    never), not past the largest when saturating; NaN and inf become NaN (code 255)."""
    bits = x.astype(np.float32).view(np.uint32)
    exp = ((bits >> 23) & 0xFF).astype(np.uint16)
    frac = bits & 0x7FFFFF
    if round_mode == "up":
        inc = frac > 0
    elif round_mode == "nearest":
        inc = ((frac & 0x400000) > 0) & (((frac & 0x3FFFFF) > 0) | (exp > 0))
    else:
        inc = np.zeros(exp.shape, bool)
    if saturate:
        inc &= exp != 0xFE
    return np.where(exp == 0xFF, 0xFF, exp + inc).astype(np.uint8)


def _finfo_max(to: str) -> float:
    import ml_dtypes  # noqa: PLC0415  (present: numpy_dtype(to) needed it already)

    return float(ml_dtypes.finfo(numpy_dtype(to)).max)


define("Cast", FAMILY, ("x",), _cast_rule, _cast,
       attrs={"to": Attr("dtype", doc="target dtype"),
              "saturate": Attr("bool", None, "float8 targets: clamp out-of-range values (and inf) to the largest "
                                          "finite value (the default); false: they become inf or NaN"),
              "round_mode": Attr("str", None, "f8e8m0fnu targets: round up (the default), down or nearest to a "
                                        "power of two")},
       differentiable=True, doc="Converts to another dtype (floats to ints truncate toward zero).")
