"""The TensorFlow import table: one small function per TF op type, building Nexus nodes.

``CONVERTERS[op](imp, node)`` gets the importer (``arg``/``args`` read inputs, ``emit``,
``const``) and the :class:`TfNode`, and returns the node's outputs (None for one it does
not produce).  Inputs that Nexus takes as attributes (reduction axes, say) must be known
when the graph is imported.  Control flow (``If``, ``While``) is in
:mod:`nexus.frontend.tf_control`, lists and stacks in :mod:`nexus.frontend.tf_lists`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from nexus.frontend.importing import Registry
from nexus.frontend.tf_proto import TfImportError, TfNode, nexus_dtype, tensor_to_array
from nexus.ir.graph import known_value
from nexus.ir.node import Node
from nexus.ir.types import TensorType, numpy_dtype

if TYPE_CHECKING:
    from nexus.frontend.tf_import import Importer

Outs = Sequence["Node | None"]
Converter = Callable[["Importer", TfNode], Outs]
_REGISTRY: Registry[Converter] = Registry()
CONVERTERS = _REGISTRY.table
converts = _REGISTRY.converts
INT64_MAX, INT64_MIN = np.iinfo(np.int64).max, np.iinfo(np.int64).min


# --- helpers -----------------------------------------------------------------------------------
def _t(v: Node) -> TensorType:
    t = v.type
    assert isinstance(t, TensorType), f"expected a tensor, got {t}"
    return t


def attr_i(n: TfNode, key: str, default: int = 0) -> int:
    a = n.attr.get(key)
    return int(a.i) if a is not None else default


def attr_b(n: TfNode, key: str, default: bool = False) -> bool:
    a = n.attr.get(key)
    return bool(a.b) if a is not None else default


def attr_type(n: TfNode, key: str) -> str:
    a = n.attr.get(key)
    if a is None:
        raise TfImportError(f"needs the type attribute {key!r}")
    return nexus_dtype(a.type, f"attribute {key!r}")


def known(imp: Importer, n: TfNode, i: int, what: str) -> np.ndarray:
    """The import-time value of input ``i``, which Nexus takes as an attribute."""
    v = known_value(imp.arg(n, i))
    if v is None:
        raise TfImportError(f"{what} (input {i}, {n.inputs[i][0]!r}) must be known when the graph is imported "
                            f"(a constant); it is computed at run time")
    return np.asarray(v)


def ints(imp: Importer, n: TfNode, i: int, what: str) -> list[int]:
    return [int(x) for x in known(imp, n, i, what).reshape(-1)]


def cast(imp: Importer, v: Node, dtype: str) -> Node:
    if _t(v).dtype == dtype:
        return v
    if v.op.name == "Constant":  # a shape or an index given as a constant: keep it one
        return imp.const(np.asarray(v.attrs["value"]).astype(numpy_dtype(dtype)))
    return imp.emit("Cast", [v], {"to": dtype}, name="")


def i64(imp: Importer, v: Node) -> Node:
    return cast(imp, v, "i64")


def scalar(imp: Importer, v: Node) -> Node:
    if _t(v).shape != ():
        v = imp.emit("Reshape", [v, imp.const(np.array([], np.int64))], name="")
    return v


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
    CONVERTERS[_tf] = _same(_nx, _k)


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


# --- shapes ------------------------------------------------------------------------------------
@converts("Shape")
def _shape(imp: Importer, n: TfNode) -> Outs:
    out = attr_type(n, "out_type") if "out_type" in n.attr else "i32"
    return [cast(imp, imp.emit("ShapeOf", [imp.arg(n, 0)], name=""), out)]


@converts("Reshape")
def _reshape(imp: Importer, n: TfNode) -> Outs:
    return [imp.emit("Reshape", [imp.arg(n, 0), i64(imp, imp.arg(n, 1))])]


@converts("Fill")
def _fill(imp: Importer, n: TfNode) -> Outs:
    dims, value = imp.args(n)
    return [imp.emit("Expand", [scalar(imp, value), i64(imp, dims)])]


@converts("Tile")
def _tile(imp: Importer, n: TfNode) -> Outs:
    return [imp.emit("Tile", [imp.arg(n, 0), i64(imp, imp.arg(n, 1))])]


@converts("Range")
def _range(imp: Importer, n: TfNode) -> Outs:
    start, limit, delta = (scalar(imp, v) for v in imp.args(n))
    out = attr_type(n, "Tidx") if "Tidx" in n.attr else _t(start).dtype
    return [imp.emit("Range", [cast(imp, start, out), cast(imp, limit, out), cast(imp, delta, out)])]


@converts("Pack")
def _pack(imp: Importer, n: TfNode) -> Outs:
    vals = imp.args(n)
    axis = attr_i(n, "axis")
    rank = len(_t(vals[0]).shape or ())
    axis = axis + rank + 1 if axis < 0 else axis
    rows = [imp.emit("Unsqueeze", [v], {"axes": (axis,)}, name="") for v in vals]
    return [imp.emit("Concat", rows, {"axis": axis})]


@converts("ConcatV2")
def _concat(imp: Importer, n: TfNode) -> Outs:
    axis = ints(imp, n, len(n.inputs) - 1, "the axis")[0]
    return [imp.emit("Concat", [imp.arg(n, i) for i in range(len(n.inputs) - 1)], {"axis": axis})]


@converts("ExpandDims")
def _expand_dims(imp: Importer, n: TfNode) -> Outs:
    x = imp.arg(n, 0)
    axis = ints(imp, n, 1, "the axis")[0]
    rank = len(_t(x).shape or ())
    return [imp.emit("Unsqueeze", [x], {"axes": (axis + rank + 1 if axis < 0 else axis,)})]


@converts("Squeeze")
def _squeeze(imp: Importer, n: TfNode) -> Outs:
    a = n.attr.get("squeeze_dims")
    axes = tuple(int(x) for x in a.list.i) if a is not None and len(a.list.i) else None
    return [imp.emit("Squeeze", [imp.arg(n, 0)], {"axes": axes} if axes else None)]


@converts("Transpose")
def _transpose(imp: Importer, n: TfNode) -> Outs:
    return [imp.emit("Transpose", [imp.arg(n, 0)], {"perm": tuple(ints(imp, n, 1, "the permutation"))})]


@converts("Roll")
def _roll(imp: Importer, n: TfNode) -> Outs:
    axes = tuple(ints(imp, n, 2, "the axes"))
    shift = imp.arg(n, 1)
    return [imp.emit("Roll", [imp.arg(n, 0), i64(imp, shift)], {"axes": axes})]


@converts("GatherV2")
def _gather(imp: Importer, n: TfNode) -> Outs:
    if attr_i(n, "batch_dims"):
        raise TfImportError("batch_dims is not supported")
    axis = ints(imp, n, 2, "the axis")[0]
    return [imp.emit("Gather", [imp.arg(n, 0), imp.arg(n, 1)], {"axis": axis})]


_REDUCE = {"Sum": "ReduceSum", "Mean": "ReduceMean", "Max": "ReduceMax", "Min": "ReduceMin", "Prod": "ReduceProd"}


@converts(*_REDUCE)
def _reduce(imp: Importer, n: TfNode) -> Outs:
    axes = tuple(ints(imp, n, 1, "the reduction axes"))
    x = imp.arg(n, 0)
    if not axes:  # TF reduces over no axis: the input itself
        return [imp.emit("Identity", [x])]
    return [imp.emit(_REDUCE[n.op], [x], {"axes": axes, "keepdims": attr_b(n, "keep_dims")})]


@converts("ArgMax", "ArgMin")
def _argmax(imp: Importer, n: TfNode) -> Outs:
    axis = ints(imp, n, 1, "the axis")[0]
    out = attr_type(n, "output_type") if "output_type" in n.attr else "i64"
    return [cast(imp, imp.emit(n.op, [imp.arg(n, 0)], {"axis": axis, "keepdims": False}, name=""), out)]


@converts("StridedSlice")
def _strided_slice(imp: Importer, n: TfNode) -> Outs:
    x = imp.arg(n, 0)
    shape = _t(x).shape
    if shape is None:
        raise TfImportError("the input's rank must be known")
    strides = ints(imp, n, 3, "the strides")
    begin, end = _entries(imp, n, 1, len(strides)), _entries(imp, n, 2, len(strides))
    bm, em, ell, new, shrink = (attr_i(n, k) for k in ("begin_mask", "end_mask", "ellipsis_mask", "new_axis_mask",
                                                        "shrink_axis_mask"))
    rank, axis, pos = len(shape), 0, 0
    sl_axes: list[int] = []
    starts: list[Any] = []
    ends: list[Any] = []
    steps: list[int] = []
    shrunk: list[tuple[int, Any]] = []
    new_axes: list[int] = []
    for i, s in enumerate(strides):
        bit = 1 << i
        if ell & bit:
            rest = sum(1 for j in range(i + 1, len(strides)) if not new & (1 << j))
            cover = rank - axis - rest
            axis, pos = axis + cover, pos + cover
        elif new & bit:
            new_axes.append(pos)
            pos += 1
        elif shrink & bit:
            shrunk.append((axis, begin[i]))
            axis += 1
        else:
            if s == 0:
                raise TfImportError("a stride is 0")
            sl_axes.append(axis)
            starts.append((0 if s > 0 else INT64_MAX) if bm & bit else begin[i])
            ends.append((INT64_MAX if s > 0 else INT64_MIN) if em & bit else end[i])
            steps.append(s)
            axis, pos = axis + 1, pos + 1
    if axis > rank:
        raise TfImportError(f"slices {axis} axes of a tensor of rank {rank}")
    if sl_axes:
        x = imp.emit("Slice", [x, _vector(imp, starts), _vector(imp, ends), imp.const(np.array(sl_axes, np.int64)),
                               imp.const(np.array(steps, np.int64))], name="")
    for ax, b in reversed(shrunk):
        x = imp.emit("Gather", [x, b if isinstance(b, Node) else imp.const(np.array(b, np.int64))], {"axis": ax},
                     name="")
    if new_axes:
        x = imp.emit("Unsqueeze", [x], {"axes": tuple(new_axes)}, name="")
    return [imp.emit("Identity", [x])]


def _entries(imp: Importer, n: TfNode, i: int, count: int) -> list[Any]:
    """The entries of a begin/end vector: ints where known, else scalar i64 nodes."""
    v = known_value(imp.arg(n, i))
    if v is not None:
        return [int(x) for x in np.asarray(v).reshape(-1)]
    vec = i64(imp, imp.arg(n, i))
    return [imp.emit("Gather", [vec, imp.const(np.array(k, np.int64))], {"axis": 0}, name="") for k in range(count)]


def _vector(imp: Importer, vals: list[Any]) -> Node:
    if all(not isinstance(v, Node) for v in vals):
        return imp.const(np.array(vals, np.int64))
    parts = [imp.emit("Unsqueeze", [v], {"axes": (0,)}, name="") if isinstance(v, Node)
             else imp.const(np.array([v], np.int64)) for v in vals]
    return imp.emit("Concat", parts, {"axis": 0}, name="")
