"""Vector-Jacobian products: the table :data:`VJPS`, one rule per differentiable op.

A rule builds the cotangents of an op's inputs from the cotangent ``g`` of its output::

    rule(e, node, ins, out, g, wants) -> list of cotangent-or-None, one per input

``e`` is an :class:`~nexus.autodiff.emit.Emitter` (graph mode emits IR nodes, tape mode
runs kernels), ``node`` gives the attributes, ``ins``/``out`` are the forward values and
``wants[i]`` says whether input ``i`` needs a cotangent.  Cotangents have the shape of
their input (broadcasting is summed back with ``SumToLike``).  Integer and boolean inputs
get none.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from nexus.autodiff.emit import Emitter
from nexus.ir.node import Node
from nexus.ir.types import FLOAT_DTYPES

Rule = Callable[[Emitter, Node, Sequence[Any], Any, Any, Sequence[bool]], list[Any]]
VJPS: dict[str, Rule] = {}


class MissingVJPError(NotImplementedError):
    """An op without an entry in the VJP table was asked for a gradient."""


def vjp_rule(op: str) -> Rule:
    """The rule for ``op``; a missing one is an error naming the op and the table."""
    try:
        return VJPS[op]
    except KeyError:
        raise MissingVJPError(
            f"op {op} has no vector-Jacobian product in nexus.autodiff.vjp.VJPS; "
            "add a rule there to differentiate through it"
        ) from None


def defvjp(*ops: str) -> Callable[[Rule], Rule]:
    def register(rule: Rule) -> Rule:
        for op in ops:
            VJPS[op] = rule
        return rule

    return register


def is_float(e: Emitter, v: Any) -> bool:
    return e.type_of(v).dtype in FLOAT_DTYPES


# --- helpers -----------------------------------------------------------------------------
def unbroadcast(e: Emitter, g: Any, x: Any) -> Any:
    """``g`` summed back to the shape of ``x`` (the adjoint of broadcasting)."""
    tg, tx = e.type_of(g), e.type_of(x)
    if tx.shape is not None and tg.shape == tx.shape:
        return g
    return e.op("SumToLike", g, x)


def mask(e: Emitter, cmp: str, a: Any, b: Any, dtype: str) -> Any:
    """1.0 where ``cmp(a, b)`` holds, else 0.0, in ``dtype``."""
    return e.op("Cast", e.op(cmp, a, b), to=dtype)


def one(e: Emitter, like: Any) -> Any:
    return e.const(1.0, e.type_of(like).dtype)


def zero(e: Emitter, like: Any) -> Any:
    return e.const(0.0, e.type_of(like).dtype)


# --- elementwise -------------------------------------------------------------------------
@defvjp("Identity")
def _identity(e: Emitter, n: Node, ins: Sequence[Any], out: Any, g: Any, wants: Sequence[bool]) -> list[Any]:
    return [g]


@defvjp("Add")
def _add(e: Emitter, n: Node, ins: Sequence[Any], out: Any, g: Any, wants: Sequence[bool]) -> list[Any]:
    a, b = ins
    return [unbroadcast(e, g, a) if wants[0] else None, unbroadcast(e, g, b) if wants[1] else None]


@defvjp("Sub")
def _sub(e: Emitter, n: Node, ins: Sequence[Any], out: Any, g: Any, wants: Sequence[bool]) -> list[Any]:
    a, b = ins
    return [unbroadcast(e, g, a) if wants[0] else None,
            unbroadcast(e, e.op("Neg", g), b) if wants[1] else None]


@defvjp("Mul")
def _mul(e: Emitter, n: Node, ins: Sequence[Any], out: Any, g: Any, wants: Sequence[bool]) -> list[Any]:
    a, b = ins
    return [unbroadcast(e, e.op("Mul", g, b), a) if wants[0] else None,
            unbroadcast(e, e.op("Mul", g, a), b) if wants[1] else None]


@defvjp("Div")
def _div(e: Emitter, n: Node, ins: Sequence[Any], out: Any, g: Any, wants: Sequence[bool]) -> list[Any]:
    a, b = ins
    ga = e.op("Div", g, b)
    # d(a/b)/db = -(a/b)/b, so g_b = -(g/b) * out
    return [unbroadcast(e, ga, a) if wants[0] else None,
            unbroadcast(e, e.op("Neg", e.op("Mul", ga, out)), b) if wants[1] else None]


@defvjp("Pow")
def _pow(e: Emitter, n: Node, ins: Sequence[Any], out: Any, g: Any, wants: Sequence[bool]) -> list[Any]:
    a, b = ins
    ga = gb = None
    if wants[0]:
        ga = unbroadcast(e, e.op("Mul", g, e.op("Mul", b, e.op("Pow", a, e.op("Sub", b, one(e, b))))), a)
    if wants[1]:
        gb = unbroadcast(e, e.op("Mul", e.op("Mul", g, out), e.op("Log", a)), b)
    return [ga, gb]


def _select_vjp(cmp: str) -> Rule:
    def rule(e: Emitter, n: Node, ins: Sequence[Any], out: Any, g: Any, wants: Sequence[bool]) -> list[Any]:
        a, b = ins
        m = mask(e, cmp, a, b, e.type_of(g).dtype)
        ga = e.op("Mul", g, m)
        return [unbroadcast(e, ga, a) if wants[0] else None,
                unbroadcast(e, e.op("Sub", g, ga), b) if wants[1] else None]

    return rule


VJPS["Maximum"] = _select_vjp("GreaterEqual")
VJPS["Minimum"] = _select_vjp("LessEqual")


def unary(fn: Callable[[Emitter, Any, Any, Any], Any]) -> Rule:
    """A rule for a unary op from ``fn(e, x, out, g) -> g_x``."""

    def rule(e: Emitter, n: Node, ins: Sequence[Any], out: Any, g: Any, wants: Sequence[bool]) -> list[Any]:
        return [fn(e, ins[0], out, g)]

    return rule


VJPS["Neg"] = unary(lambda e, x, y, g: e.op("Neg", g))
VJPS["Exp"] = unary(lambda e, x, y, g: e.op("Mul", g, y))
VJPS["Log"] = unary(lambda e, x, y, g: e.op("Div", g, x))
VJPS["Tanh"] = unary(lambda e, x, y, g: e.op("Mul", g, e.op("Sub", one(e, y), e.op("Mul", y, y))))
VJPS["Sigmoid"] = unary(lambda e, x, y, g: e.op("Mul", g, e.op("Mul", y, e.op("Sub", one(e, y), y))))
VJPS["Relu"] = unary(lambda e, x, y, g: e.op("Mul", g, mask(e, "Greater", x, zero(e, x), e.type_of(g).dtype)))
VJPS["Abs"] = unary(lambda e, x, y, g: e.op("Mul", g, e.op(
    "Sub", mask(e, "Greater", x, zero(e, x), e.type_of(g).dtype), mask(e, "Less", x, zero(e, x), e.type_of(g).dtype))))


@defvjp("Cast")
def _cast(e: Emitter, n: Node, ins: Sequence[Any], out: Any, g: Any, wants: Sequence[bool]) -> list[Any]:
    x = ins[0]
    if not is_float(e, x) or not is_float(e, out):
        return [None]
    return [e.op("Cast", g, to=e.type_of(x).dtype)]


# --- reductions ----------------------------------------------------------------------------
def _reduce_attrs(n: Node) -> dict[str, Any]:
    return {"axes": n.attrs.get("axes"), "keepdims": n.attrs.get("keepdims", False)}


def _clean(attrs: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in attrs.items() if v is not None}


@defvjp("ReduceSum")
def _reduce_sum(e: Emitter, n: Node, ins: Sequence[Any], out: Any, g: Any, wants: Sequence[bool]) -> list[Any]:
    return [e.op("UnreduceLike", g, ins[0], **_clean(_reduce_attrs(n)))]


@defvjp("ReduceMean")
def _reduce_mean(e: Emitter, n: Node, ins: Sequence[Any], out: Any, g: Any, wants: Sequence[bool]) -> list[Any]:
    if not is_float(e, ins[0]):
        return [None]
    return [e.op("UnreduceLike", g, ins[0], mean=True, **_clean(_reduce_attrs(n)))]


@defvjp("ReduceMax")
def _reduce_max(e: Emitter, n: Node, ins: Sequence[Any], out: Any, g: Any, wants: Sequence[bool]) -> list[Any]:
    x = ins[0]
    attrs = _clean(_reduce_attrs(n))
    m = mask(e, "Equal", x, e.op("UnreduceLike", out, x, **attrs), e.type_of(x).dtype)
    axes = {k: v for k, v in attrs.items() if k == "axes"}
    count = e.op("UnreduceLike", e.op("ReduceSum", m, keepdims=True, **axes), x, keepdims=True, **axes)
    # ties share the gradient equally (as PyTorch's amax)
    return [e.op("Div", e.op("Mul", e.op("UnreduceLike", g, x, **attrs), m), count)]


# --- linear algebra ------------------------------------------------------------------------
def _swap_last(e: Emitter, x: Any) -> Any:
    rank = e.type_of(x).rank
    if rank is None:
        raise MissingVJPError("MatMul's VJP needs operands of known rank")
    perm = list(range(rank))
    perm[-1], perm[-2] = perm[-2], perm[-1]
    return e.op("Transpose", x, perm=perm)


@defvjp("MatMul")
def _matmul(e: Emitter, n: Node, ins: Sequence[Any], out: Any, g: Any, wants: Sequence[bool]) -> list[Any]:
    a, b = ins
    ra, rb = e.type_of(a).rank, e.type_of(b).rank
    if ra is None or rb is None:
        raise MissingVJPError("MatMul's VJP needs operands of known rank")
    ga = gb = None
    if ra == 1 and rb == 1:  # dot product
        return [e.op("Mul", g, b) if wants[0] else None, e.op("Mul", g, a) if wants[1] else None]
    if ra == 1 and rb == 2:  # (k) @ (k, n) -> (n)
        if wants[0]:
            ga = e.op("MatMul", b, g)
        if wants[1]:
            col = e.op("Reshape", a, e.const([-1, 1], "i64"))
            gb = e.op("MatMul", col, e.op("Reshape", g, e.const([1, -1], "i64")))
        return [ga, gb]
    if ra == 2 and rb == 1:  # (m, k) @ (k) -> (m)
        if wants[0]:
            col = e.op("Reshape", g, e.const([-1, 1], "i64"))
            ga = e.op("MatMul", col, e.op("Reshape", b, e.const([1, -1], "i64")))
        if wants[1]:
            gb = e.op("MatMul", g, a)
        return [ga, gb]
    if ra == 1 or rb == 1:
        raise MissingVJPError("MatMul's VJP: a 1-D operand with a batched one is not supported")
    if wants[0]:
        ga = unbroadcast(e, e.op("MatMul", g, _swap_last(e, b)), a)
    if wants[1]:
        gb = unbroadcast(e, e.op("MatMul", _swap_last(e, a), g), b)
    return [ga, gb]


# --- shapes and indexing -------------------------------------------------------------------
@defvjp("Reshape")
def _reshape(e: Emitter, n: Node, ins: Sequence[Any], out: Any, g: Any, wants: Sequence[bool]) -> list[Any]:
    return [e.op("ReshapeLike", g, ins[0]), None]


@defvjp("Transpose")
def _transpose(e: Emitter, n: Node, ins: Sequence[Any], out: Any, g: Any, wants: Sequence[bool]) -> list[Any]:
    perm = n.attrs.get("perm")
    if perm is None:
        return [e.op("Transpose", g)]
    return [e.op("Transpose", g, perm=[int(i) for i in np.argsort(perm)])]


@defvjp("Gather")
def _gather(e: Emitter, n: Node, ins: Sequence[Any], out: Any, g: Any, wants: Sequence[bool]) -> list[Any]:
    data, idx = ins
    return [e.op("GatherGrad", g, data, idx, axis=n.attrs.get("axis", 0)), None]


# The other batches register themselves into VJPS.
from nexus.autodiff import vjp_comm, vjp_extra, vjp_nn  # noqa: E402,F401,I001
