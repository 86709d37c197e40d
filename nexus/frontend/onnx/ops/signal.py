"""ONNX import rules: signal processing (DFT) as compositions of Nexus ops.

A DFT along one axis of static length is a product with a constant matrix of cosines and
sines, so it imports as MatMuls (in f64, cast back): every backend runs it and ``nx.grad``
differentiates it like any MatMul.  The axis and ``dft_length`` must be known at import
(``NeedsConstant`` otherwise; the onnx.backend wrapper imports once per value).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from nexus.frontend.onnx.data import OnnxImportError
from nexus.frontend.onnx.ops import Ins, _cast, _rank, _req, _t, converts
from nexus.ir.node import Node

if TYPE_CHECKING:
    from nexus.frontend.onnx.importer import Importer


def _dft_matrices(n_in: int, n_out: int, length: int, weights: np.ndarray | None = None) -> tuple[np.ndarray, ...]:
    """cos and sin of 2 pi k n / length, [n_in, n_out] (row n_in: the input's index), each
    row scaled by ``weights`` (irfft's 1, 2, ..., 2, 1)."""
    k = np.outer(np.arange(n_in, dtype=np.float64), np.arange(n_out, dtype=np.float64))
    angle = 2.0 * np.pi * (k % length) / length
    c, s = np.cos(angle), np.sin(angle)
    if weights is not None:
        c, s = c * weights[:, None], s * weights[:, None]
    return c, s


@converts("DFT")
def _dft(imp: Importer, ins: Ins, attrs: dict[str, Any]) -> list[Node | None]:
    """The discrete Fourier transform of x [..., signal, ..., 1 or 2] (real, or real and
    imaginary parts) along ``axis``: forward, inverse (divided by the length), one-sided
    (the first length // 2 + 1 frequencies) and the inverse of a one-sided one (a real
    signal, numpy.fft.irfft)."""
    x = _req(ins[0], "input")
    r = _rank(x)
    length_in = ins[1] if len(ins) > 1 else None
    if imp.opset >= 20:
        axis = int(imp.need_value(ins[2], "DFT's axis").reshape(())) if len(ins) > 2 and ins[2] is not None else -2
    else:
        axis = int(attrs.get("axis", 1))
    inverse, onesided = bool(attrs.get("inverse", 0)), bool(attrs.get("onesided", 0))
    axis = axis % r
    shape = _t(x).shape or ()
    parts, m = shape[-1], shape[axis]
    if axis == r - 1 or parts not in (1, 2) or not isinstance(m, int):
        raise OnnxImportError(f"DFT: x must be [..., signal, ..., 1 or 2] with a static signal length along an axis "
                              f"other than the last, got {_t(x)} and axis {axis}")
    if length_in is not None:
        length = int(imp.need_value(length_in, "DFT's dft_length").reshape(()))
    else:
        length = 2 * (m - 1) if inverse and onesided else m
    if length < 1:
        raise OnnxImportError(f"DFT: dft_length must be >= 1, got {length}")
    dtype = _t(x).dtype
    part = [imp.emit("Gather", [x, imp.const(np.array(i, np.int64))], {"axis": r - 1}) for i in range(parts)]
    perm = tuple(d for d in range(r - 1) if d != axis) + (axis,)
    back = tuple(int(i) for i in np.argsort(perm))

    def along(v: Node, n: int) -> Node:  # v with the signal axis last, its first n entries, in f64
        v = _cast(imp, imp.emit("Transpose", [v], {"perm": perm}), "f64")
        if n < m:
            v = imp.emit("Slice", [v, imp.const(np.array([0], np.int64)), imp.const(np.array([n], np.int64)),
                                   imp.const(np.array([-1], np.int64))])
        return v

    def mm(v: Node, w: np.ndarray) -> Node:
        return imp.emit("MatMul", [v, imp.const(w)])

    def result(*vs: Node) -> list[Node | None]:
        outs = [imp.emit("Unsqueeze", [_cast(imp, imp.emit("Transpose", [v], {"perm": back}), dtype)],
                         {"axes": (r - 1,)}) for v in vs]
        return [outs[0] if len(outs) == 1 else imp.emit("Concat", outs, {"axis": r - 1})]

    if inverse and onesided:  # numpy.fft.irfft: the hermitian spectrum's first half, a real signal
        n = min(m, length // 2 + 1)
        w = np.full(n, 2.0)
        w[0] = 1.0
        if length % 2 == 0 and n == length // 2 + 1:
            w[-1] = 1.0
        c, s = _dft_matrices(n, length, length, w / length)
        re = along(part[0], n)
        y = mm(re, c) if parts == 1 else imp.emit("Sub", [mm(re, c), mm(along(part[1], n), s)])
        return result(y)
    n = min(m, length)
    k = length // 2 + 1 if onesided else length
    c, s = _dft_matrices(n, k, length)
    if inverse:
        c, s = c / length, -s / length  # e^{+i...} / length
    re = along(part[0], n)
    if parts == 1:
        return result(mm(re, c), imp.emit("Neg", [mm(re, s)]))
    im = along(part[1], n)
    return result(imp.emit("Add", [mm(re, c), mm(im, s)]), imp.emit("Sub", [mm(im, c), mm(re, s)]))
