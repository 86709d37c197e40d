"""ONNX import rules: quantisation and the few ops composed of several Nexus ops (Hardmax, LpNormalization, EyeLike)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from nexus.frontend.onnx.data import OnnxImportError, nexus_dtype
from nexus.frontend.onnx.ops import Ins, _cast, _like, _rank, _req, _t, converts
from nexus.ir.node import Node
from nexus.ir.types import int_range, numpy_dtype

if TYPE_CHECKING:
    from nexus.frontend.onnx.importer import Importer


# --- quantization ------------------------------------------------------------------------------
def _qparam(imp: Importer, v: Node, x: Node, axis: int, block: int) -> Node:
    """A scale or zero point shaped to broadcast against ``x``: a scalar as it is, a vector
    along ``axis``, a blocked one repeated ``block`` times along it."""
    r, vr = _rank(x), _rank(v)
    axis = axis + r if axis < 0 else axis
    if vr == 0:
        return v
    if block > 0:
        n = (_t(x).shape or ())[axis]
        if not isinstance(n, int):
            raise OnnxImportError("blocked quantization needs the quantized axis's static size")
        return imp.emit("Gather", [v, imp.const(np.arange(n, dtype=np.int64) // block)], {"axis": axis})
    shape = [1] * r
    shape[axis] = -1
    return imp.emit("Reshape", [v, imp.const(np.array(shape, np.int64))])


_QFLOATS = frozenset({"f8e4m3fn", "f8e4m3fnuz", "f8e5m2", "f8e5m2fnuz", "f4e2m1fn"})


@converts("QuantizeLinear")
def _quantize(imp: Importer, ins: Ins, attrs: dict[str, Any]) -> list[Node | None]:
    """y = saturate(round(x / scale) + zero_point), as the reference computes it: the
    division in x's dtype, rounding half to even, clamped to the integer type's range;
    to float8, the quotient cast with Cast's saturation."""
    x, scale = _req(ins[0], "x"), _req(ins[1], "y_scale")
    zp = ins[2] if len(ins) > 2 else None
    axis, block = int(attrs.get("axis", 1)), int(attrs.get("block_size", 0))
    out = _t(zp).dtype if zp is not None else (
        nexus_dtype(int(attrs["output_dtype"]), "QuantizeLinear's output_dtype") if attrs.get("output_dtype")
        else "u8")
    wide = _t(x).dtype if _t(x).dtype in ("f16", "f32", "f64") else "f32"
    q = imp.emit("Div", [_cast(imp, x, wide), _cast(imp, _qparam(imp, scale, x, axis, block), wide)])
    if out in _QFLOATS:
        if zp is not None and out == "f4e2m1fn":
            q = imp.emit("Add", [q, _cast(imp, _qparam(imp, zp, x, axis, block), wide)])
        extra = {"saturate": bool(attrs.get("saturate", 1))} if out != "f4e2m1fn" else {}
        return [imp.emit("Cast", [q], {"to": out, **extra})]
    q = _cast(imp, imp.emit("Round", [q]), "f64")  # f64 holds every sum below exactly
    if zp is not None:
        q = imp.emit("Add", [q, _cast(imp, _qparam(imp, zp, x, axis, block), "f64")])
    lo, hi = int_range(out)
    q = imp.emit("Clip", [q, imp.const(np.array(lo, np.float64)), imp.const(np.array(hi, np.float64))])
    return [_cast(imp, q, out)]


@converts("DequantizeLinear")
def _dequantize(imp: Importer, ins: Ins, attrs: dict[str, Any]) -> list[Node | None]:
    """y = (x - zero_point) * scale, in f32, as the reference computes it."""
    x, scale = _req(ins[0], "x"), _req(ins[1], "x_scale")
    zp = ins[2] if len(ins) > 2 else None
    axis, block = int(attrs.get("axis", 1)), int(attrs.get("block_size", 0))
    out = nexus_dtype(int(attrs["output_dtype"]), "DequantizeLinear's output_dtype") if attrs.get("output_dtype") \
        else _t(scale).dtype
    dx = _cast(imp, x, "f32")
    if zp is not None and _t(x).dtype not in _QFLOATS:  # a float8 zero point is 0
        dx = imp.emit("Sub", [dx, _cast(imp, _qparam(imp, zp, x, axis, block), "f32")])
    y = imp.emit("Mul", [dx, _cast(imp, _qparam(imp, scale, x, axis, block), "f32")])
    return [_cast(imp, y, out)]


@converts("QLinearMatMul")
def _qlinear_matmul(imp: Importer, ins: Ins, attrs: dict[str, Any]) -> list[Node | None]:
    """(a - a_zp) @ (b - b_zp) in i32, requantized by a_scale * b_scale / y_scale (f64)."""
    a, a_s, a_zp, b, b_s, b_zp, y_s = (_req(v, n) for v, n in zip(
        ins, ("a", "a_scale", "a_zero_point", "b", "b_scale", "b_zero_point", "y_scale")))
    y_zp = ins[7] if len(ins) > 7 else None

    def centred(v: Node, zp: Node) -> Node:
        return imp.emit("Sub", [_cast(imp, v, "i32"), _cast(imp, zp, "i32")])

    c = imp.emit("MatMul", [centred(a, a_zp), centred(b, b_zp)])
    factor = imp.emit("Div", [imp.emit("Mul", [a_s, _cast(imp, b_s, _t(a_s).dtype)]), _cast(imp, y_s, _t(a_s).dtype)])
    return [requantize(imp, c, factor, y_zp, a)]


def requantize(imp: Importer, acc: Node, factor: Node, y_zp: Node | None, x: Node) -> Node:
    """acc * factor (+ y_zp) in f64, rounded half to even and saturated to y_zp's dtype
    (x's when there is none): the tail of QLinearMatMul and QLinearConv."""
    d = imp.emit("Mul", [_cast(imp, acc, "f64"), _cast(imp, factor, "f64")])
    out = _t(y_zp).dtype if y_zp is not None else _t(x).dtype
    if y_zp is not None:
        d = imp.emit("Add", [d, _cast(imp, y_zp, "f64")])
    lo, hi = int_range(out)
    d = imp.emit("Clip", [imp.emit("Round", [d]), imp.const(np.array(lo, np.float64)),
                          imp.const(np.array(hi, np.float64))])
    return _cast(imp, d, out)


@converts("Hardmax")
def _hardmax(imp: Importer, ins: Ins, attrs: dict[str, Any]) -> list[Node | None]:
    """1 at the first maximum along ``axis``, 0 elsewhere: OneHot of the ArgMax.  Before
    opset 13 the input is taken as a matrix, flattened at ``axis`` (as Softmax was)."""
    x = _req(ins[0], "input")
    r = _rank(x)
    axis = int(attrs.get("axis", -1 if imp.opset >= 13 else 1))
    axis = axis + r if axis < 0 else axis
    src = x if imp.opset >= 13 else imp.emit("Flatten", [x], {"axis": axis})
    a = axis if imp.opset >= 13 else 1
    idx = imp.emit("ArgMax", [src], {"axis": a, "keepdims": False})
    depth = imp.emit("DimSize", [src], {"axis": a})
    values = imp.const(np.array([0, 1], numpy_dtype(_t(x).dtype)))
    y = imp.emit("OneHot", [idx, depth, values], {"axis": a})
    return [y if imp.opset >= 13 else imp.emit("Reshape", [y, imp.emit("ShapeOf", [x])])]


@converts("LpNormalization")
def _lpnorm(imp: Importer, ins: Ins, attrs: dict[str, Any]) -> list[Node | None]:
    x = _req(ins[0], "input")
    axis, p = int(attrs.get("axis", -1)), int(attrs.get("p", 2))
    if p not in (1, 2):
        raise OnnxImportError(f"LpNormalization p must be 1 or 2, got {p}")
    mag = imp.emit("Abs", [x]) if p == 1 else imp.emit("Mul", [x, x])
    norm = imp.emit("ReduceSum", [mag], {"axes": (axis,), "keepdims": True})
    norm = norm if p == 1 else imp.emit("Sqrt", [norm])
    # A zero vector stays zero (ONNX Runtime and the reference), not 0/0 = NaN.
    safe = imp.emit("Where", [imp.emit("Equal", [norm, _like(imp, 0, norm)]), _like(imp, 1, norm), norm])
    return [imp.emit("Div", [x, safe])]


@converts("EyeLike")
def _eyelike(imp: Importer, ins: Ins, attrs: dict[str, Any]) -> list[Node | None]:
    x = _req(ins[0], "input")
    shape = _t(x).shape
    if shape is None or len(shape) != 2 or not all(isinstance(d, int) for d in shape):
        raise OnnxImportError(f"EyeLike needs a 2-D input of static shape, got {_t(x)}")
    dt = nexus_dtype(int(attrs["dtype"]), "EyeLike's dtype") if "dtype" in attrs else _t(x).dtype
    return [imp.const(np.eye(shape[0], shape[1], int(attrs.get("k", 0)), dtype=numpy_dtype(dt)))]


