"""ONNX import rules: signal processing (DFT) as compositions of Nexus ops.

A DFT along one axis of static length is a product with a constant matrix of cosines and
sines, so it imports as MatMuls (in f64, cast back): every backend runs it and ``nx.grad``
differentiates it like any MatMul.  The axis and ``dft_length`` must be known at import
(``NeedsConstant`` otherwise; the onnx.backend wrapper imports once per value).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from nexus.frontend.onnx.data import OnnxImportError, nexus_dtype
from nexus.frontend.onnx.ops import Ins, _cast, _like, _rank, _req, _t, converts
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
    length_in = ins[1] if len(ins) > 1 else None
    if imp.opset >= 20:
        axis = int(imp.need_value(ins[2], "DFT's axis").reshape(())) if len(ins) > 2 and ins[2] is not None else -2
    else:
        axis = int(attrs.get("axis", 1))
    length = None if length_in is None else int(imp.need_value(length_in, "DFT's dft_length").reshape(()))
    return [dft(imp, x, axis, length, bool(attrs.get("inverse", 0)), bool(attrs.get("onesided", 0)))]


def dft(imp: Importer, x: Node, axis: int, length: int | None, inverse: bool, onesided: bool) -> Node:
    """DFT's composition (``length`` None: the signal's own, or 2 * (m - 1) for irfft)."""
    r = _rank(x)
    axis = axis % r
    shape = _t(x).shape or ()
    parts, m = shape[-1], shape[axis]
    if axis == r - 1 or parts not in (1, 2) or not isinstance(m, int):
        raise OnnxImportError(f"DFT: x must be [..., signal, ..., 1 or 2] with a static signal length along an axis "
                              f"other than the last, got {_t(x)} and axis {axis}")
    if length is None:
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

    def result(*vs: Node) -> Node:
        outs = [imp.emit("Unsqueeze", [_cast(imp, imp.emit("Transpose", [v], {"perm": back}), dtype)],
                         {"axes": (r - 1,)}) for v in vs]
        return outs[0] if len(outs) == 1 else imp.emit("Concat", outs, {"axis": r - 1})

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


@converts("STFT")
def _stft(imp: Importer, ins: Ins, attrs: dict[str, Any]) -> list[Node | None]:
    """Short-time Fourier transform of signal [batch, length, 1 or 2]: frames of the window's
    length every frame_step samples (a Gather with constant indices; a frame running past
    the end reads zeros), times the window, then DFT of frame_length along each frame:
    [batch, frames, bins, 2], bins = frame_length // 2 + 1 when one-sided (the default)."""
    x = _req(ins[0], "signal")
    step = int(imp.need_value(_req(ins[1], "frame_step"), "STFT's frame_step").reshape(()))
    window = ins[2] if len(ins) > 2 else None
    flen = ins[3] if len(ins) > 3 else None
    shape = _t(x).shape or ()
    if len(shape) != 3 or not isinstance(shape[1], int):
        raise OnnxImportError(f"STFT: the signal must be [batch, length, 1 or 2] with a static length, got {_t(x)}")
    n = shape[1]
    wlen = None
    if window is not None:
        ws = _t(window).shape
        if ws is None or len(ws) != 1 or not isinstance(ws[0], int):
            raise OnnxImportError(f"STFT: the window must be a vector of static length, got {_t(window)}")
        wlen = ws[0]
    length = int(imp.need_value(flen, "STFT's frame_length").reshape(())) if flen is not None else wlen or n
    wlen = wlen or length
    if step < 1 or length < 1 or length > n:
        raise OnnxImportError(f"STFT: frame_step {step} and frame_length {length} do not fit a signal of {n}")
    frames = 1 + (n - length) // step
    idx = np.arange(frames, dtype=np.int64)[:, None] * step + np.arange(wlen, dtype=np.int64)[None, :]
    if idx.max() >= n:  # zeros past the end
        x = imp.emit("Pad", [x, imp.const(np.array([0, 0, 0, 0, int(idx.max()) + 1 - n, 0], np.int64))])
    y = imp.emit("Gather", [x, imp.const(idx)], {"axis": 1})  # [batch, frames, wlen, parts]
    if window is not None:
        w = imp.emit("Reshape", [_cast(imp, window, _t(x).dtype), imp.const(np.array([1, 1, wlen, 1], np.int64))])
        y = imp.emit("Mul", [y, w])
    return [dft(imp, y, 2, length, False, bool(attrs.get("onesided", 1)))]


@converts("MelWeightMatrix")
def _mel_weight_matrix(imp: Importer, ins: Ins, attrs: dict[str, Any]) -> list[Node | None]:
    """[dft_length // 2 + 1, num_mel_bins] triangular filters between mel-spaced bins, as
    the reference computes them: the band edges in the inputs' float type, the bin numbers
    floor((dft_length + 1) * hertz / sample_rate) in f64, each filter rising from its left
    bin to its centre and falling to its right one.  The two sizes must be known at import;
    the rates and edges are data."""
    m = int(imp.need_value(_req(ins[0], "num_mel_bins"), "MelWeightMatrix's num_mel_bins").reshape(()))
    n = int(imp.need_value(_req(ins[1], "dft_length"), "MelWeightMatrix's dft_length").reshape(()))
    rate, lo, hi = (_req(v, w) for v, w in zip(ins[2:5], ("sample_rate", "lower_edge_hertz", "upper_edge_hertz")))
    if m < 1 or n < 1:
        raise OnnxImportError(f"MelWeightMatrix: num_mel_bins {m} and dft_length {n} must be >= 1")
    out = nexus_dtype(int(attrs.get("output_datatype", 1)), "MelWeightMatrix's output_datatype")

    def f64(v: float | np.ndarray) -> Node:
        return imp.const(np.asarray(v, np.float64))

    def mel(hz: Node) -> Node:  # 2595 log10(1 + hz / 700), in hz's own type
        one = imp.emit("Add", [imp.emit("Div", [hz, _like(imp, 700.0, hz)]), _like(imp, 1.0, hz)])
        return imp.emit("Mul", [imp.emit("Log", [one]), _like(imp, 2595.0 / np.log(10.0), hz)])

    low = mel(lo)
    step = imp.emit("Div", [imp.emit("Sub", [mel(_cast(imp, hi, _t(lo).dtype)), low]), _like(imp, float(m + 2), low)])
    mels = imp.emit("Add", [imp.emit("Mul", [f64(np.arange(m + 2, dtype=np.float64)), _cast(imp, step, "f64")]),
                            _cast(imp, low, "f64")])
    hz = imp.emit("Mul", [f64(700.0), imp.emit("Sub", [imp.emit("Exp", [imp.emit("Mul", [
        mels, f64(np.log(10.0) / 2595.0)])]), f64(1.0)])])
    bins = imp.emit("Floor", [imp.emit("Div", [imp.emit("Mul", [hz, f64(float(n + 1))]), _cast(imp, rate, "f64")])])

    def part(start: int) -> Node:  # [1, m]: bins[start:start + m]
        s = imp.emit("Slice", [bins, imp.const(np.array([start], np.int64)), imp.const(np.array([start + m], np.int64)),
                               imp.const(np.array([0], np.int64))])
        return imp.emit("Unsqueeze", [s], {"axes": (0,)})

    left, centre, right = part(0), part(1), part(2)
    top, bottom = (imp.emit(op, [bins], {"axes": (0,), "keepdims": False}) for op in ("ReduceMax", "ReduceMin"))
    fits = imp.emit("And", [imp.emit("Less", [top, f64(float(n // 2 + 1))]),
                            imp.emit("Not", [imp.emit("Less", [bottom, f64(0.0)])])])
    imp.emit("Assert", [fits], {"message": "MelWeightMatrix: the edges give mel bins outside the dft_length // 2 + 1 "
                                           "spectrogram bins at this sample_rate (ONNX Runtime refuses them too)"})
    j = f64(np.arange(n // 2 + 1, dtype=np.float64)[:, None])

    def both(a: Node, b: Node) -> Node:
        return imp.emit("And", [a, b])

    def not_less(a: Node, b: Node) -> Node:
        return imp.emit("Not", [imp.emit("Less", [a, b])])

    def ramp(num: Node, lo_: Node, hi_: Node) -> Node:  # num / max(hi - lo, 1)
        return imp.emit("Div", [num, imp.emit("Maximum", [imp.emit("Sub", [hi_, lo_]), f64(1.0)])])

    rising = both(both(not_less(j, left), not_less(centre, j)), imp.emit("Greater", [centre, left]))
    spike = both(imp.emit("Equal", [centre, left]), imp.emit("Equal", [j, centre]))
    falling = both(both(not_less(j, centre), imp.emit("Less", [j, right])), imp.emit("Greater", [right, centre]))
    w = imp.emit("Where", [falling, ramp(imp.emit("Sub", [right, j]), centre, right),
                           imp.emit("Where", [rising, ramp(imp.emit("Sub", [j, left]), left, centre),
                                              _cast(imp, spike, "f64")])])
    return [_cast(imp, w, out)]

