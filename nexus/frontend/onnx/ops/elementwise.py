"""ONNX import rules: the ops Nexus has one to one, activations and reductions."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from nexus.frontend.onnx.data import ONE_TO_ONE, nexus_dtype
from nexus.frontend.onnx.ops import (
    INT64_MAX,
    RULES,
    Converter,
    Ins,
    _axes,
    _cast,
    _ints,
    _like,
    _rank,
    _req,
    _t,
    converts,
)
from nexus.frontend.onnx.ops import axes as axes_rt
from nexus.ir.node import Node
from nexus.ir.types import FLOAT_DTYPES, numpy_dtype

if TYPE_CHECKING:
    from nexus.frontend.onnx.importer import Importer


# --- one to one ------------------------------------------------------------------------------
def _same(op: str, n_in: int | None = None) -> Converter:
    def fn(imp: Importer, ins: Ins, attrs: dict[str, Any]) -> list[Node | None]:
        if n_in is None:
            args = [i for i in ins if i is not None]
        else:
            args = [_req(x, str(k)) for k, x in enumerate(ins[:n_in])]
        return [imp.emit(op, args)]

    return fn


for _onnx, _nexus in ONE_TO_ONE.items():
    RULES.add(_onnx, _same(_nexus))


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


RULES.add("Max", _variadic("Maximum"))
RULES.add("Min", _variadic("Minimum"))
RULES.add("Sum", _variadic("Add"))


@converts("Mean")
def _mean(imp: Importer, ins: Ins, attrs: dict[str, Any]) -> list[Node | None]:
    (s,) = _variadic("Add")(imp, ins, attrs)
    assert s is not None
    return [imp.emit("Div", [s, _like(imp, len([x for x in ins if x is not None]), s)])]


# --- activations -----------------------------------------------------------------------------
@converts("LeakyRelu")
def _leaky(imp: Importer, ins: Ins, attrs: dict[str, Any]) -> list[Node | None]:
    return [imp.emit("LeakyRelu", [_req(ins[0], "X")], {"alpha": float(attrs.get("alpha", 0.01))})]


@converts("PRelu")
def _prelu(imp: Importer, ins: Ins, attrs: dict[str, Any]) -> list[Node | None]:
    x, slope = _req(ins[0], "X"), _req(ins[1], "slope")
    xs, ss = _t(x).shape, _t(slope).shape
    # The legacy unidirectional broadcast (opset < 7, and what PyTorch's converter wrote):
    # a slope [C] on [N, C, ...] is per channel, not per last-axis element.
    if xs is not None and ss is not None and len(ss) == 1 and len(xs) > 2 and ss[0] != 1 and (
            imp.opset < 7 or (ss[0] == xs[1] and ss[0] != xs[-1])):
        slope = imp.emit("Unsqueeze", [slope], {"axes": tuple(range(1, len(xs) - 1))})
    return [imp.emit("PRelu", [x, slope])]


@converts("Gelu")
def _gelu(imp: Importer, ins: Ins, attrs: dict[str, Any]) -> list[Node | None]:
    return [imp.emit("Gelu", [_req(ins[0], "X")], {"approximate": attrs.get("approximate", "none")})]


@converts("HardSigmoid")
def _hsig(imp: Importer, ins: Ins, attrs: dict[str, Any]) -> list[Node | None]:
    return [imp.emit("HardSigmoid", [_req(ins[0], "X")],
                     {"alpha": float(attrs.get("alpha", 0.2)), "beta": float(attrs.get("beta", 0.5))})]


@converts("HardSwish")
def _hswish(imp: Importer, ins: Ins, attrs: dict[str, Any]) -> list[Node | None]:
    return [imp.emit("HardSwish", [_req(ins[0], "X")])]


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
    """A count outside [0, bits) shifts every bit out (ONNX): 0 to the left, the sign to
    the right; Nexus's shifts take the counts inside."""
    x, y = _req(ins[0], "X"), _req(ins[1], "Y")
    left = attrs.get("direction") == "LEFT"
    bits = np.dtype(numpy_dtype(_t(x).dtype)).itemsize * 8
    inside = imp.emit("Clip", [y, _like(imp, 0, y), _like(imp, bits - 1, y)])
    out = imp.emit("Or", [imp.emit("Less", [y, _like(imp, 0, y)]), imp.emit("Greater", [y, _like(imp, bits - 1, y)])])
    shifted = imp.emit("LeftShift" if left else "RightShift", [x, inside])
    gone = _like(imp, 0, x) if left or _t(x).dtype.startswith("u") else imp.emit(
        "Where", [imp.emit("Less", [x, _like(imp, 0, x)]), _like(imp, -1, x), _like(imp, 0, x)])
    return [imp.emit("Where", [out, gone, shifted])]


@converts("BitCast")
def _bitcast(imp: Importer, ins: Ins, attrs: dict[str, Any]) -> list[Node | None]:
    return [imp.emit("BitCast", [_req(ins[0], "input")], {"to": nexus_dtype(int(attrs["to"]), "BitCast's 'to'")})]


@converts("Det")
def _det(imp: Importer, ins: Ins, attrs: dict[str, Any]) -> list[Node | None]:
    return [imp.emit("Det", [_req(ins[0], "X")])]


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
        keep = bool(attrs.get("keepdims", 1))
        given = ins[1] if len(ins) > 1 else None
        run_time = given is not None and imp.value_of(given) is None
        k = axes_rt.count(imp, given, "axes") if given is not None and run_time else 0
        axes = None if run_time else _axes(imp, ins, 1, attrs)
        if (run_time and k == 0) or (not run_time and not axes):
            if attrs.get("noop_with_empty_axes", 0):
                return [imp.emit("Identity", [x])]
            axes, run_time = None, False

        def red(o: str, v: Node, keepdims: bool = keep) -> Node:
            if run_time:
                assert given is not None
                return axes_rt.reduce(imp, o, v, given, _rank(v), k, keepdims)
            return imp.emit(o, [v], {"axes": axes, "keepdims": keepdims})

        if op == "ReduceSumSquare":
            return [red("ReduceSum", imp.emit("Mul", [x, x]))]
        if op == "ReduceL1":
            return [red("ReduceSum", imp.emit("Abs", [x]))]
        if op == "ReduceL2":
            return [imp.emit("Sqrt", [red("ReduceSum", imp.emit("Mul", [x, x]))])]
        if op == "ReduceLogSum":
            return [imp.emit("Log", [red("ReduceSum", x)])]
        if op == "ReduceLogSumExp":
            m = red("ReduceMax", x, True)
            s = red("ReduceSum", imp.emit("Exp", [imp.emit("Sub", [x, m])]))
            mk = m if keep else red("ReduceMax", x, False)
            return [imp.emit("Add", [imp.emit("Log", [s]), mk])]
        if _t(x).dtype == "bool" and op in ("ReduceMax", "ReduceMin"):
            return [_cast(imp, red(op, _cast(imp, x, "u8")), "bool")]
        return [red(op, x)]

    return fn


for _r in ("ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceSumSquare", "ReduceL1",
           "ReduceL2", "ReduceLogSum", "ReduceLogSumExp"):
    RULES.add(_r, _reduce(_r))


@converts("ArgMax", "ArgMin")
def _arg(imp: Importer, ins: Ins, attrs: dict[str, Any]) -> list[Node | None]:
    return [imp.emit(imp.node.op_type, [_req(ins[0], "data")],
                     {"axis": int(attrs.get("axis", 0)), "keepdims": bool(attrs.get("keepdims", 1)),
                      "select_last_index": bool(attrs.get("select_last_index", 0))})]


@converts("CumProd")
def _cumprod(imp: Importer, ins: Ins, attrs: dict[str, Any]) -> list[Node | None]:
    x, axis_in = _req(ins[0], "x"), _req(ins[1], "axis")
    if imp.value_of(axis_in) is None:  # an axis known only at run time: each candidate, one selected
        return [axes_rt.per_axis(imp, x, axis_in, _rank(x), lambda j: _cumprod_along(imp, x, j, attrs))]
    axis_v = _ints(imp, axis_in, "axis")
    assert axis_v is not None
    return [_cumprod_along(imp, x, axis_v[0] % max(_rank(x), 1), attrs)]


def _cumprod_along(imp: Importer, x: Node, axis: int, attrs: dict[str, Any]) -> Node:
    reverse, exclusive = bool(attrs.get("reverse", 0)), bool(attrs.get("exclusive", 0))
    i64 = lambda *v: imp.const(np.array(v, np.int64))  # noqa: E731

    def flip(v: Node) -> Node:
        return imp.emit("Slice", [v, i64(-1), i64(-INT64_MAX), i64(axis), i64(-1)])

    if reverse:
        x = flip(x)
    if exclusive:  # the product of the elements before: 1, then x shifted by one
        one = imp.emit("Slice", [imp.emit("OnesLike", [x]), i64(0), i64(1), i64(axis)])
        x = imp.emit("Concat", [one, imp.emit("Slice", [x, i64(0), i64(-1), i64(axis)])], {"axis": axis})
    y = imp.emit("CumProd", [x], {"axis": axis})
    return flip(y) if reverse else y


@converts("CumSum")
def _cumsum(imp: Importer, ins: Ins, attrs: dict[str, Any]) -> list[Node | None]:
    x, axis_in = _req(ins[0], "x"), _req(ins[1], "axis")
    flags = {"exclusive": bool(attrs.get("exclusive", 0)), "reverse": bool(attrs.get("reverse", 0))}
    if imp.value_of(axis_in) is None:  # an axis known only at run time: each candidate, one selected
        return [axes_rt.per_axis(imp, x, axis_in, _rank(x),
                                 lambda j: imp.emit("CumSum", [x], {"axis": j, **flags}))]
    axis = _ints(imp, axis_in, "axis")
    assert axis is not None
    return [imp.emit("CumSum", [x], {"axis": axis[0], **flags})]


