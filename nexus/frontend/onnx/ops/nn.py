"""ONNX import rules: linear algebra and neural-network layers (convolution, pooling, normalisation, losses, resize)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from nexus.frontend.onnx.data import OnnxImportError
from nexus.frontend.onnx.ops import INT64_MAX, Ins, _cast, _i64_vec, _like, _rank, _req, _t, converts
from nexus.frontend.onnx.ops.quantized import requantize
from nexus.ir.node import Node
from nexus.ir.types import numpy_dtype

if TYPE_CHECKING:
    from nexus.frontend.onnx.importer import Importer


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


def _conv_attrs(attrs: dict[str, Any], x: Node, w: Node) -> dict[str, Any]:
    """Nexus Conv's attributes for an ONNX Conv-like node (auto_pad made explicit)."""
    wshape = _t(w).shape
    if wshape is None:
        raise OnnxImportError("the weights' rank must be known")
    kernel = attrs.get("kernel_shape") or list(wshape[2:])
    n = len(kernel)
    strides = attrs.get("strides") or [1] * n
    dil = attrs.get("dilations") or [1] * n
    return {"strides": tuple(strides), "dilations": tuple(dil), "group": int(attrs.get("group", 1)),
            "pads": _auto_pads(attrs, x, kernel, strides, dil)}


@converts("Conv")
def _conv(imp: Importer, ins: Ins, attrs: dict[str, Any]) -> list[Node | None]:
    x, w = _req(ins[0], "X"), _req(ins[1], "W")
    args = [x, w] + ([ins[2]] if len(ins) > 2 and ins[2] is not None else [])
    return [imp.emit("Conv", args, _conv_attrs(attrs, x, w))]


def _centred(imp: Importer, v: Node, zp: Node | None, axis: int) -> Node:
    """``v - zp`` in f64 (exact for 8-bit values and their sums), a zero point [C] along ``axis``."""
    v = _cast(imp, v, "f64")
    if zp is None:
        return v
    zp = _cast(imp, zp, "f64")
    if _rank(zp) == 1 and _rank(v) > 1:
        zp = imp.emit("Unsqueeze", [zp], {"axes": tuple(a for a in range(_rank(v)) if a != axis)})
    return imp.emit("Sub", [v, zp])


@converts("ConvInteger")
def _conv_integer(imp: Importer, ins: Ins, attrs: dict[str, Any]) -> list[Node | None]:
    """Conv of (x - x_zero_point) and (w - w_zero_point) with an i32 result, computed in f64
    (every partial sum of 8-bit products is an integer f64 holds exactly)."""
    x, w = _req(ins[0], "x"), _req(ins[1], "w")
    x_zp, w_zp = (ins[i] if len(ins) > i else None for i in (2, 3))
    y = imp.emit("Conv", [_centred(imp, x, x_zp, 1), _centred(imp, w, w_zp, 0)], _conv_attrs(attrs, x, w))
    return [_cast(imp, y, "i32")]


@converts("MatMulInteger")
def _matmul_integer(imp: Importer, ins: Ins, attrs: dict[str, Any]) -> list[Node | None]:
    """(a - a_zero_point) @ (b - b_zero_point) with an i32 result, in f64 (exact for 8-bit
    values); a's zero point may be per row, b's per column."""
    a, b = _req(ins[0], "A"), _req(ins[1], "B")
    a_zp, b_zp = (ins[i] if len(ins) > i else None for i in (2, 3))
    if a_zp is not None and _rank(a_zp) == 1 and _rank(a) > 1:
        a_zp = imp.emit("Unsqueeze", [a_zp], {"axes": (1,)})  # [M] -> [M, 1]: one per row
    ca = _cast(imp, a, "f64") if a_zp is None else imp.emit("Sub", [_cast(imp, a, "f64"), _cast(imp, a_zp, "f64")])
    cb = _cast(imp, b, "f64") if b_zp is None else imp.emit("Sub", [_cast(imp, b, "f64"), _cast(imp, b_zp, "f64")])
    return [_cast(imp, imp.emit("MatMul", [ca, cb]), "i32")]


@converts("QLinearConv")
def _qlinear_conv(imp: Importer, ins: Ins, attrs: dict[str, Any]) -> list[Node | None]:
    """The integer Conv (plus the i32 bias) requantized by x_scale * w_scale / y_scale,
    rounded half to even and saturated, as QLinearMatMul."""
    x, x_s, x_zp, w, w_s, w_zp, y_s = (_req(v, n) for v, n in zip(
        ins, ("x", "x_scale", "x_zero_point", "w", "w_scale", "w_zero_point", "y_scale")))
    y_zp = ins[7] if len(ins) > 7 else None
    b = ins[8] if len(ins) > 8 else None
    acc = imp.emit("Conv", [_centred(imp, x, x_zp, 1), _centred(imp, w, w_zp, 0)], _conv_attrs(attrs, x, w))
    if b is not None:
        acc = imp.emit("Add", [acc, imp.emit("Unsqueeze", [_cast(imp, b, "f64")],
                                             {"axes": tuple(a for a in range(_rank(x)) if a != 1)})])
    factor = imp.emit("Div", [imp.emit("Mul", [x_s, _cast(imp, w_s, _t(x_s).dtype)]), _cast(imp, y_s, _t(x_s).dtype)])
    factor = _cast(imp, factor, "f64")
    if _rank(factor) == 1:
        factor = imp.emit("Unsqueeze", [factor], {"axes": tuple(a for a in range(_rank(x)) if a != 1)})
    return [requantize(imp, acc, factor, y_zp, x)]


@converts("GridSample")
def _grid_sample(imp: Importer, ins: Ins, attrs: dict[str, Any]) -> list[Node | None]:
    mode = {"bilinear": "linear", "bicubic": "cubic"}.get(attrs.get("mode", "linear"), attrs.get("mode", "linear"))
    return [imp.emit("GridSample", [_req(ins[0], "X"), _req(ins[1], "grid")],
                     {"mode": mode, "padding_mode": attrs.get("padding_mode", "zeros"),
                      "align_corners": bool(attrs.get("align_corners", 0))})]


@converts("DeformConv")
def _deform_conv(imp: Importer, ins: Ins, attrs: dict[str, Any]) -> list[Node | None]:
    x, w, off = _req(ins[0], "X"), _req(ins[1], "W"), _req(ins[2], "offset")
    b = ins[3] if len(ins) > 3 else None
    mask = ins[4] if len(ins) > 4 else None
    if mask is not None and b is None:
        m = (_t(w).shape or (None,))[0]
        if not isinstance(m, int):
            raise OnnxImportError("DeformConv with a mask and no bias needs W's static output channels")
        b = imp.const(np.zeros(m, numpy_dtype(_t(x).dtype)))
    a = _conv_attrs(attrs, x, w)
    a["offset_group"] = int(attrs.get("offset_group", 1))
    return [imp.emit("DeformConv", [x, w, off] + [v for v in (b, mask) if v is not None], a)]


@converts("Col2Im")
def _col2im(imp: Importer, ins: Ins, attrs: dict[str, Any]) -> list[Node | None]:
    image = [int(v) for v in np.asarray(imp.need_value(_req(ins[1], "image_shape"), "image_shape")).reshape(-1)]
    block = [int(v) for v in np.asarray(imp.need_value(_req(ins[2], "block_shape"), "block_shape")).reshape(-1)]
    n = len(image)
    return [imp.emit("Col2Im", [_req(ins[0], "input")],
                     {"image_shape": tuple(image), "block_shape": tuple(block),
                      "strides": tuple(attrs.get("strides") or [1] * n),
                      "pads": tuple(attrs.get("pads") or [0] * (2 * n)),
                      "dilations": tuple(attrs.get("dilations") or [1] * n)})]


@converts("RoiAlign")
def _roi_align(imp: Importer, ins: Ins, attrs: dict[str, Any]) -> list[Node | None]:
    ctm = attrs.get("coordinate_transformation_mode", "half_pixel" if imp.opset >= 16 else "output_half_pixel")
    return [imp.emit("RoiAlign", [_req(ins[0], "X"), _req(ins[1], "rois"), _req(ins[2], "batch_indices")],
                     {"mode": attrs.get("mode", "avg"), "output_height": int(attrs.get("output_height", 1)),
                      "output_width": int(attrs.get("output_width", 1)),
                      "sampling_ratio": int(attrs.get("sampling_ratio", 0)),
                      "spatial_scale": float(attrs.get("spatial_scale", 1.0)),
                      "coordinate_transformation_mode": ctm})]


@converts("MaxUnpool")
def _max_unpool(imp: Importer, ins: Ins, attrs: dict[str, Any]) -> list[Node | None]:
    """MaxPool's inverse: X's values at their flat indices (over the whole unpooled tensor)
    in zeros, one ScatterElements; an output_shape larger than the pooling's pads with
    zeros at the end of each axis (as the reference does)."""
    x, idx = _req(ins[0], "X"), _req(ins[1], "I")
    shape = _t(x).shape
    if shape is None or not all(isinstance(d, int) for d in shape):
        raise OnnxImportError("MaxUnpool needs X's static shape")
    kernel = list(attrs["kernel_shape"])
    n = len(kernel)
    strides = list(attrs.get("strides") or [1] * n)
    pads = list(attrs.get("pads") or [0] * (2 * n))
    inferred = [int(shape[0]), int(shape[1])] + [(int(shape[2 + i]) - 1) * strides[i] - pads[i] - pads[n + i]
                                                   + kernel[i] for i in range(n)]
    flat = imp.const(np.array([-1], np.int64))
    zeros = imp.emit("ConstantOfShape", [imp.const(np.array([int(np.prod(inferred))], np.int64))],
                     {"value": np.zeros(1, numpy_dtype(_t(x).dtype))})
    y = imp.emit("ScatterElements", [zeros, imp.emit("Reshape", [_cast(imp, idx, "i64"), flat]),
                                     imp.emit("Reshape", [x, flat])], {"axis": 0})
    y = imp.emit("Reshape", [y, imp.const(np.array(inferred, np.int64))])
    out_shape = ins[2] if len(ins) > 2 else None
    if out_shape is None:
        return [y]
    grow = imp.emit("Sub", [_cast(imp, out_shape, "i64"), imp.const(np.array(inferred, np.int64))])
    pads_v = imp.emit("Concat", [imp.const(np.zeros(n + 2, np.int64)), grow], {"axis": 0})
    return [imp.emit("Pad", [y, pads_v], {"mode": "constant", "value": 0.0})]


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
    ratio = ins[1] if len(ins) > 1 else None
    mode = ins[2] if len(ins) > 2 else None
    if mode is not None and imp.value_of(mode) is None:  # training or not, known at run time: both, one picked
        on = imp.emit("Reshape", [_cast(imp, mode, "bool"), imp.const(np.zeros(0, np.int64))])
        y_train, keep = _dropout_training(imp, x, ratio, attrs)
        assert y_train is not None and keep is not None
        return [imp.emit("Where", [on, y_train, x]), imp.emit("Or", [keep, imp.emit("Not", [on])])]
    if mode is not None and bool(np.asarray(imp.value_of(mode))):
        return _dropout_training(imp, x, ratio, attrs)
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


