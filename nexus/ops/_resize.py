"""The arithmetic of Resize, shared by its kernel and its adjoint (ResizeGrad).

Resize is separable: each axis is resampled on its own, and along one axis each output
element is a weighted sum of a few input elements (one for nearest, two for linear, four
for cubic, more when antialiasing stretches the filter while downsampling).  So an axis
is described by ``taps`` (output length x n input indices, already clamped into range:
ONNX pads the input by repeating its edge) and ``weights`` of the same shape, plus the
outputs that ``tf_crop_and_resize`` fills with ``extrapolation_value`` instead.  The
forward pass gathers and sums; the adjoint scatters the cotangent back with the same
weights.  The formulas are those of the ONNX Resize specification (opset 19).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

COORD_MODES = ("half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "asymmetric", "align_corners",
               "tf_crop_and_resize")
NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")
MODES = ("nearest", "linear", "cubic")


@dataclass(frozen=True)
class ResizeSpec:
    """Resize's attributes (see the op's doc in nexus/ops/nn.py)."""

    mode: str = "nearest"
    coordinate_transformation_mode: str = "half_pixel"
    nearest_mode: str = "round_prefer_floor"
    scales: tuple[float, ...] | None = None
    roi: tuple[float, ...] | None = None
    cubic_coeff_a: float = -0.75
    exclude_outside: bool = False
    extrapolation_value: float = 0.0
    antialias: bool = False


@dataclass(frozen=True)
class AxisPlan:
    """How one axis is resampled: output i = sum_k weights[i, k] * input[taps[i, k]],
    except where ``outside`` is set (then it is the extrapolation value)."""

    axis: int
    taps: np.ndarray  # int64 [out, n]
    weights: np.ndarray  # float64 [out, n]
    outside: np.ndarray | None  # bool [out]


def plan(in_shape: Sequence[int], sizes: Sequence[int], spec: ResizeSpec) -> list[AxisPlan]:
    """The per-axis plans of a resize from ``in_shape`` to ``sizes`` (identity axes skipped)."""
    rank = len(in_shape)
    out: list[AxisPlan] = []
    for axis, (inp, size) in enumerate(zip(in_shape, sizes)):
        scale = spec.scales[axis] if spec.scales is not None else (size / inp if inp else 1.0)
        roi = (spec.roi[axis], spec.roi[axis + rank]) if spec.roi is not None else (0.0, 1.0)
        if size == inp and math.isclose(scale, 1.0) and roi == (0.0, 1.0) and (
                spec.coordinate_transformation_mode != "tf_crop_and_resize" or inp > 1 or size > 1):
            continue  # every mode maps i to i here
        out.append(_axis(axis, inp, size, scale, roi, spec))
    return out


def _source(y: np.ndarray, inp: int, size: int, scale: float, roi: tuple[float, float],
            ctm: str) -> tuple[np.ndarray, np.ndarray | None]:
    """The input coordinate of each output index, and which fall outside (tf_crop_and_resize)."""
    width = scale * inp  # the real-valued output length the scale implies
    if ctm == "align_corners":
        return (np.zeros_like(y) if width == 1 else y * (inp - 1) / (width - 1)), None
    if ctm == "asymmetric":
        return y / scale, None
    if ctm == "tf_crop_and_resize":
        start, end = roi
        if width == 1:
            x = np.full_like(y, (end - start) * (inp - 1) / 2)
        else:
            x = y * (end - start) * (inp - 1) / (width - 1)
        x = x + start * (inp - 1)
        return x, (x < 0) | (x > inp - 1)
    if ctm == "pytorch_half_pixel":
        return (np.full_like(y, -0.5) if width == 1 else (y + 0.5) / scale - 0.5), None
    if ctm == "half_pixel_symmetric":
        center = inp / 2
        return center * (1 - size / width) + (y + 0.5) / scale - 0.5, None
    return (y + 0.5) / scale - 0.5, None  # half_pixel


def _cubic(d: np.ndarray, a: float) -> np.ndarray:
    """Keys' cubic convolution kernel at distance ``d``."""
    d = np.abs(d)
    near = ((a + 2) * d - (a + 3)) * d * d + 1
    far = ((a * d - 5 * a) * d + 8 * a) * d - 4 * a
    return np.where(d <= 1, near, np.where(d < 2, far, 0.0))


def _axis(axis: int, inp: int, size: int, scale: float, roi: tuple[float, float], spec: ResizeSpec) -> AxisPlan:
    y = np.arange(size, dtype=np.float64)
    x, outside = _source(y, inp, size, scale, roi, spec.coordinate_transformation_mode)
    if spec.mode == "nearest":
        idx = _nearest(x, spec.nearest_mode)
        return AxisPlan(axis, np.clip(idx, 0, max(inp - 1, 0))[:, None], np.ones((size, 1)), outside)
    # The window: the n input points nearest x, the lower one first on a tie, so that
    # base = ceil(x) - 1 and t = x - base lies in (0, 1].
    base = np.ceil(x) - 1
    t = x - base
    shrink = min(scale, 1.0) if spec.antialias else 1.0  # antialias stretches the filter by 1/scale
    reach = 1 if spec.mode == "linear" else 2
    lo = int(math.floor(-reach / shrink) + 1)  # the window: base + lo .. base + 1 - lo
    offs = np.arange(lo, 2 - lo)
    dist = (offs[None, :] - t[:, None]) * shrink
    if spec.mode == "linear":
        w = np.clip(1 - np.abs(dist), 0, 1)
    else:
        w = _cubic(dist, spec.cubic_coeff_a)
    taps = base[:, None].astype(np.int64) + offs[None, :]
    if spec.antialias:
        w = w / w.sum(axis=1, keepdims=True)
    if spec.exclude_outside:
        w = np.where((taps < 0) | (taps >= inp), 0.0, w)
        total = w.sum(axis=1, keepdims=True)
        w = w / np.where(total == 0, 1.0, total)
    return AxisPlan(axis, np.clip(taps, 0, max(inp - 1, 0)), w, outside)


def _nearest(x: np.ndarray, mode: str) -> np.ndarray:
    if mode == "floor":
        idx = np.floor(x)
    elif mode == "ceil":
        idx = np.ceil(x)
    elif mode == "round_prefer_ceil":
        idx = np.floor(x + 0.5)
    else:
        idx = np.ceil(x - 0.5)
    return idx.astype(np.int64)


def _along(shape_len: int, axis: int, v: np.ndarray) -> np.ndarray:
    """``v`` (1-D, along ``axis``) shaped to broadcast against a rank-``shape_len`` array."""
    return v.reshape((1,) * axis + (-1,) + (1,) * (shape_len - axis - 1))


def apply(x: np.ndarray, plans: Sequence[AxisPlan], extrapolation_value: float) -> np.ndarray:
    """Resample ``x`` (a float array) axis by axis."""
    out = x
    for p in plans:
        if p.taps.shape[1] == 1:  # nearest: a gather
            out = np.take(out, p.taps[:, 0], axis=p.axis)
        else:
            acc = None
            for k in range(p.taps.shape[1]):
                term = np.take(out, p.taps[:, k], axis=p.axis) * _along(out.ndim, p.axis, p.weights[:, k]).astype(
                    out.dtype)
                acc = term if acc is None else acc + term
            out = acc  # type: ignore[assignment]
        if p.outside is not None and p.outside.any():
            out = np.where(_along(out.ndim, p.axis, p.outside), np.asarray(extrapolation_value, out.dtype), out)
    return out


def adjoint(g: np.ndarray, in_shape: Sequence[int], plans: Sequence[AxisPlan]) -> np.ndarray:
    """The cotangent of Resize's input: each axis's gather-and-weigh, transposed."""
    shapes = [tuple(in_shape)]
    for p in plans:
        s = list(shapes[-1])
        s[p.axis] = p.taps.shape[0]
        shapes.append(tuple(s))
    for p, before in zip(reversed(plans), reversed(shapes[:-1])):
        w = p.weights if p.outside is None else np.where(p.outside[:, None], 0.0, p.weights)
        out = np.zeros(before, dtype=g.dtype)
        moved_out, moved_g = np.moveaxis(out, p.axis, 0), np.moveaxis(g, p.axis, 0)
        for k in range(p.taps.shape[1]):
            np.add.at(moved_out, p.taps[:, k], moved_g * w[:, k].astype(g.dtype).reshape((-1,) + (1,) * (g.ndim - 1)))
        g = out
    return g
