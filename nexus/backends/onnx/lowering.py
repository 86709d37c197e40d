"""The ``onnx`` lowering table: one rule per Nexus op, emitting ONNX nodes (opset 18).

``rule(ex, node, *inputs)`` gets the :class:`~nexus.backends.onnx.export.Exporter`, the
Nexus node and the ONNX names of its inputs, and returns the ONNX name of its result (a
list of names for a tuple-valued op, read by ``Proj``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from nexus.backends.base import MissingLoweringError, register_lowering
from nexus.frontend.onnx.data import NEXUS_TO_ONNX, ONE_TO_ONE
from nexus.ir.node import Node
from nexus.ir.types import FLOAT_DTYPES, TensorType

if TYPE_CHECKING:
    from nexus.backends.onnx.export import Exporter

# What the exporter writes one to one: the importer's pairs inverted, and the ops the
# importer converts with more care (Div and Pow on integers, Max and Min with any number
# of inputs, Shape with start and end, the optional ops on plain values).
_SAME = {**{nx: ox for ox, nx in ONE_TO_ONE.items()},
         "Div": "Div", "Pow": "Pow", "Maximum": "Max", "Minimum": "Min", "ShapeOf": "Shape",
         "Optional": "Optional", "OptionalHasElement": "OptionalHasElement", "OptionalGetElement": "OptionalGetElement"}


def _same(onnx_op: str) -> Any:
    def rule(ex: Exporter, n: Node, *ins: str) -> str:
        return ex.add(onnx_op, ins)[0]

    return rule


for _nx, _ox in _SAME.items():
    register_lowering("onnx", _nx)(_same(_ox))


def _attrs(n: Node, *names: str, ints: tuple[str, ...] = ()) -> dict[str, Any]:
    out = {}
    for k in names:
        v = n.attrs.get(k)
        if v is None:
            continue
        out[k] = int(v) if k in ints or isinstance(v, bool) else (list(v) if isinstance(v, tuple) else v)
    return out


def _dtype(n: Node) -> str:
    t = n.type
    assert isinstance(t, TensorType)
    return t.dtype


@register_lowering("onnx", "Constant")
def _constant(ex: Exporter, n: Node) -> str:
    return ex.const(n.attrs["value"])


@register_lowering("onnx", "Proj")
def _proj(ex: Exporter, n: Node, t: str) -> str:
    return ex.proj(n)


@register_lowering("onnx", "Cast")
def _cast(ex: Exporter, n: Node, x: str) -> str:
    modes = {k: (int(v) if isinstance(v, bool) else v) for k in ("saturate", "round_mode")
             if (v := n.attrs.get(k)) is not None}  # set only by models that use them (opset 19+)
    return ex.add("Cast", [x], to=NEXUS_TO_ONNX[n.attrs["to"]], **modes)[0]


@register_lowering("onnx", "BitCast")
def _bitcast(ex: Exporter, n: Node, x: str) -> str:
    return ex.add("BitCast", [x], to=NEXUS_TO_ONNX[n.attrs["to"]])[0]


@register_lowering("onnx", "Det")
def _det(ex: Exporter, n: Node, x: str) -> str:
    return ex.add("Det", [x])[0]


@register_lowering("onnx", "Rsqrt")
def _rsqrt(ex: Exporter, n: Node, x: str) -> str:
    return ex.add("Reciprocal", ex.add("Sqrt", [x]))[0]


@register_lowering("onnx", "Mod")
def _mod(ex: Exporter, n: Node, a: str, b: str) -> str:
    if _dtype(n) in ("f16", "f32", "f64"):  # Python's %: a - floor(a / b) * b
        q = ex.add("Floor", ex.add("Div", [a, b]))[0]
        return ex.add("Sub", [a, ex.add("Mul", [q, b])[0]])[0]
    return ex.add("Mod", [a, b], fmod=0)[0]


@register_lowering("onnx", "FloorDiv")
def _floordiv(ex: Exporter, n: Node, a: str, b: str) -> str:
    if _dtype(n) in ("f16", "f32", "f64"):
        return ex.add("Floor", ex.add("Div", [a, b]))[0]
    # ints: (a - a mod b) / b is exact, with the mod's sign of b
    m = ex.add("Mod", [a, b], fmod=0)[0]
    return ex.add("Div", [ex.add("Sub", [a, m])[0], b])[0]


@register_lowering("onnx", "NotEqual")
def _ne(ex: Exporter, n: Node, a: str, b: str) -> str:
    return ex.add("Not", ex.add("Equal", [a, b]))[0]


@register_lowering("onnx", "LeftShift", "RightShift")
def _shift(ex: Exporter, n: Node, a: str, b: str) -> str:
    return ex.add("BitShift", [a, b], direction="LEFT" if n.op.name == "LeftShift" else "RIGHT")[0]


@register_lowering("onnx", "Clip")
def _clip(ex: Exporter, n: Node, x: str, lo: str, hi: str) -> str:
    return ex.add("Min", [ex.add("Max", [x, lo])[0], hi])[0]  # Clip wants scalar bounds; these broadcast


@register_lowering("onnx", "LeakyRelu")
def _leaky(ex: Exporter, n: Node, x: str) -> str:
    return ex.add("LeakyRelu", [x], alpha=n.attrs["alpha"])[0]


@register_lowering("onnx", "HardSigmoid")
def _hard_sigmoid(ex: Exporter, n: Node, x: str) -> str:
    return ex.add("HardSigmoid", [x], alpha=n.attrs["alpha"], beta=n.attrs["beta"])[0]


@register_lowering("onnx", "HardSwish")
def _hard_swish(ex: Exporter, n: Node, x: str) -> str:
    return ex.add("HardSwish", [x])[0]


@register_lowering("onnx", "Gelu")
def _gelu(ex: Exporter, n: Node, x: str) -> str:
    dt = n.type.dtype  # type: ignore[attr-defined]

    def c(v: float) -> str:
        return ex.const(np.array(v, _np(dt)))

    if n.attrs["approximate"] == "tanh":
        x3 = ex.add("Mul", [ex.add("Mul", [x, x])[0], x])[0]
        inner = ex.add("Mul", [ex.add("Add", [x, ex.add("Mul", [x3, c(0.044715)])[0]])[0], c(np.sqrt(2 / np.pi))])[0]
        t = ex.add("Add", [ex.add("Tanh", [inner])[0], c(1.0)])[0]
    else:
        t = ex.add("Add", [ex.add("Erf", [ex.add("Div", [x, c(np.sqrt(2.0))])[0]])[0], c(1.0)])[0]
    return ex.add("Mul", [ex.add("Mul", [x, t])[0], c(0.5)])[0]


def _np(dt: str) -> Any:
    from nexus.ir.types import numpy_dtype

    return numpy_dtype(dt)


@register_lowering("onnx", "Softmax", "LogSoftmax")
def _softmax(ex: Exporter, n: Node, x: str) -> str:
    return ex.add(n.op.name, [x], axis=n.attrs["axis"])[0]


def _axes(ex: Exporter, n: Node) -> list[str]:
    axes = n.attrs.get("axes")
    return [] if axes is None else [ex.const(np.array(axes, np.int64))]


@register_lowering("onnx", "ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd")
def _reduce(ex: Exporter, n: Node, x: str) -> str:
    return ex.add(n.op.name, [x, *_axes(ex, n)], keepdims=int(n.attrs["keepdims"]))[0]


@register_lowering("onnx", "ArgMax", "ArgMin")
def _arg(ex: Exporter, n: Node, x: str) -> str:
    return ex.add(n.op.name, [x], **_attrs(n, "axis", "keepdims", "select_last_index"))[0]


@register_lowering("onnx", "CumSum")
def _cumsum(ex: Exporter, n: Node, x: str) -> str:
    axis = ex.const(np.array(n.attrs["axis"], np.int64))
    return ex.add("CumSum", [x, axis], exclusive=int(n.attrs["exclusive"]), reverse=int(n.attrs["reverse"]))[0]


@register_lowering("onnx", "CumProd")
def _cumprod(ex: Exporter, n: Node, x: str) -> str:
    return ex.add("CumProd", [x, ex.const(np.array(n.attrs["axis"], np.int64))])[0]


@register_lowering("onnx", "Gemm")
def _gemm(ex: Exporter, n: Node, *ins: str) -> str:
    attrs = _attrs(n, "alpha", "beta", "transA", "transB")
    operands = list(ins)
    for k, flag in ((0, "transA"), (1, "transB")):
        # A transposed matrix operand is Gemm's own flag, as torch.onnx writes it: no
        # Transpose to run, and none for ONNX Runtime to fuse in a Loop body, where its
        # fusion of a Transpose of an outer-scope constant loses an input (ORT 1.32).
        t = n.input(k)
        if t.op.name == "Transpose" and tuple(t.attrs.get("perm") or (1, 0)) == (1, 0):
            operands[k] = ex.value(t.input(0))
            attrs[flag] = 1 - int(attrs.get(flag, 0))
    return ex.add("Gemm", operands, **attrs)[0]


@register_lowering("onnx", "Einsum")
def _einsum(ex: Exporter, n: Node, *ins: str) -> str:
    return ex.add("Einsum", ins, equation=n.attrs["equation"])[0]


@register_lowering("onnx", "Conv")
def _conv(ex: Exporter, n: Node, *ins: str) -> str:
    return ex.add("Conv", ins, **_attrs(n, "strides", "pads", "dilations", "group"))[0]


@register_lowering("onnx", "ConvTranspose")
def _conv_t(ex: Exporter, n: Node, *ins: str) -> str:
    return ex.add("ConvTranspose", ins, **_attrs(n, "strides", "pads", "dilations", "group", "output_padding"))[0]


@register_lowering("onnx", "MaxPool")
def _maxpool(ex: Exporter, n: Node, x: str) -> str:
    return ex.add("MaxPool", [x], **_attrs(n, "kernel_shape", "strides", "pads", "ceil_mode", "dilations"))[0]


@register_lowering("onnx", "MaxPoolIndices")
def _maxpool_indices(ex: Exporter, n: Node, x: str) -> str:
    return ex.add("MaxPool", [x], 2, **_attrs(n, "kernel_shape", "strides", "pads", "ceil_mode", "dilations",
                                              "storage_order"))[1]


@register_lowering("onnx", "AveragePool")
def _avgpool(ex: Exporter, n: Node, x: str) -> str:
    return ex.add("AveragePool", [x], **_attrs(n, "kernel_shape", "strides", "pads", "ceil_mode",
                                                 "count_include_pad", "dilations"))[0]


@register_lowering("onnx", "GridSample")
def _grid_sample(ex: Exporter, n: Node, x: str, grid: str) -> str:
    return ex.add("GridSample", [x, grid], mode=n.attrs["mode"], padding_mode=n.attrs["padding_mode"],
                  align_corners=int(n.attrs["align_corners"]))[0]


@register_lowering("onnx", "DeformConv")
def _deform_conv(ex: Exporter, n: Node, *ins: str) -> str:
    return ex.add("DeformConv", ins, **_attrs(n, "strides", "pads", "dilations", "group", "offset_group"))[0]


@register_lowering("onnx", "Col2Im")
def _col2im(ex: Exporter, n: Node, x: str) -> str:
    image, block = (ex.const(np.array(n.attrs[k], np.int64)) for k in ("image_shape", "block_shape"))
    return ex.add("Col2Im", [x, image, block], **_attrs(n, "strides", "pads", "dilations"))[0]


@register_lowering("onnx", "RoiAlign")
def _roi_align(ex: Exporter, n: Node, *ins: str) -> str:
    return ex.add("RoiAlign", ins, **_attrs(n, "mode", "output_height", "output_width", "sampling_ratio",
                                            "spatial_scale", "coordinate_transformation_mode"))[0]


@register_lowering("onnx", "BatchNormalization")
def _bn(ex: Exporter, n: Node, *ins: str) -> str:
    return ex.add("BatchNormalization", ins, epsilon=n.attrs["epsilon"])[0]


@register_lowering("onnx", "LayerNormalization")
def _ln(ex: Exporter, n: Node, *ins: str) -> str:
    channels = _instance_channels(n)
    if channels is None:
        return ex.add("LayerNormalization", ins, axis=n.attrs["axis"], epsilon=n.attrs["epsilon"])[0]
    # over the axes from 2 on, with one scale (and bias) for all: an InstanceNormalization
    # (the torch importer's group norm), which ONNX Runtime runs 3-4x faster than its
    # LayerNormalization with a broadcast scale
    dt = _np(_dtype(n))
    size, one = ex.const(np.array([channels], np.int64)), ex.const(np.array([1], np.int64))

    def per_channel(v: str) -> str:
        return ex.add("Expand", [ex.add("Reshape", [v, one])[0], size])[0]

    bias = per_channel(ins[2]) if len(ins) > 2 else ex.const(np.zeros(channels, dt))
    return ex.add("InstanceNormalization", [ins[0], per_channel(ins[1]), bias], epsilon=n.attrs["epsilon"])[0]


def _instance_channels(n: Node) -> int | None:
    """The static channel count of a LayerNormalization that is an InstanceNormalization:
    normalised over axes 2 on of a float input of rank 3 or more, with a single-element
    scale and bias; else None."""
    t = n.input(0).type
    if not isinstance(t, TensorType) or t.shape is None or len(t.shape) < 3 or t.dtype not in FLOAT_DTYPES:
        return None
    if int(n.attrs["axis"]) % len(t.shape) != 2 or not isinstance(t.shape[1], int) or t.shape[1] < 1:
        return None
    for v in n.inputs[1:]:
        s = v.type
        if not isinstance(s, TensorType) or s.shape is None or any(d != 1 for d in s.shape):
            return None
    return t.shape[1]


@register_lowering("onnx", "Dropout")
def _dropout(ex: Exporter, n: Node, x: str) -> str:
    return ex.add("Identity", [x])[0]


@register_lowering("onnx", "Resize")
def _resize(ex: Exporter, n: Node, x: str, sizes: str) -> str:
    attrs = _attrs(n, "mode", "coordinate_transformation_mode", "nearest_mode", "cubic_coeff_a", "exclude_outside",
                   "extrapolation_value", "antialias")
    roi = ex.const(np.array(n.attrs["roi"], np.float32)) if n.attrs.get("roi") is not None else ""
    scales = n.attrs.get("scales")
    if scales is not None:  # the coordinates depend on the scales: ONNX then derives the sizes (floor)
        return ex.add("Resize", [x, roi, ex.const(np.array(scales, np.float32)), ""], **attrs)[0]
    return ex.add("Resize", [x, roi, "", sizes], **attrs)[0]


@register_lowering("onnx", "Reshape")
def _reshape(ex: Exporter, n: Node, x: str, s: str) -> str:
    spec = _static_reshape(n)
    if spec is not None:  # a constant shape: no shape arithmetic at run time, and ORT can fuse around it
        return ex.add("Reshape", [x, ex.const(np.array(spec, np.int64))])[0]
    target = _zeros_copied(n)
    if target is not None:  # ONNX's own Reshape, as imported: its 0s copy the input's dims
        return ex.add("Reshape", [x, ex.value(target)])[0]
    return ex.add("Reshape", [x, s], allowzero=1)[0]  # Nexus: a 0 is a 0


def _zeros_copied(n: Node) -> Node | None:
    """``t`` where Reshape ``n``'s shape is ``Where(Equal(t, 0), Slice(Concat(ShapeOf(x),
    zeros), 0, k), t)`` of its own input ``x``: how the ONNX importer spells a Reshape whose
    run-time shape ``t`` copies dims with 0s (``allowzero=0``).  Exported as that Reshape,
    without the five ops a call would run (the dead ones go, see export._live)."""
    where = n.input(1)
    if where.op.name != "Where":
        return None
    test, picked, t = where.inputs
    if test.op.name != "Equal" or test.input(0) is not t or picked.op.name != "Slice":
        return None
    zeros = test.input(1)
    if zeros.op.name != "Constant" or np.any(np.asarray(zeros.attrs["value"]) != 0):
        return None
    padded = picked.input(0)
    shape = padded.input(0) if padded.op.name == "Concat" and padded.inputs else None
    if shape is None or shape.op.name != "ShapeOf" or shape.input(0) is not n.input(0) or shape.attrs.get("start"):
        return None
    starts = picked.input(1)
    if starts.op.name != "Constant" or np.any(np.asarray(starts.attrs["value"]) != 0):
        return None
    return t


def _static_reshape(n: Node) -> list[int] | None:
    """``n``'s target shape as ONNX's Reshape spells it without run-time values, or None: each
    symbolic dim is 0 (copy the input's dim) where the input, of the same rank, has that dim at the same place,
    else -1 (inferred), which one dim at most may be; a literal 0 would need ``allowzero``."""
    src, out = n.inputs[0].type, n.type
    if not (isinstance(src, TensorType) and isinstance(out, TensorType)) or src.shape is None or out.shape is None:
        return None
    spec: list[int] = []
    for i, d in enumerate(out.shape):
        if isinstance(d, int):
            spec.append(d)
        elif len(src.shape) == len(out.shape) and src.shape[i] == d:
            spec.append(0)
        else:
            spec.append(-1)
    if 0 in [d for d in out.shape if isinstance(d, int)] or spec.count(-1) > 1:
        return None
    return spec


@register_lowering("onnx", "Transpose")
def _transpose(ex: Exporter, n: Node, x: str) -> str:
    return ex.add("Transpose", [x], **_attrs(n, "perm"))[0]


@register_lowering("onnx", "Gather", "GatherElements")
def _gather(ex: Exporter, n: Node, x: str, i: str) -> str:
    return ex.add(n.op.name, [x, i], axis=n.attrs["axis"])[0]


@register_lowering("onnx", "Flatten")
def _flatten(ex: Exporter, n: Node, x: str) -> str:
    return ex.add("Flatten", [x], axis=n.attrs["axis"])[0]


@register_lowering("onnx", "Squeeze", "Unsqueeze")
def _squeeze(ex: Exporter, n: Node, x: str) -> str:
    return ex.add(n.op.name, [x, *_axes(ex, n)])[0]


@register_lowering("onnx", "Concat")
def _concat(ex: Exporter, n: Node, *ins: str) -> str:
    return ex.add("Concat", ins, axis=n.attrs["axis"])[0]


@register_lowering("onnx", "Split")
def _split(ex: Exporter, n: Node, x: str) -> list[str]:
    k = len(n.type.elems)  # type: ignore[attr-defined]
    split = n.attrs.get("split")
    extra = [ex.const(np.array(split, np.int64))] if split is not None else []
    kw = {} if split is not None else {"num_outputs": k}
    return ex.add("Split", [x, *extra], k, axis=n.attrs["axis"], **kw)


@register_lowering("onnx", "Slice")
def _slice(ex: Exporter, n: Node, *ins: str) -> str:
    return ex.add("Slice", ins)[0]


@register_lowering("onnx", "PRelu")
def _prelu(ex: Exporter, n: Node, x: str, slope: str) -> str:
    return ex.add("PRelu", [x, slope])[0]


@register_lowering("onnx", "GatherND")
def _gather_nd(ex: Exporter, n: Node, x: str, i: str) -> str:
    return ex.add("GatherND", [x, i], **_attrs(n, "batch_dims", ints=("batch_dims",)))[0]


@register_lowering("onnx", "ScatterND")
def _scatter_nd(ex: Exporter, n: Node, *ins: str) -> str:
    red = n.attrs["reduction"]
    return ex.add("ScatterND", ins, **({} if red == "none" else {"reduction": red}))[0]


@register_lowering("onnx", "Pad")
def _pad(ex: Exporter, n: Node, x: str, pads: str) -> str:
    value = ex.const(np.array(n.attrs["value"], _np(_dtype(n))))
    return ex.add("Pad", [x, pads, value], mode=n.attrs["mode"])[0]


@register_lowering("onnx", "DimSize")
def _dimsize(ex: Exporter, n: Node, x: str) -> str:
    a = n.attrs["axis"]
    s = ex.add("Shape", [x], start=a, end=a + 1 if a != -1 else 2**62)[0]
    return ex.add("Squeeze", [s, ex.const(np.array([0], np.int64))])[0]


@register_lowering("onnx", "ConstantOfShape")
def _cos(ex: Exporter, n: Node, s: str) -> str:
    import onnx

    value = np.asarray(n.attrs["value"]).reshape(1)
    return ex.add("ConstantOfShape", [s], value=onnx.numpy_helper.from_array(value))[0]


@register_lowering("onnx", "Range")
def _range(ex: Exporter, n: Node, *ins: str) -> str:
    return ex.add("Range", ins)[0]


@register_lowering("onnx", "OneHot")
def _onehot(ex: Exporter, n: Node, i: str, depth: str, values: str) -> str:
    return ex.add("OneHot", [i, depth, values], axis=n.attrs["axis"])[0]


@register_lowering("onnx", "TopK")
def _topk(ex: Exporter, n: Node, x: str, k: str) -> list[str]:
    kk = ex.add("Reshape", [k, ex.const(np.array([1], np.int64))])[0]
    vals, idx = ex.add("TopK", [x, kk], 2, axis=n.attrs["axis"], largest=int(n.attrs["largest"]),
                       sorted=int(n.attrs["sorted"]))
    return [vals, idx, k]


def _size_of(ex: Exporter, x: str, axis: int) -> str:
    s = ex.add("Shape", [x], start=axis, end=axis + 1)[0]
    return ex.add("Squeeze", [s, ex.const(np.array([0], np.int64))])[0]


@register_lowering("onnx", "NonZero")
def _nonzero(ex: Exporter, n: Node, x: str) -> list[str]:
    idx = ex.add("NonZero", [x])[0]
    return [idx, _size_of(ex, idx, 1)]


@register_lowering("onnx", "Unique", "UniqueSlices")
def _unique(ex: Exporter, n: Node, x: str) -> list[str]:
    axis = {"axis": int(n.attrs["axis"])} if n.op.name == "UniqueSlices" else {}
    outs = ex.add("Unique", [x], 4, sorted=int(n.attrs["sorted"]), **axis)
    return outs + [_size_of(ex, outs[1], 0)]


@register_lowering("onnx", "ScatterElements")
def _scatter_elements(ex: Exporter, n: Node, *ins: str) -> str:
    return ex.add("ScatterElements", ins, **_attrs(n, "axis", "reduction", ints=("axis",)))[0]


@register_lowering("onnx", "NonMaxSuppression")
def _nms(ex: Exporter, n: Node, boxes: str, scores: str, mx: str, iou: str, score: str) -> list[str]:
    if n.attrs.get("select_boxes"):
        from nexus.backends.base import MissingLoweringError

        raise MissingLoweringError("onnx", n)
    sel = ex.add("NonMaxSuppression", [boxes, scores, mx, iou, score],
                 center_point_box=n.attrs["center_point_box"])[0]
    return [sel, _size_of(ex, sel, 0)]


@register_lowering("onnx", "OnesLike", "ZerosLike")
def _like(ex: Exporter, n: Node, x: str) -> str:
    value = np.array([1 if n.op.name == "OnesLike" else 0], _np(_dtype(n)))
    import onnx

    return ex.add("ConstantOfShape", [ex.add("Shape", [x])[0]], value=onnx.numpy_helper.from_array(value))[0]


@register_lowering("onnx", "BroadcastLike")
def _broadcast_like(ex: Exporter, n: Node, x: str, like: str) -> str:
    return ex.add("Expand", [x, ex.add("Shape", [like])[0]])[0]


@register_lowering("onnx", "ReshapeLike")
def _reshape_like(ex: Exporter, n: Node, x: str, like: str) -> str:
    return ex.add("Reshape", [x, ex.add("Shape", [like])[0]], allowzero=1)[0]


@register_lowering("onnx", "SumToLike")
def _sum_to_like(ex: Exporter, n: Node, x: str, like: str) -> str:
    """Sum x down to like's shape: over the leading extra axes and the axes where like is 1
    (static shapes; the autodiff op of broadcasting)."""
    xt, lt = n.inputs[0].type, n.inputs[1].type
    assert isinstance(xt, TensorType) and isinstance(lt, TensorType)
    if xt.shape is None or lt.shape is None:
        from nexus.backends.base import MissingLoweringError

        raise MissingLoweringError("onnx", n)
    lead = len(xt.shape) - len(lt.shape)
    axes = list(range(lead)) + [lead + i for i, d in enumerate(lt.shape) if d == 1 and xt.shape[lead + i] != 1]
    y = x
    if axes:
        y = ex.add("ReduceSum", [x, ex.const(np.array(axes, np.int64))], keepdims=1)[0]
    return ex.add("Reshape", [y, ex.add("Shape", [like])[0]], allowzero=1)[0]


@register_lowering("onnx", "UnreduceLike")
def _unreduce_like(ex: Exporter, n: Node, g: str, x: str) -> str:
    """The adjoint of a reduction: g, with the reduced axes put back, broadcast to x
    (divided by their count for a mean)."""
    xt = n.inputs[1].type
    assert isinstance(xt, TensorType)
    axes = n.attrs.get("axes")
    rank = len(xt.shape) if xt.shape is not None else None
    if axes is not None and not n.attrs["keepdims"]:
        g = ex.add("Unsqueeze", [g, ex.const(np.array(sorted(a % rank for a in axes) if rank else axes, np.int64))])[0]
    shape = ex.add("Shape", [x])[0]
    out = ex.add("Expand", [g, shape])[0]
    if n.attrs["mean"]:
        total = ex.add("ReduceProd", [shape], keepdims=0)[0]
        part = ex.add("ReduceProd", [ex.add("Shape", [g])[0]], keepdims=0)[0]
        count = ex.add("Cast", [ex.add("Div", [total, part])[0]], to=NEXUS_TO_ONNX[_dtype(n)])[0]
        out = ex.add("Div", [out, count])[0]
    return out


@register_lowering("onnx", "GatherGrad")
def _gather_grad(ex: Exporter, n: Node, g: str, data: str, idx: str) -> str:
    """Zeros like ``data`` with the slices of ``g`` added where Gather took them: the
    gathered axis moved first, ``ScatterND`` with ``reduction="add"`` (repeated indices
    add up), and the axis moved back.  Needs the rank of ``data``."""
    import onnx

    dt = n.inputs[1].type
    assert isinstance(dt, TensorType)
    if dt.shape is None:
        from nexus.backends.base import MissingLoweringError

        raise MissingLoweringError("onnx", n)
    rank = len(dt.shape)
    axis = int(n.attrs["axis"]) % rank
    perm = [axis, *(i for i in range(rank) if i != axis)]
    back = [perm.index(i) for i in range(rank)]
    # g has the shape data[:axis] + idx.shape + data[axis+1:]: one axis for all indices.
    shape = ex.add("Shape", [data])[0]
    parts = [ex.const(np.array([-1], np.int64))]
    if axis > 0:
        parts.insert(0, ex.add("Shape", [data], end=axis)[0])
    if axis + 1 < rank:
        parts.append(ex.add("Shape", [data], start=axis + 1)[0])
    g = ex.add("Reshape", [g, ex.add("Concat", parts, axis=0)[0]])[0]
    g_t = ex.add("Transpose", [g], perm=perm)[0]
    size = ex.add("Gather", [shape, ex.const(np.int64(axis))], axis=0)[0]
    flat = ex.add("Reshape", [idx, ex.const(np.array([-1], np.int64))])[0]
    flat = ex.add("Cast", [flat], to=onnx.TensorProto.INT64)[0]
    flat = ex.add("Mod", [ex.add("Add", [flat, size])[0], size])[0]  # NumPy's negative indices
    where = ex.add("Unsqueeze", [flat, ex.const(np.array([-1], np.int64))])[0]
    zero = np.array([0], _np(_dtype(n)))
    zeros = ex.add("ConstantOfShape", [ex.add("Shape", [ex.add("Transpose", [data], perm=perm)[0]])[0]],
                   value=onnx.numpy_helper.from_array(zero))[0]
    out = ex.add("ScatterND", [zeros, where, g_t], reduction="add")[0]
    return ex.add("Transpose", [out], perm=back)[0]


# --- autodiff tapes: after the export splits stacks by dtype, each is an ONNX sequence ----

@register_lowering("onnx", "StackNew")
def _stack_new(ex: Exporter, n: Node) -> str:
    return ex.add("SequenceEmpty", [], 1, dtype=NEXUS_TO_ONNX[ex.stack_dtypes[n]])[0]


@register_lowering("onnx", "StackPush")
def _stack_push(ex: Exporter, n: Node, stack: str, value: str) -> str:
    return ex.add("SequenceInsert", [stack, value])[0]  # at the end: the top


@register_lowering("onnx", "StackPop")
def _stack_pop(ex: Exporter, n: Node, stack: str) -> list[str]:
    last = ex.const(np.int64(-1))
    return [ex.add("SequenceErase", [stack, last])[0], ex.add("SequenceAt", [stack, last])[0]]  # (rest, top)


@register_lowering("onnx", "Call")
def _call(ex: Exporter, n: Node, *ins: str) -> str | list[str]:
    """A Call of a recurrent op's cell graph, still as the importer built it, is the ONNX op
    again (its fused kernel in ONNX Runtime); ``to_onnx`` inlines every other Call first."""
    from nexus.frontend.recurrent import INPUTS, OUTPUTS, spec_of

    spec = spec_of(n)
    if spec is None:
        raise ValueError(f"Call %{n.name or '?'} is not a recurrent op's loop: inline it before the export")
    names = dict(zip(spec.inputs, ins))
    if "sequence_lens" in names:  # ONNX takes int32 lengths
        lens = n.inputs[spec.inputs.index("sequence_lens")].type
        if isinstance(lens, TensorType) and lens.dtype != "i32":
            names["sequence_lens"] = ex.add("Cast", [names["sequence_lens"]], to=NEXUS_TO_ONNX["i32"])[0]
    inputs = [names.get(role, "") for role in INPUTS]
    while not inputs[-1]:
        inputs.pop()
    last = max(OUTPUTS.index(role) for role in spec.outputs)
    outs = [ex.fresh(role) if role in spec.outputs else "" for role in OUTPUTS[:last + 1]]
    ex.add(spec.op, inputs, outs, **spec.attrs)
    results = [outs[OUTPUTS.index(role)] for role in spec.outputs]
    return results if len(results) > 1 else results[0]


@register_lowering("onnx", "SetItem")
def _setitem(ex: Exporter, n: Node, data: str, value: str, *index: str) -> str:
    """``data[i] = value`` with one integer scalar ``i`` and a value of ``data``'s row shape
    (a recurrent op's loop writes its output rows so): ONNX's ScatterND.  Other subscripts
    (slices, masks, broadcast values) have no rule."""
    d, v = n.input(0).type, n.input(1).type
    i = n.inputs[2] if len(n.inputs) == 3 else None
    if (n.attrs.get("kinds", "i") != "i" or i is None or not isinstance(i.type, TensorType) or i.type.shape != ()
            or not isinstance(d, TensorType) or not isinstance(v, TensorType) or d.shape is None
            or v.shape != d.shape[1:] or v.dtype != d.dtype):
        raise MissingLoweringError("onnx", n)
    idx = ex.add("Reshape", [index[0], ex.const(np.array([1, 1], np.int64))])[0]
    if i.type.dtype != "i64":
        idx = ex.add("Cast", [idx], to=NEXUS_TO_ONNX["i64"])[0]
    rows = ex.add("Unsqueeze", [value, ex.const(np.array([0], np.int64))])[0]
    return ex.add("ScatterND", [data, idx, rows])[0]
