"""VJP rules, second batch: activations, more math, indexing, joining and linear algebra
ops of the op library.  Registered into :data:`nexus.autodiff.vjp.VJPS`."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from nexus.autodiff.emit import Emitter
from nexus.autodiff.vjp import VJPS, MissingVJPError, defvjp, mask, one, unary, unbroadcast, zero
from nexus.ir.node import Node

Ins = Sequence[Any]
W = Sequence[bool]


def _c(e: Emitter, v: float, like: Any) -> Any:
    return e.const(v, e.type_of(like).dtype)


# --- unary math ------------------------------------------------------------------------------
VJPS["Sqrt"] = unary(lambda e, x, y, g: e.op("Div", e.op("Mul", g, _c(e, 0.5, y)), y))
VJPS["Rsqrt"] = unary(lambda e, x, y, g: e.op("Mul", e.op("Mul", g, _c(e, -0.5, y)), e.op("Div", y, x)))
VJPS["Reciprocal"] = unary(lambda e, x, y, g: e.op("Neg", e.op("Mul", g, e.op("Mul", y, y))))
VJPS["Sin"] = unary(lambda e, x, y, g: e.op("Mul", g, e.op("Cos", x)))
VJPS["Cos"] = unary(lambda e, x, y, g: e.op("Neg", e.op("Mul", g, e.op("Sin", x))))
# The inverse trigonometric and hyperbolic functions: d/dx of each, times g.
VJPS["Asin"] = unary(lambda e, x, y, g: e.op("Mul", g, e.op("Rsqrt", e.op("Sub", _c(e, 1.0, x), e.op("Mul", x, x)))))
VJPS["Acos"] = unary(lambda e, x, y, g: e.op("Neg", e.op("Mul", g, e.op("Rsqrt", e.op("Sub", _c(e, 1.0, x),
                                                                                      e.op("Mul", x, x))))))
VJPS["Atan"] = unary(lambda e, x, y, g: e.op("Div", g, e.op("Add", _c(e, 1.0, x), e.op("Mul", x, x))))
VJPS["Asinh"] = unary(lambda e, x, y, g: e.op("Mul", g, e.op("Rsqrt", e.op("Add", e.op("Mul", x, x), _c(e, 1.0, x)))))
VJPS["Acosh"] = unary(lambda e, x, y, g: e.op("Mul", g, e.op("Rsqrt", e.op("Sub", e.op("Mul", x, x), _c(e, 1.0, x)))))
VJPS["Atanh"] = unary(lambda e, x, y, g: e.op("Div", g, e.op("Sub", _c(e, 1.0, x), e.op("Mul", x, x))))
VJPS["Erf"] = unary(lambda e, x, y, g: e.op("Mul", g, e.op(
    "Mul", _c(e, 2 / math.sqrt(math.pi), x), e.op("Exp", e.op("Neg", e.op("Mul", x, x))))))
VJPS["Softplus"] = unary(lambda e, x, y, g: e.op("Mul", g, e.op("Sigmoid", x)))


@defvjp("Gelu")
def _gelu(e: Emitter, n: Node, ins: Ins, out: Any, g: Any, wants: W) -> list[Any]:
    x = ins[0]
    if n.attrs.get("approximate", "none") == "tanh":
        c, k = math.sqrt(2 / math.pi), 0.044715
        x2 = e.op("Mul", x, x)
        t = e.op("Tanh", e.op("Mul", _c(e, c, x), e.op("Add", x, e.op("Mul", _c(e, k, x), e.op("Mul", x2, x)))))
        du = e.op("Mul", _c(e, c, x), e.op("Add", one(e, x), e.op("Mul", _c(e, 3 * k, x), x2)))
        d = e.op("Add", e.op("Mul", _c(e, 0.5, x), e.op("Add", one(e, x), t)),
                 e.op("Mul", e.op("Mul", _c(e, 0.5, x), x), e.op("Mul", e.op("Sub", one(e, x), e.op("Mul", t, t)), du)))
    else:
        erf = e.op("Erf", e.op("Mul", x, _c(e, 1 / math.sqrt(2), x)))
        cdf = e.op("Mul", _c(e, 0.5, x), e.op("Add", one(e, x), erf))
        pdf = e.op("Mul", _c(e, 1 / math.sqrt(2 * math.pi), x),
                   e.op("Exp", e.op("Mul", _c(e, -0.5, x), e.op("Mul", x, x))))
        d = e.op("Add", cdf, e.op("Mul", x, pdf))
    return [e.op("Mul", g, d)]


@defvjp("LeakyRelu")
def _leaky(e: Emitter, n: Node, ins: Ins, out: Any, g: Any, wants: W) -> list[Any]:
    x = ins[0]
    m = mask(e, "GreaterEqual", x, zero(e, x), e.type_of(x).dtype)
    alpha = _c(e, n.attrs.get("alpha", 0.01), x)
    return [e.op("Mul", g, e.op("Add", m, e.op("Mul", alpha, e.op("Sub", one(e, x), m))))]


@defvjp("HardSigmoid")
def _hard_sigmoid(e: Emitter, n: Node, ins: Ins, out: Any, g: Any, wants: W) -> list[Any]:
    x, dt = ins[0], e.type_of(ins[0]).dtype
    alpha = n.attrs.get("alpha", 0.2)
    u = e.op("Add", e.op("Mul", _c(e, alpha, x), x), _c(e, n.attrs.get("beta", 0.5), x))
    inside = e.op("Mul", mask(e, "Greater", u, zero(e, x), dt), mask(e, "Less", u, one(e, x), dt))
    return [e.op("Mul", g, e.op("Mul", inside, _c(e, alpha, x)))]


@defvjp("HardSwish")
def _hard_swish(e: Emitter, n: Node, ins: Ins, out: Any, g: Any, wants: W) -> list[Any]:
    x, dt = ins[0], e.type_of(ins[0]).dtype  # torch's hardswish_backward: 0, x / 3 + 1/2, 1
    above = mask(e, "Greater", x, _c(e, 3.0, x), dt)
    inside = e.op("Mul", mask(e, "GreaterEqual", x, _c(e, -3.0, x), dt), e.op("Sub", one(e, x), above))
    ramp = e.op("Add", e.op("Mul", x, _c(e, 1 / 3, x)), _c(e, 0.5, x))
    return [e.op("Mul", g, e.op("Add", e.op("Mul", inside, ramp), above))]


@defvjp("PRelu")
def _prelu(e: Emitter, n: Node, ins: Ins, out: Any, g: Any, wants: W) -> list[Any]:
    x, slope = ins
    m = mask(e, "GreaterEqual", x, zero(e, x), e.type_of(x).dtype)
    neg = e.op("Sub", one(e, x), m)
    gx = unbroadcast(e, e.op("Mul", g, e.op("Add", m, e.op("Mul", slope, neg))), x) if wants[0] else None
    gs = unbroadcast(e, e.op("Mul", g, e.op("Mul", x, neg)), slope) if wants[1] else None
    return [gx, gs]


@defvjp("Softmax")
def _softmax(e: Emitter, n: Node, ins: Ins, out: Any, g: Any, wants: W) -> list[Any]:
    axis = n.attrs.get("axis", -1)
    s = e.op("ReduceSum", e.op("Mul", g, out), axes=[axis], keepdims=True)
    return [e.op("Mul", out, e.op("Sub", g, s))]


@defvjp("LogSoftmax")
def _log_softmax(e: Emitter, n: Node, ins: Ins, out: Any, g: Any, wants: W) -> list[Any]:
    axis = n.attrs.get("axis", -1)
    s = e.op("ReduceSum", g, axes=[axis], keepdims=True)
    return [e.op("Sub", g, e.op("Mul", e.op("Exp", out), s))]


@defvjp("Clip")
def _clip(e: Emitter, n: Node, ins: Ins, out: Any, g: Any, wants: W) -> list[Any]:
    # Clip = Minimum(Maximum(x, lo), hi): the Maximum/Minimum rules composed.
    x, lo, hi = ins
    dt = e.type_of(g).dtype
    m = e.op("Maximum", x, lo)
    gm = e.op("Mul", g, mask(e, "LessEqual", m, hi, dt))
    gx = e.op("Mul", gm, mask(e, "GreaterEqual", x, lo, dt))
    return [unbroadcast(e, gx, x) if wants[0] else None,
            unbroadcast(e, e.op("Sub", gm, gx), lo) if wants[1] else None,
            unbroadcast(e, e.op("Sub", g, gm), hi) if wants[2] else None]


@defvjp("Where")
def _where(e: Emitter, n: Node, ins: Ins, out: Any, g: Any, wants: W) -> list[Any]:
    c, a, b = ins
    z = zero(e, g)
    return [None, unbroadcast(e, e.op("Where", c, g, z), a) if wants[1] else None,
            unbroadcast(e, e.op("Where", c, z, g), b) if wants[2] else None]


# --- reductions --------------------------------------------------------------------------------
def _attrs(n: Node, *names: str) -> dict[str, Any]:
    return {k: n.attrs[k] for k in names if n.attrs.get(k) is not None}


VJPS["ReduceMin"] = VJPS["ReduceMax"]


@defvjp("ReduceProd")
def _reduce_prod(e: Emitter, n: Node, ins: Ins, out: Any, g: Any, wants: W) -> list[Any]:
    x = ins[0]
    a = _attrs(n, "axes", "keepdims")
    # d prod / d x_i = prod / x_i (inputs without zeros)
    return [e.op("Div", e.op("UnreduceLike", e.op("Mul", g, out), x, **a), x)]


@defvjp("CumSum")
def _cumsum(e: Emitter, n: Node, ins: Ins, out: Any, g: Any, wants: W) -> list[Any]:
    return [e.op("CumSum", g, axis=n.attrs.get("axis", 0), exclusive=n.attrs.get("exclusive", False),
                 reverse=not n.attrs.get("reverse", False))]


@defvjp("CumProd")
def _cumprod(e: Emitter, n: Node, ins: Ins, out: Any, g: Any, wants: W) -> list[Any]:
    return [e.op("CumProdGrad", ins[0], g, axis=n.attrs.get("axis", 0))]


@defvjp("Append")
def _append(e: Emitter, n: Node, ins: Ins, out: Any, g: Any, wants: W) -> list[Any]:
    # The list's part is g[:-1] (ReshapeLike: an empty list may carry other trailing dims).
    head = e.op("Slice", g, e.const([0], "i64"), e.const([-1], "i64"), e.const([0], "i64"))
    return [e.op("ReshapeLike", head, ins[0]), e.op("Gather", g, e.const(-1, "i64"), axis=0)]


# --- shapes ------------------------------------------------------------------------------------
def _reshape_back(e: Emitter, n: Node, ins: Ins, out: Any, g: Any, wants: W) -> list[Any]:
    return [e.op("ReshapeLike", g, ins[0])] + [None] * (len(ins) - 1)


for _op in ("Flatten", "Squeeze", "Unsqueeze"):
    VJPS[_op] = _reshape_back


@defvjp("Expand")
def _expand(e: Emitter, n: Node, ins: Ins, out: Any, g: Any, wants: W) -> list[Any]:
    return [e.op("SumToLike", g, ins[0]), None]


@defvjp("Tile")
def _tile(e: Emitter, n: Node, ins: Ins, out: Any, g: Any, wants: W) -> list[Any]:
    return [e.op("TileGrad", g, ins[0]), None]


@defvjp("Pad")
def _pad(e: Emitter, n: Node, ins: Ins, out: Any, g: Any, wants: W) -> list[Any]:
    if n.attrs.get("mode", "constant") != "constant":
        raise MissingVJPError(f"Pad's VJP supports mode 'constant' only, not {n.attrs['mode']!r}")
    # padding back by the negated widths crops what was added and zero-fills what was cropped
    return [e.op("Pad", g, e.op("Neg", ins[1])), None]


@defvjp("Concat")
def _concat(e: Emitter, n: Node, ins: Ins, out: Any, g: Any, wants: W) -> list[Any]:
    axis = n.attrs["axis"]
    return [e.op("ConcatGrad", g, *ins, axis=axis, index=i) if w else None for i, w in enumerate(wants)]


@defvjp("Split")
def _split(e: Emitter, n: Node, ins: Ins, out: Any, g: Any, wants: W) -> list[Any]:
    # g holds one cotangent (or None) per part; missing parts are zeros of their shape.
    x = ins[0]
    attrs = _attrs(n, "axis", "split", "num_outputs")
    parts = list(g)
    if any(p is None for p in parts):
        zeros = e.op("Split", e.op("ZerosLike", x), **attrs)
        parts = [p if p is not None else e.op("Proj", zeros, num=i) for i, p in enumerate(parts)]
    return [e.op("Concat", *parts, axis=n.attrs.get("axis", 0))]


# --- indexing ------------------------------------------------------------------------------------
@defvjp("Slice")
def _slice(e: Emitter, n: Node, ins: Ins, out: Any, g: Any, wants: W) -> list[Any]:
    return [e.op("SliceGrad", g, *ins)] + [None] * (len(ins) - 1)


@defvjp("GatherND")
def _gather_nd(e: Emitter, n: Node, ins: Ins, out: Any, g: Any, wants: W) -> list[Any]:
    data, idx = ins
    return [e.op("GatherNDGrad", g, data, idx, batch_dims=n.attrs.get("batch_dims", 0)), None]


@defvjp("ScatterND")
def _scatter_nd(e: Emitter, n: Node, ins: Ins, out: Any, g: Any, wants: W) -> list[Any]:
    data, idx, upd = ins
    red = n.attrs.get("reduction", "none")
    if red not in ("none", "add"):
        raise MissingVJPError(f"ScatterND's VJP supports reduction 'none' and 'add', not {red!r}")
    gd = gu = None
    if wants[0]:
        gd = g if red == "add" else e.op("ScatterND", g, idx, e.op("ZerosLike", upd))
    if wants[2]:
        gu = e.op("GatherND", g, idx)
    return [gd, None, gu]


# --- linear algebra ------------------------------------------------------------------------------
@defvjp("Gemm")
def _gemm(e: Emitter, n: Node, ins: Ins, out: Any, g: Any, wants: W) -> list[Any]:
    a, b = ins[0], ins[1]
    alpha, beta = n.attrs.get("alpha", 1.0), n.attrs.get("beta", 1.0)
    ta, tb = n.attrs.get("transA", False), n.attrs.get("transB", False)
    res: list[Any] = [None] * len(ins)
    if wants[0]:  # d(A') = alpha g B'^T; A = A'^T when transA
        ga = e.op("Gemm", b, g, alpha=alpha, transA=tb, transB=True) if ta else \
            e.op("Gemm", g, b, alpha=alpha, transB=not tb)
        res[0] = ga
    if wants[1]:  # d(B') = alpha A'^T g; B = B'^T when transB
        gb = e.op("Gemm", g, a, alpha=alpha, transA=True, transB=ta) if tb else \
            e.op("Gemm", a, g, alpha=alpha, transA=not ta)
        res[1] = gb
    if len(ins) == 3 and wants[2]:
        gc = g if beta == 1.0 else e.op("Mul", g, _c(e, beta, g))
        res[2] = unbroadcast(e, gc, ins[2])
    return res


@defvjp("Einsum")
def _einsum(e: Emitter, n: Node, ins: Ins, out: Any, g: Any, wants: W) -> list[Any]:
    eq = n.attrs["equation"].replace(" ", "")
    lhs, _, rhs = eq.partition("->")
    terms = lhs.split(",")
    if "..." in eq or not _ or any(len(set(t)) != len(t) for t in terms):
        raise MissingVJPError("Einsum's VJP needs an explicit '->', no '...' and no repeated subscripts in a term")
    res: list[Any] = []
    for i, (term, w) in enumerate(zip(terms, wants)):
        if not w:
            res.append(None)
            continue
        others = [(t, v) for j, (t, v) in enumerate(zip(terms, ins)) if j != i]
        avail = set(rhs).union(*[set(t) for t, _v in others])
        kept = "".join(ch for ch in term if ch in avail)
        sub = ",".join([rhs] + [t for t, _v in others]) + "->" + kept
        gi = e.op("Einsum", g, *[v for _t, v in others], equation=sub)
        missing = [k for k, ch in enumerate(term) if ch not in avail]
        if missing:  # letters summed away inside this operand: broadcast back over them
            gi = e.op("BroadcastLike", e.op("Unsqueeze", gi, axes=missing), ins[i])
        res.append(gi)
    return res




@defvjp("SetItem")
def _setitem(e: Emitter, n: Node, ins: Ins, out: Any, g: Any, wants: W) -> list[Any]:
    data, value, *idx = ins
    kinds = n.attrs["kinds"]
    res: list[Any] = [None] * len(ins)
    if wants[0]:  # the overwritten elements no longer reach the output
        res[0] = e.op("SetItem", g, e.op("ZerosLike", value), *idx, kinds=kinds)
    if wants[1]:
        res[1] = e.op("SetItemValueGrad", g, value, *idx, kinds=kinds)
    return res


@defvjp("Roll")
def _roll(e: Emitter, n: Node, ins: Sequence[Any], out: Any, g: Any, wants: Sequence[bool]) -> list[Any]:
    # Rolling back by the same shift moves every element home.
    return [e.op("Roll", g, e.op("Neg", ins[1]), axes=list(n.attrs["axes"])), None]
