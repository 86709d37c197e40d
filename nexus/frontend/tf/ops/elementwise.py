"""TensorFlow import rules: the ops Nexus has one to one, and the other elementwise ops."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from nexus.frontend.tf.ops import Converter, Outs, _t, attr_b, attr_type, converts
from nexus.frontend.tf.proto import TfImportError, TfNode, tensor_to_array
from nexus.ir.types import numpy_dtype

if TYPE_CHECKING:
    from nexus.frontend.tf.importer import Importer


# --- one to one --------------------------------------------------------------------------------
def _same(op: str, arity: int) -> Converter:
    def fn(imp: Importer, n: TfNode) -> Outs:
        if len(n.inputs) != arity:
            raise TfImportError(f"takes {arity} inputs, has {len(n.inputs)}")
        return [imp.emit(op, imp.args(n))]

    return fn


for _tf, (_nx, _k) in {
    "Add": ("Add", 2), "AddV2": ("Add", 2), "Sub": ("Sub", 2), "Mul": ("Mul", 2), "RealDiv": ("Div", 2),
    "Div": ("Div", 2), "FloorDiv": ("FloorDiv", 2), "FloorMod": ("Mod", 2), "Maximum": ("Maximum", 2),
    "Minimum": ("Minimum", 2), "Pow": ("Pow", 2), "Less": ("Less", 2), "LessEqual": ("LessEqual", 2),
    "Greater": ("Greater", 2), "GreaterEqual": ("GreaterEqual", 2), "Equal": ("Equal", 2),
    "NotEqual": ("NotEqual", 2), "LogicalAnd": ("And", 2), "LogicalOr": ("Or", 2), "LogicalNot": ("Not", 1),
    "Neg": ("Neg", 1), "Abs": ("Abs", 1), "Sin": ("Sin", 1), "Cos": ("Cos", 1), "Exp": ("Exp", 1),
    "Log": ("Log", 1), "Sqrt": ("Sqrt", 1), "Rsqrt": ("Rsqrt", 1), "Reciprocal": ("Reciprocal", 1),
    "Relu": ("Relu", 1), "Tanh": ("Tanh", 1), "Sigmoid": ("Sigmoid", 1), "Softplus": ("Softplus", 1),
    "Floor": ("Floor", 1), "Ceil": ("Ceil", 1), "Round": ("Round", 1), "Sign": ("Sign", 1), "Erf": ("Erf", 1),
    "ZerosLike": ("ZerosLike", 1), "OnesLike": ("OnesLike", 1), "SelectV2": ("Where", 3),
}.items():
    converts(_tf)(_same(_nx, _k))


@converts("Placeholder")
def _placeholder(imp: Importer, n: TfNode) -> Outs:
    raise TfImportError("the outputs need this Placeholder, but it is not among the inputs")


@converts("PlaceholderWithDefault")
def _placeholder_default(imp: Importer, n: TfNode) -> Outs:
    return [imp.arg(n, 0)]


@converts("Const")
def _const(imp: Importer, n: TfNode) -> Outs:
    a = n.attr.get("value")
    if a is None or a.WhichOneof("value") != "tensor":
        raise TfImportError("Const needs a tensor 'value'")
    return [imp.emit("Constant", [], {"value": tensor_to_array(a.tensor, "its value")})]


@converts("Square")
def _square(imp: Importer, n: TfNode) -> Outs:
    x = imp.arg(n, 0)
    return [imp.emit("Mul", [x, x])]


@converts("Select")
def _select(imp: Importer, n: TfNode) -> Outs:
    c, a, b = imp.args(n)
    ca, cc = _t(a).shape, _t(c).shape
    if cc is not None and ca is not None and len(cc) == 1 and len(ca) > 1:  # v1 Select picks rows
        c = imp.emit("Reshape", [c, imp.const(np.array([-1] + [1] * (len(ca) - 1), np.int64))], name="")
    return [imp.emit("Where", [c, a, b])]


@converts("Cast")
def _cast(imp: Importer, n: TfNode) -> Outs:
    return [imp.emit("Cast", [imp.arg(n, 0)], {"to": attr_type(n, "DstT")})]


@converts("AddN")
def _addn(imp: Importer, n: TfNode) -> Outs:
    vals = imp.args(n)
    acc = vals[0]
    for v in vals[1:]:
        acc = imp.emit("Add", [acc, v], name="")
    return [acc if len(vals) > 1 else imp.emit("Identity", [acc])]


@converts("MatMul", "BatchMatMul", "BatchMatMulV2", "BatchMatMulV3")
def _matmul(imp: Importer, n: TfNode) -> Outs:
    a, b = imp.args(n)[:2]
    for key, alt in (("transpose_a", "adj_x"), ("transpose_b", "adj_y")):
        if attr_b(n, key) or attr_b(n, alt):
            v = a if key.endswith("a") else b
            r = len(_t(v).shape or ())
            perm = (*range(r - 2), r - 1, r - 2)
            v = imp.emit("Transpose", [v], {"perm": perm}, name="")
            a, b = (v, b) if key.endswith("a") else (a, v)
    return [imp.emit("MatMul", [a, b])]


@converts("BiasAdd", "BiasAddV1")
def _bias_add(imp: Importer, n: TfNode) -> Outs:
    a = n.attr.get("data_format")
    if a is not None and a.s.decode() not in ("", "NHWC"):
        raise TfImportError(f"data_format {a.s.decode()!r} is not supported (only NHWC)")
    return [imp.emit("Add", imp.args(n))]


@converts("Softmax", "LogSoftmax")
def _softmax(imp: Importer, n: TfNode) -> Outs:
    return [imp.emit(n.op, [imp.arg(n, 0)], {"axis": -1})]


@converts("Relu6")
def _relu6(imp: Importer, n: TfNode) -> Outs:
    x = imp.arg(n, 0)
    dt = numpy_dtype(_t(x).dtype)
    return [imp.emit("Clip", [x, imp.const(np.array(0, dt)), imp.const(np.array(6, dt))])]


@converts("LeakyRelu")
def _leaky(imp: Importer, n: TfNode) -> Outs:
    a = n.attr.get("alpha")
    return [imp.emit("LeakyRelu", [imp.arg(n, 0)], {"alpha": float(a.f) if a is not None else 0.2})]


