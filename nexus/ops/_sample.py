"""Kernels of the nn ops that sample or scatter by position: GridSample, DeformConv and
Col2Im (their definitions are in :mod:`nexus.ops.nn`).

GridSample and DeformConv share one sampler: values of x [N, C, *D] at fractional
positions, in pixel units per spatial dim, by the nearest, linear or cubic taps, each tap
an index per dim and a weight; a tap outside the input reads 0, the border value or its
reflection (``padding``).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

_CUBIC_A = -0.75  # Keys' cubic, as PyTorch's grid_sample and ONNX GridSample


def _cubic_weights(t: np.ndarray) -> list[np.ndarray]:
    """The weights of the taps at floor - 1 .. floor + 2 for the fraction ``t`` in [0, 1)."""
    a = _CUBIC_A

    def near(d: np.ndarray) -> np.ndarray:  # |d| <= 1
        return ((a + 2) * d - (a + 3)) * d * d + 1

    def far(d: np.ndarray) -> np.ndarray:  # 1 < |d| < 2
        return ((a * d - 5 * a) * d + 8 * a) * d - 4 * a

    return [far(t + 1), near(t), near(1 - t), far(2 - t)]


def reflect(v: np.ndarray, lo: float, hi: float) -> np.ndarray:
    """``v`` reflected by the borders ``lo`` and ``hi`` until it lies between them."""
    span = hi - lo
    if span <= 0:
        return np.full_like(v, lo)
    below, above = v < lo, v > hi
    d = np.where(below, lo - v, np.where(above, v - hi, 0))
    n = np.floor(d / span)
    r = d - n * span
    even = (n % 2) == 0
    from_lo, from_hi = lo + r, hi - r
    out = np.where(below, np.where(even, from_lo, from_hi), v)
    return np.where(above, np.where(even, from_hi, from_lo), out)


def _borders(size: int, align_corners: bool) -> tuple[float, float]:
    return (0.0, size - 1.0) if align_corners else (-0.5, size - 0.5)


def sample(x: np.ndarray, pos: np.ndarray, mode: str, padding: str, align_corners: bool) -> np.ndarray:
    """x [N, C, *D] at ``pos`` [N, *P, n] (pixel units, dims in x's order): [N, C, *P],
    in float64."""
    nb, c = x.shape[:2]
    dims = x.shape[2:]
    n = len(dims)
    p_shape = pos.shape[1:-1]
    pos = pos.reshape(nb, -1, n)
    coords = []
    for d in range(n):
        v = pos[..., d]
        lo, hi = _borders(dims[d], align_corners)
        if mode == "nearest":
            v = np.rint(v)  # half to even, as PyTorch
        if padding == "border":
            v = np.where((v < lo) | (v > hi), np.clip(v, 0, dims[d] - 1), v)
        elif padding == "reflection":
            v = reflect(v, lo, hi)
        coords.append(v)
    taps_per_dim: list[list[tuple[np.ndarray, np.ndarray]]] = []
    for v in coords:
        if mode == "nearest":
            taps_per_dim.append([(v.astype(np.int64), np.ones_like(v))])
            continue
        f = np.floor(v)
        t = v - f
        i0 = f.astype(np.int64)
        if mode == "linear":
            taps_per_dim.append([(i0, 1 - t), (i0 + 1, t)])
        else:
            taps_per_dim.append([(i0 + k - 1, w) for k, w in enumerate(_cubic_weights(t))])
    flat = x.reshape(nb, c, -1).astype(np.float64)
    out = np.zeros((nb, c, pos.shape[1]), np.float64)
    rows = np.arange(nb)[:, None, None]
    chans = np.arange(c)[None, :, None]
    for combo in itertools.product(*taps_per_dim):
        index = np.zeros(pos.shape[:2], np.int64)
        weight = np.ones(pos.shape[:2], np.float64)
        inside = np.ones(pos.shape[:2], bool)
        for d, (i, w) in enumerate(combo):
            size = dims[d]
            if padding == "zeros":
                inside &= (i >= 0) & (i < size)
            elif padding == "border":
                i = np.clip(i, 0, size - 1)
            else:
                lo, hi = _borders(size, align_corners)
                i = np.clip(reflect(i.astype(np.float64), lo, hi).astype(np.int64), 0, size - 1)
            index = index * size + np.clip(i, 0, size - 1)
            weight = weight * w
        vals = flat[rows, chans, index[:, None, :]]
        out += np.where(inside[:, None, :], vals * weight[:, None, :], 0.0)
    return out.reshape((nb, c) + p_shape)


def grid_sample(x: Any, grid: Any, mode: str = "linear", padding_mode: str = "zeros",
                align_corners: bool = False) -> np.ndarray:
    """ONNX GridSample: x [N, C, *D] at the normalized positions of grid [N, *out, n]
    (the last axis in reverse dim order: x, y, z)."""
    xa, g = np.asarray(x), np.asarray(grid)
    work = np.promote_types(g.dtype, np.float32)
    g = g.astype(work)[..., ::-1]
    dims = xa.shape[2:]
    pos = np.empty(g.shape, work)
    for d, size in enumerate(dims):
        if align_corners:
            pos[..., d] = (g[..., d] + 1) / 2 * (size - 1)
        else:
            pos[..., d] = ((g[..., d] + 1) * size - 1) / 2
    return sample(xa, pos, mode, padding_mode, align_corners).astype(xa.dtype)


def deform_conv(x: Any, w: Any, offset: Any, b: Any = None, mask: Any = None, strides: Any = None,
                pads: Any = None, dilations: Any = None, group: int = 1, offset_group: int = 1) -> np.ndarray:
    """ONNX DeformConv: each kernel tap reads x, bilinearly (zeros outside), at its regular
    position plus the learned offset, scaled by the mask, then a grouped convolution."""
    xa, wa, off = np.asarray(x), np.asarray(w), np.asarray(offset)
    nb, c = xa.shape[:2]
    m = wa.shape[0]
    ks = wa.shape[2:]
    n = len(ks)
    out_sp = off.shape[2:]
    strides = tuple(strides or (1,) * n)
    pads = tuple(pads or (0,) * (2 * n))
    dil = tuple(dilations or (1,) * n)
    og = offset_group
    off = off.reshape((nb, og) + tuple(ks) + (n,) + tuple(out_sp)).astype(np.float64)
    msk = (np.ones((nb, og) + tuple(ks) + tuple(out_sp)) if mask is None
           else np.asarray(mask).reshape((nb, og) + tuple(ks) + tuple(out_sp)).astype(np.float64))
    # The regular positions [*k, *out] per dim, then the offsets added: [N, og, *k, *out, n].
    grids = np.meshgrid(*[np.arange(k) for k in ks], *[np.arange(o) for o in out_sp], indexing="ij")
    base = np.stack([grids[n + d] * strides[d] - pads[d] + grids[d] * dil[d] for d in range(n)], -1)
    pos = base[None, None].astype(np.float64) + np.moveaxis(off, 2 + n, -1)
    cg = c // og
    cols = np.concatenate([
        sample(xa[:, g * cg:(g + 1) * cg], pos[:, g], "linear", "zeros", True) * msk[:, g][:, None]
        for g in range(og)], axis=1)  # [N, C, *k, *out]
    kk, p = math.prod(ks), math.prod(out_sp)
    cin = wa.shape[1]
    cols = cols.reshape(nb, group, cin * kk, p)
    wg = wa.astype(np.float64).reshape(group, m // group, cin * kk)
    out = np.matmul(wg, cols).reshape((nb, m) + tuple(out_sp))
    if b is not None:
        out += np.asarray(b, np.float64).reshape((1, m) + (1,) * n)
    return out.astype(np.result_type(xa, wa))


def col2im(x: Any, image_shape: Sequence[int], block_shape: Sequence[int], strides: Any = None, pads: Any = None,
           dilations: Any = None) -> np.ndarray:
    """ONNX Col2Im: x [N, C * prod(block), L] (the columns of im2col) summed back into an
    image [N, C, *image_shape]; overlapping blocks add."""
    xa = np.asarray(x)
    n = len(image_shape)
    strides = tuple(strides or (1,) * n)
    pads = tuple(pads or (0,) * (2 * n))
    dil = tuple(dilations or (1,) * n)
    nb = xa.shape[0]
    kk = math.prod(block_shape)
    c = xa.shape[1] // kk
    padded = tuple(image_shape[d] + pads[d] + pads[n + d] for d in range(n))
    blocks = tuple((padded[d] - dil[d] * (block_shape[d] - 1) - 1) // strides[d] + 1 for d in range(n))
    cols = xa.reshape((nb, c) + tuple(block_shape) + blocks)
    img = np.zeros((nb, c) + padded, xa.dtype)
    for k in itertools.product(*[range(b) for b in block_shape]):
        where = tuple(slice(k[d] * dil[d], k[d] * dil[d] + strides[d] * (blocks[d] - 1) + 1, strides[d])
                      for d in range(n))
        img[(slice(None), slice(None)) + where] += cols[(slice(None), slice(None)) + k]
    crop = tuple(slice(pads[d], pads[d] + image_shape[d]) for d in range(n))
    return np.ascontiguousarray(img[(slice(None), slice(None)) + crop])


def _roi_taps(start: float, bin_size: float, grid: int, pooled: int, size: int) -> tuple[np.ndarray, ...]:
    """One axis of RoiAlign's samples, [pooled, grid]: whether each lies on the map, and
    its two taps with their weights (Caffe2's rule: within one pixel outside the map, the
    position clamps to it; farther out, the sample reads nothing)."""
    p = np.arange(pooled, dtype=np.float64)[:, None]
    g = np.arange(grid, dtype=np.float64)[None, :]
    v = start + p * bin_size + (g + 0.5) * bin_size / max(grid, 1)
    on = (v >= -1.0) & (v <= size)
    v = np.maximum(v, 0.0)
    low = np.minimum(v.astype(np.int64), size - 1)
    edge = low >= size - 1
    high = np.where(edge, low, low + 1)
    v = np.where(edge, low.astype(np.float64), v)
    frac = v - low
    return on, low, high, 1.0 - frac, frac


def roi_align(x: Any, rois: Any, batch_indices: Any, mode: str = "avg", output_height: int = 1,
              output_width: int = 1, sampling_ratio: int = 0, spatial_scale: float = 1.0,
              coordinate_transformation_mode: str = "half_pixel") -> np.ndarray:
    """ONNX RoiAlign: each region of interest [x1, y1, x2, y2] of image batch_indices[r],
    divided into output_height x output_width bins, each the average (or the max) of a
    grid of bilinear samples (sampling_ratio per side, or ceil(bin size) when 0)."""
    xa = np.asarray(x)
    boxes = np.asarray(rois, np.float64)
    which = np.asarray(batch_indices).astype(np.int64).reshape(-1)
    nr, c = len(which), xa.shape[1]
    h, w = xa.shape[2:]
    oh, ow = output_height, output_width
    out = np.zeros((nr, c, oh, ow), np.float64)
    shift = 0.5 if coordinate_transformation_mode == "half_pixel" else 0.0
    for r in range(nr):
        x1, y1, x2, y2 = (float(v) * spatial_scale - shift for v in boxes[r, :4])
        rw, rh = x2 - x1, y2 - y1
        if not shift:  # output_half_pixel: a malformed region counts as 1 x 1
            rw, rh = max(rw, 1.0), max(rh, 1.0)
        gh = sampling_ratio if sampling_ratio > 0 else int(np.ceil(rh / oh))
        gw = sampling_ratio if sampling_ratio > 0 else int(np.ceil(rw / ow))
        if gh <= 0 or gw <= 0:
            continue  # no samples: the bins stay 0, as the reference leaves them
        on_y, ylo, yhi, hy, ly = _roi_taps(y1, rh / oh, gh, oh, h)
        on_x, xlo, xhi, hx, lx = _roi_taps(x1, rw / ow, gw, ow, w)
        on = on_y[:, :, None, None] & on_x[None, None]  # [oh, gh, ow, gw]
        img = xa[which[r]].astype(np.float64)

        def tap(yi: np.ndarray, xi: np.ndarray, wy: np.ndarray, wx: np.ndarray) -> np.ndarray:
            vals = img[:, yi[:, :, None, None], xi[None, None]]  # [C, oh, gh, ow, gw]
            return vals * np.where(on, wy[:, :, None, None] * wx[None, None], 0.0)

        taps = [tap(ylo, xlo, hy, hx), tap(ylo, xhi, hy, lx), tap(yhi, xlo, ly, hx), tap(yhi, xhi, ly, lx)]
        if mode == "avg":
            out[r] = np.add.reduce(taps).sum(axis=(2, 4)) / (gh * gw)
        else:  # the largest weighted tap of any sample, as ONNX Runtime and the reference
            out[r] = np.maximum.reduce(taps).max(axis=(2, 4))
    return out.astype(xa.dtype)
