"""The ONNX import table: one small function per ONNX op type, building Nexus nodes.

``RULES.table[op_type](imp, ins, attrs)`` gets the importer (:class:`Importer`: ``emit``,
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

from nexus.frontend.importing import Registry, known_rank, tensor_type
from nexus.frontend.onnx.data import OnnxImportError, tensor_to_array
from nexus.frontend.onnx.functions import function_body
from nexus.ir.node import Node
from nexus.ir.types import NARROW_DTYPES, TensorType, numpy_dtype

if TYPE_CHECKING:
    from nexus.frontend.onnx.importer import Importer


Ins = list["Node | None"]
Converter = Callable[["Importer", Ins, dict[str, Any]], Sequence["Node | None"]]
# The core op set of issue 13 (what real CNN, transformer and detection models use).
CORE_OPS = frozenset("""
Conv ConvTranspose MaxPool AveragePool GlobalAveragePool BatchNormalization InstanceNormalization LayerNormalization
LRN Gemm MatMul Einsum Dropout Relu LeakyRelu PRelu Sigmoid Tanh HardSigmoid HardSwish Gelu Erf Softmax LogSoftmax
Clip Elu Add Sub Mul Div Pow Sqrt Exp Log Neg Abs Reciprocal Max Min Sum Floor Ceil Where Equal Greater Less Not
ReduceMean ReduceSum ReduceMax ReduceMin ArgMax CumSum Reshape Transpose Concat Split Slice Gather GatherElements
ScatterND Squeeze Unsqueeze Flatten Expand Tile Shape ConstantOfShape Constant Range Cast Identity Pad Resize Trilu
If Loop Scan NonMaxSuppression TopK NonZero
""".split())
_SECTIONS = ("elementwise", "nn", "shapes", "quantized", "dynamic", "rnn", "sequence")
RULES: Registry[Converter] = Registry(*(f"nexus.frontend.onnx.ops.{m}" for m in _SECTIONS), required=CORE_OPS)
converts = RULES.converts
INT64_MAX = np.iinfo(np.int64).max


# Attributes whose value is a subgraph are imported by the control-flow converters.
_GRAPH_ATTRS = 5  # AttributeProto.GRAPH


def convert_node(imp: Importer, nd: Any) -> None:
    """Import ONNX node ``nd`` at the importer's current block."""
    fn = RULES.table.get(nd.op_type) if nd.domain in ("", "ai.onnx") else None
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
    narrow = {v.type.dtype for v in ins if v is not None and isinstance(v.type, TensorType)
              and v.type.dtype in NARROW_DTYPES}
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
_t = tensor_type


def _rank(v: Node) -> int:
    return known_rank(v, OnnxImportError)


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


