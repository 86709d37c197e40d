"""Adjoint kernels for the nn ops (convolutions, pooling, resizing, boolean masks).

Each mirrors the forward kernel in :mod:`nexus.ops.nn` (it reuses that module's window
and geometry helpers, so both agree on padding, strides, dilation and ceil mode) and
scatters the cotangent back where the forward read."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from nexus.ir.opdef import Attr
from nexus.ir.types import TensorType, Type
from nexus.ops import _resize as _rs
from nexus.ops import nn
from nexus.ops._rules import define, tensor
from nexus.ops.adjoint import FAMILY, _like1_rule

_CONV = {
    "strides": Attr("ints", None, "as the forward op"),
    "pads": Attr("ints", None, "as the forward op"),
    "dilations": Attr("ints", None, "as the forward op"),
    "group": Attr("int", 1, "as the forward op"),
}


def _w_rule(op: str, ins: Sequence[Type], attrs: Mapping[str, Any], _: Sequence[Any]) -> Type:
    g, w = tensor(op, ins[0], 0), tensor(op, ins[2], 2)
    return TensorType(g.dtype, w.shape)


def _conv_grad_x(g: Any, x: Any, w: Any, strides: Any = None, pads: Any = None, dilations: Any = None,
                 group: int = 1) -> Any:
    """Adjoint of Conv in x: a transposed convolution sized back to x."""
    x, w = np.asarray(x), np.asarray(w)
    n = x.ndim - 2
    s, p, d = nn._geometry("Conv", {"strides": strides, "pads": pads, "dilations": dilations}, n)
    out = np.shape(g)[2:]
    ks = w.shape[2:]
    opad = [x.shape[2 + i] + p[i] + p[i + n] - (s[i] * (out[i] - 1) + d[i] * (ks[i] - 1) + 1) for i in range(n)]
    return nn._conv_transpose(g, w, None, s, p, d, group, opad)


def _conv_grad_w(g: Any, x: Any, w: Any, strides: Any = None, pads: Any = None, dilations: Any = None,
                 group: int = 1) -> Any:
    """Adjoint of Conv in w: correlate the input windows with the cotangent."""
    xa, wa, ga = np.asarray(x), np.asarray(w), np.asarray(g)
    n = xa.ndim - 2
    s, p, d = nn._geometry("Conv", {"strides": strides, "pads": pads, "dilations": dilations}, n)
    xp = np.pad(xa, [(0, 0), (0, 0)] + [(p[i], p[i + n]) for i in range(n)])
    win = nn._windows(xp, wa.shape[2:], s, d)  # [N, C, *out, *k]
    win = win[(slice(None), slice(None)) + tuple(slice(0, o) for o in ga.shape[2:])]
    mg, cg = wa.shape[0] // group, wa.shape[1]
    axes = [0] + list(range(2, 2 + n))
    parts = [np.tensordot(ga[:, i * mg:(i + 1) * mg], win[:, i * cg:(i + 1) * cg], axes=(axes, axes))
             for i in range(group)]
    return np.ascontiguousarray(np.concatenate(parts, axis=0).astype(ga.dtype))


def _convt_grad_w(g: Any, x: Any, w: Any, strides: Any = None, pads: Any = None, dilations: Any = None,
                  group: int = 1, output_padding: Any = None) -> Any:
    """Adjoint of ConvTranspose in w."""
    xa, wa, ga = np.asarray(x), np.asarray(w), np.asarray(g)
    n = xa.ndim - 2
    s, p, d = nn._geometry("ConvTranspose", {"strides": strides, "pads": pads, "dilations": dilations}, n)
    gp = np.pad(ga, [(0, 0), (0, 0)] + [(p[i], p[i + n]) for i in range(n)])
    win = nn._windows(gp, wa.shape[2:], s, d)  # [N, M, *sp', *k]
    win = win[(slice(None), slice(None)) + tuple(slice(0, o) for o in xa.shape[2:])]
    cg, mg = xa.shape[1] // group, wa.shape[1]
    axes = [0] + list(range(2, 2 + n))
    parts = [np.tensordot(xa[:, i * cg:(i + 1) * cg], win[:, i * mg:(i + 1) * mg], axes=(axes, axes))
             for i in range(group)]
    return np.ascontiguousarray(np.concatenate(parts, axis=0).astype(ga.dtype))


def _index_windows(x: np.ndarray, kernel_shape: Sequence[int], strides: Any, pads: Any, dilations: Any,
                   ceil_mode: bool) -> np.ndarray:
    """For every pooling window element, the flat index of the input element it reads
    (-1 for padding): [N, C, *out, K]."""
    idx = np.arange(x.size, dtype=np.float64).reshape(x.shape)
    win = nn._pool_windows(idx, -1.0, kernel_shape, strides, pads, dilations, ceil_mode)
    n = x.ndim - 2
    return win.reshape(win.shape[: 2 + n] + (-1,)).astype(np.int64)


def _max_pool_grad(g: Any, x: Any, kernel_shape: Sequence[int], strides: Any = None, pads: Any = None,
                   dilations: Any = None, ceil_mode: bool = False) -> Any:
    xa, ga = np.asarray(x), np.asarray(g)
    n = xa.ndim - 2
    vals = nn._pool_windows(xa.astype(np.float64), -np.inf, kernel_shape, strides, pads, dilations, ceil_mode)
    vals = vals.reshape(vals.shape[: 2 + n] + (-1,))
    src = _index_windows(xa, kernel_shape, strides, pads, dilations, ceil_mode)
    arg = np.argmax(vals, axis=-1)[..., None]
    pick = np.take_along_axis(src, arg, axis=-1)[..., 0]
    out = np.zeros(xa.size, dtype=ga.dtype)
    ok = pick >= 0
    np.add.at(out, pick[ok], ga[ok])
    return out.reshape(xa.shape)


def _avg_pool_grad(g: Any, x: Any, kernel_shape: Sequence[int], strides: Any = None, pads: Any = None,
                   ceil_mode: bool = False, count_include_pad: bool = False, dilations: Any = None) -> Any:
    xa, ga = np.asarray(x), np.asarray(g)
    n = xa.ndim - 2
    src = _index_windows(xa, kernel_shape, strides, pads, dilations, ceil_mode)
    inside = np.ones((1, 1) + xa.shape[2:], np.float64)
    count = nn._pool_windows(inside, 1.0 if count_include_pad else 0.0, kernel_shape, strides, pads, dilations,
                             ceil_mode, overhang_fill=0.0)
    count = np.maximum(count.sum(axis=tuple(range(-n, 0))), 1)
    share = np.broadcast_to((ga / count)[..., None], src.shape)
    out = np.zeros(xa.size, dtype=ga.dtype)
    ok = src >= 0
    np.add.at(out, src[ok], share[ok])
    return out.reshape(xa.shape)


def _resize_grad(g: Any, x: Any, sizes: Any, **attrs: Any) -> Any:
    """Adjoint of Resize: each axis's gather-and-weigh, transposed."""
    xa, ga = np.asarray(x), np.asarray(g)
    return _rs.adjoint(ga, xa.shape, _rs.plan(xa.shape, [int(v) for v in sizes], nn.resize_spec(attrs)))


def _boolean_mask_grad(g: Any, x: Any, mask: Any) -> Any:
    out = np.zeros(np.shape(x), dtype=np.asarray(g).dtype)
    out[np.asarray(mask)] = g
    return out


_POOL = {
    "kernel_shape": Attr("ints", doc="as the forward op"),
    "strides": Attr("ints", None, "as the forward op"),
    "pads": Attr("ints", None, "as the forward op"),
    "ceil_mode": Attr("bool", False, "as the forward op"),
}

define("ConvGradX", FAMILY, ("grad", "x", "w"), _like1_rule, _conv_grad_x, attrs=_CONV,
                  doc="Adjoint of Conv in its input x.", may_fail=True)
define("ConvGradW", FAMILY, ("grad", "x", "w"), _w_rule, _conv_grad_w, attrs=_CONV,
                  doc="Adjoint of Conv in its weight w.", may_fail=True)
define("ConvTransposeGradW", FAMILY, ("grad", "x", "w"), _w_rule, _convt_grad_w,
                  attrs={**_CONV, "output_padding": Attr("ints", None, "as the forward op")},
                  doc="Adjoint of ConvTranspose in its weight w.", may_fail=True)
define("MaxPoolGrad", FAMILY, ("grad", "x"), _like1_rule, _max_pool_grad,
                  attrs={**_POOL, "dilations": Attr("ints", None, "as the forward op")},
                  doc="Adjoint of MaxPool: each window's cotangent goes to its (first) maximum.", may_fail=True)
define("AveragePoolGrad", FAMILY, ("grad", "x"), _like1_rule, _avg_pool_grad,
                  attrs={**_POOL, "count_include_pad": Attr("bool", False, "as the forward op"),
                         "dilations": Attr("ints", None, "as the forward op")},
                  doc="Adjoint of AveragePool: each window's cotangent shared over its elements.", may_fail=True)
define("ResizeGrad", FAMILY, ("grad", "x", "sizes"), _like1_rule, _resize_grad,
                  attrs={k: Attr(a.kind, a.default, "as the forward op") for k, a in nn.RESIZE_ATTRS.items()},
                  doc="Adjoint of Resize.", may_fail=True)
define("BooleanMaskGrad", FAMILY, ("grad", "x", "mask"), _like1_rule, _boolean_mask_grad,
                  doc="Zeros shaped like x with grad written where the mask is true.", may_fail=True)



def _put_along_axis_grad(g: Any, x: Any, indices: Any, axis: int = -1) -> Any:
    # Accumulates (np.add.at): an entry picked twice (GatherElements) gets both cotangents;
    # TopK's indices are distinct, so for it this is a plain write.
    out = np.zeros(np.shape(x), dtype=np.asarray(g).dtype)
    idx = np.asarray(indices).astype(np.int64)
    axis %= out.ndim
    idx = np.where(idx < 0, idx + out.shape[axis], idx)
    where: list[Any] = list(np.indices(idx.shape, sparse=True))
    where[axis] = idx
    np.add.at(out, tuple(where), np.broadcast_to(np.asarray(g), idx.shape))
    return out


define("TakeAlongAxisGrad", FAMILY, ("grad", "x", "indices"), _like1_rule, _put_along_axis_grad,
                  attrs={"axis": Attr("int", -1, "the axis indexed")},
                  doc="Zeros shaped like x with grad added at `indices` along `axis` (adjoint of TopK's values "
                      "and of GatherElements).",
                  may_fail=True)
