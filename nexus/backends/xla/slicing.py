"""Slice in XLA: static bounds, run-time bounds, and slices of padded values.

``x[a:b:k]`` with bounds known while compiling is a static slice.  Where a bound or the
step is known only at run time (``v[i % 3:]``), or the axis it slices is a padded one
(:class:`~nexus.backends.xla.trace.Padded`, whose true size is a run-time value), the
result's length is data-dependent: it becomes a padded value too, a window as long as
the axis's static extent (the most such a slice can hold) with the true length beside.
The start, stop and length are Python's (``slice.indices``): negative indices count from
the true end, out-of-range ones clamp, and a negative step walks backwards.  With step 1
the window is one ``lax.dynamic_slice`` of the input padded by its own extent (so that a
late start does not clamp the window back); any other step is a gather of the
``start + j * step`` entries.  One padded axis per value: a slice whose run-time length
would be along a second axis is an error naming the node.
"""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp
import numpy as np
import sympy
from jax import lax

from nexus.backends.base import register_lowering
from nexus.backends.xla.rules_shape import static_ints
from nexus.backends.xla.trace import BACKEND, Padded, Trace, XlaLoweringError, is_static
from nexus.ir.node import Node
from nexus.ir.types import TensorType


@register_lowering(BACKEND, "Slice")
def slice_value(tr: Trace, node: Node, data: Any, starts: Any, ends: Any, axes: Any = None, steps: Any = None) -> Any:
    """``data[starts:ends:steps]`` along ``axes``; ``data`` may be :class:`Padded` (the
    padded-value consumer calls this too) and the bounds may be traced (see the module doc)."""
    pad = data if isinstance(data, Padded) else None
    x = pad.data if pad is not None else data
    rank = jnp.ndim(x)
    count = int(np.shape(starts)[0])
    ax = list(range(count)) if axes is None else [a % rank for a in static_ints(node, axes, "the axes")]
    index: list[slice] = [slice(None)] * rank
    windows = []
    for k, a in enumerate(ax):
        bounds = [_entry(v, k) for v in (starts, ends)] + [1 if steps is None else _entry(steps, k)]
        if all(isinstance(b, int) for b in bounds) and (pad is None or pad.axis != a):
            index[a] = slice(*bounds)
        else:
            windows.append((a, *bounds))
    if windows or pad is not None:
        x = jnp.asarray(x)
    x = x[tuple(index)]
    if not windows:
        return x if pad is None else Padded(x, pad.size, pad.axis)
    a, start, stop, step = windows[0]
    if len(windows) > 1 or (pad is not None and pad.axis != a):
        raise XlaLoweringError(
            "a slice whose length is known only at run time (a run-time bound, or a padded value's axis) along "
            "more than one axis: XLA pads one axis per value; make all but one slice's bounds constants", node)
    size = pad.size if pad is not None else np.int64(jnp.shape(x)[a])
    out, length = _window(x, a, size, start, stop, step)
    t = node.type
    if isinstance(t, TensorType) and t.shape is not None and isinstance(t.shape[a], sympy.Symbol):
        tr.dims[t.shape[a]] = int(jnp.shape(out)[a])  # later types that mention the length see the bound
    return Padded(out, length, a)


def _entry(v: Any, k: int) -> Any:
    """Entry ``k`` of a bounds vector: an int where known while compiling, else a traced i64."""
    if is_static(v):
        return int(np.reshape(v, (-1,))[k])
    return jnp.reshape(jnp.asarray(v), (-1,))[k].astype(jnp.int64)


def _indices(size: Any, start: Any, stop: Any, step: int) -> tuple[Any, Any]:
    """Python's ``slice(start, stop, step).indices(size)`` first index and length, traced
    (``step`` a nonzero int)."""
    i64 = jnp.int64
    size, start, stop = (jnp.asarray(v, i64) for v in (size, start, stop))
    if step > 0:
        lo = jnp.where(start < 0, jnp.maximum(start + size, 0), jnp.minimum(start, size))
        hi = jnp.where(stop < 0, jnp.maximum(stop + size, 0), jnp.minimum(stop, size))
        return lo, jnp.maximum((hi - lo + (step - 1)) // step, 0)
    lo = jnp.where(start < 0, jnp.maximum(start + size, -1), jnp.minimum(start, size - 1))
    hi = jnp.where(stop < 0, jnp.maximum(stop + size, -1), jnp.minimum(stop, size - 1))
    return lo, jnp.maximum((lo - hi + (-step - 1)) // -step, 0)


def _window(x: Any, axis: int, size: Any, start: Any, stop: Any, step: Any) -> tuple[Any, Any]:
    """``x[start:stop:step]`` along ``axis`` of true size ``size``: the entries padded to
    the most such a slice holds, and how many are real."""
    extent = int(jnp.shape(x)[axis])
    if isinstance(step, int):
        if step == 0:
            raise ValueError("slice step cannot be zero")
        first, length = _indices(size, start, stop, step)
        bound = len(range(0, extent, abs(step)))
        if step == 1:
            # The input followed by as many zeros, so that a window starting late is not clamped back.
            doubled = jnp.concatenate([x, jnp.zeros_like(x)], axis=axis)
            return lax.dynamic_slice_in_dim(doubled, first, extent, axis=axis), length
        step_v: Any = np.int64(step)
    else:
        # A run-time step: both directions' indices, the one of its sign picked (a zero step
        # raises in Python; here it gives an empty slice).
        step_v = step
        safe = jnp.where(step == 0, 1, step)
        lo_up, n_up = _indices(size, start, stop, 1)
        lo_dn, n_dn = _indices(size, start, stop, -1)
        first = jnp.where(step > 0, lo_up, lo_dn)
        length = jnp.where(step > 0, (n_up + safe - 1) // safe, (n_dn - safe - 1) // -safe)
        length = jnp.where(step == 0, 0, jnp.maximum(length, 0))
        bound = extent
    if bound == 0:
        return lax.slice_in_dim(x, 0, 0, axis=axis), jnp.zeros((), jnp.int64)
    at = jnp.clip(first + jnp.arange(bound, dtype=jnp.int64) * step_v, 0, extent - 1)
    return jnp.take(x, at, axis=axis), length
