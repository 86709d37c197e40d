"""Inference BatchNormalization folded into the convolution before it, as ONNX Runtime does.

A ``BatchNormalization`` whose input is a ``Conv`` with constant weights (and bias), and
whose parameters are constants, is a per-channel affine map of the convolution's output:
``(conv(x, w) + b - mean) * f + bias`` with ``f = scale / sqrt(var + eps)``, which is
``conv(x, w * f) + (b - mean) * f + bias``.  The python backend runs the folded form: one
pass over the activations fewer per pair (CNNs have one after almost every convolution),
with the folded constants computed once, in float64, when the graph is prepared.

The result differs from the two-step form by rounding only (the products are
reassociated); float16 convolutions are left alone (the kernels widen them to float32, so
a folded float16 weight would round where the two-step form does not).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from nexus.ir.graph import Graph, known_value
from nexus.ir.node import Node
from nexus.ir.types import TensorType

_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


def _foldable(bn: Node) -> tuple[Node, np.ndarray, np.ndarray | None, list[np.ndarray]] | None:
    """(conv, w, b, [scale, bias, mean, var]) where ``bn`` folds into the Conv before it."""
    conv = bn.input(0)
    if conv.op.name != "Conv" or conv.uses != [(bn, 0)] or conv.attrs.get("device") or bn.attrs.get("device"):
        return None
    w: Any = known_value(conv.input(1))
    b: Any = known_value(conv.input(2)) if conv.num_inputs > 2 else None
    params: list[Any] = [known_value(v) for v in bn.inputs[1:]]
    if w is None or (conv.num_inputs > 2 and b is None) or any(p is None for p in params):
        return None
    w = np.asarray(w)
    if w.dtype not in _FLOATS or w.ndim < 3 or any(np.asarray(p).shape != (w.shape[0],) for p in params):
        return None
    return conv, w, None if b is None else np.asarray(b), [np.asarray(p, np.float64) for p in params]


def has_foldable(g: Graph) -> bool:
    """Whether :func:`fold_batch_norms` would change ``g``."""
    return any(n.op.name == "BatchNormalization" and _foldable(n) is not None for n in g.nodes())


def fold_batch_norms(g: Graph) -> int:
    """Fold each BatchNormalization of ``g`` (changed in place) that follows a Conv with
    constant weights, used by nothing else, into that Conv; the number folded."""
    folded = 0
    for bn in [n for n in g.nodes() if n.op.name == "BatchNormalization"]:
        found = _foldable(bn)
        if found is None:
            continue
        conv, w, b, (scale, bias, mean, var) = found
        factor = scale / np.sqrt(var + float(bn.attrs["epsilon"]))
        w2 = (w * factor.reshape((-1,) + (1,) * (w.ndim - 1))).astype(w.dtype)
        b2 = (((0.0 if b is None else b.astype(np.float64)) - mean) * factor + bias).astype(w.dtype)
        old = [*conv.inputs[1:], *bn.inputs[1:]]
        start = g.start_block
        conv.set_input(1, g.add("Constant", [], start, {"value": w2}, type=conv.input(1).type))
        w_type = conv.input(1).type
        assert isinstance(w_type, TensorType)  # a constant's array
        new_b = g.add("Constant", [], start, {"value": b2}, type=TensorType(w_type.dtype, b2.shape))
        if conv.num_inputs > 2:
            conv.set_input(2, new_b)
        else:
            conv.append_input(new_b)
        g.replace(bn, conv)
        for c in dict.fromkeys(old):
            if not c.has_uses():
                g.erase(c)
        folded += 1
    return folded
