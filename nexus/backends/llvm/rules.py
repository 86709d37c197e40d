"""The ``llvm`` lowering table: one element of an elementwise op, in registers.

A rule is ``rule(cx, node, args, dtypes) -> ir.Value``: ``args`` are the inputs' scalar
values (LLVM registers, bools as ``i1``), ``dtypes`` their dtypes.  The same rule computes
a scalar op and the body of a fused loop over tensors (:mod:`nexus.backends.llvm.tensors`).
Integer semantics are NumPy's, which are Python's on values that fit: floor division
and modulo round toward -inf, fixed-width ints wrap, shift counts past the width give 0
(or -1), a zero divisor, a negative shift count or a negative integer power fail with the
reference kernel's exception (``cx.fail``).  Float ``//`` and ``%`` follow NumPy's
``npy_divmod``, ``maximum``/``minimum`` its NaN and signed-zero rules.
"""

from __future__ import annotations

from typing import Any, Protocol

from llvmlite import ir

from nexus.backends.base import lowering_table, register_lowering
from nexus.backends.llvm.dtypes import I1, Unsupported, constant, kind, reg_type
from nexus.ir.node import Node
from nexus.ir.types import TensorType

BACKEND = "llvm"


class Ctx(Protocol):
    """What a rule may use: the builder, failure exits and math functions."""

    b: ir.IRBuilder

    def fail(self, cond: ir.Value, node: Node, exc: str, msg: str) -> None:
        """Leave the function with ``exc(msg)`` (raised by the caller) where ``cond`` holds."""

    def math(self, name: str, dtype: str, args: list[ir.Value]) -> ir.Value:
        """An LLVM intrinsic (``llvm.<name>``) or libm function on ``dtype``."""


def out_dtype(node: Node) -> str:
    t = node.type
    assert isinstance(t, TensorType)
    return t.dtype


def _same(dts: list[str], node: Node) -> str:
    if len(set(dts)) != 1:
        raise Unsupported(f"{node.op.name} on mixed dtypes {dts}")
    return dts[0]


# --- arithmetic ------------------------------------------------------------------------------
def _int_divisor_check(cx: Ctx, node: Node, d: ir.Value) -> None:
    cx.fail(cx.b.icmp_signed("==", d, ir.Constant(d.type, 0)), node, "ZeroDivisionError", "integer division by zero")


def _sdiv_safe(cx: Ctx, a: ir.Value, d: ir.Value, signed: bool) -> tuple[ir.Value, ir.Value]:
    """Truncating quotient and remainder; MIN / -1 wraps (as NumPy) instead of being UB."""
    b = cx.b
    if not signed:
        return b.udiv(a, d), b.urem(a, d)
    minus1 = b.icmp_signed("==", d, ir.Constant(d.type, -1))
    safe = b.select(minus1, ir.Constant(d.type, 1), d)
    q = b.select(minus1, b.sub(ir.Constant(a.type, 0), a), b.sdiv(a, safe))
    r = b.select(minus1, ir.Constant(a.type, 0), b.srem(a, safe))
    return q, r


def _float_divmod(cx: Ctx, a: ir.Value, d: ir.Value, dt: str) -> tuple[ir.Value, ir.Value]:
    """NumPy's npy_divmod: (floor quotient, modulo with the sign of the divisor)."""
    b = cx.b
    zero = ir.Constant(a.type, 0.0)
    mod = b.frem(a, d)
    div = b.fdiv(b.fsub(a, mod), d)
    fix = b.and_(b.fcmp_ordered("!=", mod, zero),
                 b.icmp_unsigned("!=", b.fcmp_ordered("<", d, zero), b.fcmp_ordered("<", mod, zero)))
    mod2 = b.select(fix, b.fadd(mod, d), b.select(b.fcmp_unordered("!=", mod, zero), mod,
                                                     cx.math("copysign", dt, [zero, d])))
    div = b.select(fix, b.fsub(div, ir.Constant(a.type, 1.0)), div)
    fl = cx.math("floor", dt, [div])
    one, half = ir.Constant(a.type, 1.0), ir.Constant(a.type, 0.5)
    fl = b.select(b.fcmp_ordered(">", b.fsub(div, fl), half), b.fadd(fl, one), fl)
    q = b.select(b.fcmp_unordered("!=", div, zero), fl, cx.math("copysign", dt, [zero, b.fdiv(a, d)]))
    dzero = b.fcmp_ordered("==", d, zero)
    return b.select(dzero, b.fdiv(a, d), q), b.select(dzero, mod, mod2)


def _arith(cx: Ctx, node: Node, args: list[ir.Value], dts: list[str]) -> ir.Value:
    b, name = cx.b, node.op.name
    dt = _same(dts, node)
    k = kind(dt)
    x, y = args
    if k == "f":
        simple = {"Add": b.fadd, "Sub": b.fsub, "Mul": b.fmul, "Div": b.fdiv}
        if name in simple:
            return simple[name](x, y)
        if name in ("FloorDiv", "Mod"):
            q, r = _float_divmod(cx, x, y, dt)
            return q if name == "FloorDiv" else r
        if name == "Pow":
            return cx.math("pow", dt, [x, y])
        # NumPy: maximum(a, b) = a if a > b or a is NaN else b (so NaN wins, and ties give b)
        cmp = b.fcmp_ordered(">" if name == "Maximum" else "<", x, y)
        return b.select(b.or_(cmp, b.fcmp_unordered("uno", x, x)), x, y)
    if k == "b":
        raise Unsupported(f"{name} on bools")
    signed = k == "i"
    simple = {"Add": b.add, "Sub": b.sub, "Mul": b.mul}
    if name in simple:
        return simple[name](x, y)
    if name in ("Maximum", "Minimum"):
        op = (">" if name == "Maximum" else "<")
        cmp = b.icmp_signed(op, x, y) if signed else b.icmp_unsigned(op, x, y)
        return b.select(cmp, x, y)
    if name in ("FloorDiv", "Mod") and signed and _positive_constant(y):
        return _floor_by_positive_constant(cx, name, x, y)
    if name in ("Div", "FloorDiv", "Mod"):
        _int_divisor_check(cx, node, y)
        q, r = _sdiv_safe(cx, x, y, signed)
        if name == "Div" or not signed:
            return q if name != "Mod" else r
        zero = ir.Constant(x.type, 0)
        # floor: the remainder is non-zero and its sign differs from the divisor's
        fix = b.and_(b.icmp_signed("!=", r, zero), b.icmp_signed("<", b.xor(r, y), zero))
        if name == "FloorDiv":
            return b.sub(q, b.zext(fix, x.type))
        return b.select(fix, b.add(r, y), r)
    if name == "Pow":
        return _int_pow(cx, node, x, y, signed)
    raise Unsupported(name)


def _positive_constant(y: ir.Value) -> bool:
    return isinstance(y, ir.Constant) and isinstance(y.constant, int) and 0 < y.constant < (1 << (y.type.width - 1))


def _floor_by_positive_constant(cx: Ctx, name: str, x: ir.Value, y: ir.Value) -> ir.Value:
    """``x // c`` or ``x % c`` for a constant ``c > 0``: a branch on the sign of ``x``.  The
    non-negative side is ``udiv``/``urem`` (no sign correction, no floor fix-up); the
    branch is predicted, so the usual case's dependency chain is the unsigned division
    alone (W2's ``s = (s + i * i) % 1000003``: C's ``%`` costs the same)."""
    b = cx.b
    zero = ir.Constant(x.type, 0)
    fast = b.append_basic_block("mod.nonneg")
    slow = b.append_basic_block("mod.neg")
    done = b.append_basic_block("mod.done")
    b.cbranch(b.icmp_signed(">=", x, zero), fast, slow)
    b.position_at_end(fast)
    q_fast = _udiv_nonneg(b, x, y.constant)
    r_fast = q_fast if name == "FloorDiv" else b.sub(x, b.mul(q_fast, y))
    b.branch(done)
    b.position_at_end(slow)
    q, r = b.sdiv(x, y), b.srem(x, y)  # c > 0: no MIN / -1 case; floor: a remainder < 0 moves
    fix = b.icmp_signed("<", r, zero)
    r_slow = b.sub(q, b.zext(fix, x.type)) if name == "FloorDiv" else b.select(fix, b.add(r, y), r)
    b.branch(done)
    b.position_at_end(done)
    phi = b.phi(x.type)
    phi.add_incoming(r_fast, fast)
    phi.add_incoming(r_slow, slow)
    return phi


def magic(d: int, bits: int) -> tuple[int, int]:
    """(m, shift) with ``x // d == (x * m) >> shift`` for every ``0 <= x < 2**(bits - 1)``
    (Granlund and Montgomery for a numerator of bits - 1 bits: m < 2**bits always)."""
    n = bits - 1
    ell = max((d - 1).bit_length(), 0)
    m = -((-(1 << (n + ell))) // d)  # ceil
    return m, n + ell


def _udiv_nonneg(b: ir.IRBuilder, x: ir.Value, d: int) -> ir.Value:
    """``x // d`` for ``x >= 0`` as one widening multiply and a shift: the numerator's spare
    top bit makes the magic fit the register, which LLVM's own ``udiv`` lowering (for any
    unsigned numerator) cannot assume."""
    bits = x.type.width
    if d & (d - 1) == 0:
        return b.lshr(x, ir.Constant(x.type, d.bit_length() - 1))
    m, shift = magic(d, bits)
    wide = ir.IntType(2 * bits)
    prod = b.mul(b.zext(x, wide), ir.Constant(wide, m), flags=["nuw"])
    return b.trunc(b.lshr(prod, ir.Constant(wide, shift)), x.type)


def _int_pow(cx: Ctx, node: Node, base: ir.Value, exp: ir.Value, signed: bool) -> ir.Value:
    """Square and multiply, wrapping; a negative exponent fails as NumPy's does."""
    b = cx.b
    t = base.type
    if signed:
        cx.fail(b.icmp_signed("<", exp, ir.Constant(t, 0)), node, "ValueError",
                "Integers to negative integer powers are not allowed.")
    pre = b.block
    head = b.append_basic_block("pow.head")
    body = b.append_basic_block("pow.body")
    done = b.append_basic_block("pow.done")
    b.branch(head)
    b.position_at_end(head)
    r, x, e = b.phi(t), b.phi(t), b.phi(t)
    r.add_incoming(ir.Constant(t, 1), pre)
    x.add_incoming(base, pre)
    e.add_incoming(exp, pre)
    b.cbranch(b.icmp_unsigned("!=", e, ir.Constant(t, 0)), body, done)
    b.position_at_end(body)
    odd = b.trunc(e, I1)
    r2 = b.select(odd, b.mul(r, x), r)
    r.add_incoming(r2, body)
    x.add_incoming(b.mul(x, x), body)
    e.add_incoming(b.lshr(e, ir.Constant(t, 1)), body)
    b.branch(head)
    b.position_at_end(done)
    return r


register_lowering(BACKEND, "Add", "Sub", "Mul", "Div", "FloorDiv", "Mod", "Pow", "Maximum", "Minimum")(_arith)


# --- comparisons, logic, bits ----------------------------------------------------------------
_CMP = {"Less": "<", "LessEqual": "<=", "Greater": ">", "GreaterEqual": ">=", "Equal": "==", "NotEqual": "!="}


@register_lowering(BACKEND, *_CMP)
def _compare(cx: Ctx, node: Node, args: list[ir.Value], dts: list[str]) -> ir.Value:
    dt, op = _same(dts, node), _CMP[node.op.name]
    x, y = args
    k = kind(dt)
    if k == "f":  # every comparison with NaN is false, except !=
        return cx.b.fcmp_unordered(op, x, y) if op == "!=" else cx.b.fcmp_ordered(op, x, y)
    if k == "i":
        return cx.b.icmp_signed(op, x, y)
    return cx.b.icmp_unsigned(op, x, y)


@register_lowering(BACKEND, "And", "Or", "Xor", "BitwiseAnd", "BitwiseOr", "BitwiseXor")
def _logic(cx: Ctx, node: Node, args: list[ir.Value], dts: list[str]) -> ir.Value:
    _same(dts, node)
    f = {"And": cx.b.and_, "Or": cx.b.or_, "Xor": cx.b.xor}[node.op.name.replace("Bitwise", "")]
    return f(*args)


@register_lowering(BACKEND, "Not", "BitwiseNot")
def _not(cx: Ctx, node: Node, args: list[ir.Value], dts: list[str]) -> ir.Value:
    return cx.b.not_(args[0])


@register_lowering(BACKEND, "LeftShift", "RightShift")
def _shift(cx: Ctx, node: Node, args: list[ir.Value], dts: list[str]) -> ir.Value:
    b = cx.b
    dt = _same(dts, node)
    x, n = args
    t = x.type
    signed = kind(dt) == "i"
    if signed:
        cx.fail(b.icmp_signed("<", n, ir.Constant(t, 0)), node, "ValueError",
                f"{node.op.name}: negative shift count")
    width = ir.Constant(t, t.width)
    big = b.icmp_unsigned(">=", n, width)  # LLVM leaves these undefined; NumPy gives 0 or -1
    if node.op.name == "LeftShift":
        return b.select(big, ir.Constant(t, 0), b.shl(x, b.select(big, ir.Constant(t, 0), n)))
    if signed:
        return b.ashr(x, b.select(big, ir.Constant(t, t.width - 1), n))
    return b.select(big, ir.Constant(t, 0), b.lshr(x, b.select(big, ir.Constant(t, 0), n)))


def exp_f32(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    """exp on f32 in arithmetic (Cephes' ``expf``, as Eigen's ``pexp_float``), within 2 ulp:
    a loop over it vectorises where one calling libm's ``expf`` per element does not.
    ``x = m ln2 + r``, ``|r| <= ln2 / 2``: a polynomial for ``e^r``, times ``2^m`` in two
    steps so that results below the normal range round to subnormals (and 0) as expf's."""
    f = ir.FloatType()
    i32 = ir.IntType(32)

    def c(v: float) -> ir.Constant:
        return ir.Constant(f, v)

    # beyond 88.8 the result is inf, below -105 it is 0 (half the least subnormal is e^-103.97)
    xc = b.select(b.fcmp_ordered(">", x, c(88.8)), c(88.8), x)
    xc = b.select(b.fcmp_ordered("<", xc, c(-105.0)), c(-105.0), xc)
    floor = b.module.declare_intrinsic("llvm.floor", [f])
    m = b.call(floor, [b.fadd(b.fmul(xc, c(1.44269504088896341)), c(0.5))])
    r = b.fadd(b.fmul(m, c(-0.693359375)), xc)
    r = b.fadd(b.fmul(m, c(2.12194440e-4)), r)
    y = c(1.9875691500e-4)
    for p in (1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2, 1.6666665459e-1, 5.0000001201e-1):
        y = b.fadd(b.fmul(y, r), c(p))
    y = b.fadd(b.fadd(b.fmul(y, b.fmul(r, r)), r), c(1.0))
    k = b.fptosi(m, i32)  # in [-152, 128]: two factors 2^k1 2^k2, each a normal float
    k1 = b.ashr(k, ir.Constant(i32, 1))

    def pow2(e: ir.Value) -> ir.Value:
        return b.bitcast(b.shl(b.add(e, ir.Constant(i32, 127)), ir.Constant(i32, 23)), f)

    out = b.fmul(b.fmul(y, pow2(k1)), pow2(b.sub(k, k1)))
    return b.select(b.fcmp_unordered("uno", x, x), x, out)  # NaN (its m was poison, not chosen)


# erf(x) / x as a polynomial in x^2 on [0, 1], and erfc(x) e^(x^2) as one in x - 2.5 on [1, 4]:
# least-squares fits (relative error 1.4e-9 and 6e-9) at Chebyshev nodes, rounded to f32.
_ERF_SMALL = (1.128379225730896, -0.3761262893676758, 0.11283612251281738, -0.026854807510972023,
              0.0051900530233979225, -0.000802435155492276, 7.898201874922961e-05)
_ERFCX_MID = (0.21080636978149414, -0.07434733957052231, 0.024938007816672325, -0.008001679554581642,
              0.0024669975973665714, -0.0007331884698942304, 0.00021105114137753844, -5.948642501607537e-05,
              1.599714596522972e-05, -3.7638258163497085e-06, 1.0235056606688886e-06, -4.237685971020255e-07,
              9.592292826710036e-08)


def erf_f32(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    """erf on f32 in arithmetic, within 2.5 ulp of the exact value (checked against SciPy
    over a dense grid): for ``|x| < 1`` x times a polynomial in x^2; below 4, ``1 - e^(-x^2)``
    times a polynomial; beyond, 1 to float precision.  A loop over it vectorises where one
    calling libm's ``erff`` per element does not (BERT's Gelu spent ~40% of its time there).
    The Erf op on f32 and Gelu's erf use it."""
    f = ir.FloatType()

    def c(v: float) -> ir.Constant:
        return ir.Constant(f, v)

    def horner(coefs: tuple[float, ...], t: ir.Value) -> ir.Value:
        p = c(coefs[-1])
        for k in reversed(coefs[:-1]):
            p = b.fadd(b.fmul(p, t), c(k))
        return p

    a = b.call(b.module.declare_intrinsic("llvm.fabs", [f]), [x])
    a2 = b.fmul(a, a)
    small = b.fmul(a, horner(_ERF_SMALL, a2))
    u = b.fsub(b.select(b.fcmp_ordered("<", a, c(4.0)), a, c(4.0)), c(2.5))
    mid = b.fsub(c(1.0), b.fmul(exp_f32(b, b.fneg(a2)), horner(_ERFCX_MID, u)))
    r = b.select(b.fcmp_ordered("<", a, c(1.0)), small, b.select(b.fcmp_ordered("<", a, c(4.0)), mid, c(1.0)))
    out = b.call(b.module.declare_intrinsic("llvm.copysign", [f], ir.FunctionType(f, [f, f])), [r, x])
    return b.select(b.fcmp_unordered("uno", x, x), x, out)


# --- unary math ------------------------------------------------------------------------------
_INTRINSIC = {"Exp": "exp", "Log": "log", "Sqrt": "sqrt", "Sin": "sin", "Cos": "cos", "Floor": "floor",
              "Ceil": "ceil", "Round": "roundeven"}


@register_lowering(BACKEND, "Neg", "Abs", "Relu", "Sign", "Reciprocal", "Rsqrt", "Sigmoid", "Tanh", "Erf",
                   *_INTRINSIC)
def _unary(cx: Ctx, node: Node, args: list[ir.Value], dts: list[str]) -> ir.Value:
    b, name, (x,), dt = cx.b, node.op.name, args, dts[0]
    k = kind(dt)
    t = x.type
    if name == "Exp" and dt == "f32":  # inline: the loop vectorises (libm's expf is one call an element)
        return exp_f32(b, x)
    if name in _INTRINSIC:
        return cx.math(_INTRINSIC[name], dt, [x])
    if k == "f":
        one, zero = ir.Constant(t, 1.0), ir.Constant(t, 0.0)
        if name == "Neg":
            return b.fneg(x)
        if name == "Abs":
            return cx.math("fabs", dt, [x])
        if name == "Relu":  # np.maximum(x, 0): NaN stays NaN
            return b.select(b.or_(b.fcmp_ordered(">", x, zero), b.fcmp_unordered("uno", x, x)), x, zero)
        if name == "Sign":
            return b.select(b.fcmp_ordered(">", x, zero), one, b.select(
                b.fcmp_ordered("<", x, zero), ir.Constant(t, -1.0), b.select(b.fcmp_ordered("==", x, zero), zero, x)))
        if name == "Reciprocal":
            return b.fdiv(one, x)
        if name == "Rsqrt":
            return b.fdiv(one, cx.math("sqrt", dt, [x]))
        if name == "Sigmoid":
            e = exp_f32(b, b.fneg(x)) if dt == "f32" else cx.math("exp", dt, [b.fneg(x)])
            return b.fdiv(one, b.fadd(one, e))
        if name == "Tanh":
            return cx.math("tanh", dt, [x])
        if name == "Erf":  # f32 inline (vectorisable), others libm's
            return erf_f32(b, x) if dt == "f32" else cx.math("erf", dt, [x])
    if k in "iu":
        zero = ir.Constant(t, 0)
        if name == "Neg":
            return b.sub(zero, x)
        if name == "Abs":
            return x if k == "u" else b.select(b.icmp_signed("<", x, zero), b.sub(zero, x), x)
        if name == "Relu":
            return x if k == "u" else b.select(b.icmp_signed(">", x, zero), x, zero)
        if name == "Sign":
            if k == "u":
                return b.zext(b.icmp_unsigned("!=", x, zero), t)
            return b.sub(b.zext(b.icmp_signed(">", x, zero), t), b.zext(b.icmp_signed("<", x, zero), t))
    raise Unsupported(f"{name} on {dt}")


# --- selection and conversion ----------------------------------------------------------------
@register_lowering(BACKEND, "Where")
def _where(cx: Ctx, node: Node, args: list[ir.Value], dts: list[str]) -> ir.Value:
    return cx.b.select(*args)


@register_lowering(BACKEND, "Clip")
def _clip(cx: Ctx, node: Node, args: list[ir.Value], dts: list[str]) -> ir.Value:
    x, lo, hi = args
    dt = _same(dts, node)
    b = cx.b
    if kind(dt) == "f":  # np.minimum(np.maximum(x, lo), hi), NaN-propagating as they are
        m = b.select(b.or_(b.fcmp_ordered(">", x, lo), b.fcmp_unordered("uno", x, x)), x, lo)
        return b.select(b.or_(b.fcmp_ordered("<", m, hi), b.fcmp_unordered("uno", m, m)), m, hi)
    gt = b.icmp_signed if kind(dt) == "i" else b.icmp_unsigned
    m = b.select(gt(">", x, lo), x, lo)
    return b.select(gt("<", m, hi), m, hi)


@register_lowering(BACKEND, "Cast")
def _cast(cx: Ctx, node: Node, args: list[ir.Value], dts: list[str]) -> ir.Value:
    return convert(cx.b, args[0], dts[0], out_dtype(node))


def convert(b: ir.IRBuilder, x: ir.Value, src: str, dst: str) -> ir.Value:
    """NumPy's ``astype``: floats to ints truncate, anything to bool is ``!= 0``."""
    ks, kd = kind(src), kind(dst)
    t = reg_type(dst)
    if src == dst:
        return x
    if kd == "b":
        if ks == "f":
            return b.fcmp_unordered("!=", x, ir.Constant(x.type, 0.0))
        return b.icmp_unsigned("!=", x, ir.Constant(x.type, 0))
    if ks == "b":
        return b.uitofp(x, t) if kd == "f" else b.zext(x, t)
    if ks == "f" and kd == "f":
        return b.fpext(x, t) if _fwidth(t) > _fwidth(x.type) else b.fptrunc(x, t)
    if ks == "f":
        return b.fptosi(x, t) if kd == "i" else b.fptoui(x, t)  # out of range: poison (NumPy: unspecified)
    if kd == "f":
        return b.sitofp(x, t) if ks == "i" else b.uitofp(x, t)
    if t.width > x.type.width:
        return b.sext(x, t) if ks == "i" else b.zext(x, t)
    return b.trunc(x, t) if t.width < x.type.width else x


def _fwidth(t: Any) -> int:
    return {"half": 16, "float": 32, "double": 64}[str(t)]


@register_lowering(BACKEND, "Constant")
def _constant(cx: Ctx, node: Node, args: list[ir.Value], dts: list[str]) -> ir.Value:
    return constant(out_dtype(node), node.attrs["value"][()])


@register_lowering(BACKEND, "Identity")
def _identity(cx: Ctx, node: Node, args: list[ir.Value], dts: list[str]) -> ir.Value:
    return args[0]


# Ops this module lowers element by element; the emitter fuses chains of them over tensors.
# (The emitter's own rules, registered after this line, are not elementwise.)
ELEMENTWISE = frozenset(lowering_table(BACKEND).rules) - {"Constant"}
