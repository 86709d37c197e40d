"""The xla lowering table, part 3: convolutions, pooling, normalisation and index ops as
lax ops (they ran their NumPy kernel on the host before, ``rules_shape.HOST_OPS``).

The semantics are the kernels' in :mod:`nexus.ops.nn` and :mod:`nexus.ops.index`: f16 is
computed in f32 and rounded back once, pads are all begins then all ends, a pooling
window in ceil mode never starts in the end padding, an average counts the explicit
padding only with ``count_include_pad``.  ``tests/test_backends_xla_nn.py`` compares each
rule with its kernel over the attribute space.

Depthwise convolution (one input channel per group) is a sum over the kernel positions of
the shifted, strided input times that tap of every filter, which XLA fuses into one loop:
``lax.conv_general_dilated`` with ``feature_group_count`` equal to the channels is 3 to
15 times slower than that on XLA:CPU (jaxlib 0.10; ``bench/conv_xla.py`` measures both
beside torch).  Other grouped convolutions, 1x1 kernels and an image's first layer are
products batched over the groups (:func:`_dense`).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from nexus.backends.base import register_lowering
from nexus.backends.xla.rules import out_dtype
from nexus.backends.xla.rules_shape import static_ints
from nexus.backends.xla.trace import BACKEND, Trace
from nexus.ir.node import Node
from nexus.ops.nn import _geometry, _out_dim

# Computed in f32 and rounded back, as the kernels' ``_wide`` does.
_NARROW = (np.dtype(np.float16), np.dtype(jnp.bfloat16))


def _wide(x: Any) -> Any:
    x = jnp.asarray(x)
    return x.astype(np.float32) if x.dtype in _NARROW else x


def _channel(v: Any, ndim: int) -> Any:
    """A per-channel vector [C] shaped to broadcast along axis 1 of an ``ndim`` tensor."""
    return jnp.reshape(v, (1, -1) + (1,) * (ndim - 2))


# --- convolution -------------------------------------------------------------------------
@register_lowering(BACKEND, "Conv")
def _conv(tr: Trace, node: Node, x: Any, w: Any, b: Any = None) -> Any:
    xa, wa = _wide(x), _wide(w)
    dtype = jnp.result_type(xa, wa)
    xa, wa = xa.astype(dtype), wa.astype(dtype)
    n = xa.ndim - 2
    strides, pads, dil = _geometry("Conv", node.attrs, n)
    group = int(node.attrs["group"])
    nb, c = xa.shape[:2]
    m, cg = wa.shape[:2]
    ks = tuple(wa.shape[2:])
    out_sp = tuple(_out_dim(xa.shape[2 + i], ks[i], strides[i], pads[i], pads[i + n], dil[i]) for i in range(n))
    if 0 in out_sp or 0 in (nb, m):
        out = jnp.zeros((nb, m, *out_sp), dtype)
    elif cg == 1 and group == c:
        out = _depthwise(xa, wa, out_sp, strides, pads, dil)
    else:
        out = _dense(xa, wa, out_sp, strides, pads, dil, group)
    if b is not None:
        out = out + _channel(_wide(b).astype(dtype), out.ndim)
    return out.astype(out_dtype(node))


def _dense(xa: Any, wa: Any, out_sp: tuple[int, ...], strides: tuple[int, ...], pads: tuple[int, ...],
           dil: tuple[int, ...], group: int) -> Any:
    """A convolution as a product of each group's weights [M/G, C/G*K] with its columns
    [C/G*K, P], batched over N and the groups (no transpose: NCHW comes out as it is).
    For 1x1 kernels the (strided) input is its own columns; for grouped convolutions and
    few input channels (an image's first layer) the columns are gathered by slices.  Other
    dense convolutions go to XLA's own.  Measured on one thread (``bench/conv_xla.py``):
    XLA:CPU's NCHW convolution of a 1x1 kernel takes 2-4x torch's time at batch 8 (as a
    product: 1-3x), its grouped convolution 12-16x (ResNeXt's 32 groups)."""
    nb, c = xa.shape[:2]
    m = wa.shape[0]
    ks = tuple(wa.shape[2:])
    taps = int(np.prod(ks))
    if group == 1 and taps > 1 and c * taps > _IM2COL_MAX:
        n = len(ks)
        return lax.conv_general_dilated(xa, wa, strides, [(pads[i], pads[i + n]) for i in range(n)],
                                        rhs_dilation=dil)
    xp = _padded(xa, pads)
    cols = jnp.stack([_tap(xp, kpos, out_sp, strides, dil) for kpos in np.ndindex(*ks)], axis=2)
    depth = c // group * taps  # C/G major, then the kernel position, as w's rows flatten
    p = int(np.prod(out_sp))
    cols = jnp.reshape(cols, (nb, group, depth, p))
    if depth > p:
        # Weights larger than the output (late layers: many channels, few positions): batched
        # over the groups only, then the output's [G, M/G, N, P] transposed, rather than the
        # weights broadcast over N (EfficientNet's 1152 -> 192 at 7x7, batch 8: 3.4 ms, 10 ms).
        out = lax.dot_general(jnp.reshape(wa, (group, m // group, depth)), cols, (((2,), (2,)), ((0,), (1,))))
        return jnp.reshape(jnp.transpose(out, (2, 0, 1, 3)), (nb, m, *out_sp))
    wb = jnp.broadcast_to(jnp.reshape(wa, (1, group, m // group, depth)), (nb, group, m // group, depth))
    out = lax.dot_general(wb, cols, (((3,), (2,)), ((0, 1), (0, 1))))  # [N, G, M/G, P]
    return jnp.reshape(out, (nb, m, *out_sp))


# The most input channels times kernel positions for which gathering the columns by slices
# beats XLA:CPU's convolution (measured: 3 channels x 3x3 at batch 8, 1.9x torch's time
# against 4.4x; 64 channels x 3x3, 4.5x against 1.3x).
_IM2COL_MAX = 32


def _padded(xa: Any, pads: tuple[int, ...]) -> Any:
    """``xa`` with zeros around its spatial dims (``pads``: all begins, then all ends)."""
    n = xa.ndim - 2
    if not any(pads):
        return xa
    return jnp.pad(xa, [(0, 0), (0, 0), *((pads[i], pads[i + n]) for i in range(n))])


def _tap(xa: Any, kpos: tuple[int, ...], out_sp: tuple[int, ...], strides: tuple[int, ...],
         dil: tuple[int, ...]) -> Any:
    """[N, C, *out]: the (padded) input's elements that kernel position ``kpos`` meets."""
    start = (0, 0, *(k * d for k, d in zip(kpos, dil)))
    limit = (*xa.shape[:2], *(k * d + s * (o - 1) + 1 for k, d, s, o in zip(kpos, dil, strides, out_sp)))
    return lax.slice(xa, start, limit, (1, 1, *strides))


def _depthwise(xa: Any, wa: Any, out_sp: tuple[int, ...], strides: tuple[int, ...], pads: tuple[int, ...],
               dil: tuple[int, ...]) -> Any:
    """Depthwise convolution (group == C, M = C * mult) as a multiply-add per kernel position."""
    nb, c = xa.shape[:2]
    n = xa.ndim - 2
    mult = wa.shape[0] // c
    ks = tuple(wa.shape[2:])
    xp = _padded(xa, pads)
    taps = jnp.reshape(wa, (c, mult, *ks))
    acc = None
    for kpos in np.ndindex(*ks):
        view = _tap(xp, kpos, out_sp, strides, dil)[:, :, None]  # [N, C, 1, *out]
        tap = jnp.reshape(taps[(slice(None), slice(None), *kpos)], (1, c, mult) + (1,) * n)
        term = view * tap
        acc = term if acc is None else acc + term
    assert acc is not None
    return jnp.reshape(acc, (nb, c * mult, *out_sp))


@register_lowering(BACKEND, "ConvTranspose")
def _conv_transpose(tr: Trace, node: Node, x: Any, w: Any, b: Any = None) -> Any:
    """The gradient of a Conv with respect to its input: the input dilated by the strides,
    convolved with the kernel flipped and its in/out channels swapped per group."""
    xa, wa = _wide(x), _wide(w)
    dtype = jnp.result_type(xa, wa)
    xa, wa = xa.astype(dtype), wa.astype(dtype)
    n = xa.ndim - 2
    strides, pads, dil = _geometry("ConvTranspose", node.attrs, n)
    opad = tuple(node.attrs.get("output_padding") or (0,) * n)
    group = int(node.attrs["group"])
    nb, c = xa.shape[:2]
    mg = wa.shape[1]
    ks = tuple(wa.shape[2:])
    full = [strides[i] * (xa.shape[2 + i] - 1) + dil[i] * (ks[i] - 1) + 1 + opad[i] for i in range(n)]
    out_sp = tuple(full[i] - pads[i] - pads[i + n] for i in range(n))
    if 0 in (nb, c, mg) or min(out_sp, default=1) <= 0:
        out = jnp.zeros((nb, mg * group, *(max(o, 0) for o in out_sp)), dtype)
    else:
        # w [C, M/G, *k] -> [G, C/G, M/G, *k] -> [M, C/G, *k] (OIHW), flipped spatially.
        wt = jnp.reshape(wa, (group, c // group, mg, *ks))
        wt = jnp.swapaxes(wt, 1, 2).reshape(group * mg, c // group, *ks)
        wt = jnp.flip(wt, axis=tuple(range(2, 2 + n)))
        edge = [dil[i] * (ks[i] - 1) for i in range(n)]
        padding = [(edge[i] - pads[i], edge[i] - pads[i + n] + opad[i]) for i in range(n)]
        out = lax.conv_general_dilated(xa, wt, (1,) * n, padding, lhs_dilation=strides, rhs_dilation=dil,
                                       feature_group_count=group)
    if b is not None:
        out = out + _channel(_wide(b).astype(dtype), out.ndim)
    return out.astype(out_dtype(node))


# --- pooling -----------------------------------------------------------------------------
def _pool(node: Node, xa: Any, init: Any, op: Any) -> tuple[Any, tuple[int, ...]]:
    """``op`` (lax.max, lax.add) over the windows of a pooling node, and its output sizes:
    the padding is ``init``, and so is the overhang that ceil mode adds at the end."""
    n = xa.ndim - 2
    ks = tuple(int(k) for k in node.attrs["kernel_shape"])
    strides, pads, dil = _geometry(node.op.name, node.attrs, n)
    ceil = bool(node.attrs.get("ceil_mode", False))
    outs = tuple(_out_dim(xa.shape[2 + i], ks[i], strides[i], pads[i], pads[i + n], dil[i], ceil) for i in range(n))
    if 0 in outs or 0 in xa.shape:
        return jnp.zeros((*xa.shape[:2], *outs), xa.dtype), outs
    extra = [max((outs[i] - 1) * strides[i] + dil[i] * (ks[i] - 1) + 1 - (xa.shape[2 + i] + pads[i] + pads[i + n]), 0)
             for i in range(n)]
    padding = ((0, 0), (0, 0), *((pads[i], pads[i + n] + extra[i]) for i in range(n)))
    fill = np.asarray(init, xa.dtype)
    if int(np.prod(ks)) <= _POOL_TAPS:
        # One elementwise op per kernel position, fused by XLA into one loop: faster than
        # XLA:CPU's reduce_window (a 3x3 max at batch 8: 3.7 ms against 13.6 ms).
        xp = lax.pad(xa, fill, [(lo, hi, 0) for lo, hi in padding])
        views = [_tap(xp, kpos, outs, strides, dil) for kpos in np.ndindex(*ks)]
        out = views[0]
        for v in views[1:]:
            out = op(out, v)
        return out, outs
    out = lax.reduce_window(xa, fill, op, (1, 1, *ks), (1, 1, *strides), padding, window_dilation=(1, 1, *dil))
    return out[(slice(None), slice(None), *(slice(0, o) for o in outs))], outs


_POOL_TAPS = 64  # the largest window pooled by one op per position (else reduce_window)


@register_lowering(BACKEND, "MaxPool")
def _max_pool(tr: Trace, node: Node, x: Any) -> Any:
    out, _ = _pool(node, _wide(x), -np.inf, lax.max)
    return out.astype(out_dtype(node))


@register_lowering(BACKEND, "AveragePool")
def _avg_pool(tr: Trace, node: Node, x: Any) -> Any:
    xa = _wide(x)
    total, outs = _pool(node, xa, 0.0, lax.add)
    if 0 in outs or 0 in xa.shape:
        return total.astype(out_dtype(node))
    # The divisor depends on shapes only: the window's elements inside the input, plus
    # (count_include_pad) those in the explicit padding, never the ceil-mode overhang.
    # Computed while tracing, it is a constant of the computation.
    n = xa.ndim - 2
    inside = np.ones((1, 1, *xa.shape[2:]), np.float64)
    if node.attrs.get("count_include_pad"):
        _, pads, _ = _geometry("AveragePool", node.attrs, n)
        inside = np.pad(inside, [(0, 0), (0, 0), *((pads[i], pads[i + n]) for i in range(n))], constant_values=1.0)
        attrs = {**node.attrs, "pads": (0,) * (2 * n)}
        count = _static_pool(attrs, inside, outs)
    else:
        count = _static_pool(node.attrs, inside, outs)
    return (total / np.maximum(count, 1).astype(xa.dtype)).astype(out_dtype(node))


def _static_pool(attrs: Any, inside: np.ndarray, outs: tuple[int, ...]) -> np.ndarray:
    """How many of ``inside``'s ones each window of ``attrs`` sums (NumPy, while tracing)."""
    n = inside.ndim - 2
    ks = tuple(int(k) for k in attrs["kernel_shape"])
    strides, pads, dil = _geometry("AveragePool", attrs, n)
    big = [max((outs[i] - 1) * strides[i] + dil[i] * (ks[i] - 1) + 1, inside.shape[2 + i] + pads[i] + pads[i + n])
           for i in range(n)]
    grid = np.zeros((1, 1, *big))
    where: tuple[Any, ...] = (0, 0, *(slice(pads[i], pads[i] + inside.shape[2 + i]) for i in range(n)))
    grid[where] = inside[0, 0]
    count = np.zeros((1, 1, *outs))
    for kpos in np.ndindex(*ks):
        count += grid[(slice(None), slice(None), *(
            slice(k * d, k * d + s * (o - 1) + 1, s) for k, d, s, o in zip(kpos, dil, strides, outs)))]
    return count


@register_lowering(BACKEND, "GlobalAveragePool")
def _global_avg_pool(tr: Trace, node: Node, x: Any) -> Any:
    xa = _wide(x)
    return jnp.mean(xa, axis=tuple(range(2, xa.ndim)), keepdims=True).astype(out_dtype(node))


# --- normalisation -----------------------------------------------------------------------
@register_lowering(BACKEND, "BatchNormalization")
def _batch_norm(tr: Trace, node: Node, x: Any, scale: Any, bias: Any, mean: Any, var: Any) -> Any:
    xa = _wide(x)
    dt = xa.dtype
    # The per-channel factor first (C values), as the kernel does.
    factor = _wide(scale).astype(dt) / jnp.sqrt(_wide(var).astype(dt) + np.asarray(node.attrs["epsilon"], dt))
    out = (xa - _channel(_wide(mean).astype(dt), xa.ndim)) * _channel(factor, xa.ndim)
    return (out + _channel(_wide(bias).astype(dt), xa.ndim)).astype(out_dtype(node))


@register_lowering(BACKEND, "LayerNormalization")
def _layer_norm(tr: Trace, node: Node, x: Any, scale: Any, bias: Any = None) -> Any:
    xa = _wide(x)
    dt = xa.dtype
    axes = tuple(range(int(node.attrs["axis"]) % xa.ndim, xa.ndim))
    out = xa - jnp.mean(xa, axis=axes, keepdims=True)
    var = jnp.mean(jnp.square(out), axis=axes, keepdims=True)
    out = out / jnp.sqrt(var + np.asarray(node.attrs["epsilon"], dt)) * _wide(scale).astype(dt)
    if bias is not None:
        out = out + _wide(bias).astype(dt)
    return out.astype(out_dtype(node))


@register_lowering(BACKEND, "Dropout")
def _dropout(tr: Trace, node: Node, x: Any) -> Any:
    return x  # inference: the identity (training-mode dropout is a random op of its own)


# --- index ops ---------------------------------------------------------------------------
@register_lowering(BACKEND, "GatherElements")
def _gather_elements(tr: Trace, node: Node, data: Any, indices: Any) -> Any:
    data = jnp.asarray(data)
    axis = int(node.attrs["axis"]) % max(data.ndim, 1)
    idx = jnp.asarray(indices).astype(np.int64)
    idx = jnp.where(idx < 0, idx + data.shape[axis], idx)  # out of range: clamped (see nexus.backends.xla)
    return jnp.take_along_axis(data, idx, axis=axis, mode="clip")


@register_lowering(BACKEND, "GatherND")
def _gather_nd(tr: Trace, node: Node, data: Any, indices: Any) -> Any:
    data, idx = jnp.asarray(data), jnp.asarray(indices).astype(np.int64)
    b = int(node.attrs["batch_dims"])
    k = idx.shape[-1]

    def pick(d: Any, ix: Any) -> Any:
        return d[tuple(jnp.moveaxis(ix, -1, 0))] if k else jnp.broadcast_to(d, (*ix.shape[:-1], *d.shape))

    if not b:
        return pick(data, idx)
    nb = int(np.prod(data.shape[:b]))
    d = jnp.reshape(data, (nb, *data.shape[b:]))
    ix = jnp.reshape(idx, (nb, *idx.shape[b:]))
    out = jax.vmap(pick)(d, ix)
    return jnp.reshape(out, (*idx.shape[:-1], *data.shape[b + k:]))


@register_lowering(BACKEND, "OneHot")
def _one_hot(tr: Trace, node: Node, indices: Any, depth: Any, values: Any) -> Any:
    (d,) = static_ints(node, depth, "OneHot's depth")
    idx = jnp.asarray(indices).astype(np.int64)
    idx = jnp.where(idx < 0, idx + d, idx)  # ONNX: indices in [-depth, depth) wrap
    vals = jnp.asarray(values)
    out = jnp.where(idx[..., None] == jnp.arange(d), vals[1], vals[0]).astype(vals.dtype)
    axis = int(node.attrs["axis"]) % out.ndim
    return jnp.moveaxis(out, -1, axis)
