"""ONNX import rules: the optimizer update ops of ai.onnx.preview.training (Adagrad, Adam,
Momentum) as element-wise compositions in f64, each result cast back to its tensor's dtype.

Each op updates n tensors at once: inputs R (learning rate), T (step), then the n tensors
X, their n gradients G, and their n states (H; V and H for Adam; V for Momentum); the
results are the n new X, then the new states, in the same order.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from nexus.frontend.onnx.data import OnnxImportError
from nexus.frontend.onnx.ops import Ins, _cast, _req, _t, converts
from nexus.ir.node import Node

if TYPE_CHECKING:
    from nexus.frontend.onnx.importer import Importer


class _F64:
    """f64 arithmetic on importer nodes, enough for the update formulas."""

    def __init__(self, imp: Importer) -> None:
        self.imp = imp

    def c(self, v: float) -> Node:
        return self.imp.const(np.array(v, np.float64))

    def __call__(self, op: str, *args: Node | float) -> Node:
        return self.imp.emit(op, [a if isinstance(a, Node) else self.c(float(a)) for a in args])


def _groups(ins: Ins, states: int, op: str) -> tuple[Node, Node, list[list[Node]]]:
    """R, T and the n tensors' groups [X..., G..., states...]."""
    vals = [_req(v, f"{op}'s input {i}") for i, v in enumerate(ins)]
    rest = vals[2:]
    if not rest or len(rest) % (2 + states):
        raise OnnxImportError(f"{op}: after R and T, the inputs must be n tensors, their gradients and "
                              f"{states} state(s) each; got {len(rest)}")
    n = len(rest) // (2 + states)
    return vals[0], vals[1], [rest[k * n:(k + 1) * n] for k in range(2 + states)]


def _scalar(f: _F64, v: Node) -> Node:
    return f.imp.emit("Reshape", [_cast(f.imp, v, "f64"), f.imp.const(np.zeros(0, np.int64))])


@converts("ai.onnx.preview.training.Adagrad")
def _adagrad(imp: Importer, ins: Ins, attrs: dict[str, Any]) -> list[Node | None]:
    f = _F64(imp)
    r, t, (xs, gs, hs) = _groups(ins, 1, "Adagrad")
    decay, eps, norm = (float(attrs.get(k, d)) for k, d in (("decay_factor", 0.0), ("epsilon", 0.0),
                                                            ("norm_coefficient", 0.0)))
    rate = f("Div", _scalar(f, r), f("Add", 1.0, f("Mul", _scalar(f, t), decay)))
    new_x, new_h = [], []
    for x, g, h in zip(xs, gs, hs):
        x64, g64, h64 = (_cast(imp, v, "f64") for v in (x, g, h))
        gr = f("Add", f("Mul", x64, norm), g64)
        h2 = f("Add", h64, f("Mul", gr, gr))
        x2 = f("Sub", x64, f("Div", f("Mul", rate, gr), f("Add", f("Sqrt", h2), eps)))
        new_x.append(_cast(imp, x2, _t(x).dtype))
        new_h.append(_cast(imp, h2, _t(h).dtype))
    return [*new_x, *new_h]


@converts("ai.onnx.preview.training.Adam")
def _adam(imp: Importer, ins: Ins, attrs: dict[str, Any]) -> list[Node | None]:
    f = _F64(imp)
    r, t, (xs, gs, vs, hs) = _groups(ins, 2, "Adam")
    alpha, beta, eps, norm, post = (float(attrs.get(k, d)) for k, d in (
        ("alpha", 0.9), ("beta", 0.999), ("epsilon", 0.0), ("norm_coefficient", 0.0), ("norm_coefficient_post", 0.0)))
    t64 = _scalar(f, t)
    started = f("Greater", t64, 0.0)
    denom = imp.emit("Where", [started, f("Sub", 1.0, f("Pow", f.c(alpha), t64)), f.c(1.0)])
    corrected = f("Div", f("Mul", _scalar(f, r), f("Sqrt", f("Sub", 1.0, f("Pow", f.c(beta), t64)))), denom)
    rate = imp.emit("Where", [started, corrected, _scalar(f, r)])
    out_x, out_v, out_h = [], [], []
    for x, g, v, h in zip(xs, gs, vs, hs):
        x64, g64, v64, h64 = (_cast(imp, a, "f64") for a in (x, g, v, h))
        gr = f("Add", f("Mul", x64, norm), g64)
        v2 = f("Add", f("Mul", v64, alpha), f("Mul", gr, 1.0 - alpha))
        h2 = f("Add", f("Mul", h64, beta), f("Mul", f("Mul", gr, gr), 1.0 - beta))
        x2 = f("Sub", x64, f("Mul", rate, f("Div", v2, f("Add", f("Sqrt", h2), eps))))
        out_x.append(_cast(imp, f("Mul", x2, 1.0 - post), _t(x).dtype))
        out_v.append(_cast(imp, v2, _t(v).dtype))
        out_h.append(_cast(imp, h2, _t(h).dtype))
    return [*out_x, *out_v, *out_h]


@converts("ai.onnx.preview.training.Momentum")
def _momentum(imp: Importer, ins: Ins, attrs: dict[str, Any]) -> list[Node | None]:
    f = _F64(imp)
    r, t, (xs, gs, vs) = _groups(ins, 1, "Momentum")
    alpha, beta, norm = (float(attrs[k]) for k in ("alpha", "beta", "norm_coefficient"))
    mode = attrs.get("mode", "standard")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    if mode not in ("standard", "nesterov"):
        raise OnnxImportError(f"Momentum: mode must be standard or nesterov, got {mode!r}")
    b = imp.emit("Where", [f("Greater", _scalar(f, t), 0.0), f.c(beta), f.c(1.0)])  # the first step takes g whole
    rate = _scalar(f, r)
    out_x, out_v = [], []
    for x, g, v in zip(xs, gs, vs):
        x64, g64, v64 = (_cast(imp, a, "f64") for a in (x, g, v))
        gr = f("Add", f("Mul", x64, norm), g64)
        v2 = f("Add", f("Mul", v64, alpha), f("Mul", gr, b))
        step = v2 if mode == "standard" else f("Add", gr, f("Mul", v2, alpha))
        out_x.append(_cast(imp, f("Sub", x64, f("Mul", rate, step)), _t(x).dtype))
        out_v.append(_cast(imp, v2, _t(v).dtype))
    return [*out_x, *out_v]
