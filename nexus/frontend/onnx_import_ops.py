"""The ONNX import table: one small function per ONNX op type, building Nexus nodes.

``CONVERTERS[op_type](imp, ins, attrs)`` gets the importer (:class:`Importer`: ``emit``,
``const``, ``value_of``, ``need_value``), the node's inputs (None for an omitted optional
input) and its attributes as Python values (with ONNX's defaults where the converter
asks ``attrs.get``), and returns the node's outputs (None for one it does not produce).
Ops Nexus has map one to one; the others are compositions of Nexus ops.  Inputs that
Nexus takes as attributes (Squeeze's axes, say) must be known at import time.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from nexus.frontend.importing import Registry
from nexus.frontend.onnx_control import convert_if, convert_loop, convert_scan
from nexus.frontend.onnx_data import OnnxImportError, nexus_dtype, tensor_to_array
from nexus.frontend.onnx_functions import function_body
from nexus.ir.node import Node
from nexus.ir.types import FLOAT_DTYPES, NARROW_DTYPES, TensorType, int_range, numpy_dtype

if TYPE_CHECKING:
    from nexus.frontend.onnx_import import Importer

Ins = list["Node | None"]
Converter = Callable[["Importer", Ins, dict[str, Any]], Sequence["Node | None"]]
_REGISTRY: Registry[Converter] = Registry()
CONVERTERS = _REGISTRY.table
converts = _REGISTRY.converts
INT64_MAX = np.iinfo(np.int64).max


# Attributes whose value is a subgraph are imported by the control-flow converters.
_GRAPH_ATTRS = 5  # AttributeProto.GRAPH


def convert_node(imp: Importer, nd: Any) -> None:
    """Import ONNX node ``nd`` at the importer's current block."""
    fn = CONVERTERS.get(nd.op_type) if nd.domain in ("", "ai.onnx") else None
    if fn is None:
        body = function_body(imp, nd)
        if body is None and nd.domain not in ("", "ai.onnx"):
            raise OnnxImportError(f"op domain {nd.domain!r} is not supported (only the default ONNX domain, and "
                                  f"ops of others that ONNX defines by a function)")
        if body is None:
            raise OnnxImportError(f"ONNX op {nd.op_type} has no Nexus import rule (nor a function body in ONNX)")
        opset, where = imp.opset, imp.where
        imp.opset, imp.where = body.opset, f"{where}: in its function body, "
        try:
            imp.nodes(body)
        finally:
            imp.opset, imp.where = opset, where
        return
    attrs = read_attrs(imp, nd)
    ins: Ins = [imp.read(n) if n else None for n in nd.input]
    narrow = {_t(v).dtype for v in ins if v is not None and _t(v).dtype in NARROW_DTYPES}
    if narrow and nd.op_type not in _CARRY_NARROW:
        outs = _widened(imp, fn, ins, attrs, narrow)
    else:
        outs = list(fn(imp, ins, attrs))
    for i, name in enumerate(nd.output):
        if not name:
            continue
        if i >= len(outs) or outs[i] is None:
            raise OnnxImportError(f"output {i} ({name!r}) of {nd.op_type} is not supported by the importer")
        imp.define(name, outs[i])  # type: ignore[arg-type]


# Ops that take the narrow dtypes (bf16, float8, int4...) as they are: conversions, and
# control flow, whose bodies are imported op by op.  Any other op on a narrow dtype runs
# in the wider dtype that holds each of its values exactly (below).
_CARRY_NARROW = frozenset({"Cast", "CastLike", "Identity", "Constant", "If", "Loop", "Scan", "QuantizeLinear",
                           "DequantizeLinear"})
_WIDE = {"i4": "i8", "i2": "i8", "u4": "u8", "u2": "u8"}  # the floats widen to f32


def _widened(imp: Importer, fn: Converter, ins: Ins, attrs: dict[str, Any], narrow: set[str]) -> list[Node | None]:
    """An op on narrow dtypes, computed in f32 (i8/u8 for the narrow ints) and rounded
    back once: f32 holds every bf16/float8/float4 value exactly, and one rounding of the
    exact-in-f32 result is what ONNX Runtime and the reference do for these types."""
    wide = {d: _WIDE.get(d, "f32") for d in narrow}
    args = [None if v is None else _cast(imp, v, wide.get(_t(v).dtype, _t(v).dtype)) for v in ins]
    back = {w: d for d, w in wide.items()} if len(set(wide.values())) == len(wide) else {}
    outs = list(fn(imp, args, attrs))
    return [o if o is None or _t(o).dtype not in back else _cast(imp, o, back[_t(o).dtype]) for o in outs]


def read_attrs(imp: Importer, nd: Any) -> dict[str, Any]:
    """The node's attributes as Python values, each checked against the op's schema."""
    from onnx import AttributeProto, defs, helper

    try:
        schema = defs.get_schema(nd.op_type, imp.opset, nd.domain)
    except Exception:  # noqa: BLE001  (onnx raises SchemaError, a private class)
        schema = None
    out: dict[str, Any] = {}
    for a in nd.attribute:
        if a.ref_attr_name:
            raise OnnxImportError(f"attribute {a.name!r} refers to a function attribute; only models, not "
                                  f"function bodies, are imported")
        if schema is not None:
            spec = schema.attributes.get(a.name)
            if spec is None:
                raise OnnxImportError(f"{nd.op_type} has no attribute {a.name!r}")
            want = int(spec.type)  # type: ignore[call-overload]  # a pybind11 enum
            if a.type != want:
                raise OnnxImportError(f"attribute {a.name!r} must be {AttributeProto.AttributeType.Name(want)}, "
                                      f"got {AttributeProto.AttributeType.Name(a.type)}")
        if a.type == AttributeProto.TENSOR:
            out[a.name] = tensor_to_array(a.t, imp.base_dir, f"attribute {a.name!r}")
        elif a.type == AttributeProto.GRAPH:
            out[a.name] = a.g
        else:
            v = helper.get_attribute_value(a)
            if isinstance(v, bytes):
                v = v.decode()
            elif isinstance(v, list) and v and isinstance(v[0], bytes):
                v = [x.decode() for x in v]
            out[a.name] = v
    return out


# --- helpers ---------------------------------------------------------------------------------
def _t(v: Node) -> TensorType:
    t = v.type
    assert isinstance(t, TensorType), f"expected a tensor, got {t}"
    return t


def _rank(v: Node) -> int:
    shape = _t(v).shape
    if shape is None:
        raise OnnxImportError("the input's rank must be known")
    return len(shape)


def _req(v: Node | None, what: str) -> Node:
    if v is None:
        raise OnnxImportError(f"input {what} is required")
    return v


def _ints(imp: Importer, v: Node | None, what: str) -> list[int] | None:
    if v is None:
        return None
    return [int(x) for x in np.asarray(imp.need_value(v, what)).reshape(-1)]


def _axes(imp: Importer, ins: Ins, i: int, attrs: dict[str, Any]) -> list[int] | None:
    """Axes given as input ``i`` (newer opsets) or as the ``axes`` attribute."""
    if len(ins) > i and ins[i] is not None:
        return _ints(imp, ins[i], "axes")
    a = attrs.get("axes")
    return [int(x) for x in a] if a is not None else None


def _like(imp: Importer, value: Any, v: Node) -> Node:
    return imp.const(np.asarray(value, dtype=numpy_dtype(_t(v).dtype)))


def _cast(imp: Importer, v: Node, dtype: str) -> Node:
    return v if _t(v).dtype == dtype else imp.emit("Cast", [v], {"to": dtype})


def _i64_vec(imp: Importer, v: Node) -> Node:
    v = _cast(imp, v, "i64")
    if _t(v).shape == ():
        v = imp.emit("Reshape", [v, imp.const(np.array([1], np.int64))])
    return v


def _i64_scalar(imp: Importer, v: Node) -> Node:
    v = _cast(imp, v, "i64")
    if _t(v).shape != ():
        v = imp.emit("Reshape", [v, imp.const(np.array([], np.int64))])
    return v


# --- one to one ------------------------------------------------------------------------------
def _same(op: str, n_in: int | None = None) -> Converter:
    def fn(imp: Importer, ins: Ins, attrs: dict[str, Any]) -> list[Node | None]:
        if n_in is None:
            args = [i for i in ins if i is not None]
        else:
            args = [_req(x, str(k)) for k, x in enumerate(ins[:n_in])]
        return [imp.emit(op, args)]

    return fn


for _onnx, _nexus in {
    "Add": "Add", "Sub": "Sub", "Mul": "Mul", "Abs": "Abs", "Neg": "Neg", "Exp": "Exp", "Log": "Log",
    "Sqrt": "Sqrt", "Reciprocal": "Reciprocal", "Relu": "Relu", "Sigmoid": "Sigmoid", "Tanh": "Tanh",
    "Erf": "Erf", "Floor": "Floor", "Ceil": "Ceil", "Round": "Round", "Sign": "Sign", "Sin": "Sin",
    "Cos": "Cos", "Asin": "Asin", "Acos": "Acos", "Atan": "Atan", "Asinh": "Asinh", "Acosh": "Acosh",
    "Atanh": "Atanh", "Where": "Where", "Equal": "Equal", "Greater": "Greater", "Less": "Less",
    "GreaterOrEqual": "GreaterEqual", "LessOrEqual": "LessEqual", "Not": "Not", "And": "And", "Or": "Or",
    "Xor": "Xor", "MatMul": "MatMul", "Identity": "Identity", "PRelu": "PRelu", "Expand": "Expand",
    "Tile": "Tile", "GatherND": "GatherND", "GlobalAveragePool": "GlobalAveragePool",
    "Softplus": "Softplus", "BitwiseAnd": "BitwiseAnd", "BitwiseOr": "BitwiseOr", "BitwiseXor": "BitwiseXor",
    "BitwiseNot": "BitwiseNot",
}.items():
    CONVERTERS[_onnx] = _same(_nexus)


@converts("Div")
def _div(imp: Importer, ins: Ins, attrs: dict[str, Any]) -> list[Node | None]:
    return [imp.emit("Div", [_req(ins[0], "A"), _req(ins[1], "B")])]


@converts("Pow")
def _pow(imp: Importer, ins: Ins, attrs: dict[str, Any]) -> list[Node | None]:
    x, y = _req(ins[0], "X"), _req(ins[1], "Y")
    return [imp.emit("Pow", [x, _cast(imp, y, _t(x).dtype)])]


@converts("Mod")
def _mod(imp: Importer, ins: Ins, attrs: dict[str, Any]) -> list[Node | None]:
    a, b = _req(ins[0], "A"), _req(ins[1], "B")
    if attrs.get("fmod", 0):
        # fmod: the sign of the dividend, a - trunc(a / b) * b
        if _t(a).dtype in FLOAT_DTYPES:
            q = imp.emit("Div", [a, b])
            trunc = imp.emit("Mul", [imp.emit("Sign", [q]), imp.emit("Floor", [imp.emit("Abs", [q])])])
            return [imp.emit("Sub", [a, imp.emit("Mul", [trunc, b])])]
        return [imp.emit("Sub", [a, imp.emit("Mul", [imp.emit("Div", [a, b]), b])])]
    return [imp.emit("Mod", [a, b])]


def _variadic(op: str) -> Converter:
    def fn(imp: Importer, ins: Ins, attrs: dict[str, Any]) -> list[Node | None]:
        args = [x for x in ins if x is not None]
        if len(args) == 1:
            return [imp.emit("Identity", args)]
        out = args[0]
        for x in args[1:]:
            out = imp.emit(op, [out, x])
        return [out]

    return fn


CONVERTERS["Max"] = _variadic("Maximum")
CONVERTERS["Min"] = _variadic("Minimum")
CONVERTERS["Sum"] = _variadic("Add")


@converts("Mean")
def _mean(imp: Importer, ins: Ins, attrs: dict[str, Any]) -> list[Node | None]:
    (s,) = _variadic("Add")(imp, ins, attrs)
    assert s is not None
    return [imp.emit("Div", [s, _like(imp, len([x for x in ins if x is not None]), s)])]


# --- activations -----------------------------------------------------------------------------
@converts("LeakyRelu")
def _leaky(imp: Importer, ins: Ins, attrs: dict[str, Any]) -> list[Node | None]:
    return [imp.emit("LeakyRelu", [_req(ins[0], "X")], {"alpha": float(attrs.get("alpha", 0.01))})]


@converts("Gelu")
def _gelu(imp: Importer, ins: Ins, attrs: dict[str, Any]) -> list[Node | None]:
    return [imp.emit("Gelu", [_req(ins[0], "X")], {"approximate": attrs.get("approximate", "none")})]


def _hard_sigmoid(imp: Importer, x: Node, alpha: float, beta: float) -> Node:
    y = imp.emit("Add", [imp.emit("Mul", [x, _like(imp, alpha, x)]), _like(imp, beta, x)])
    return imp.emit("Clip", [y, _like(imp, 0, x), _like(imp, 1, x)])


@converts("HardSigmoid")
def _hsig(imp: Importer, ins: Ins, attrs: dict[str, Any]) -> list[Node | None]:
    return [_hard_sigmoid(imp, _req(ins[0], "X"), attrs.get("alpha", 0.2), attrs.get("beta", 0.5))]


@converts("HardSwish")
def _hswish(imp: Importer, ins: Ins, attrs: dict[str, Any]) -> list[Node | None]:
    x = _req(ins[0], "X")
    return [imp.emit("Mul", [x, _hard_sigmoid(imp, x, 1 / 6, 0.5)])]


@converts("Elu", "Selu", "Celu")
def _elu(imp: Importer, ins: Ins, attrs: dict[str, Any]) -> list[Node | None]:
    x = _req(ins[0], "X")
    op = imp.node.op_type
    alpha = attrs.get("alpha", {"Elu": 1.0, "Selu": 1.67326319217681884765625, "Celu": 1.0}[op])
    gamma = attrs.get("gamma", 1.05070102214813232421875) if op == "Selu" else 1.0
    xs = imp.emit("Div", [x, _like(imp, alpha, x)]) if op == "Celu" else x
    neg = imp.emit("Mul", [_like(imp, alpha, x), imp.emit("Sub", [imp.emit("Exp", [xs]), _like(imp, 1, x)])])
    out = imp.emit("Where", [imp.emit("Less", [x, _like(imp, 0, x)]), neg, x])
    return [imp.emit("Mul", [out, _like(imp, gamma, x)]) if op == "Selu" else out]


@converts("BitShift")
def _bitshift(imp: Importer, ins: Ins, attrs: dict[str, Any]) -> list[Node | None]:
    op = "LeftShift" if attrs.get("direction") == "LEFT" else "RightShift"
    return [imp.emit(op, [_req(ins[0], "X"), _req(ins[1], "Y")])]


@converts("Swish")
def _swish(imp: Importer, ins: Ins, attrs: dict[str, Any]) -> list[Node | None]:
    x = _req(ins[0], "X")
    return [imp.emit("Mul", [x, imp.emit("Sigmoid", [imp.emit("Mul", [x, _like(imp, attrs.get("alpha", 1.0), x)])])])]


@converts("IsNaN")
def _isnan(imp: Importer, ins: Ins, attrs: dict[str, Any]) -> list[Node | None]:
    x = _req(ins[0], "X")
    return [imp.emit("NotEqual", [x, x])]


@converts("IsInf")
def _isinf(imp: Importer, ins: Ins, attrs: dict[str, Any]) -> list[Node | None]:
    x = _req(ins[0], "X")
    pos = imp.emit("Equal", [x, _like(imp, np.inf, x)])
    neg = imp.emit("Equal", [x, _like(imp, -np.inf, x)])
    if not attrs.get("detect_negative", 1):
        return [pos]
    if not attrs.get("detect_positive", 1):
        return [neg]
    return [imp.emit("Or", [pos, neg])]


@converts("Tan")
def _tan(imp: Importer, ins: Ins, attrs: dict[str, Any]) -> list[Node | None]:
    x = _req(ins[0], "X")
    return [imp.emit("Div", [imp.emit("Sin", [x]), imp.emit("Cos", [x])])]


@converts("Sinh", "Cosh")
def _hyp(imp: Importer, ins: Ins, attrs: dict[str, Any]) -> list[Node | None]:
    x = _req(ins[0], "X")
    a, b = imp.emit("Exp", [x]), imp.emit("Exp", [imp.emit("Neg", [x])])
    y = imp.emit("Sub" if imp.node.op_type == "Sinh" else "Add", [a, b])
    return [imp.emit("Div", [y, _like(imp, 2, x)])]


@converts("Softsign")
def _softsign(imp: Importer, ins: Ins, attrs: dict[str, Any]) -> list[Node | None]:
    x = _req(ins[0], "X")
    return [imp.emit("Div", [x, imp.emit("Add", [imp.emit("Abs", [x]), _like(imp, 1, x)])])]


@converts("ThresholdedRelu")
def _trelu(imp: Importer, ins: Ins, attrs: dict[str, Any]) -> list[Node | None]:
    x = _req(ins[0], "X")
    cond = imp.emit("Greater", [x, _like(imp, attrs.get("alpha", 1.0), x)])
    return [imp.emit("Where", [cond, x, _like(imp, 0, x)])]


@converts("Softmax", "LogSoftmax")
def _softmax(imp: Importer, ins: Ins, attrs: dict[str, Any]) -> list[Node | None]:
    x = _req(ins[0], "input")
    op = imp.node.op_type
    if imp.opset >= 13:
        return [imp.emit(op, [x], {"axis": int(attrs.get("axis", -1))})]
    # Before opset 13: over the flattened trailing axes from `axis` (default 1).
    flat = imp.emit("Flatten", [x], {"axis": int(attrs.get("axis", 1))})
    y = imp.emit(op, [flat], {"axis": 1})
    return [imp.emit("Reshape", [y, imp.emit("ShapeOf", [x])])]


@converts("Clip")
def _clip(imp: Importer, ins: Ins, attrs: dict[str, Any]) -> list[Node | None]:
    x = _req(ins[0], "input")
    dt = numpy_dtype(_t(x).dtype)
    info: Any = np.finfo(dt) if _t(x).dtype in FLOAT_DTYPES else np.iinfo(dt)
    lo = ins[1] if len(ins) > 1 and ins[1] is not None else imp.const(np.array(attrs.get("min", info.min), dt))
    hi = ins[2] if len(ins) > 2 and ins[2] is not None else imp.const(np.array(attrs.get("max", info.max), dt))
    return [imp.emit("Clip", [x, lo, hi])]


# --- reductions ------------------------------------------------------------------------------
def _reduce(op: str) -> Converter:
    def fn(imp: Importer, ins: Ins, attrs: dict[str, Any]) -> list[Node | None]:
        x = _req(ins[0], "data")
        axes = _axes(imp, ins, 1, attrs)
        keep = bool(attrs.get("keepdims", 1))
        if not axes:
            if attrs.get("noop_with_empty_axes", 0):
                return [imp.emit("Identity", [x])]
            axes = None
        if op == "ReduceSumSquare":
            return [imp.emit("ReduceSum", [imp.emit("Mul", [x, x])], {"axes": axes, "keepdims": keep})]
        if op == "ReduceL1":
            return [imp.emit("ReduceSum", [imp.emit("Abs", [x])], {"axes": axes, "keepdims": keep})]
        if op == "ReduceL2":
            s = imp.emit("ReduceSum", [imp.emit("Mul", [x, x])], {"axes": axes, "keepdims": keep})
            return [imp.emit("Sqrt", [s])]
        if op == "ReduceLogSum":
            return [imp.emit("Log", [imp.emit("ReduceSum", [x], {"axes": axes, "keepdims": keep})])]
        if op == "ReduceLogSumExp":
            m = imp.emit("ReduceMax", [x], {"axes": axes, "keepdims": True})
            s = imp.emit("ReduceSum", [imp.emit("Exp", [imp.emit("Sub", [x, m])])], {"axes": axes, "keepdims": keep})
            mk = m if keep else imp.emit("ReduceMax", [x], {"axes": axes, "keepdims": False})
            return [imp.emit("Add", [imp.emit("Log", [s]), mk])]
        if _t(x).dtype == "bool" and op in ("ReduceMax", "ReduceMin"):
            y = imp.emit(op, [_cast(imp, x, "u8")], {"axes": axes, "keepdims": keep})
            return [_cast(imp, y, "bool")]
        return [imp.emit(op, [x], {"axes": axes, "keepdims": keep})]

    return fn


for _r in ("ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceSumSquare", "ReduceL1",
           "ReduceL2", "ReduceLogSum", "ReduceLogSumExp"):
    CONVERTERS[_r] = _reduce(_r)


@converts("ArgMax", "ArgMin")
def _arg(imp: Importer, ins: Ins, attrs: dict[str, Any]) -> list[Node | None]:
    return [imp.emit(imp.node.op_type, [_req(ins[0], "data")],
                     {"axis": int(attrs.get("axis", 0)), "keepdims": bool(attrs.get("keepdims", 1)),
                      "select_last_index": bool(attrs.get("select_last_index", 0))})]


@converts("CumSum")
def _cumsum(imp: Importer, ins: Ins, attrs: dict[str, Any]) -> list[Node | None]:
    axis = _ints(imp, _req(ins[1], "axis"), "axis")
    assert axis is not None
    return [imp.emit("CumSum", [_req(ins[0], "x")], {"axis": axis[0], "exclusive": bool(attrs.get("exclusive", 0)),
                                                      "reverse": bool(attrs.get("reverse", 0))})]


# --- linear algebra and nn ----------------------------------------------------------------
@converts("Gemm")
def _gemm(imp: Importer, ins: Ins, attrs: dict[str, Any]) -> list[Node | None]:
    args = [_req(ins[0], "A"), _req(ins[1], "B")] + ([ins[2]] if len(ins) > 2 and ins[2] is not None else [])
    return [imp.emit("Gemm", args, {"alpha": float(attrs.get("alpha", 1.0)), "beta": float(attrs.get("beta", 1.0)),
                                    "transA": bool(attrs.get("transA", 0)), "transB": bool(attrs.get("transB", 0))})]


@converts("Einsum")
def _einsum(imp: Importer, ins: Ins, attrs: dict[str, Any]) -> list[Node | None]:
    return [imp.emit("Einsum", [x for x in ins if x is not None], {"equation": attrs["equation"].replace(" ", "")})]


def _spatial(x: Node) -> list[Any]:
    shape = _t(x).shape
    if shape is None:
        raise OnnxImportError("the input's rank must be known")
    return list(shape[2:])


def _auto_pads(attrs: dict[str, Any], x: Node, kernel: Sequence[int], strides: Sequence[int],
               dilations: Sequence[int]) -> list[int] | None:
    """Explicit pads for auto_pad SAME_UPPER / SAME_LOWER / VALID (static spatial dims)."""
    mode = attrs.get("auto_pad", "NOTSET")
    if mode in ("NOTSET", ""):
        p = attrs.get("pads")
        return [int(v) for v in p] if p is not None else None
    n = len(kernel)
    if mode == "VALID":
        return [0] * (2 * n)
    begins, ends = [], []
    for d, k, s, dl in zip(_spatial(x), kernel, strides, dilations):
        if not isinstance(d, int):
            raise OnnxImportError(f"auto_pad {mode} needs static spatial dims, got {d}")
        out = -(-d // s)
        total = max((out - 1) * s + (k - 1) * dl + 1 - d, 0)
        small, big = total // 2, total - total // 2
        begins.append(big if mode == "SAME_LOWER" else small)
        ends.append(small if mode == "SAME_LOWER" else big)
    return begins + ends


@converts("Conv")
def _conv(imp: Importer, ins: Ins, attrs: dict[str, Any]) -> list[Node | None]:
    x, w = _req(ins[0], "X"), _req(ins[1], "W")
    wshape = _t(w).shape
    assert wshape is not None
    kernel = attrs.get("kernel_shape") or list(wshape[2:])
    n = len(kernel)
    strides = attrs.get("strides") or [1] * n
    dil = attrs.get("dilations") or [1] * n
    a = {"strides": tuple(strides), "dilations": tuple(dil), "group": int(attrs.get("group", 1)),
         "pads": _auto_pads(attrs, x, kernel, strides, dil)}
    args = [x, w] + ([ins[2]] if len(ins) > 2 and ins[2] is not None else [])
    return [imp.emit("Conv", args, a)]


@converts("ConvTranspose")
def _conv_t(imp: Importer, ins: Ins, attrs: dict[str, Any]) -> list[Node | None]:
    x, w = _req(ins[0], "X"), _req(ins[1], "W")
    wshape = _t(w).shape
    assert wshape is not None
    kernel = list(attrs.get("kernel_shape") or wshape[2:])
    n = len(kernel)
    strides = list(attrs.get("strides") or [1] * n)
    dil = list(attrs.get("dilations") or [1] * n)
    outpad = list(attrs.get("output_padding") or [0] * n)
    pads = attrs.get("pads")
    mode = attrs.get("auto_pad", "NOTSET")
    if attrs.get("output_shape") is not None or mode in ("SAME_UPPER", "SAME_LOWER"):
        spatial = _spatial(x)
        want = list(attrs["output_shape"])[-n:] if attrs.get("output_shape") is not None else \
            [d * s for d, s in zip(spatial, strides)]
        pads_b, pads_e = [], []
        for i, (d, k, s, dl, op_, o) in enumerate(zip(spatial, kernel, strides, dil, outpad, want)):
            if not isinstance(d, int):
                raise OnnxImportError("ConvTranspose with output_shape or auto_pad needs static spatial dims")
            total = s * (d - 1) + op_ + ((k - 1) * dl + 1) - o
            if total < 0:  # the output_shape asks for more than the strides make: zeros at the end
                outpad[i] -= total
                total = 0
            lower = mode == "SAME_LOWER" or (attrs.get("output_shape") is None and False)
            b = total - total // 2 if lower else total // 2
            pads_b.append(b)
            pads_e.append(total - b)
        pads = pads_b + pads_e
    elif mode == "VALID":
        pads = [0] * (2 * n)
    a = {"strides": tuple(strides), "dilations": tuple(dil), "group": int(attrs.get("group", 1)),
         "pads": tuple(int(p) for p in pads) if pads is not None else None, "output_padding": tuple(outpad)}
    args = [x, w] + ([ins[2]] if len(ins) > 2 and ins[2] is not None else [])
    return [imp.emit("ConvTranspose", args, a)]


@converts("MaxPool", "AveragePool")
def _pool(imp: Importer, ins: Ins, attrs: dict[str, Any]) -> list[Node | None]:
    x = _req(ins[0], "X")
    kernel = list(attrs["kernel_shape"])
    n = len(kernel)
    strides = list(attrs.get("strides") or [1] * n)
    dil = list(attrs.get("dilations") or [1] * n)
    a: dict[str, Any] = {"kernel_shape": tuple(kernel), "strides": tuple(strides),
                         "pads": _auto_pads(attrs, x, kernel, strides, dil),
                         "ceil_mode": bool(attrs.get("ceil_mode", 0))}
    if imp.node.op_type == "MaxPool":
        a["dilations"] = tuple(dil)
        small = _t(x).dtype in ("i8", "u8")  # f32 holds every 8-bit int, and a max is exact
        src = _cast(imp, x, "f32") if small else x
        y = imp.emit("MaxPool", [src], a)
        indices = None
        if len(imp.node.output) > 1 and imp.node.output[1]:
            indices = imp.emit("MaxPoolIndices", [src], {**a, "storage_order": int(attrs.get("storage_order", 0))})
        return [_cast(imp, y, _t(x).dtype) if small else y, indices]
    if any(d != 1 for d in dil):
        a["dilations"] = tuple(dil)
    a["count_include_pad"] = bool(attrs.get("count_include_pad", 0))
    return [imp.emit("AveragePool", [x], a)]


@converts("LpPool")
def _lppool(imp: Importer, ins: Ins, attrs: dict[str, Any]) -> list[Node | None]:
    """(sum over the window of |x|^p)^(1/p): an AveragePool counting the zero padding,
    times the window size."""
    x = _req(ins[0], "X")
    if attrs.get("ceil_mode", 0):
        raise OnnxImportError("LpPool with ceil_mode is not supported (its overhang would be counted)")
    kernel = list(attrs["kernel_shape"])
    n = len(kernel)
    strides = list(attrs.get("strides") or [1] * n)
    dil = list(attrs.get("dilations") or [1] * n)
    p = float(attrs.get("p", 2))
    a: dict[str, Any] = {"kernel_shape": tuple(kernel), "strides": tuple(strides),
                         "pads": _auto_pads(attrs, x, kernel, strides, dil), "count_include_pad": True}
    if any(d != 1 for d in dil):
        a["dilations"] = tuple(dil)
    powered = imp.emit("Pow", [imp.emit("Abs", [x]), _like(imp, p, x)])
    total = imp.emit("Mul", [imp.emit("AveragePool", [powered], a), _like(imp, float(np.prod(kernel)), x)])
    return [imp.emit("Pow", [total, _like(imp, 1.0 / p, x)])]


@converts("GlobalMaxPool")
def _gmax(imp: Importer, ins: Ins, attrs: dict[str, Any]) -> list[Node | None]:
    x = _req(ins[0], "X")
    return [imp.emit("ReduceMax", [x], {"axes": tuple(range(2, _rank(x))), "keepdims": True})]


@converts("BatchNormalization")
def _bn(imp: Importer, ins: Ins, attrs: dict[str, Any]) -> list[Node | None]:
    args = [_req(v, str(i)) for i, v in enumerate(ins[:5])]
    eps = {"epsilon": float(attrs.get("epsilon", 1e-5))}
    if not attrs.get("training_mode", 0):
        return [imp.emit("BatchNormalization", args, eps)]
    # Training: normalise with the batch's statistics (mean and population variance over
    # every axis but the channels) and update the running ones with the momentum.
    x, _, _, mean, var = args
    axes = tuple(i for i in range(_rank(x)) if i != 1)
    m = imp.emit("ReduceMean", [x], {"axes": axes, "keepdims": True})
    d = imp.emit("Sub", [x, m])
    v = imp.emit("ReduceMean", [imp.emit("Mul", [d, d])], {"axes": axes, "keepdims": False})
    m = imp.emit("ReduceMean", [x], {"axes": axes, "keepdims": False})
    y = imp.emit("BatchNormalization", [*args[:3], m, v], eps)
    mom = float(attrs.get("momentum", 0.9))

    def running(old: Node, batch: Node) -> Node:
        return imp.emit("Add", [imp.emit("Mul", [old, _like(imp, mom, old)]),
                                imp.emit("Mul", [_cast(imp, batch, _t(old).dtype), _like(imp, 1 - mom, old)])])

    return [y, running(mean, m), running(var, v)]


@converts("InstanceNormalization")
def _instnorm(imp: Importer, ins: Ins, attrs: dict[str, Any]) -> list[Node | None]:
    x, scale, bias = _req(ins[0], "input"), _req(ins[1], "scale"), _req(ins[2], "B")
    r = _rank(x)
    axes = tuple(range(2, r))
    mean = imp.emit("ReduceMean", [x], {"axes": axes, "keepdims": True})
    d = imp.emit("Sub", [x, mean])
    var = imp.emit("ReduceMean", [imp.emit("Mul", [d, d])], {"axes": axes, "keepdims": True})
    std = imp.emit("Sqrt", [imp.emit("Add", [var, _like(imp, attrs.get("epsilon", 1e-5), x)])])
    shape = imp.const(np.array([-1] + [1] * (r - 2), np.int64))
    s = imp.emit("Reshape", [scale, shape])
    b = imp.emit("Reshape", [bias, shape])
    return [imp.emit("Add", [imp.emit("Mul", [imp.emit("Div", [d, std]), s]), b])]


@converts("LayerNormalization")
def _layernorm(imp: Importer, ins: Ins, attrs: dict[str, Any]) -> list[Node | None]:
    nd = imp.node
    if any(nd.output[1:]):
        return _layernorm_stats(imp, ins, attrs)
    args = [_req(ins[0], "X"), _req(ins[1], "Scale")] + ([ins[2]] if len(ins) > 2 and ins[2] is not None else [])
    return [imp.emit("LayerNormalization", args, {"axis": int(attrs.get("axis", -1)),
                                                  "epsilon": float(attrs.get("epsilon", 1e-5))})]


def _layernorm_stats(imp: Importer, ins: Ins, attrs: dict[str, Any]) -> list[Node | None]:
    """LayerNormalization with its Mean and InvStdDev outputs, composed (in stash_type f32)."""
    x, scale = _req(ins[0], "X"), _req(ins[1], "Scale")
    r = _rank(x)
    axis = int(attrs.get("axis", -1)) % r
    axes = tuple(range(axis, r))
    xf = _cast(imp, x, "f32")
    mean = imp.emit("ReduceMean", [xf], {"axes": axes, "keepdims": True})
    d = imp.emit("Sub", [xf, mean])
    var = imp.emit("ReduceMean", [imp.emit("Mul", [d, d])], {"axes": axes, "keepdims": True})
    eps = _like(imp, attrs.get("epsilon", 1e-5), var)
    inv = imp.emit("Reciprocal", [imp.emit("Sqrt", [imp.emit("Add", [var, eps])])])
    y = _cast(imp, imp.emit("Mul", [d, inv]), _t(x).dtype)
    y = imp.emit("Mul", [y, scale])
    if len(ins) > 2 and ins[2] is not None:
        y = imp.emit("Add", [y, ins[2]])
    return [y, mean, inv]


@converts("RMSNormalization")
def _rmsnorm(imp: Importer, ins: Ins, attrs: dict[str, Any]) -> list[Node | None]:
    x, scale = _req(ins[0], "X"), _req(ins[1], "scale")
    r = _rank(x)
    axes = tuple(range(int(attrs.get("axis", -1)) % r, r))
    xf = _cast(imp, x, "f32")
    ms = imp.emit("ReduceMean", [imp.emit("Mul", [xf, xf])], {"axes": axes, "keepdims": True})
    eps = _like(imp, attrs.get("epsilon", 1e-5), ms)
    inv = imp.emit("Reciprocal", [imp.emit("Sqrt", [imp.emit("Add", [ms, eps])])])
    return [imp.emit("Mul", [_cast(imp, imp.emit("Mul", [xf, inv]), _t(x).dtype), scale])]


@converts("NegativeLogLikelihoodLoss")
def _nll(imp: Importer, ins: Ins, attrs: dict[str, Any]) -> list[Node | None]:
    return [_nll_loss(imp, _req(ins[0], "input"), _req(ins[1], "target"), ins[2] if len(ins) > 2 else None, attrs)]


@converts("SoftmaxCrossEntropyLoss")
def _sce(imp: Importer, ins: Ins, attrs: dict[str, Any]) -> list[Node | None]:
    logp = imp.emit("LogSoftmax", [_req(ins[0], "scores")], {"axis": 1})
    return [_nll_loss(imp, logp, _req(ins[1], "labels"), ins[2] if len(ins) > 2 else None, attrs), logp]


def _nll_loss(imp: Importer, logp: Node, target: Node, weight: Node | None, attrs: dict[str, Any]) -> Node:
    """-logp[n, target[n, ...], ...] weighted, ignore_index masked, then reduced."""
    target = _cast(imp, target, "i64")
    mask: Node | None = None
    if "ignore_index" in attrs:
        mask = imp.emit("NotEqual", [target, imp.const(np.array(attrs["ignore_index"], np.int64))])
        target = imp.emit("Where", [mask, target, imp.const(np.array(0, np.int64))])
    picked = imp.emit("GatherElements", [logp, imp.emit("Unsqueeze", [target], {"axes": (1,)})], {"axis": 1})
    loss = imp.emit("Neg", [imp.emit("Squeeze", [picked], {"axes": (1,)})])
    w = imp.emit("Gather", [weight, target]) if weight is not None else None
    if mask is not None:
        m = _cast(imp, mask, _t(logp).dtype)
        w = m if w is None else imp.emit("Mul", [w, m])
    if w is not None:
        loss = imp.emit("Mul", [loss, w])
    red = attrs.get("reduction", "mean")
    if red == "none":
        return loss
    total = imp.emit("ReduceSum", [loss], {"keepdims": False})
    if red == "sum":
        return total
    if w is None:
        return imp.emit("ReduceMean", [loss], {"keepdims": False})
    return imp.emit("Div", [total, imp.emit("ReduceSum", [w], {"keepdims": False})])


@converts("LRN")
def _lrn(imp: Importer, ins: Ins, attrs: dict[str, Any]) -> list[Node | None]:
    x = _req(ins[0], "X")
    size = int(attrs["size"])
    alpha, beta, bias = attrs.get("alpha", 1e-4), attrs.get("beta", 0.75), attrs.get("bias", 1.0)
    r = _rank(x)
    sq = imp.emit("Mul", [x, x])
    lo, hi = (size - 1) // 2, size - 1 - (size - 1) // 2
    pads = [0] * (2 * r)
    pads[1], pads[r + 1] = lo, hi
    padded = imp.emit("Pad", [sq, imp.const(np.array(pads, np.int64))])
    total: Node | None = None
    for j in range(size):
        end = j - (size - 1)
        part = imp.emit("Slice", [padded, imp.const(np.array([j], np.int64)),
                                  imp.const(np.array([end if end < 0 else INT64_MAX], np.int64)),
                                  imp.const(np.array([1], np.int64))])
        total = part if total is None else imp.emit("Add", [total, part])
    assert total is not None
    scale = imp.emit("Add", [_like(imp, bias, x), imp.emit("Mul", [total, _like(imp, alpha / size, x)])])
    return [imp.emit("Div", [x, imp.emit("Pow", [scale, _like(imp, beta, x)])])]


@converts("Dropout")
def _dropout(imp: Importer, ins: Ins, attrs: dict[str, Any]) -> list[Node | None]:
    x = _req(ins[0], "data")
    if len(ins) > 2 and ins[2] is not None:
        mode = imp.need_value(ins[2], "Dropout's training_mode")
        if bool(np.asarray(mode)):
            return _dropout_training(imp, x, ins[1] if len(ins) > 1 else None, attrs)
    y = imp.emit("Identity", [x])
    mask = imp.emit("ConstantOfShape", [imp.emit("ShapeOf", [x])], {"value": np.array([True])})
    return [y, mask]


def _dropout_training(imp: Importer, x: Node, ratio: Node | None, attrs: dict[str, Any]) -> list[Node | None]:
    """Training-mode Dropout: keep = uniform(0, 1) >= ratio, y = x * keep / (1 - ratio).
    The draw is NumPy's legacy stream seeded with the node's seed (0 when it has none), as
    ONNX's reference implementation draws, so a seeded model gives the reference's mask."""
    dt = _t(x).dtype
    r = _cast(imp, ratio, "f64") if ratio is not None else imp.const(np.array(0.5, np.float64))
    seed = imp.const(np.array(int(attrs.get("seed", 0)), np.int64))
    shape = _t(x).shape
    dims = imp.const(np.array(shape, np.int64)) if shape is not None and all(isinstance(d, int) for d in shape) \
        else imp.emit("ShapeOf", [x])  # static dims keep the mask's type static (XLA needs it)
    u = imp.emit("RandomUniform", [dims, seed], {"dtype": "f64", "generator": "mt19937"})
    keep = imp.emit("GreaterEqual", [u, r])
    scale = imp.emit("Div", [imp.const(np.array(1.0, np.float64)), imp.emit("Sub", [imp.const(np.array(1.0)), r])])
    y = imp.emit("Mul", [imp.emit("Mul", [x, _cast(imp, keep, dt)]), _cast(imp, scale, dt)])
    return [y, keep]


@converts("Resize", "Upsample")
def _resize(imp: Importer, ins: Ins, attrs: dict[str, Any]) -> list[Node | None]:
    x = _req(ins[0], "X")
    upsample = imp.node.op_type == "Upsample"
    mode = _text(attrs.get("mode", "nearest"))
    if mode not in ("nearest", "linear", "cubic"):
        raise OnnxImportError(f"Resize mode {mode!r} is not supported (nearest, linear, cubic)")
    ctm = _text(attrs.get("coordinate_transformation_mode", "half_pixel"))
    if upsample or imp.opset < 11:
        ctm = "asymmetric"
    shape = _t(x).shape
    rank = len(shape) if shape is not None else None
    axes = attrs.get("axes")
    if axes is not None:
        if rank is None:
            raise OnnxImportError("Resize with axes needs the input's rank")
        axes = [int(a) + rank if int(a) < 0 else int(a) for a in axes]
    sizes_in = None if upsample else (ins[3] if len(ins) > 3 else None)
    scales_in = ins[1] if upsample else (ins[2] if len(ins) > 2 else None)
    sv = imp.value_of(scales_in) if scales_in is not None else None
    if upsample and "scales" in attrs:  # Upsample-7: an attribute
        sv = np.asarray(attrs["scales"], np.float32)
        scales_in = imp.const(sv)
    if sv is not None and np.asarray(sv).size == 0:
        scales_in, sv = None, None  # an empty scales input stands for "not given"
    # Upsample took floor(x / scale) as the nearest index (the reference, ONNX Runtime).
    nearest = "floor" if upsample else _text(attrs.get("nearest_mode", "round_prefer_floor"))
    spec: dict[str, Any] = {"mode": mode, "coordinate_transformation_mode": ctm, "nearest_mode": nearest}
    if mode == "cubic" and "cubic_coeff_a" in attrs:
        spec["cubic_coeff_a"] = float(attrs["cubic_coeff_a"])
    if mode != "nearest":
        spec.update({k: True for k in ("exclude_outside", "antialias") if attrs.get(k, 0)})
    if ctm == "tf_crop_and_resize" and "extrapolation_value" in attrs:
        spec["extrapolation_value"] = float(attrs["extrapolation_value"])
    if ctm == "tf_crop_and_resize":
        roi = np.asarray(imp.need_value(_req(ins[1] if len(ins) > 1 else None, "roi"), "Resize's roi"), np.float64)
        spec["roi"] = _full_roi(roi.reshape(-1), axes, rank)
    static = shape is not None and all(isinstance(d, int) for d in shape)
    policy = _text(attrs.get("keep_aspect_ratio_policy", "stretch"))
    if sizes_in is not None:
        if axes is None and policy == "stretch":
            return [imp.emit("Resize", [x, _i64_vec(imp, sizes_in)], spec)]
        if not static:
            raise OnnxImportError("Resize with axes or keep_aspect_ratio_policy needs the input's static shape")
        want = [int(v) for v in np.asarray(imp.need_value(sizes_in, "Resize's sizes")).reshape(-1)]
        used = axes if axes is not None else list(range(len(shape)))  # type: ignore[arg-type]
        scales = [1.0] * len(shape)  # type: ignore[arg-type]
        sizes = list(shape)  # type: ignore[arg-type]
        for a, w in zip(used, want):
            scales[a], sizes[a] = w / shape[a], w  # type: ignore[index,operator]
        if policy != "stretch":
            if policy not in ("not_larger", "not_smaller"):
                raise OnnxImportError(f"Resize keep_aspect_ratio_policy {policy!r} is not supported")
            pick = min if policy == "not_larger" else max
            s = pick(scales[a] for a in used)
            for a in used:
                scales[a], sizes[a] = s, int(s * shape[a] + 0.5)  # type: ignore[index,operator]
            spec["scales"] = tuple(float(v) for v in scales)
        return [imp.emit("Resize", [x, imp.const(np.array(sizes, np.int64))], spec)]
    scales_node = _req(scales_in, "scales")
    if sv is None and (axes is not None or mode != "nearest" or ctm != "asymmetric"):
        sv = imp.need_value(scales_node, "Resize's scales")  # the coordinates depend on them
    if sv is None:
        dims = imp.emit("Cast", [imp.emit("ShapeOf", [x])], {"to": "f32"})
        f = imp.emit("Mul", [dims, _cast(imp, scales_node, "f32")])
        sizes_node = imp.emit("Cast", [imp.emit("Floor", [f])], {"to": "i64"})
        return [imp.emit("Resize", [x, sizes_node], spec)]
    given = [float(v) for v in np.asarray(sv, np.float64).reshape(-1)]
    if rank is None:
        raise OnnxImportError("Resize with scales needs the input's rank")
    full = [1.0] * rank
    for a, v in zip(axes if axes is not None else range(rank), given):
        full[a] = v
    spec["scales"] = tuple(full)
    if static:
        sizes_node = imp.const(np.floor(np.array(shape, np.float64) * np.array(full)).astype(np.int64))
    else:
        dims = imp.emit("Cast", [imp.emit("ShapeOf", [x])], {"to": "f64"})
        f = imp.emit("Mul", [dims, imp.const(np.array(full, np.float64))])
        sizes_node = imp.emit("Cast", [imp.emit("Floor", [f])], {"to": "i64"})
    return [imp.emit("Resize", [x, sizes_node], spec)]


def _text(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def _full_roi(roi: np.ndarray, axes: list[int] | None, rank: int | None) -> tuple[float, ...]:
    """Resize's roi (starts then ends of the given axes) for every axis."""
    if axes is None:
        return tuple(float(v) for v in roi)
    if rank is None or roi.size != 2 * len(axes):
        raise OnnxImportError(f"Resize's roi has {roi.size} entries; axes {axes} need {2 * len(axes)}")
    full = [0.0] * rank + [1.0] * rank
    for i, a in enumerate(axes):
        full[a], full[rank + a] = float(roi[i]), float(roi[len(axes) + i])
    return tuple(full)


# --- shapes --------------------------------------------------------------------------------
@converts("Reshape")
def _reshape(imp: Importer, ins: Ins, attrs: dict[str, Any]) -> list[Node | None]:
    x, s = _req(ins[0], "data"), _req(ins[1], "shape")
    sv = imp.value_of(s)
    if sv is not None and not attrs.get("allowzero", 0) and (np.asarray(sv) == 0).any():
        shape = _t(x).shape
        target = [int(v) for v in np.asarray(sv).reshape(-1)]
        if shape is not None and all(isinstance(shape[i], int) for i, v in enumerate(target) if v == 0):
            s = imp.const(np.array([shape[i] if v == 0 else v for i, v in enumerate(target)], np.int64))
        else:
            picked = imp.emit("Slice", [imp.emit("ShapeOf", [x]), imp.const(np.array([0], np.int64)),
                                        imp.const(np.array([len(target)], np.int64))])
            zero = imp.emit("Equal", [s, imp.const(np.zeros_like(sv))])
            s = imp.emit("Where", [zero, picked, s])
    elif sv is None and not attrs.get("allowzero", 0):
        s = _i64_vec(imp, s)
        n = _t(s).shape
        if n is not None and isinstance(n[0], int):  # a 0 copies the input's dim
            padded = imp.emit("Concat", [imp.emit("ShapeOf", [x]), imp.const(np.zeros(n[0], np.int64))], {"axis": 0})
            picked = imp.emit("Slice", [padded, imp.const(np.array([0], np.int64)), imp.const(np.array(n, np.int64))])
            zero = imp.emit("Equal", [s, imp.const(np.zeros(1, np.int64))])
            s = imp.emit("Where", [zero, picked, s])
    return [imp.emit("Reshape", [x, _i64_vec(imp, s)])]


@converts("Transpose")
def _transpose(imp: Importer, ins: Ins, attrs: dict[str, Any]) -> list[Node | None]:
    perm = attrs.get("perm")
    return [imp.emit("Transpose", [_req(ins[0], "data")], {"perm": tuple(perm) if perm is not None else None})]


@converts("Flatten")
def _flatten(imp: Importer, ins: Ins, attrs: dict[str, Any]) -> list[Node | None]:
    return [imp.emit("Flatten", [_req(ins[0], "input")], {"axis": int(attrs.get("axis", 1))})]


@converts("Squeeze")
def _squeeze(imp: Importer, ins: Ins, attrs: dict[str, Any]) -> list[Node | None]:
    axes = _axes(imp, ins, 1, attrs)
    return [imp.emit("Squeeze", [_req(ins[0], "data")], {"axes": tuple(axes) if axes else None})]


@converts("Unsqueeze")
def _unsqueeze(imp: Importer, ins: Ins, attrs: dict[str, Any]) -> list[Node | None]:
    axes = _axes(imp, ins, 1, attrs)
    if not axes:
        raise OnnxImportError("Unsqueeze needs axes")
    return [imp.emit("Unsqueeze", [_req(ins[0], "data")], {"axes": tuple(axes)})]


@converts("Concat")
def _concat(imp: Importer, ins: Ins, attrs: dict[str, Any]) -> list[Node | None]:
    return [imp.emit("Concat", [x for x in ins if x is not None], {"axis": int(attrs["axis"])})]


@converts("Split")
def _split(imp: Importer, ins: Ins, attrs: dict[str, Any]) -> list[Node | None]:
    x = _req(ins[0], "input")
    n = len(imp.node.output)
    sizes = ins[1] if len(ins) > 1 else None
    if sizes is not None and imp.value_of(sizes) is None:  # sizes computed at run time: one Slice each
        sizes = _i64_vec(imp, sizes)
        starts = imp.emit("CumSum", [sizes], {"axis": 0, "exclusive": True})
        ends = imp.emit("CumSum", [sizes], {"axis": 0})
        axis = imp.const(np.array([int(attrs.get("axis", 0))], np.int64))

        def part(v: Node, k: int) -> Node:
            return imp.emit("Slice", [v, imp.const(np.array([k], np.int64)), imp.const(np.array([k + 1], np.int64))])

        return [imp.emit("Slice", [x, part(starts, k), part(ends, k), axis]) for k in range(n)]
    split = _ints(imp, sizes, "split") if sizes is not None else attrs.get("split")
    a: dict[str, Any] = {"axis": int(attrs.get("axis", 0))}
    if split:
        a["split"] = tuple(int(v) for v in split)
    else:
        a["num_outputs"] = int(attrs.get("num_outputs", n))
    t = imp.emit("Split", [x], a)
    return [imp.emit("Proj", [t], {"num": i}, name=None) for i in range(n)]


@converts("Slice")
def _slice(imp: Importer, ins: Ins, attrs: dict[str, Any]) -> list[Node | None]:
    x = _req(ins[0], "data")
    if imp.opset < 10 or (len(ins) < 3 and "starts" in attrs):
        starts = imp.const(np.array(attrs["starts"], np.int64))
        ends = imp.const(np.array(attrs["ends"], np.int64))
        axes = attrs.get("axes")
        rest = [imp.const(np.array(axes, np.int64))] if axes is not None else []
        return [imp.emit("Slice", [x, starts, ends, *rest])]
    args = [x, _i64_vec(imp, _req(ins[1], "starts")), _i64_vec(imp, _req(ins[2], "ends"))]
    axes_in = ins[3] if len(ins) > 3 else None
    steps_in = ins[4] if len(ins) > 4 else None
    if steps_in is not None and axes_in is None:
        n = _t(args[1]).shape
        assert n is not None
        if not isinstance(n[0], int):
            raise OnnxImportError("Slice with steps but no axes needs a static number of starts")
        axes_in = imp.const(np.arange(n[0], dtype=np.int64))
    if axes_in is not None:
        args.append(_i64_vec(imp, axes_in))
    if steps_in is not None:
        args.append(_i64_vec(imp, steps_in))
    return [imp.emit("Slice", args)]


@converts("Gather")
def _gather(imp: Importer, ins: Ins, attrs: dict[str, Any]) -> list[Node | None]:
    return [imp.emit("Gather", [_req(ins[0], "data"), _req(ins[1], "indices")], {"axis": int(attrs.get("axis", 0))})]


@converts("GatherElements")
def _gather_el(imp: Importer, ins: Ins, attrs: dict[str, Any]) -> list[Node | None]:
    return [imp.emit("GatherElements", [_req(ins[0], "data"), _req(ins[1], "indices")],
                     {"axis": int(attrs.get("axis", 0))})]


@converts("ScatterND")
def _scatter_nd(imp: Importer, ins: Ins, attrs: dict[str, Any]) -> list[Node | None]:
    args = [_req(ins[0], "data"), _req(ins[1], "indices"), _req(ins[2], "updates")]
    return [imp.emit("ScatterND", args, {"reduction": attrs.get("reduction", "none")})]


@converts("Shape")
def _shape(imp: Importer, ins: Ins, attrs: dict[str, Any]) -> list[Node | None]:
    s = imp.emit("ShapeOf", [_req(ins[0], "data")])
    start, end = attrs.get("start", 0), attrs.get("end")
    if start == 0 and end is None:
        return [s]
    ends = imp.const(np.array([INT64_MAX if end is None else end], np.int64))
    return [imp.emit("Slice", [s, imp.const(np.array([start], np.int64)), ends])]


@converts("Size")
def _size(imp: Importer, ins: Ins, attrs: dict[str, Any]) -> list[Node | None]:
    s = imp.emit("ShapeOf", [_req(ins[0], "data")])
    return [imp.emit("ReduceProd", [s], {"axes": None, "keepdims": False})]


@converts("ConstantOfShape")
def _cos(imp: Importer, ins: Ins, attrs: dict[str, Any]) -> list[Node | None]:
    value = attrs.get("value", np.zeros(1, np.float32))
    shape = _i64_vec(imp, _req(ins[0], "input"))
    return [imp.emit("ConstantOfShape", [shape], {"value": np.asarray(value).reshape(-1)[:1]})]


@converts("Constant")
def _constant(imp: Importer, ins: Ins, attrs: dict[str, Any]) -> list[Node | None]:
    if "value" in attrs:
        return [imp.const(attrs["value"])]
    for key, dt in (("value_float", np.float32), ("value_floats", np.float32), ("value_int", np.int64),
                    ("value_ints", np.int64)):
        if key in attrs:
            return [imp.const(np.array(attrs[key], dt))]
    raise OnnxImportError("Constant needs a tensor, float(s) or int(s) value (strings and sparse are not supported)")


@converts("Range")
def _range(imp: Importer, ins: Ins, attrs: dict[str, Any]) -> list[Node | None]:
    return [imp.emit("Range", [_req(v, n) for v, n in zip(ins, ("start", "limit", "delta"))])]


@converts("Cast")
def _cast_op(imp: Importer, ins: Ins, attrs: dict[str, Any]) -> list[Node | None]:
    to = nexus_dtype(int(attrs["to"]), "Cast's 'to'")
    return [imp.emit("Cast", [_req(ins[0], "input")], {"to": to, **_cast_modes(attrs)})]


def _cast_modes(attrs: dict[str, Any]) -> dict[str, Any]:
    """Cast's float8 attributes (opset 19/23), where the model gives them."""
    out: dict[str, Any] = {}
    if "saturate" in attrs:
        out["saturate"] = bool(attrs["saturate"])
    if "round_mode" in attrs:
        mode = attrs["round_mode"]
        out["round_mode"] = mode.decode() if isinstance(mode, bytes) else str(mode)
    return out


@converts("CastLike")
def _castlike(imp: Importer, ins: Ins, attrs: dict[str, Any]) -> list[Node | None]:
    return [imp.emit("Cast", [_req(ins[0], "input")], {"to": _t(_req(ins[1], "target_type")).dtype,
                                                       **_cast_modes(attrs)})]


@converts("Pad")
def _pad(imp: Importer, ins: Ins, attrs: dict[str, Any]) -> list[Node | None]:
    x = _req(ins[0], "data")
    mode = attrs.get("mode", "constant")
    if mode not in ("constant", "reflect", "edge", "wrap"):
        raise OnnxImportError(f"Pad mode {mode!r} is not supported (constant, reflect, edge, wrap)")
    value = 0.0
    if len(ins) > 1:
        pads = _i64_vec(imp, _req(ins[1], "pads"))
        cv = ins[2] if len(ins) > 2 else None
        if cv is not None and imp.value_of(cv) is not None:
            value = float(np.asarray(imp.value_of(cv)).reshape(-1)[0])
            cv = None
        if len(ins) > 3 and ins[3] is not None:
            axes = _ints(imp, ins[3], "axes")
            assert axes is not None
            r = _rank(x)
            where = [a % r for a in axes] + [a % r + r for a in axes]
            pads = imp.emit("ScatterND", [imp.const(np.zeros(2 * r, np.int64)),
                                          imp.const(np.array(where, np.int64).reshape(-1, 1)), pads])
    else:
        cv = None
        pads = imp.const(np.array(attrs["pads"], np.int64))
        value = float(attrs.get("value", 0.0))
    y = imp.emit("Pad", [x, pads], {"mode": mode, "value": value})
    if cv is not None and mode == "constant":  # a fill computed at run time: fill where the mask is 0
        inside = imp.emit("Pad", [imp.emit("OnesLike", [x]), pads], {"mode": "constant", "value": 0.0})
        keep = imp.emit("Equal", [inside, _like(imp, 1, x)])
        y = imp.emit("Where", [keep, y, imp.emit("Reshape", [cv, imp.const(np.array([], np.int64))])])
    return [y]


@converts("Trilu")
def _trilu(imp: Importer, ins: Ins, attrs: dict[str, Any]) -> list[Node | None]:
    x = _req(ins[0], "input")
    k = _i64_scalar(imp, ins[1]) if len(ins) > 1 and ins[1] is not None else imp.const(np.array(0, np.int64))
    r = _rank(x)
    zero, one = imp.const(np.array(0, np.int64)), imp.const(np.array(1, np.int64))
    rows = imp.emit("Range", [zero, imp.emit("DimSize", [x], {"axis": r - 2}), one])
    cols = imp.emit("Range", [zero, imp.emit("DimSize", [x], {"axis": r - 1}), one])
    rows = imp.emit("Unsqueeze", [rows], {"axes": (1,)})
    diff = imp.emit("Sub", [cols, rows])  # j - i, [n, m]
    keep = imp.emit("GreaterEqual" if attrs.get("upper", 1) else "LessEqual", [diff, k])
    return [imp.emit("Where", [keep, x, _like(imp, 0, x)])]


@converts("OneHot")
def _onehot(imp: Importer, ins: Ins, attrs: dict[str, Any]) -> list[Node | None]:
    idx, depth, values = _req(ins[0], "indices"), _req(ins[1], "depth"), _req(ins[2], "values")
    if _t(idx).dtype in FLOAT_DTYPES:  # ONNX takes float indices too: their integer part
        idx = _cast(imp, idx, "i64")
    return [imp.emit("OneHot", [idx, _i64_scalar(imp, depth), values], {"axis": int(attrs.get("axis", -1))})]


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
    d = imp.emit("Mul", [_cast(imp, c, "f64"), _cast(imp, factor, "f64")])
    out = _t(y_zp).dtype if y_zp is not None else _t(a).dtype
    if y_zp is not None:
        d = imp.emit("Add", [d, _cast(imp, y_zp, "f64")])
    lo, hi = int_range(out)
    d = imp.emit("Clip", [imp.emit("Round", [d]), imp.const(np.array(lo, np.float64)),
                          imp.const(np.array(hi, np.float64))])
    return [_cast(imp, d, out)]


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


# --- data-dependent sizes ------------------------------------------------------------------
@converts("TopK")
def _topk(imp: Importer, ins: Ins, attrs: dict[str, Any]) -> list[Node | None]:
    t = imp.emit("TopK", [_req(ins[0], "X"), _i64_scalar(imp, _req(ins[1], "K"))],
                 {"axis": int(attrs.get("axis", -1)), "largest": bool(attrs.get("largest", 1)),
                  "sorted": bool(attrs.get("sorted", 1))})
    return [imp.emit("Proj", [t], {"num": 0}), imp.emit("Proj", [t], {"num": 1}, name=None)]


@converts("NonZero")
def _nonzero(imp: Importer, ins: Ins, attrs: dict[str, Any]) -> list[Node | None]:
    t = imp.emit("NonZero", [_req(ins[0], "X")])
    return [imp.emit("Proj", [t], {"num": 0})]


@converts("NonMaxSuppression")
def _nms(imp: Importer, ins: Ins, attrs: dict[str, Any]) -> list[Node | None]:
    boxes, scores = _req(ins[0], "boxes"), _req(ins[1], "scores")
    ft = numpy_dtype(_t(boxes).dtype)
    full = list(ins) + [None] * (5 - len(ins))
    mx = _i64_scalar(imp, full[2]) if full[2] is not None else imp.const(np.array(0, np.int64))
    iou = full[3] if full[3] is not None else imp.const(np.array(0, ft))
    score = full[4] if full[4] is not None else imp.const(np.array(-np.inf, ft))
    t = imp.emit("NonMaxSuppression", [boxes, scores, mx, iou, score],
                 {"center_point_box": int(attrs.get("center_point_box", 0))})
    return [imp.emit("Proj", [t], {"num": 0})]


# --- control flow ----------------------------------------------------------------------------
CONVERTERS["If"] = convert_if
CONVERTERS["Loop"] = convert_loop
CONVERTERS["Scan"] = convert_scan

# The core op set of issue 13 (what real CNN, transformer and detection models use).
CORE_OPS = frozenset("""
Conv ConvTranspose MaxPool AveragePool GlobalAveragePool BatchNormalization InstanceNormalization LayerNormalization
LRN Gemm MatMul Einsum Dropout Relu LeakyRelu PRelu Sigmoid Tanh HardSigmoid HardSwish Gelu Erf Softmax LogSoftmax
Clip Elu Add Sub Mul Div Pow Sqrt Exp Log Neg Abs Reciprocal Max Min Sum Floor Ceil Where Equal Greater Less Not
ReduceMean ReduceSum ReduceMax ReduceMin ArgMax CumSum Reshape Transpose Concat Split Slice Gather GatherElements
ScatterND Squeeze Unsqueeze Flatten Expand Tile Shape ConstantOfShape Constant Range Cast Identity Pad Resize Trilu
If Loop Scan NonMaxSuppression TopK NonZero
""".split())
assert CORE_OPS <= set(CONVERTERS), sorted(CORE_OPS - set(CONVERTERS))
