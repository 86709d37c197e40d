"""ONNX import rules: shapes, indexing, constants, casts and padding."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from nexus.frontend.onnx.data import OnnxImportError, nexus_dtype
from nexus.frontend.onnx.ops import (
    INT64_MAX,
    Ins,
    _axes,
    _cast,
    _i64_scalar,
    _i64_vec,
    _ints,
    _like,
    _rank,
    _req,
    _t,
    converts,
)
from nexus.frontend.onnx.ops import axes as axes_rt
from nexus.ir.node import Node
from nexus.ir.types import FLOAT_DTYPES

if TYPE_CHECKING:
    from nexus.frontend.onnx.importer import Importer


# --- shapes --------------------------------------------------------------------------------
@converts("Reshape")
def _reshape(imp: Importer, ins: Ins, attrs: dict[str, Any]) -> list[Node | None]:
    x, s = _req(ins[0], "data"), _req(ins[1], "shape")
    sv = imp.value_of(s)
    if sv is not None and not attrs.get("allowzero", 0) and (np.asarray(sv) == 0).any():
        shape = _t(x).shape
        target = [int(v) for v in np.asarray(sv).reshape(-1)]
        copied = [shape[i] if v == 0 else v for i, v in enumerate(target)] if shape is not None else []
        unknown = [i for i, v in enumerate(copied) if not isinstance(v, int)]
        if shape is not None and not unknown:
            s = imp.const(np.array(copied, np.int64))
        elif len(unknown) == 1 and all(isinstance(v, int) and v > 0 for i, v in enumerate(copied) if i != unknown[0]):
            # one symbolic dim copied and no -1: it is the size left over, and the result's
            # type keeps it (``batch``), where the general form below knows nothing of it
            s = imp.const(np.array([-1 if i == unknown[0] else v for i, v in enumerate(copied)], np.int64))
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


def _run_time_axes(imp: Importer, ins: Ins) -> Node | None:
    """Input 1 when it holds axes that only the run knows."""
    v = ins[1] if len(ins) > 1 else None
    return v if v is not None and imp.value_of(v) is None else None


@converts("Squeeze")
def _squeeze(imp: Importer, ins: Ins, attrs: dict[str, Any]) -> list[Node | None]:
    x = _req(ins[0], "data")
    rt = _run_time_axes(imp, ins)
    if rt is not None:
        k = axes_rt.count(imp, rt, "axes")
        if k:
            return [axes_rt.squeeze(imp, x, rt, _rank(x), k)]
        return [imp.emit("Squeeze", [x], {"axes": None})]
    axes = _axes(imp, ins, 1, attrs)
    return [imp.emit("Squeeze", [_req(ins[0], "data")], {"axes": tuple(axes) if axes else None})]


@converts("Unsqueeze")
def _unsqueeze(imp: Importer, ins: Ins, attrs: dict[str, Any]) -> list[Node | None]:
    rt = _run_time_axes(imp, ins)
    if rt is not None:
        x = _req(ins[0], "data")
        return [axes_rt.unsqueeze(imp, x, rt, _rank(x), axes_rt.count(imp, rt, "axes"))]
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


@converts("GatherND")
def _gather_nd(imp: Importer, ins: Ins, attrs: dict[str, Any]) -> list[Node | None]:
    return [imp.emit("GatherND", [_req(ins[0], "data"), _req(ins[1], "indices")],
                     {"batch_dims": int(attrs.get("batch_dims", 0))})]


@converts("ReverseSequence")
def _reverse_sequence(imp: Importer, ins: Ins, attrs: dict[str, Any]) -> list[Node | None]:
    """Each batch entry's first sequence_lens[b] steps reversed: GatherElements along the
    time axis with index lens[b] - 1 - t where t < lens[b], else t."""
    x, lens = _req(ins[0], "input"), _cast(imp, _req(ins[1], "sequence_lens"), "i64")
    t_axis, b_axis = int(attrs.get("time_axis", 0)), int(attrs.get("batch_axis", 1))
    if {t_axis, b_axis} != {0, 1}:
        raise OnnxImportError(f"ReverseSequence: time_axis and batch_axis must be 0 and 1, got {t_axis}, {b_axis}")
    r = _rank(x)
    zero, one = imp.const(np.array(0, np.int64)), imp.const(np.array(1, np.int64))
    t = imp.emit("Range", [zero, imp.emit("DimSize", [x], {"axis": t_axis}), one])
    t = imp.emit("Unsqueeze", [t], {"axes": (1,) if t_axis == 0 else (0,)})
    lens = imp.emit("Unsqueeze", [lens], {"axes": (0,) if t_axis == 0 else (1,)})
    back = imp.emit("Sub", [imp.emit("Sub", [lens, one]), t])
    idx = imp.emit("Where", [imp.emit("Less", [t, lens]), back, imp.emit("Add", [t, imp.emit("ZerosLike", [lens])])])
    if r > 2:
        idx = imp.emit("Unsqueeze", [idx], {"axes": tuple(range(2, r))})
    idx = imp.emit("Expand", [idx, imp.emit("ShapeOf", [x])])
    return [imp.emit("GatherElements", [x, idx], {"axis": t_axis})]


@converts("Compress")
def _compress(imp: Importer, ins: Ins, attrs: dict[str, Any]) -> list[Node | None]:
    """The slices where condition is true: Gather by NonZero's indices (a condition shorter
    than the axis leaves out the rest, as ONNX says)."""
    x, cond = _req(ins[0], "input"), _cast(imp, _req(ins[1], "condition"), "bool")
    nz = imp.emit("Proj", [imp.emit("NonZero", [cond])], {"num": 0})
    idx = imp.emit("Reshape", [nz, imp.const(np.array([-1], np.int64))])
    if attrs.get("axis") is None:
        return [imp.emit("Gather", [imp.emit("Reshape", [x, imp.const(np.array([-1], np.int64))]), idx], {"axis": 0})]
    return [imp.emit("Gather", [x, idx], {"axis": int(attrs["axis"])})]


@converts("ScatterElements", "Scatter")
def _scatter_elements(imp: Importer, ins: Ins, attrs: dict[str, Any]) -> list[Node | None]:
    args = [_req(ins[0], "data"), _req(ins[1], "indices"), _req(ins[2], "updates")]
    return [imp.emit("ScatterElements", args, {"axis": int(attrs.get("axis", 0)),
                                               "reduction": attrs.get("reduction", "none")})]


@converts("TensorScatter")
def _tensor_scatter(imp: Importer, ins: Ins, attrs: dict[str, Any]) -> list[Node | None]:
    """A KV-cache write: update's steps go to past_cache at write_indices[b] + s along
    `axis` (modulo its length in circular mode), one ScatterElements."""
    past, upd = _req(ins[0], "past_cache"), _req(ins[1], "update")
    r = _rank(past)
    axis = int(attrs.get("axis", -2)) % r
    if axis == 0:
        raise OnnxImportError("TensorScatter: axis must not be the batch axis 0")
    mode = attrs.get("mode", "linear")
    if mode not in ("linear", "circular"):
        raise OnnxImportError(f"TensorScatter: mode must be linear or circular, got {mode!r}")
    zero, one = imp.const(np.array(0, np.int64)), imp.const(np.array(1, np.int64))
    steps = imp.emit("Range", [zero, imp.emit("DimSize", [upd], {"axis": axis}), one])
    steps = imp.emit("Unsqueeze", [steps], {"axes": tuple(a for a in range(r) if a != axis)})
    w = ins[2] if len(ins) > 2 else None
    idx = steps
    if w is not None:
        w = imp.emit("Unsqueeze", [_cast(imp, w, "i64")], {"axes": tuple(range(1, r))})
        idx = imp.emit("Add", [w, steps])
    if mode == "circular":
        idx = imp.emit("Mod", [idx, imp.emit("DimSize", [past], {"axis": axis})])
    idx = imp.emit("Expand", [idx, imp.emit("ShapeOf", [upd])])
    return [imp.emit("ScatterElements", [past, idx, upd], {"axis": axis})]


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
    # ONNX wants scalars; a [1] tensor whose size the types lose (an If's join) is one too.
    args = [_req(v, n) for v, n in zip(ins, ("start", "limit", "delta"))]
    return [imp.emit("Range", [v if _t(v).shape == () else imp.emit("Reshape", [v, imp.const(np.array([], np.int64))])
                               for v in args])]


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
            r = _rank(x)
            if imp.value_of(ins[3]) is None:  # axes known at run time: where their pads go, computed
                where = axes_rt.pad_positions(imp, ins[3], r)
            else:
                axes = _ints(imp, ins[3], "axes")
                assert axes is not None
                where = imp.const(np.array([a % r for a in axes] + [a % r + r for a in axes], np.int64).reshape(-1, 1))
            pads = imp.emit("ScatterND", [imp.const(np.zeros(2 * r, np.int64)), where, pads])
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


