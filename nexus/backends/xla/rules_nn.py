"""The xla lowering table, part 3: convolutions, pooling, normalisation and index ops as
lax ops (they ran their NumPy kernel on the host before, ``rules_shape.HOST_OPS``).

The semantics are the kernels' in :mod:`nexus.ops.nn` and :mod:`nexus.ops.index`: f16 is
computed in f32 and rounded back once, pads are all begins then all ends, a pooling
window in ceil mode never starts in the end padding, an average counts the explicit
padding only with ``count_include_pad``.  ``tests/test_backends_xla_nn.py`` compares each
rule with its kernel over the attribute space.

Depthwise convolution (one input channel per group) is a sum over the kernel positions of
the shifted, strided input times that tap of every filter, which XLA fuses into one loop:
``lax.conv_general_dilated`` with ``feature_group_count`` equal to the channels is 10 to
100 times slower than that on XLA:CPU (jaxlib 0.10; ``bench/conv_xla.py`` measures both
beside torch).  Other grouped convolutions keep ``feature_group_count``.
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
        out = lax.conv_general_dilated(xa, wa, strides, [(pads[i], pads[i + n]) for i in range(n)],
                                       rhs_dilation=dil, feature_group_count=group)
    if b is not None:
        out = out + _channel(_wide(b).astype(dtype), out.ndim)
    return out.astype(out_dtype(node))


def _depthwise(xa: Any, wa: Any, out_sp: tuple[int, ...], strides: tuple[int, ...], pads: tuple[int, ...],
               dil: tuple[int, ...]) -> Any:
    """Depthwise convolution (group == C, M = C * mult) as a multiply-add per kernel position."""
    nb, c = xa.shape[:2]
    n = xa.ndim - 2
    mult = wa.shape[0] // c
    ks = tuple(wa.shape[2:])
    if any(pads):
        xa = jnp.pad(xa, [(0, 0), (0, 0), *((pads[i], pads[i + n]) for i in range(n))])
    taps = jnp.reshape(wa, (c, mult, *ks))
    acc = None
    for kpos in np.ndindex(*ks):
        start = (0, 0, *(k * d for k, d in zip(kpos, dil)))
        limit = (nb, c, *(k * d + s * (o - 1) + 1 for k, d, s, o in zip(kpos, dil, strides, out_sp)))
        view = lax.slice(xa, start, limit, (1, 1, *strides))[:, :, None]  # [N, C, 1, *out]
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
    out = lax.reduce_window(xa, np.asarray(init, xa.dtype), op, (1, 1, *ks), (1, 1, *strides), padding,
                            window_dilation=(1, 1, *dil))
    return out[(slice(None), slice(None), *(slice(0, o) for o in outs))], outs


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
