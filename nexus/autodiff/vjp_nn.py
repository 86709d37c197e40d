"""VJP rules for the nn ops: convolutions, pooling, normalisations, resizing, masks."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from nexus.autodiff.emit import Emitter
from nexus.autodiff.vjp import MissingVJPError, defvjp, unbroadcast
from nexus.ir.node import Node
from nexus.ops.nn import RESIZE_ATTRS

Ins = Sequence[Any]
W = Sequence[bool]


def _rank(e: Emitter, v: Any, op: str) -> int:
    r = e.type_of(v).rank
    if r is None:
        raise MissingVJPError(f"{op}'s VJP needs an input of known rank")
    return r


def _pick(n: Node, *names: str) -> dict[str, Any]:
    return {k: n.attrs[k] for k in names if n.attrs.get(k) is not None}


_GEOM = ("strides", "pads", "dilations", "group")


def _bias_grad(e: Emitter, g: Any, op: str) -> Any:
    r = _rank(e, g, op)
    return e.op("ReduceSum", g, axes=[0, *range(2, r)])


@defvjp("Conv")
def _conv(e: Emitter, n: Node, ins: Ins, out: Any, g: Any, wants: W) -> list[Any]:
    x, w = ins[0], ins[1]
    a = _pick(n, *_GEOM)
    res: list[Any] = [e.op("ConvGradX", g, x, w, **a) if wants[0] else None,
                      e.op("ConvGradW", g, x, w, **a) if wants[1] else None]
    if len(ins) == 3:
        res.append(_bias_grad(e, g, "Conv") if wants[2] else None)
    return res


@defvjp("ConvTranspose")
def _conv_transpose(e: Emitter, n: Node, ins: Ins, out: Any, g: Any, wants: W) -> list[Any]:
    x, w = ins[0], ins[1]
    a = _pick(n, *_GEOM)
    res: list[Any] = [e.op("Conv", g, w, **a) if wants[0] else None,
                      e.op("ConvTransposeGradW", g, x, w, **a, **_pick(n, "output_padding")) if wants[1] else None]
    if len(ins) == 3:
        res.append(_bias_grad(e, g, "ConvTranspose") if wants[2] else None)
    return res


@defvjp("MaxPool")
def _max_pool(e: Emitter, n: Node, ins: Ins, out: Any, g: Any, wants: W) -> list[Any]:
    return [e.op("MaxPoolGrad", g, ins[0], **_pick(n, "kernel_shape", "strides", "pads", "ceil_mode", "dilations"))]


@defvjp("AveragePool")
def _avg_pool(e: Emitter, n: Node, ins: Ins, out: Any, g: Any, wants: W) -> list[Any]:
    a = _pick(n, "kernel_shape", "strides", "pads", "ceil_mode", "count_include_pad", "dilations")
    return [e.op("AveragePoolGrad", g, ins[0], **a)]


@defvjp("GlobalAveragePool")
def _gap(e: Emitter, n: Node, ins: Ins, out: Any, g: Any, wants: W) -> list[Any]:
    r = _rank(e, ins[0], "GlobalAveragePool")
    return [e.op("UnreduceLike", g, ins[0], axes=list(range(2, r)), keepdims=True, mean=True)]


@defvjp("Dropout")
def _dropout(e: Emitter, n: Node, ins: Ins, out: Any, g: Any, wants: W) -> list[Any]:
    return [g]


@defvjp("Resize")
def _resize(e: Emitter, n: Node, ins: Ins, out: Any, g: Any, wants: W) -> list[Any]:
    a = _pick(n, *RESIZE_ATTRS)
    return [e.op("ResizeGrad", g, ins[0], ins[1], **a), None]


@defvjp("BooleanMask")
def _boolean_mask(e: Emitter, n: Node, ins: Ins, out: Any, g: Any, wants: W) -> list[Any]:
    gv = g[0]  # g: one cotangent per output (values, count)
    return [None if gv is None else e.op("BooleanMaskGrad", gv, ins[0], ins[1]), None]


@defvjp("BatchNormalization")
def _batch_norm(e: Emitter, n: Node, ins: Ins, out: Any, g: Any, wants: W) -> list[Any]:
    x, scale, bias, mean, var = ins
    r = _rank(e, x, "BatchNormalization")
    other = [0, *range(2, r)]

    def per_channel(p: Any) -> Any:
        return e.op("Unsqueeze", p, axes=other)

    dt = e.type_of(x).dtype
    inv = e.op("Rsqrt", e.op("Add", var, e.const(n.attrs.get("epsilon", 1e-5), dt)))
    xc = e.op("Sub", x, per_channel(mean))
    gsum = e.op("ReduceSum", g, axes=other)
    gxc = e.op("ReduceSum", e.op("Mul", g, xc), axes=other)
    res: list[Any] = [None] * 5
    if wants[0]:
        res[0] = e.op("Mul", g, per_channel(e.op("Mul", scale, inv)))
    if wants[1]:
        res[1] = e.op("Mul", gxc, inv)
    if wants[2]:
        res[2] = gsum
    if wants[3]:
        res[3] = e.op("Neg", e.op("Mul", gsum, e.op("Mul", scale, inv)))
    if wants[4]:
        inv3 = e.op("Mul", inv, e.op("Mul", inv, inv))
        res[4] = e.op("Mul", e.op("Mul", gxc, scale), e.op("Mul", e.const(-0.5, dt), inv3))
    return res


@defvjp("LayerNormalization")
def _layer_norm(e: Emitter, n: Node, ins: Ins, out: Any, g: Any, wants: W) -> list[Any]:
    x, scale = ins[0], ins[1]
    r = _rank(e, x, "LayerNormalization")
    axes = list(range(n.attrs.get("axis", -1) % r, r))
    dt = e.type_of(x).dtype
    mu = e.op("ReduceMean", x, axes=axes, keepdims=True)
    xc = e.op("Sub", x, mu)
    var = e.op("ReduceMean", e.op("Mul", xc, xc), axes=axes, keepdims=True)
    inv = e.op("Rsqrt", e.op("Add", var, e.const(n.attrs.get("epsilon", 1e-5), dt)))
    xhat = e.op("Mul", xc, inv)
    res: list[Any] = [None] * len(ins)
    if wants[0]:
        gy = e.op("Mul", g, scale)
        m1 = e.op("ReduceMean", gy, axes=axes, keepdims=True)
        m2 = e.op("ReduceMean", e.op("Mul", gy, xhat), axes=axes, keepdims=True)
        res[0] = e.op("Mul", inv, e.op("Sub", e.op("Sub", gy, m1), e.op("Mul", xhat, m2)))
    if wants[1]:
        res[1] = unbroadcast(e, e.op("Mul", g, xhat), scale)
    if len(ins) == 3 and wants[2]:
        res[2] = unbroadcast(e, g, ins[2])
    return res




@defvjp("TopK")
def _topk(e: Emitter, n: Node, ins: Ins, out: Any, g: Any, wants: W) -> list[Any]:
    gv = g[0]  # cotangents of (values, indices, k): only the values carry one
    if gv is None:
        return [None, None]
    a = _pick(n, "axis", "largest", "sorted")
    # the indices are recomputed, so the reverse needs no tuple-valued forward value
    idx = e.op("Proj", e.op("TopK", ins[0], ins[1], **a), num=1)
    return [e.op("TakeAlongAxisGrad", gv, ins[0], idx, axis=n.attrs.get("axis", -1)), None]


@defvjp("GatherElements")
def _gather_elements(e: Emitter, n: Node, ins: Ins, out: Any, g: Any, wants: W) -> list[Any]:
    # Each picked entry's cotangent goes back where it was picked (summed where picked twice).
    return [e.op("TakeAlongAxisGrad", g, ins[0], ins[1], axis=n.attrs.get("axis", 0)), None]
