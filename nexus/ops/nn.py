"""Neural-network ops: Conv (1-D, 2-D and up), ConvTranspose, MaxPool, AveragePool,
GlobalAveragePool, BatchNormalization (inference), LayerNormalization, Dropout
(inference: identity), Resize, GridSample, DeformConv and Col2Im.

Layouts and attributes follow ONNX: x is [N, C, *spatial]; ``pads`` lists all begins,
then all ends; omitted strides / dilations are 1 and omitted pads are 0.  Kernels are
float-only and return the input dtype (f16 is computed in f32).
"""

from __future__ import annotations

import math
import threading
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import sympy
from numpy.lib.stride_tricks import sliding_window_view

from nexus.ir.opdef import Attr, Inferred, OpTypeError
from nexus.ir.types import FLOAT_DTYPES, TensorType, Type, simplify_dim
from nexus.ops import _resize as _rs
from nexus.ops import _sample as _sp
from nexus.ops._rules import (
    assume_equal,
    assuming,
    check_dtype,
    check_int_vector,
    check_same_dtype,
    define,
    dims_value,
    normalize_axis,
    tensor,
)

FAMILY = "nn"
FLOATS = frozenset(FLOAT_DTYPES)


def _wide(x: Any) -> np.ndarray:
    arr = np.asarray(x)
    return arr.astype(np.float32) if arr.dtype == np.float16 else arr


def _geometry(op: str, attrs: Mapping[str, Any], n: int) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    """(strides, pads, dilations) filled with defaults for ``n`` spatial dims."""
    strides = attrs.get("strides") or (1,) * n
    pads = attrs.get("pads") or (0,) * (2 * n)
    dil = attrs.get("dilations") or (1,) * n
    if len(strides) != n or len(pads) != 2 * n or len(dil) != n:
        raise OpTypeError(f"{op}: with {n} spatial dims, strides and dilations need {n} entries and pads {2 * n} "
                          f"(got {len(strides)}, {len(dil)}, {len(pads)})")
    if min(strides) < 1 or min(dil) < 1 or min(pads) < 0:
        raise OpTypeError(f"{op}: strides and dilations must be >= 1 and pads >= 0")
    return tuple(strides), tuple(pads), tuple(dil)


def _out_dim(d: Any, k: int, s: int, pb: int, pe: int, dil: int, ceil: bool = False) -> Any:
    span = d + pb + pe - dil * (k - 1) - 1
    if isinstance(span, int):
        if span < 0:
            return 0
        n = (-(-span // s) if ceil else span // s) + 1
        if ceil and (n - 1) * s >= d + pb:  # the last window must start inside the input
            n -= 1
        return n
    if not ceil:
        return simplify_dim(sympy.floor(span / s) + 1)
    # Ceil mode, with the last window starting inside the input (or its begin padding).
    return simplify_dim(sympy.Min(sympy.ceiling(span / s) + 1, sympy.ceiling((d + pb) / s)))


# --- Conv --------------------------------------------------------------------------------
_CONV_ATTRS = {
    "strides": Attr("ints", None, "step per spatial dim (default 1)"),
    "pads": Attr("ints", None, "padding: all begins, then all ends (default 0)"),
    "dilations": Attr("ints", None, "kernel dilation per spatial dim (default 1)"),
    "group": Attr("int", 1, "number of channel groups"),
}


def _conv_inputs(op: str, ins: Sequence[Type]) -> tuple[TensorType, TensorType, TensorType | None]:
    if len(ins) > 3:
        raise OpTypeError(f"{op}: takes x, w and an optional bias, got {len(ins)} inputs")
    ts = [tensor(op, t, i) for i, t in enumerate(ins)]
    check_dtype(op, ts[0], FLOATS)
    check_same_dtype(op, ts)
    return ts[0], ts[1], ts[2] if len(ts) == 3 else None


def _conv_rule(op: str, ins: Sequence[Type], attrs: Mapping[str, Any], _: Sequence[Any]) -> Type | Inferred:
    x, w, b = _conv_inputs(op, ins)
    if x.shape is None or w.shape is None:
        return x.with_shape(None)
    if len(x.shape) < 3 or len(w.shape) != len(x.shape):
        raise OpTypeError(f"{op}: x must be [N, C, *spatial] and w [M, C/group, *kernel] of the same rank, "
                          f"got {x} and {w}")
    n = len(x.shape) - 2
    strides, pads, dil = _geometry(op, attrs, n)
    g = attrs["group"]
    c, m, cg = x.shape[1], w.shape[0], w.shape[1]
    if isinstance(c, int) and isinstance(cg, int) and c != cg * g:
        raise OpTypeError(f"{op}: x has {c} channels, w expects {cg} per group x {g} groups")
    if isinstance(m, int) and m % g:
        raise OpTypeError(f"{op}: {m} output channels do not divide into {g} groups")
    if b is not None and b.shape is not None and (len(b.shape) != 1 or (
            isinstance(b.shape[0], int) and isinstance(m, int) and b.shape[0] != m)):
        raise OpTypeError(f"{op}: bias must be [{m}], got {b}")
    ks = w.shape[2:]
    if not all(isinstance(k, int) for k in ks):
        raise OpTypeError(f"{op}: the kernel size must be static, got {w}")
    out = [_out_dim(x.shape[2 + i], ks[i], strides[i], pads[i], pads[i + n], dil[i]) for i in range(n)]  # type: ignore
    # x's channels are w's per group times groups (a pair of dims only with one group),
    # the bias has one value per output channel.
    assumed = assume_equal(ins, *([(0, 1, 1, 1)] if g == 1 else []), *([(2, 0, 1, 0)] if b is not None else []))
    return assuming(x.with_shape((x.shape[0], m, *out)), assumed)


def _windows(x: np.ndarray, ks: Sequence[int], strides: Sequence[int], dil: Sequence[int]) -> np.ndarray:
    """[N, C, *out, *k] view of the (already padded) input's sliding windows."""
    n = len(ks)
    span = [d * (k - 1) + 1 for k, d in zip(ks, dil)]
    axes = tuple(range(2, 2 + n))
    win = sliding_window_view(x, span, axis=axes)
    sub = (slice(None), slice(None)) + tuple(slice(None, None, s) for s in strides) + \
        tuple(slice(None, None, d) for d in dil)
    return win[sub]


def _pad(x: np.ndarray, pads: Sequence[int], fill: Any = 0) -> np.ndarray:
    """``x`` with ``pads`` (all begins, then all ends) of ``fill`` around its spatial dims;
    ``x`` itself when there are none (``np.pad`` costs ~30 us of Python per call)."""
    n = x.ndim - 2
    if not any(pads):
        return x
    shape = x.shape[:2] + tuple(x.shape[2 + i] + pads[i] + pads[i + n] for i in range(n))
    out = np.full(shape, fill, x.dtype)
    out[(slice(None), slice(None)) + tuple(slice(pads[i], pads[i] + x.shape[2 + i]) for i in range(n))] = x
    return out


def _tap(xp: np.ndarray, kpos: Sequence[int], out_sp: Sequence[int], strides: Sequence[int],
         dil: Sequence[int]) -> np.ndarray:
    """[N, C, *out] view of the (padded) input elements that kernel position ``kpos`` meets."""
    return xp[(slice(None), slice(None)) + tuple(
        slice(k * d, k * d + s * (o - 1) + 1, s) for k, d, s, o in zip(kpos, dil, strides, out_sp))]


def _conv(x: Any, w: Any, b: Any = None, strides: Any = None, pads: Any = None, dilations: Any = None,
          group: int = 1) -> np.ndarray:
    """Conv as ONNX: one GEMM over an im2col matrix per call, batched over the groups (the
    BLAS of NumPy's matmul does the work), except depthwise convolution (one input channel
    per group), which is a multiply-add of shifted views per kernel position: its GEMMs would
    be matrix-vector products over an im2col K times the input's size."""
    if group == 1 and not any(pads or ()) and not any(s != 1 for s in strides or ()) and type(x) is np.ndarray \
            and type(w) is np.ndarray and x.dtype == w.dtype and x.dtype in _BLAS_FLOATS and x.ndim == w.ndim > 2 \
            and w.size == w.shape[0] * w.shape[1] and x.shape[1] == w.shape[1] and 0 not in x.shape:
        # 1x1, unit strides: the input is its own im2col (the general path's answer, in a
        # tenth of its ~10 us of Python: MobileNet's squeeze-excite convs are 1x1 on 1x1)
        out = np.matmul(w.reshape(w.shape[:2]), x.reshape(x.shape[0], x.shape[1], -1))
        out = out.reshape((x.shape[0], w.shape[0]) + x.shape[2:])
        if b is not None:
            out += np.asarray(b, x.dtype).reshape((1, -1) + (1,) * (x.ndim - 2))
        return out
    xa, wa = _wide(x), _wide(w)
    dtype = np.result_type(xa, wa)
    n = xa.ndim - 2
    strides, pads, dil = _geometry("Conv", {"strides": strides, "pads": pads, "dilations": dilations}, n)
    nb, c = xa.shape[:2]
    m, cg = wa.shape[:2]
    ks = tuple(wa.shape[2:])
    xp = _pad(xa, pads)
    out_sp = tuple(max((xp.shape[2 + i] - dil[i] * (ks[i] - 1) - 1) // strides[i] + 1, 0) for i in range(n))
    if 0 in out_sp or 0 in (nb, m):
        out = np.zeros((nb, m, *out_sp), dtype)
    elif cg == 1 and group == c:
        out = _conv_depthwise(xp, wa, dtype, out_sp, strides, dil)
    else:
        if all(k == 1 for k in ks):  # 1x1: the (strided) input is its own im2col
            cols = _tap(xp, (0,) * n, out_sp, strides, dil)
        else:  # [N, C, *k, *out]: C major, then the kernel position, as w's rows flatten
            win = _windows(xp, ks, strides, dil)
            cols = win.transpose((0, 1) + tuple(range(2 + n, 2 + 2 * n)) + tuple(range(2, 2 + n)))
        p, kk = math.prod(out_sp), math.prod(ks)
        cols = cols.reshape(nb, group, cg * kk, p)
        wg = wa.reshape(group, m // group, cg * kk)
        out = np.matmul(wg, cols).reshape(nb, m, *out_sp)  # [N, G, M/G, P]: NCHW order already
    if b is not None:
        out += _wide(b).reshape((1, m) + (1,) * n)
    return out.astype(np.asarray(x).dtype, copy=False)


def _conv_depthwise(xp: np.ndarray, wa: np.ndarray, dtype: Any, out_sp: tuple[int, ...],
                    strides: Sequence[int], dil: Sequence[int], planned: bool = False) -> np.ndarray:
    """Depthwise Conv (group == C, one input channel per group, M = C * mult): for each
    kernel position, the shifted input view times that tap of every channel's filter.

    With unit strides the spatial dims are flattened, so that each shift is one contiguous
    run per channel (NumPy's inner loop then spans the whole image, not one row: 3-5x
    faster on 14x14 to 56x56 images); the output is computed on the padded grid and its
    valid corner cut out at the end.  With many channels (and one filter per channel) the
    channels go last instead and one einsum contracts the windows with the taps
    (:func:`_conv_depthwise_last`): 3-10x faster on MobileNet's 72- to 576-channel layers,
    slower on its 16-channel one.  ``planned``: called by a planned kernel, which chose
    this path (never channels-last); the temporaries are this thread's work arrays."""
    nb, c = xp.shape[:2]
    n = len(out_sp)
    mult = wa.shape[0] // c
    ks = wa.shape[2:]
    if mult == 1 and c >= 32 and not planned:
        return _conv_depthwise_last(xp, wa, dtype, out_sp, strides, dil)
    taps = wa.reshape(c, mult, math.prod(ks), 1)
    if any(s != 1 for s in strides):
        out = np.empty((nb, c, mult, *out_sp), dtype)
        tmp = _scratch(1, out.shape, dtype) if planned else np.empty_like(out)
        per_dim = taps.reshape(taps.shape[:3] + (1,) * n)
        for i, kpos in enumerate(np.ndindex(*ks)):
            view = _tap(xp, kpos, out_sp, strides, dil)[:, :, None]  # [N, C, 1, *out]
            np.multiply(view, per_dim[:, :, i], out=out if i == 0 else tmp)
            if i:
                out += tmp
        return out.reshape(nb, c * mult, *out_sp)
    sp = xp.shape[2:]
    place = [math.prod(sp[i + 1:]) for i in range(n)]  # the flat step of each spatial dim
    length = sum((o - 1) * p for o, p in zip(out_sp, place)) + 1  # up to the last valid output
    flat = xp.reshape(nb, c, 1, math.prod(sp))
    grid = (_scratch(1, (nb, c, mult, math.prod(sp)), dtype) if planned else
            np.empty((nb, c, mult, math.prod(sp)), dtype))
    acc = grid[..., :length]
    tmp = _scratch(2, acc.shape, dtype) if planned else np.empty_like(acc)
    for i, kpos in enumerate(np.ndindex(*ks)):
        off = sum(k * d * p for k, d, p in zip(kpos, dil, place))
        np.multiply(flat[..., off:off + length], taps[:, :, i], out=acc if i == 0 else tmp)
        if i:
            acc += tmp
    valid = grid.reshape(nb, c * mult, *sp)[(slice(None), slice(None)) + tuple(slice(0, o) for o in out_sp)]
    return valid.copy() if planned else np.ascontiguousarray(valid)


def _conv_depthwise_last(xp: np.ndarray, wa: np.ndarray, dtype: Any, out_sp: tuple[int, ...],
                         strides: Sequence[int], dil: Sequence[int]) -> np.ndarray:
    """Depthwise Conv with one filter per channel, computed channels-last: the [N, *out,
    *kernel, C] view of the input's windows contracted with the [*kernel, C] taps by one
    ``einsum`` (no optimisation: its sum-of-products loop runs over C with the kernel
    positions' products accumulated in place, no temporaries).  Measured in CPU time on
    MobileNetV3's and EfficientNet's layers of 32 to 1152 channels, against a multiply and
    an add per kernel position: 1.5-2x at batch 1 and 8, the same on 64x64 images; a
    product of the windows summed afterwards is slower than both."""
    n = len(out_sp)
    c = xp.shape[1]
    ks = tuple(wa.shape[2:])
    last = np.ascontiguousarray(np.moveaxis(xp, 1, -1))  # [N, *padded, C]
    span = [d * (k - 1) + 1 for k, d in zip(ks, dil)]
    win = sliding_window_view(last, span, axis=tuple(range(1, 1 + n)))  # [N, *positions, C, *span]
    win = win[(slice(None),) + tuple(slice(None, None, s) for s in strides) + (slice(None),) +
              tuple(slice(None, None, d) for d in dil)]
    win = win.transpose((0, *range(1, 1 + n), *range(n + 2, 2 * n + 2), n + 1))  # [N, *out, *k, C]
    taps = np.ascontiguousarray(wa.reshape(c, -1).T).reshape(*ks, c).astype(dtype, copy=False)
    o, k = _LETTERS[:n], _LETTERS[n:2 * n]
    out = np.einsum(f"N{o}{k}C,{k}C->N{o}C", win, taps)
    return np.ascontiguousarray(np.moveaxis(out, -1, 1))


_LETTERS = "abcdefghijklmnopqrstuvwxyz"
_BLAS_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))  # einsum subscripts: output dims, then kernel dims


def planned_conv(strides: Any = None, pads: Any = None, dilations: Any = None, group: int = 1,
                 channels_last: bool = False) -> Any:
    """The Conv kernel of one node (the attributes given), planned once per input shape
    and weights: ``f(x, w, b=None)`` gives :func:`_conv`'s result.  A backend that runs a
    node many times with the same constant weights uses it instead of ``_conv``: what
    ``_conv`` works out on every call (the geometry, the padded and window shapes and
    strides, the weights as GEMM rows or depthwise taps, the bias's broadcast shape) is
    worked out on the first call for an input shape and kept; MobileNet's 52 convolutions
    spent ~40 us of Python each on it at batch 1.  Another input shape or other weights
    plan again (the latest plan is kept); what the plans do not cover (float16, mixed
    dtypes, empty arrays) goes to ``_conv``.

    ``channels_last``: a 1x1 layer leaves its result channels-last from a channels-first
    input too, for a next layer that computes channels-last (the backend knows the graph):
    one GEMM of the input's [N, P, C] view, which BLAS reads transposed as it is, so the
    depthwise layer after it need not move its input channels-last (MobileNetV3-small's
    expansion to 72 channels of 32x32 and the depthwise layer after it, batch 8: 1.6 ->
    1.0 ms).  The GEMM itself is faster so on few input channels (16 -> 72 channels of
    32x32: 340 -> 260 us)."""
    cell: list[tuple[Any, ...]] = [()]

    def conv(x: Any, w: Any, b: Any = None) -> np.ndarray:
        last = cell[0]  # one read: another thread may replace the plan meanwhile
        if last and type(x) is np.ndarray and x.shape == last[0] and x.dtype is last[1] and w is last[2] \
                and b is last[3]:
            return last[4](x)  # type: ignore[no-any-return]
        run = _conv_plan(x, w, b, strides, pads, dilations, group, channels_last)
        if run is None:
            return _conv(x, w, b, strides, pads, dilations, group)
        cell[0] = (x.shape, x.dtype, w, b, run)
        return run(x)

    return conv


# Work arrays of the planned kernels, per thread: a kernel's padded input and im2col matrix
# live only during its call, and fresh arrays of megabytes cost more than the work on them
# (each new page is faulted in and zeroed by the OS: MobileNet's stem at batch 8, 5.4 ms with
# fresh arrays, 1.4 ms reusing them).  Each thread keeps the largest it has needed, per slot;
# above SCRATCH_MAX bytes a call allocates its own.
_SCRATCH = threading.local()
SCRATCH_MAX = 1 << 26  # 64 MiB: ResNet-18's biggest im2col at batch 8 is 59 MB
DEPTHWISE_SLICE = 1 << 20
_SLOTS = 3


def _scratch(slot: int, shape: tuple[int, ...], dtype: np.dtype[Any]) -> np.ndarray:
    """An uninitialised C-ordered array of this thread's work slot ``slot``."""
    nbytes = math.prod(shape) * dtype.itemsize
    if nbytes > SCRATCH_MAX:
        return np.empty(shape, dtype)
    bufs = getattr(_SCRATCH, "bufs", None)
    if bufs is None:
        bufs = _SCRATCH.bufs = [np.empty(0, np.uint8)] * _SLOTS
    buf = bufs[slot]
    if buf.nbytes < nbytes:
        buf = bufs[slot] = np.empty(nbytes, np.uint8)
    return np.ndarray(shape, dtype, buf)


def _borders(shape: tuple[int, ...], axes: Sequence[int], pads: Sequence[int]) -> list[tuple[slice, ...]]:
    """The index of each border slab of a padded array (``pads``: the begins, then the ends,
    of ``axes``), which a reused work array must have zeroed again."""
    n = len(axes)
    out = []
    for i, a in enumerate(axes):
        for lo, hi in ((0, pads[i]), (shape[a] - pads[i + n], shape[a])):
            if hi > lo:
                out.append(tuple(slice(lo, hi) if d == a else slice(None) for d in range(len(shape))))
    return out


def _padded(slot: int, x: np.ndarray, shape: tuple[int, ...], inner: tuple[slice, ...],
            borders: list[tuple[slice, ...]]) -> np.ndarray:
    """``x`` (or its transposed view) written into a work array of ``shape`` at ``inner``,
    the ``borders`` around it zeroed."""
    buf = _scratch(slot, shape, x.dtype)
    for idx in borders:
        buf[idx] = 0
    buf[inner] = x
    return buf


def depthwise_channels_last(shape: Sequence[Any], w_shape: Sequence[Any], group: int, strides: Sequence[int]) -> bool:
    """Whether the planned kernel computes a Conv of input ``shape`` and weights ``w_shape``
    channels-last (:func:`_depthwise_last_plan`): a depthwise layer (one filter per
    channel) of 32 channels or more, but for unit strides on images of 20 pixels a channel
    or more, where the shifted multiply-adds on whole flattened images win (EfficientNet's
    32 channels of 64x64 at batch 8: 9.1 ms channels-last, 2.5 ms; MobileNet's 88 of 16x16:
    0.84, 1.2 ms; break-even near 48 channels of 32x32).  False where a dim is not known."""
    if not all(isinstance(d, int) for d in (*shape[1:], *w_shape[:2])):
        return False
    c, m, cg = shape[1], w_shape[0], w_shape[1]
    return bool(cg == 1 and group == c and m == c and c >= 32 and not (
        all(st == 1 for st in strides) and math.prod(shape[2:]) >= 20 * c))


def _conv_plan(x: Any, w: Any, b: Any, strides: Any, pads: Any, dilations: Any, group: int,
               last_out: bool = False) -> Any:
    """A function of x alone that computes Conv for ``x``'s shape and dtype with these
    weights, or None where :func:`_conv` should (see :func:`planned_conv`)."""
    if not (type(x) is np.ndarray and type(w) is np.ndarray and x.dtype == w.dtype and x.dtype in _BLAS_FLOATS
            and x.ndim == w.ndim > 2 and 0 not in x.shape and 0 not in w.shape):
        return None
    if b is not None and not (type(b) is np.ndarray and b.shape == w.shape[:1]):
        return None
    n = x.ndim - 2
    strides, pads, dil = _geometry("Conv", {"strides": strides, "pads": pads, "dilations": dilations}, n)
    nb, c = x.shape[:2]
    m, cg = w.shape[:2]
    ks = tuple(w.shape[2:])
    if c != cg * group or m % group:
        return None  # _conv raises what it raises
    dtype = x.dtype
    padded = x.shape[:2] + tuple(x.shape[2 + i] + pads[i] + pads[i + n] for i in range(n))
    out_sp = tuple((padded[2 + i] - dil[i] * (ks[i] - 1) - 1) // strides[i] + 1 for i in range(n))
    if min(out_sp) < 1:
        return None
    inner = (slice(None), slice(None)) + tuple(slice(pads[i], pads[i] + x.shape[2 + i]) for i in range(n))
    borders = _borders(padded, range(2, n + 2), pads)
    bias = None if b is None else np.ascontiguousarray(b.astype(dtype, copy=False))
    if depthwise_channels_last(x.shape, w.shape, group, strides):
        return _depthwise_last_plan(x.shape, dtype, w, bias, padded, pads, out_sp, strides, dil)
    pad = any(pads)
    bias_nc = None if bias is None else bias.reshape((1, m) + (1,) * n)
    if cg == 1 and group == c and any(st != 1 for st in strides):
        return _depthwise_phase_plan(x.shape, dtype, w, bias, pads, out_sp, strides, dil)
    if cg == 1 and group == c:
        def depthwise(x: np.ndarray) -> np.ndarray:
            xp = _padded(0, x, padded, inner, borders) if pad else x
            out = _conv_depthwise(xp, w, dtype, out_sp, strides, dil, planned=True)
            if bias_nc is not None:
                out += bias_nc
            return out
        return depthwise
    # GEMM: [G, M/G, C/G * K] @ [N, G, C/G * K, P], the windows' [N, C, *k, *out] view (C
    # major, then the kernel position, as w's rows flatten) copied into the im2col matrix.
    kk, p = math.prod(ks), math.prod(out_sp)
    rows = np.ascontiguousarray(w).reshape(group, m // group, cg * kk)
    item = dtype.itemsize
    steps = [item * math.prod(padded[i + 1:]) for i in range(n + 2)]  # a C-ordered padded array's strides
    direct = all(k == 1 for k in ks) and not pad and all(s == 1 for s in strides)
    win_shape = (nb, c) + ks + out_sp
    win_strides = (steps[0], steps[1]) + tuple(steps[2 + i] * dil[i] for i in range(n)) + \
        tuple(steps[2 + i] * strides[i] for i in range(n))
    cols_shape = (nb, group, cg * kk, p)
    out_shape = (nb, m) + out_sp

    # a 1x1's [C, M] weights for a channels-last input (see _depthwise_last_plan)
    last_rows = np.ascontiguousarray(rows.reshape(m, c).T) if direct and group == 1 else None
    moved = (0,) + tuple(range(2, n + 2)) + (1,)
    to_first = (0, n + 1) + tuple(range(1, n + 1))
    unit = math.prod(x.shape[2:]) == 1  # [N, C, 1, 1]: both layouts at once; one GEMM is faster

    def gemm(x: np.ndarray) -> np.ndarray:
        if unit and last_rows is not None:
            # [N, C, 1, 1] (squeeze-excite): [N, C] @ [C, M], without the layout's views
            out = np.matmul(x.reshape(nb, c), last_rows)
            if bias is not None:
                out += bias
            return out.reshape(out_shape)
        if last_rows is not None and last_out and x.flags.c_contiguous:
            # a channels-first input, its [N, P, C] view (each image's [C, P] transposed: BLAS
            # reads it as it is) times [C, M], the result channels-last for the next layer
            out = np.matmul(x.reshape(nb, c, p).transpose(0, 2, 1), last_rows)
            if bias is not None:
                out += bias
            return out.reshape((nb,) + out_sp + (m,)).transpose(to_first)
        if last_rows is not None and (unit or not x.flags.c_contiguous) \
                and (xl := x.transpose(moved)).flags.c_contiguous:
            # a channels-last input (a channels-last kernel's result): one [N*P, C] @ [C, M]
            # GEMM, its result left channels-last too
            out = np.matmul(xl.reshape(-1, c), last_rows)
            if bias is not None:
                out += bias
            return out.reshape(xl.shape[:-1] + (m,)).transpose(to_first)
        if direct:  # 1x1, unit strides: the input is its own im2col
            cols = x.reshape(cols_shape)
        else:
            xp = _padded(0, x, padded, inner, borders) if pad or not x.flags.c_contiguous else x
            cols = _scratch(1, cols_shape, dtype)
            np.copyto(cols.reshape(win_shape), np.ndarray(win_shape, dtype, xp, 0, win_strides))
        out = np.matmul(rows, cols).reshape(out_shape)
        if bias_nc is not None:
            out += bias_nc
        return out
    return gemm


def _depthwise_last_plan(shape: tuple[int, ...], dtype: Any, w: np.ndarray, bias: np.ndarray | None,
                         padded: tuple[int, ...], pads: Sequence[int], out_sp: tuple[int, ...],
                         strides: Sequence[int], dil: Sequence[int]) -> Any:
    """:func:`_conv_depthwise_last` planned: the input padded and moved channels-last into
    a [N, *padded, C] work array, the windows a strided view of it, one ``einsum`` with the
    taps into a [N, *out, C] array, the bias added in place, and that array returned as its
    [N, C, *out] view: channels-last, not C-contiguous.  The layout so travels without
    copies through the elementwise ops after the layer (NumPy's ufuncs keep their input's
    layout) to the next convolution, which takes it as it is: a 1x1 as one GEMM of
    [N * P, C] rows (channels-last again), this kernel by one contiguous copy into its padded
    work array; any other op sees an ordinary array (a copy is made where contiguity is
    needed, as for any view).  The transposing copies into and out of each depthwise layer,
    a third of its time on MobileNetV3, are gone between such layers.  A channels-first
    input is moved channels-last directly on small images and through a padded
    channels-first copy on large ones: a channel's stride of a power of two floats (32x32,
    64x64) makes the direct transposing copy 4x slower (cache sets).  A large batch goes
    through in slices of about DEPTHWISE_SLICE bytes of padded input, so that each slice's
    arrays stay in the core's cache from one step to the next (EfficientNet's 96 channels
    of 64x64 at batch 8: 8.6 ms whole, a batch of one 0.6 ms)."""
    n = len(out_sp)
    nb, c = shape[:2]
    ks = tuple(w.shape[2:])
    item = dtype.itemsize
    per_image = math.prod(padded[1:]) * item
    part = max(1, min(nb, DEPTHWISE_SLICE // per_image))
    last = padded[2:] + (c,)  # a channels-last image
    steps = [item * math.prod(last[i:]) for i in range(n + 2)]
    win_shape = out_sp + ks + (c,)
    win_strides = (steps[0],) + tuple(steps[1 + i] * strides[i] for i in range(n)) + \
        tuple(steps[1 + i] * dil[i] for i in range(n)) + (item,)
    taps = np.ascontiguousarray(w.reshape(c, -1).T).reshape(*ks, c)
    o, k = _LETTERS[:n], _LETTERS[n:2 * n]
    spec = f"N{o}{k}C,{k}C->N{o}C"
    to_first = (0, n + 1) + tuple(range(1, n + 1))
    pad = padded != shape
    two_step = pad and math.prod(shape[2:]) >= 256
    moved = (0,) + tuple(range(2, n + 2)) + (1,)
    first_inner = (slice(None), slice(None)) + tuple(slice(pads[i], pads[i] + shape[2 + i]) for i in range(n))
    last_inner = (slice(None),) + first_inner[2:] + (slice(None),)
    first_borders = _borders(padded, range(2, n + 2), pads)  # the batch dim is whole: any slice's
    last_borders = _borders((nb,) + last, range(1, n + 1), pads)

    def depthwise(x: np.ndarray) -> np.ndarray:
        res = np.empty((nb,) + out_sp + (c,), dtype)
        moved_x = x.transpose(moved)
        first = two_step and not moved_x.flags.c_contiguous  # a channels-last input is copied as it is
        for lo in range(0, nb, part):
            if first:
                xp = _padded(0, x[lo:lo + part], (min(part, nb - lo),) + padded[1:], first_inner, first_borders)
                buf = _scratch(1, xp.shape[:1] + last, dtype)
                np.copyto(buf, xp.transpose(moved))
            else:
                xs = moved_x[lo:lo + part]
                buf = xs if not pad and xs.flags.c_contiguous else _padded(1, xs, xs.shape[:1] + last, last_inner,
                                                                          last_borders)
            win = np.ndarray(buf.shape[:1] + win_shape, dtype, buf, 0, win_strides)
            np.einsum(spec, win, taps, out=res[lo:lo + part])
        if bias is not None:
            res += bias
        return res.transpose(to_first)
    return depthwise


def _depthwise_phase_plan(shape: tuple[int, ...], dtype: Any, w: np.ndarray, bias: np.ndarray | None,
                          pads: Sequence[int], out_sp: tuple[int, ...], strides: Sequence[int],
                          dil: Sequence[int]) -> Any:
    """A strided depthwise Conv (group == C, M = C * mult) computed channels-first on the
    input split into its stride phases: phase (p_1, ..) of the padded input holds the
    elements at p_i + s_i * j in each spatial dim, so that every kernel position reads
    one phase at a fixed shift, and the whole image of a channel is one contiguous run as
    in the unit-stride path of :func:`_conv_depthwise` (its multiply-adds otherwise read
    every kernel position through views strided by s in the innermost dim).  The phases
    are filled by one strided copy each (s_1 * s_2 of them, the padding zeroed at the
    borders of each); the products accumulate in contiguous work arrays, whose valid
    corner is copied out.  MobileNetV3's 16 channels of 64x64 at stride 2, in CPU time:
    1.1 -> 0.75 ms at batch 8."""
    n = len(out_sp)
    nb, c = shape[:2]
    m = w.shape[0]
    mult = m // c
    ks = tuple(w.shape[2:])
    item = dtype.itemsize
    reach = [(d * (k - 1)) // s for k, d, s in zip(ks, dil, strides)]  # the furthest shift in a phase
    plane = tuple(o + r for o, r in zip(out_sp, reach))  # each phase's extent
    phases = list(np.ndindex(*strides))
    buf_shape = (nb, c, len(phases)) + plane
    # per phase: where x's elements go (None: x reaches none of it), which of x's elements,
    # the borders to zero
    fills: list[tuple[tuple[Any, ...] | None, tuple[Any, ...], list[tuple[Any, ...]]]] = []
    for k, ph in enumerate(phases):
        lo, cnt, src = [], [], []
        for i in range(n):
            j0 = max(0, -(-(pads[i] - ph[i]) // strides[i]))  # the first plane index on x
            h0 = j0 * strides[i] + ph[i] - pads[i]
            count = max(0, min(len(range(h0, shape[2 + i], strides[i])), plane[i] - j0))
            lo.append(j0)
            cnt.append(count)
            src.append(slice(h0, h0 + strides[i] * (count - 1) + 1, strides[i]) if count else slice(0, 0))
        at = (slice(None), slice(None), k)
        dst: tuple[Any, ...] | None = at + tuple(slice(j, j + q) for j, q in zip(lo, cnt))
        edge = lo + [p - j - q for p, j, q in zip(plane, lo, cnt)]
        borders = [at + idx[2:] for idx in _borders((nb, c) + plane, range(2, n + 2), edge)]
        if 0 in cnt:  # a phase that x does not reach: all padding
            borders, dst = [at], None
        fills.append((dst, (slice(None), slice(None)) + tuple(src), borders))
    place = [math.prod(plane[i + 1:]) for i in range(n)]
    length = sum((o - 1) * p for o, p in zip(out_sp, place)) + 1
    taps = np.ascontiguousarray(w.reshape(c, mult, math.prod(ks), 1).astype(dtype, copy=False))
    reads = []  # per kernel position: its phase and its shift in that phase
    for kpos in np.ndindex(*ks):
        ph = tuple(k * d % s for k, d, s in zip(kpos, dil, strides))
        off = sum((k * d // s) * p for k, d, s, p in zip(kpos, dil, strides, place))
        reads.append((phases.index(ph), off))
    acc_shape = (nb, c, mult, length)
    valid_shape = (nb, m) + out_sp
    valid_strides = (item * c * mult * length, item * length) + tuple(item * p for p in place)
    bias_nc = None if bias is None else bias.reshape((1, m) + (1,) * n)

    def depthwise(x: np.ndarray) -> np.ndarray:
        buf = _scratch(0, buf_shape, dtype)
        for dst, src, borders in fills:
            for idx in borders:
                buf[idx] = 0
            if dst is not None:
                buf[dst] = x[src]
        flat = buf.reshape(nb, c, 1, len(phases), -1)
        acc = _scratch(1, acc_shape, dtype)
        tmp = _scratch(2, acc_shape, dtype)
        for i, (k, off) in enumerate(reads):
            np.multiply(flat[:, :, :, k, off:off + length], taps[:, :, i], out=acc if i == 0 else tmp)
            if i:
                acc += tmp
        out = np.array(np.ndarray(valid_shape, dtype, acc, 0, valid_strides))
        if bias_nc is not None:
            out += bias_nc
        return out
    return depthwise


define("Conv", FAMILY, ("x", "w", "b"), _conv_rule, _conv, attrs=_CONV_ATTRS, variadic=True, differentiable=True,
       multithreaded=True,
       doc="N-d convolution (cross-correlation) of x [N, C, *spatial] with w [M, C/group, *kernel] and an "
           "optional bias [M]; strides, pads, dilations, groups as ONNX Conv.")


# --- ConvTranspose -----------------------------------------------------------------------
def _convt_rule(op: str, ins: Sequence[Type], attrs: Mapping[str, Any], _: Sequence[Any]) -> Type | Inferred:
    x, w, b = _conv_inputs(op, ins)
    if x.shape is None or w.shape is None:
        return x.with_shape(None)
    if len(x.shape) < 3 or len(w.shape) != len(x.shape):
        raise OpTypeError(f"{op}: x must be [N, C, *spatial] and w [C, M/group, *kernel], got {x} and {w}")
    n = len(x.shape) - 2
    strides, pads, dil = _geometry(op, attrs, n)
    opad = attrs.get("output_padding") or (0,) * n
    g = attrs["group"]
    c = x.shape[1]
    if isinstance(c, int) and isinstance(w.shape[0], int) and c != w.shape[0]:
        raise OpTypeError(f"{op}: x has {c} channels, w has {w.shape[0]}")
    ks = w.shape[2:]
    if not all(isinstance(k, int) for k in ks):
        raise OpTypeError(f"{op}: the kernel size must be static, got {w}")
    out = [simplify_dim(strides[i] * (x.shape[2 + i] - 1) + opad[i] + dil[i] * (ks[i] - 1) + 1  # type: ignore
                        - pads[i] - pads[i + n]) for i in range(n)]
    assumed = assume_equal(ins, (0, 1, 1, 0), *([(2, 0, 1, 1)] if b is not None and g == 1 else []))
    return assuming(x.with_shape((x.shape[0], w.shape[1] * g, *out)), assumed)


def _conv_transpose(x: Any, w: Any, b: Any = None, strides: Any = None, pads: Any = None, dilations: Any = None,
                    group: int = 1, output_padding: Any = None) -> np.ndarray:
    xa, wa = _wide(x), _wide(w)
    n = xa.ndim - 2
    strides, pads, dil = _geometry("ConvTranspose", {"strides": strides, "pads": pads, "dilations": dilations}, n)
    opad = output_padding or (0,) * n
    nb, c = xa.shape[:2]
    ks, cg, mg = tuple(wa.shape[2:]), c // group, wa.shape[1]
    sp = xa.shape[2:]
    full = [strides[i] * (sp[i] - 1) + dil[i] * (ks[i] - 1) + 1 + opad[i] for i in range(n)]
    out = np.zeros((nb, mg * group, *full), dtype=np.result_type(xa, wa))
    # Every group's columns in one matmul batched over the groups, [G, M/G * K, C/G] @
    # [N, G, C/G, P]; then each kernel position's [N, M, *spatial] slice is added where it lands.
    wt = wa.reshape(group, cg, mg * math.prod(ks)).transpose(0, 2, 1)
    cols = np.matmul(wt, xa.reshape(nb, group, cg, math.prod(sp))).reshape(nb, group * mg, *ks, *sp)
    for kpos in np.ndindex(*ks):
        dst = (slice(None), slice(None)) + tuple(
            slice(kpos[i] * dil[i], kpos[i] * dil[i] + strides[i] * (sp[i] - 1) + 1, strides[i]) for i in range(n))
        out[dst] += cols[(slice(None), slice(None)) + kpos]
    crop = (slice(None), slice(None)) + tuple(slice(pads[i], full[i] - pads[i + n]) for i in range(n))
    out = out[crop]
    if b is not None:
        out = out + _wide(b).reshape((1, -1) + (1,) * n)
    return np.ascontiguousarray(out.astype(np.asarray(x).dtype, copy=False))


define("ConvTranspose", FAMILY, ("x", "w", "b"), _convt_rule, _conv_transpose, variadic=True, differentiable=True,
       multithreaded=True,
       attrs={**_CONV_ATTRS, "output_padding": Attr("ints", None, "extra size at the end of each spatial dim")},
       doc="Transposed convolution of x [N, C, *spatial] with w [C, M/group, *kernel] and an optional bias "
           "[M] (the gradient of Conv with respect to its input), as ONNX ConvTranspose.")


# --- pooling -----------------------------------------------------------------------------
def _pool_rule(op: str, ins: Sequence[Type], attrs: Mapping[str, Any], _: Sequence[Any]) -> Type:
    x = tensor(op, ins[0], 0)
    check_dtype(op, x, FLOATS)
    if x.shape is None:
        return x
    ks = attrs["kernel_shape"]
    n = len(x.shape) - 2
    if n < 1 or len(ks) != n:
        raise OpTypeError(f"{op}: kernel_shape {list(ks)} does not fit x {x} ([N, C, *spatial])")
    strides, pads, dil = _geometry(op, attrs, n)
    for i in range(n):
        if pads[i] >= ks[i] or pads[i + n] >= ks[i]:
            raise OpTypeError(f"{op}: pads must be smaller than the kernel, got {list(pads)} for {list(ks)}")
    out = [_out_dim(x.shape[2 + i], ks[i], strides[i], pads[i], pads[i + n], dil[i], attrs["ceil_mode"])
           for i in range(n)]
    return x.with_shape(tuple(x.shape[:2]) + tuple(out))


def _pool_padded(xa: np.ndarray, fill: float, kernel_shape: Sequence[int], strides: Any, pads: Any,
                 dilations: Any, ceil_mode: bool, overhang_fill: float | None = None
                 ) -> tuple[np.ndarray, tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    """(x padded for the windows, the output sizes, strides, dilations) of a pooling op."""
    n = xa.ndim - 2
    strides, pads, dil = _geometry("Pool", {"strides": strides, "pads": pads, "dilations": dilations}, n)
    outs = tuple(_out_dim(xa.shape[2 + i], kernel_shape[i], strides[i], pads[i], pads[i + n], dil[i], ceil_mode)
                 for i in range(n))
    # Extra padding at the end so that ceil-mode windows exist; it never wins a max and
    # is never counted in an average.
    extra = tuple(max((outs[i] - 1) * strides[i] + dil[i] * (kernel_shape[i] - 1) + 1
                      - (xa.shape[2 + i] + pads[i] + pads[i + n]), 0) for i in range(n))
    xp = _pad(_pad(xa, pads, fill), (0,) * n + extra, fill if overhang_fill is None else overhang_fill)
    return xp, outs, strides, dil


def _pool_windows(xa: np.ndarray, fill: float, kernel_shape: Sequence[int], strides: Any, pads: Any,
                  dilations: Any, ceil_mode: bool, overhang_fill: float | None = None) -> np.ndarray:
    """[N, C, *out, *k] view of the pooling windows (padding and ceil-mode overhang filled)."""
    xp, outs, strides, dil = _pool_padded(xa, fill, kernel_shape, strides, pads, dilations, ceil_mode,
                                          overhang_fill)
    win = _windows(xp, kernel_shape, strides, dil)
    return win[(slice(None), slice(None)) + tuple(slice(0, o) for o in outs)]


def _pool_reduce(ufunc: np.ufunc, xa: np.ndarray, fill: float, kernel_shape: Sequence[int], strides: Any,
                 pads: Any, dilations: Any, ceil_mode: bool, overhang_fill: float | None = None) -> np.ndarray:
    """``ufunc`` (np.maximum, np.add) folded over the windows: one pass over the output per
    kernel position, instead of a reduction over a strided window view (7x slower)."""
    xp, outs, strides, dil = _pool_padded(xa, fill, kernel_shape, strides, pads, dilations, ceil_mode,
                                          overhang_fill)
    if 0 in outs:
        return np.zeros(xa.shape[:2] + outs, xa.dtype)
    out: np.ndarray | None = None
    for kpos in np.ndindex(*kernel_shape):
        view = _tap(xp, kpos, outs, strides, dil)
        if out is None:
            out = view.copy()
        else:
            ufunc(out, view, out=out)
    assert out is not None  # kernel_shape has no 0 (pads < kernel, the type rule)
    return out


def _max_pool(x: Any, kernel_shape: Sequence[int], strides: Any = None, pads: Any = None, dilations: Any = None,
              ceil_mode: bool = False) -> np.ndarray:
    xa = _wide(x)
    out = _pool_reduce(np.maximum, xa, -np.inf, kernel_shape, strides, pads, dilations, ceil_mode)
    return out.astype(np.asarray(x).dtype, copy=False)


def _avg_pool(x: Any, kernel_shape: Sequence[int], strides: Any = None, pads: Any = None,
              ceil_mode: bool = False, count_include_pad: bool = False, dilations: Any = None) -> np.ndarray:
    xa = _wide(x)
    total = _pool_reduce(np.add, xa, 0.0, kernel_shape, strides, pads, dilations, ceil_mode)
    # Divisor: the window's elements inside the input, plus (count_include_pad) those in
    # the explicit padding; the ceil-mode overhang never counts (as PyTorch and ORT).
    inside = np.ones((1, 1) + xa.shape[2:], xa.dtype)
    count = _pool_reduce(np.add, inside, 1.0 if count_include_pad else 0.0, kernel_shape, strides, pads, dilations,
                         ceil_mode, overhang_fill=0.0)
    total /= np.maximum(count, 1)
    return total.astype(np.asarray(x).dtype, copy=False)


_POOL_ATTRS = {
    "kernel_shape": Attr("ints", doc="window size per spatial dim"),
    "strides": Attr("ints", None, "step per spatial dim (default 1)"),
    "pads": Attr("ints", None, "padding: all begins, then all ends (default 0)"),
    "ceil_mode": Attr("bool", False, "round the output size up"),
}
define("MaxPool", FAMILY, ("x",), _pool_rule, _max_pool, differentiable=True,
       attrs={**_POOL_ATTRS, "dilations": Attr("ints", None, "window dilation (default 1)")},
       doc="Maximum over sliding windows of x [N, C, *spatial] (padding never wins), as ONNX MaxPool.")
def _argmax_pool_rule(op: str, ins: Sequence[Type], attrs: Mapping[str, Any], values: Sequence[Any]) -> Type:
    if attrs.get("storage_order", 0) not in (0, 1):
        raise OpTypeError(f"{op}: storage_order must be 0 (row-major) or 1 (column-major), "
                          f"got {attrs['storage_order']}")
    t = _pool_rule(op, ins, attrs, values)
    assert isinstance(t, TensorType)
    return t.with_dtype("i64")


def _max_pool_indices(x: Any, kernel_shape: Sequence[int], strides: Any = None, pads: Any = None,
                      dilations: Any = None, ceil_mode: bool = False, storage_order: int = 0) -> np.ndarray:
    """Where each window's (first) maximum is, as a flat index into x, as ONNX MaxPool's
    Indices output: row-major, or with the spatial dims column-major (storage_order 1)."""
    xa = _wide(x)
    n = xa.ndim - 2
    win = _pool_windows(xa, -np.inf, kernel_shape, strides, pads, dilations, ceil_mode)
    spatial = xa.shape[2:]
    if storage_order:  # numbered with the spatial dims reversed, then put back in place
        flat = np.arange(xa.size, dtype=np.int64).reshape(xa.shape[:2] + spatial[::-1])
        flat = flat.transpose((0, 1) + tuple(range(1 + n, 1, -1)))
    else:
        flat = np.arange(xa.size, dtype=np.int64).reshape(xa.shape)
    where = _pool_windows(flat, -1, kernel_shape, strides, pads, dilations, ceil_mode)
    lead = win.shape[: 2 + n]
    best = win.reshape(lead + (-1,)).argmax(axis=-1)[..., None]
    return np.ascontiguousarray(np.take_along_axis(where.reshape(lead + (-1,)), best, axis=-1)[..., 0])


define("MaxPoolIndices", FAMILY, ("x",), _argmax_pool_rule, _max_pool_indices,
       attrs={**_POOL_ATTRS, "dilations": Attr("ints", None, "window dilation (default 1)"),
              "storage_order": Attr("int", 0, "0: row-major indices; 1: the spatial dims column-major")},
       doc="The flat index (i64) into x of each MaxPool window's first maximum (padding never wins), as ONNX "
           "MaxPool's Indices output.")
define("AveragePool", FAMILY, ("x",), _pool_rule, _avg_pool, differentiable=True,
       attrs={**_POOL_ATTRS, "count_include_pad": Attr("bool", False, "count padded elements in the divisor"),
              "dilations": Attr("ints", None, "window dilation (default 1)")},
       doc="Mean over sliding windows of x [N, C, *spatial], as ONNX AveragePool.")


def _gap_rule(op: str, ins: Sequence[Type], attrs: Mapping[str, Any], _: Sequence[Any]) -> Type:
    x = tensor(op, ins[0], 0)
    check_dtype(op, x, FLOATS)
    if x.shape is None:
        return x
    if len(x.shape) < 3:
        raise OpTypeError(f"{op}: x must be [N, C, *spatial], got {x}")
    return x.with_shape(tuple(x.shape[:2]) + (1,) * (len(x.shape) - 2))


def _global_avg_pool(x: Any) -> np.ndarray:
    xa = _wide(x)
    out = xa.mean(axis=tuple(range(2, xa.ndim)), keepdims=True)
    return out.astype(np.asarray(x).dtype)


define("GlobalAveragePool", FAMILY, ("x",), _gap_rule, _global_avg_pool, differentiable=True,
       doc="Mean over all spatial dims: [N, C, *spatial] -> [N, C, 1, ...].")


# --- normalisation -----------------------------------------------------------------------
def _bn_rule(op: str, ins: Sequence[Type], attrs: Mapping[str, Any], _: Sequence[Any]) -> Type | Inferred:
    ts = [tensor(op, t, i) for i, t in enumerate(ins)]
    check_dtype(op, ts[0], FLOATS)
    check_same_dtype(op, ts)
    x = ts[0]
    if x.shape is not None and len(x.shape) < 2:
        raise OpTypeError(f"{op}: x must be [N, C, ...], got {x}")
    c = x.shape[1] if x.shape is not None else None
    names = ("x", "scale", "bias", "mean", "var")
    for i, t in enumerate(ts[1:], 1):
        if t.shape is not None and (len(t.shape) != 1 or (
                isinstance(c, int) and isinstance(t.shape[0], int) and t.shape[0] != c)):
            raise OpTypeError(f"{op}: {names[i]} must be [C] = [{c}], got {t}")
    return assuming(x, assume_equal(ins, *((0, 1, i, 0) for i in range(1, len(ts)))))


def _batch_norm(x: Any, scale: Any, bias: Any, mean: Any, var: Any, epsilon: float = 1e-5) -> np.ndarray:
    xa = _wide(x)
    shape = (1, -1) + (1,) * (xa.ndim - 2)
    # The per-channel factor first (C values), then three passes over x, two in place.
    factor = _wide(scale) / np.sqrt(_wide(var) + xa.dtype.type(epsilon))
    out = xa - _wide(mean).reshape(shape)
    out *= factor.reshape(shape)
    out += _wide(bias).reshape(shape)
    return out.astype(np.asarray(x).dtype, copy=False)


define("BatchNormalization", FAMILY, ("x", "scale", "bias", "mean", "var"), _bn_rule, _batch_norm,
       differentiable=True, attrs={"epsilon": Attr("float", 1e-5, "added to the variance")},
       doc="Inference batch norm over channel axis 1 with running mean and var: "
           "(x - mean) / sqrt(var + eps) * scale + bias.")


def _ln_rule(op: str, ins: Sequence[Type], attrs: Mapping[str, Any], _: Sequence[Any]) -> Type | Inferred:
    if len(ins) > 3:
        raise OpTypeError(f"{op}: takes x, scale and an optional bias, got {len(ins)} inputs")
    ts = [tensor(op, t, i) for i, t in enumerate(ins)]
    check_dtype(op, ts[0], FLOATS)
    check_same_dtype(op, ts)
    x = ts[0]
    if x.shape is None:
        return x
    axis = normalize_axis(op, attrs["axis"], len(x.shape))
    norm = x.shape[axis:]
    for i, t in enumerate(ts[1:], 1):
        if t.shape is None:
            continue
        if len(t.shape) > len(norm) or any(isinstance(a, int) and isinstance(b, int) and a not in (b, 1)
                                           for a, b in zip(reversed(t.shape), reversed(norm))):
            raise OpTypeError(f"{op}: {'scale' if i == 1 else 'bias'} {t} does not fit the normalised "
                              f"dims {list(norm)}")
    # scale and bias broadcast against the normalised (trailing) dims of x
    pairs = [(0, -k, i, -k) for i, t in enumerate(ts[1:], 1) if t.shape is not None
             for k in range(1, len(t.shape) + 1)]
    return assuming(x, assume_equal(ins, *pairs, broadcast=True))


def _layer_norm(x: Any, scale: Any, bias: Any = None, axis: int = -1, epsilon: float = 1e-5) -> np.ndarray:
    xa = _wide(x)
    axes = tuple(range(axis % xa.ndim, xa.ndim))
    count = math.prod(xa.shape[axis % xa.ndim:])
    # The means as np.mean computes them (a pairwise sum divided by the count), without its
    # wrapper's ~3 us a call (BERT's and BART's LayerNorms are on 4k-element arrays at batch 1)
    mean = np.add.reduce(xa, axis=axes, keepdims=True)
    mean /= count
    out = xa - mean
    var = np.add.reduce(np.square(out), axis=axes, keepdims=True)
    var /= count
    # In place from here: out is this kernel's own array, and scale and bias broadcast
    # against the normalised (trailing) dims, so its shape stays x's.
    var += xa.dtype.type(epsilon)
    out /= np.sqrt(var, out=var)
    out *= _wide(scale)
    if bias is not None:
        out += _wide(bias)
    return out.astype(np.asarray(x).dtype, copy=False)


define("LayerNormalization", FAMILY, ("x", "scale", "bias"), _ln_rule, _layer_norm, variadic=True,
       differentiable=True,
       attrs={"axis": Attr("int", -1, "the first normalised axis (all after it too)"),
              "epsilon": Attr("float", 1e-5, "added to the variance")},
       doc="(x - mean) / sqrt(var + eps) * scale + bias over the axes from `axis` on (ONNX LayerNormalization).")


def _dropout_rule(op: str, ins: Sequence[Type], attrs: Mapping[str, Any], _: Sequence[Any]) -> Type:
    x = tensor(op, ins[0], 0)
    check_dtype(op, x, FLOATS)
    if not 0 <= attrs["ratio"] < 1:
        raise OpTypeError(f"{op}: ratio must be in [0, 1), got {attrs['ratio']}")
    return x


define("Dropout", FAMILY, ("x",), _dropout_rule, lambda x, ratio=0.5: x, differentiable=True,
       attrs={"ratio": Attr("float", 0.5, "the drop probability in training (unused at inference)")},
       doc="Identity (inference); training-mode dropout is a random op with an explicit seed.")


# --- Resize ------------------------------------------------------------------------------
def _resize_rule(op: str, ins: Sequence[Type], attrs: Mapping[str, Any], values: Sequence[Any]) -> Type:
    x, s = tensor(op, ins[0], 0), tensor(op, ins[1], 1)
    check_dtype(op, x, FLOATS)
    check_int_vector(op, s, "sizes")
    for key, allowed in (("mode", _rs.MODES), ("coordinate_transformation_mode", _rs.COORD_MODES),
                         ("nearest_mode", _rs.NEAREST_MODES)):
        if attrs[key] not in allowed:
            raise OpTypeError(f"{op}: {key} must be one of {', '.join(allowed)}, got {attrs[key]!r}")
    if attrs.get("antialias") and attrs["mode"] == "nearest":
        raise OpTypeError(f"{op}: antialias applies to linear and cubic, not nearest")
    if x.shape is None:
        return x
    rank = len(x.shape)
    n = s.shape[0] if s.shape is not None else None
    if isinstance(n, int) and n != rank:
        raise OpTypeError(f"{op}: sizes has {n} entries, x has rank {rank}")
    for key, want in (("scales", rank), ("roi", 2 * rank)):
        got = attrs.get(key)
        if got is not None and len(got) != want:
            raise OpTypeError(f"{op}: {key} has {len(got)} entries, x of rank {rank} needs {want}")
    if attrs.get("scales") is not None and any(not v > 0 for v in attrs["scales"]):
        raise OpTypeError(f"{op}: scales must be positive, got {list(attrs['scales'])}")
    sizes = dims_value(values[1])
    if sizes is None:
        from nexus.ir.types import fresh_dim

        return x.with_shape(tuple(fresh_dim() for _ in x.shape))
    return x.with_shape(tuple(sizes))


def resize_spec(attrs: Mapping[str, Any]) -> _rs.ResizeSpec:
    """The attributes of a Resize (or ResizeGrad) call as a ResizeSpec."""
    values: dict[str, Any] = {k: (tuple(v) if isinstance(v, list) else v) for k, v in attrs.items()}
    return _rs.ResizeSpec(**values)


def _resize(x: Any, sizes: Any, **attrs: Any) -> np.ndarray:
    spec = resize_spec(attrs)
    xa = np.asarray(x)
    plans = _rs.plan(xa.shape, [int(v) for v in sizes], spec)
    out = _rs.apply(_wide(xa), plans, spec.extrapolation_value)
    return np.ascontiguousarray(out.astype(xa.dtype))


RESIZE_ATTRS = {
    "mode": Attr("str", "nearest", "nearest, linear (n-linear over the resized axes) or cubic"),
    "coordinate_transformation_mode": Attr("str", "half_pixel", "how an output index maps to an input coordinate: "
                                           + ", ".join(_rs.COORD_MODES)),
    "nearest_mode": Attr("str", "round_prefer_floor", ", ".join(_rs.NEAREST_MODES)),
    "scales": Attr("floats", None, "the scale per axis the coordinates use (ONNX's scales input); default "
                   "sizes / input shape"),
    "roi": Attr("floats", None, "tf_crop_and_resize: starts then ends per axis, as fractions of the input"),
    # None (absent) stands for the ONNX default, so graphs that do not use these print as before.
    "cubic_coeff_a": Attr("float", None, "cubic: the kernel's a (default -0.75; -0.5 is TensorFlow's)"),
    "exclude_outside": Attr("bool", None, "give the taps outside the input weight 0 and renormalise"),
    "extrapolation_value": Attr("float", None, "tf_crop_and_resize: the value where the coordinate is "
                                "outside (default 0)"),
    "antialias": Attr("bool", None, "linear/cubic: widen the filter by 1/scale when downsampling"),
}

define("Resize", FAMILY, ("x", "sizes"), _resize_rule, _resize, differentiable=True, attrs=RESIZE_ATTRS,
       doc="Resizes x to `sizes` (one entry per axis, a 1-D int tensor), as ONNX Resize (opset 19) "
           "with sizes; its scales and roi inputs are attributes.", may_fail=True)


# --- GridSample, DeformConv, Col2Im (kernels in _sample.py) ------------------------------
_GRID_MODES = ("linear", "nearest", "cubic")
_GRID_PADDINGS = ("zeros", "border", "reflection")


def _grid_sample_rule(op: str, ins: Sequence[Type], attrs: Mapping[str, Any], _: Sequence[Any]) -> Type:
    x, grid = tensor(op, ins[0], 0), tensor(op, ins[1], 1)
    check_dtype(op, x, FLOATS, 0)
    check_dtype(op, grid, FLOATS, 1)
    if attrs["mode"] not in _GRID_MODES:
        raise OpTypeError(f"{op}: mode must be one of {', '.join(_GRID_MODES)}, got {attrs['mode']!r}")
    if attrs["padding_mode"] not in _GRID_PADDINGS:
        raise OpTypeError(f"{op}: padding_mode must be one of {', '.join(_GRID_PADDINGS)}, "
                          f"got {attrs['padding_mode']!r}")
    if x.shape is None or grid.shape is None:
        return x.with_shape(None)
    n = len(x.shape) - 2
    if n < 1 or len(grid.shape) != n + 2 or (isinstance(grid.shape[-1], int) and grid.shape[-1] != n):
        raise OpTypeError(f"{op}: x [N, C, *spatial] needs grid [N, *out, {max(n, 1)}], got {x} and {grid}")
    return x.with_shape((x.shape[0], x.shape[1]) + tuple(grid.shape[1:-1]))


define("GridSample", FAMILY, ("x", "grid"), _grid_sample_rule, _sp.grid_sample,
       attrs={"mode": Attr("str", "linear", "linear, nearest (half to even) or cubic (Keys, a = -0.75)"),
              "padding_mode": Attr("str", "zeros", "what a tap outside x reads: zeros, border or reflection"),
              "align_corners": Attr("bool", False, "-1 and 1 are the corner pixels' centres (else their outer "
                                                   "edges)")},
       doc="x [N, C, *spatial] sampled at grid [N, *out, n] ([-1, 1] per spatial dim, in reverse order: x, y, "
           "z), giving [N, C, *out] (ONNX GridSample, torch.nn.functional.grid_sample).")


def _deform_conv_rule(op: str, ins: Sequence[Type], attrs: Mapping[str, Any], _: Sequence[Any]) -> Type:
    if not 3 <= len(ins) <= 5:
        raise OpTypeError(f"{op}: takes x, w, offset, an optional bias and an optional mask, got {len(ins)} inputs")
    ts = [tensor(op, t, i) for i, t in enumerate(ins)]
    check_dtype(op, ts[0], FLOATS)
    check_same_dtype(op, ts)
    x, w, off = ts[0], ts[1], ts[2]
    if x.shape is None or w.shape is None or off.shape is None:
        return x.with_shape(None)
    n = len(x.shape) - 2
    if n < 1 or len(w.shape) != n + 2 or len(off.shape) != n + 2:
        raise OpTypeError(f"{op}: x [N, C, *spatial], w [M, C/group, *kernel] and offset [N, *, *out] must have "
                          f"the same rank, got {x}, {w} and {off}")
    strides, pads, dil = _geometry(op, attrs, n)
    for i in range(n):
        want, got = x.shape[2 + i], off.shape[2 + i]
        k = w.shape[2 + i]
        if isinstance(want, int) and isinstance(k, int) and isinstance(got, int):
            want = _out_dim(want, k, strides[i], pads[i], pads[i + n], dil[i])
            if want != got:
                raise OpTypeError(f"{op}: the geometry makes {want} outputs along spatial dim {i}, the offsets "
                                  f"have {got}")
    return x.with_shape((x.shape[0], w.shape[0]) + tuple(off.shape[2:]))


define("DeformConv", FAMILY, ("x", "w", "offset", "b_then_mask"), _deform_conv_rule, _sp.deform_conv,
       variadic=True, multithreaded=True,
       attrs={**_CONV_ATTRS, "offset_group": Attr("int", 1, "channel groups that share one set of offsets")},
       doc="Deformable convolution (ONNX DeformConv): each kernel tap reads x bilinearly at its place plus "
           "offset [N, offset_group * prod(kernel) * n, *out], times the optional mask [N, offset_group * "
           "prod(kernel), *out]; then w [M, C/group, *kernel] and the optional bias [M] as Conv. Inputs: x, w, "
           "offset, then bias and mask (a zero bias where only the mask is given).")


def _col2im_rule(op: str, ins: Sequence[Type], attrs: Mapping[str, Any], _: Sequence[Any]) -> Type:
    x = tensor(op, ins[0], 0)
    check_dtype(op, x, FLOATS | {"i32", "i64"})
    image, block = tuple(attrs.get("image_shape") or ()), tuple(attrs.get("block_shape") or ())
    n = len(image)
    if n < 1 or len(block) != n or min(image + block) < 1:
        raise OpTypeError(f"{op}: image_shape and block_shape need one positive size per spatial dim, "
                          f"got {list(image)} and {list(block)}")
    strides, pads, dil = _geometry(op, attrs, n)
    if x.shape is None:
        return x.with_shape(None)
    if len(x.shape) != 3:
        raise OpTypeError(f"{op}: input must be [N, C * prod(block_shape), L], got {x}")
    kk, cc = math.prod(block), x.shape[1]
    if isinstance(cc, int) and cc % kk:
        raise OpTypeError(f"{op}: {cc} rows do not divide into blocks of {kk}")
    blocks = math.prod((image[d] + pads[d] + pads[n + d] - dil[d] * (block[d] - 1) - 1) // strides[d] + 1
                       for d in range(n))
    if isinstance(x.shape[2], int) and x.shape[2] != blocks:
        raise OpTypeError(f"{op}: {x.shape[2]} columns, but the geometry makes {blocks} blocks")
    return x.with_shape((x.shape[0], cc // kk if isinstance(cc, int) else simplify_dim(cc / kk)) + image)


define("Col2Im", FAMILY, ("x",), _col2im_rule, _sp.col2im,
       attrs={"image_shape": Attr("ints", None, "the spatial size of the image"),
              "block_shape": Attr("ints", None, "the spatial size of a block (the kernel)"),
              "strides": _CONV_ATTRS["strides"], "pads": _CONV_ATTRS["pads"],
              "dilations": _CONV_ATTRS["dilations"]},
       doc="The inverse of im2col (ONNX Col2Im, torch fold): x [N, C * prod(block_shape), L] summed back into "
           "[N, C, *image_shape], overlapping blocks adding up.")


def _roi_align_rule(op: str, ins: Sequence[Type], attrs: Mapping[str, Any], _: Sequence[Any]) -> Type:
    x, rois, idx = (tensor(op, t, i) for i, t in enumerate(ins))
    check_dtype(op, x, FLOATS, 0)
    check_dtype(op, rois, FLOATS, 1)
    check_dtype(op, idx, frozenset({"i32", "i64"}), 2)
    if attrs["mode"] not in ("avg", "max"):
        raise OpTypeError(f"{op}: mode must be avg or max, got {attrs['mode']!r}")
    if attrs["coordinate_transformation_mode"] not in ("half_pixel", "output_half_pixel"):
        raise OpTypeError(f"{op}: coordinate_transformation_mode must be half_pixel or output_half_pixel")
    if min(attrs["output_height"], attrs["output_width"]) < 1:
        raise OpTypeError(f"{op}: output_height and output_width must be >= 1")
    if x.shape is not None and len(x.shape) != 4:
        raise OpTypeError(f"{op}: x must be [N, C, H, W], got {x}")
    if rois.shape is not None and (len(rois.shape) != 2 or (isinstance(rois.shape[1], int) and rois.shape[1] != 4)):
        raise OpTypeError(f"{op}: rois must be [num_rois, 4], got {rois}")
    n = idx.shape[0] if idx.shape is not None and len(idx.shape) == 1 else (
        rois.shape[0] if rois.shape is not None else None)
    c = x.shape[1] if x.shape is not None else None
    if n is None or c is None:
        return x.with_shape(None)
    return x.with_shape((n, c, attrs["output_height"], attrs["output_width"]))


define("RoiAlign", FAMILY, ("x", "rois", "batch_indices"), _roi_align_rule, _sp.roi_align, may_fail=True,
       attrs={"mode": Attr("str", "avg", "avg or max over each bin's samples"),
              "output_height": Attr("int", 1, "bins per region, vertically"),
              "output_width": Attr("int", 1, "bins per region, horizontally"),
              "sampling_ratio": Attr("int", 0, "samples per bin side (0: ceil of the bin size)"),
              "spatial_scale": Attr("float", 1.0, "from the rois' coordinates to x's pixels"),
              "coordinate_transformation_mode": Attr("str", "half_pixel", "half_pixel (pixel centres at +0.5) or "
                                                                          "output_half_pixel (legacy)")},
       doc="Region-of-interest pooling by bilinear samples (ONNX RoiAlign): rois [R, 4] as x1, y1, x2, y2 on "
           "image batch_indices[r] of x [N, C, H, W] give [R, C, output_height, output_width].")
