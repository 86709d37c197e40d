"""The Conv kernel (nexus.ops.nn) on every kind of grouping it has a path for: dense
(one GEMM over an im2col), grouped (one matmul batched over the groups), depthwise (one
input channel per group, with and without a channel multiplier; shifted multiply-adds)
and 1x1, across strides, dilations, symmetric and asymmetric pads, bias, 1-D to 3-D and
the float dtypes.  Oracles: a plain loop over every output element in float64, written
here, and PyTorch's conv1d/2d/3d."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest

import nexus as nx
from nexus.backends.python import lowering
from nexus.ir.graph import Graph
from nexus.ir.opdef import get_op
from nexus.ir.types import TensorType
from nexus.ops import nn
from nexus.ops.nn import planned_conv
from nexus.testing.extras import require

CONV = get_op("Conv").kernel


def naive_conv(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, strides: tuple[int, ...],
               pads: tuple[int, ...], dil: tuple[int, ...], group: int) -> np.ndarray:
    """ONNX Conv by its definition: for each output element, the sum over its group's input
    channels and the kernel positions that fall inside the (unpadded) input."""
    n = x.ndim - 2
    nb, c = x.shape[:2]
    m, cg = w.shape[:2]
    ks = w.shape[2:]
    mg = m // group
    out_sp = [(x.shape[2 + i] + pads[i] + pads[i + n] - dil[i] * (ks[i] - 1) - 1) // strides[i] + 1 for i in range(n)]
    out = np.zeros((nb, m, *out_sp), np.float64)
    for bi, oc in itertools.product(range(nb), range(m)):
        g = oc // mg
        for pos in itertools.product(*(range(o) for o in out_sp)):
            acc = 0.0 if b is None else float(b[oc])
            for ic, kpos in itertools.product(range(cg), itertools.product(*(range(k) for k in ks))):
                src = [pos[i] * strides[i] - pads[i] + kpos[i] * dil[i] for i in range(n)]
                if all(0 <= s < x.shape[2 + i] for i, s in enumerate(src)):
                    acc += float(x[(bi, g * cg + ic, *src)]) * float(w[(oc, ic, *kpos)])
            out[(bi, oc, *pos)] = acc
    return out


# (channels in, channels out, group): dense, grouped, depthwise, depthwise x2 multiplier,
# grouped with one output channel per group, depthwise wide enough to go channels-last
GROUPINGS = [(4, 6, 1), (4, 6, 2), (6, 6, 3), (4, 4, 4), (3, 6, 3), (4, 2, 2), (32, 32, 32)]
GEOMETRIES = [  # (kernel, stride, dilation, pads as begin, end per dim)
    (3, 1, 1, (1, 1)), (3, 2, 1, (1, 1)), (3, 1, 2, (2, 2)), (2, 2, 1, (0, 1)), (1, 1, 1, (0, 0)),
    (1, 2, 1, (0, 0)), (3, 2, 2, (0, 2)), (1, 1, 1, (1, 0)),
]


def _case(cin: int, cout: int, group: int, k: int, n: int, rng: np.random.Generator, size: int = 6,
          batch: int = 2, dtype: Any = np.float64) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    x = rng.standard_normal((batch, cin) + (size,) * n).astype(dtype)
    w = rng.standard_normal((cout, cin // group) + (k,) * n).astype(dtype)
    b = rng.standard_normal(cout).astype(dtype)
    return x, w, b


def _pads(per_dim: tuple[int, int], n: int) -> tuple[int, ...]:
    return (per_dim[0],) * n + (per_dim[1],) * n


@pytest.mark.parametrize("cin,cout,group", GROUPINGS)
@pytest.mark.parametrize("k,stride,dil,pad", GEOMETRIES)
@pytest.mark.parametrize("bias", [True, False])
def test_conv2d_float64_matches_the_loop(cin: int, cout: int, group: int, k: int, stride: int, dil: int,
                                         pad: tuple[int, int], bias: bool) -> None:
    rng = np.random.default_rng(cin * 100 + cout * 10 + group + k + stride * 7 + dil * 13)
    x, w, b = _case(cin, cout, group, k, 2, rng)
    pads = _pads(pad, 2)
    got = CONV(x, w, b if bias else None, strides=(stride,) * 2, pads=pads, dilations=(dil,) * 2, group=group)
    want = naive_conv(x, w, b if bias else None, (stride,) * 2, pads, (dil,) * 2, group)
    assert got.dtype == np.float64 and got.flags.c_contiguous
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("n", [1, 3])
@pytest.mark.parametrize("cin,cout,group", [(4, 6, 1), (4, 6, 2), (4, 4, 4), (2, 4, 2), (32, 32, 32)])
def test_conv1d_and_3d_float64_match_the_loop(n: int, cin: int, cout: int, group: int) -> None:
    rng = np.random.default_rng(n * 10 + group)
    x, w, b = _case(cin, cout, group, 3, n, rng, size=5 if n == 3 else 9, batch=1)
    for strides, pads, dil in [((1,) * n, (1,) * 2 * n, (1,) * n),
                               (tuple(range(1, n + 1)), tuple(range(2 * n)), (2,) + (1,) * (n - 1))]:
        got = CONV(x, w, b, strides=strides, pads=pads, dilations=dil, group=group)
        np.testing.assert_allclose(got, naive_conv(x, w, b, strides, pads, dil, group), rtol=1e-12, atol=1e-12)


def _torch_conv(torch: Any, x: np.ndarray, w: np.ndarray, b: np.ndarray | None, strides: tuple[int, ...],
                pads: tuple[int, ...], dil: tuple[int, ...], group: int) -> np.ndarray:
    n = x.ndim - 2
    xt = torch.from_numpy(x)
    # torch pads symmetrically: the asymmetric ONNX pads by F.pad first (last dim first).
    xt = torch.nn.functional.pad(xt, [p for i in reversed(range(n)) for p in (pads[i], pads[i + n])])
    fn = (torch.nn.functional.conv1d, torch.nn.functional.conv2d, torch.nn.functional.conv3d)[n - 1]
    bt = None if b is None else torch.from_numpy(b)
    return fn(xt, torch.from_numpy(w), bt, stride=strides, dilation=dil, groups=group).numpy()  # type: ignore[no-any-return]


@pytest.mark.parametrize("n", [1, 2, 3])
@pytest.mark.parametrize("cin,cout,group", GROUPINGS)
@pytest.mark.parametrize("k,stride,dil,pad", GEOMETRIES)
def test_conv_float32_matches_pytorch(n: int, cin: int, cout: int, group: int, k: int, stride: int, dil: int,
                                      pad: tuple[int, int]) -> None:
    torch = require("torch", "torch")
    rng = np.random.default_rng(n + cin + cout + group + k + stride + dil)
    x, w, b = _case(cin, cout, group, k, n, rng, size={1: 11, 2: 8, 3: 6}[n], dtype=np.float32)
    strides, dil_n, pads = (stride,) * n, (dil,) * n, _pads(pad, n)
    got = CONV(x, w, b, strides=strides, pads=pads, dilations=dil_n, group=group)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, _torch_conv(torch, x, w, b, strides, pads, dil_n, group), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("shape,w_shape,group,stride", [
    ((2, 32, 20, 20), (32, 1, 3, 3), 32, 1),     # depthwise, MobileNet-like
    ((1, 24, 17, 17), (24, 1, 5, 5), 24, 2),     # depthwise 5x5 stride 2, odd size
    ((2, 64, 12, 12), (64, 2, 3, 3), 32, 1),     # ResNeXt-like grouped
    ((3, 16, 15, 15), (40, 16, 1, 1), 1, 1),     # pointwise
    ((1, 3, 33, 33), (8, 3, 7, 7), 1, 2),        # a stem
])
def test_conv_model_sizes_match_pytorch(shape: tuple[int, ...], w_shape: tuple[int, ...], group: int,
                                        stride: int) -> None:
    torch = require("torch", "torch")
    rng = np.random.default_rng(0)
    x = rng.standard_normal(shape).astype(np.float32)
    w = rng.standard_normal(w_shape).astype(np.float32)
    b = rng.standard_normal(w_shape[0]).astype(np.float32)
    p = w_shape[2] // 2
    got = CONV(x, w, b, strides=(stride,) * 2, pads=(p,) * 4, group=group)
    want = _torch_conv(torch, x, w, b, (stride,) * 2, (p,) * 4, (1, 1), group)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("shape,k,stride,dil", [
    ((2, 32, 40, 40), 3, 1, 1),
    ((1, 40, 70, 70), 3, 2, 1),
    ((2, 48, 40, 40), 3, 2, 2),
    ((3, 64, 9, 9), 5, 1, 1),
    ((2, 32, 9, 11), 3, 2, 1),
    ((2, 32, 30), 5, 1, 2),       # 1-D and 3-D
    ((1, 32, 6, 7, 5), 3, 1, 1),
])
def test_wide_depthwise_matches_one_dense_gemm(shape: tuple[int, ...], k: int, stride: int, dil: int) -> None:
    """Depthwise layers of 32 channels and more run channels-last, the windows contracted
    with the taps by one einsum (images big and small, strides, dilations, 1-D to 3-D).
    Oracle: the same convolution as the dense path's one GEMM, with a block-diagonal
    weight (channel m sees only input channel m)."""
    rng = np.random.default_rng(sum(shape) + k)
    n, c = len(shape) - 2, shape[1]
    x = rng.standard_normal(shape)
    w = rng.standard_normal((c, 1) + (k,) * n)
    b = rng.standard_normal(c)
    dense = np.zeros((c, c) + (k,) * n)
    dense[np.arange(c), np.arange(c)] = w[:, 0]
    geo = {"strides": (stride,) * n, "pads": (dil * (k // 2),) * 2 * n, "dilations": (dil,) * n}
    got = CONV(x, w, b, group=c, **geo)
    np.testing.assert_allclose(got, CONV(x, dense, b, **geo), rtol=1e-12, atol=1e-12)
    assert got.flags.c_contiguous


@pytest.mark.parametrize("cin,cout,group", GROUPINGS)
def test_float16_is_computed_in_float32(cin: int, cout: int, group: int) -> None:
    rng = np.random.default_rng(group)
    x, w, b = _case(cin, cout, group, 3, 2, rng, dtype=np.float16)
    got = CONV(x, w, b, pads=(1, 1, 1, 1), strides=(2, 1), group=group)
    want = naive_conv(x.astype(np.float64), w.astype(np.float64), b.astype(np.float64), (2, 1), (1, 1, 1, 1),
                      (1, 1), group)
    assert got.dtype == np.float16
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=2e-3, atol=2e-2)


def test_windows_larger_than_the_input_give_an_empty_output() -> None:
    """A kernel span beyond the padded input: no output positions (as the type rule says),
    not an error from the window view."""
    x = np.ones((1, 2, 3, 3), np.float32)
    w = np.ones((4, 2, 5, 5), np.float32)
    out = CONV(x, w, np.ones(4, np.float32))
    assert out.shape == (1, 4, 0, 0) and out.dtype == np.float32
    assert CONV(np.ones((0, 2, 6, 6)), np.ones((2, 1, 3, 3)), group=2).shape == (0, 2, 4, 4)


def test_inputs_are_not_written() -> None:
    """The kernel works in place only on arrays it made: x, w and b are unchanged, also
    without padding (where the input itself is the im2col source)."""
    rng = np.random.default_rng(1)
    for group, w_shape in [(1, (4, 4, 1, 1)), (4, (4, 1, 3, 3)), (2, (4, 2, 3, 3))]:
        x = rng.standard_normal((1, 4, 5, 5))
        w = rng.standard_normal(w_shape)
        b = rng.standard_normal(4)
        copies = [a.copy() for a in (x, w, b)]
        CONV(x, w, b, group=group)
        for a, c in zip((x, w, b), copies):
            np.testing.assert_array_equal(a, c)


def test_python_backend_runs_a_depthwise_block() -> None:
    """Through the python backend: a depthwise conv and a pointwise conv in one graph,
    against the loop oracle."""
    rng = np.random.default_rng(2)
    g = Graph("dw", [TensorType("f64", (1, 3, 6, 6))], ["x"])
    blk = g.start_block
    wd = rng.standard_normal((3, 1, 3, 3))
    wp = rng.standard_normal((5, 3, 1, 1))
    c1 = g.add("Constant", [], blk, {"value": wd})
    c2 = g.add("Constant", [], blk, {"value": wp})
    h = g.add("Conv", [g.args[0], c1], blk, {"group": 3, "pads": (1, 1, 1, 1), "strides": (2, 2)})
    y = g.add("Conv", [h, c2], blk)
    g.end_block.append_input(g.add("Return", [y], blk))
    nx.verify(g)
    x = rng.standard_normal((1, 3, 6, 6))
    want = naive_conv(naive_conv(x, wd, None, (2, 2), (1, 1, 1, 1), (1, 1), 3), wp, None, (1, 1), (0,) * 4,
                      (1, 1), 1)
    np.testing.assert_allclose(nx.compile(g, backend="python")(x), want, rtol=1e-12, atol=1e-12)



# --- the planned kernel (nexus.ops.nn.planned_conv: what the python backend runs) ---------
def _planned_twice(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, **attrs: Any) -> np.ndarray:
    """The planned kernel's result on its second call (the first plans; the second runs
    the kept plan), checked equal to the first."""
    conv = planned_conv(**attrs)
    first = conv(x, w, b)
    second = conv(x, w, b)
    np.testing.assert_array_equal(first, second)
    channels_last = second.transpose((0, *range(2, second.ndim), 1))
    assert (second.flags.c_contiguous or channels_last.flags.c_contiguous) and second.dtype == x.dtype
    return second  # type: ignore[no-any-return]


@pytest.mark.parametrize("n", [1, 2, 3])
@pytest.mark.parametrize("cin,cout,group", GROUPINGS)
@pytest.mark.parametrize("k,stride,dil,pad", GEOMETRIES)
def test_planned_conv_matches_pytorch(n: int, cin: int, cout: int, group: int, k: int, stride: int, dil: int,
                                      pad: tuple[int, int]) -> None:
    torch = require("torch", "torch")
    rng = np.random.default_rng(n * 3 + cin + cout + group + k + stride + dil)
    x, w, b = _case(cin, cout, group, k, n, rng, size={1: 11, 2: 8, 3: 6}[n], batch=3, dtype=np.float32)
    geo = {"strides": (stride,) * n, "pads": _pads(pad, n), "dilations": (dil,) * n}
    got = _planned_twice(x, w, b, group=group, **geo)
    want = _torch_conv(torch, x, w, b, geo["strides"], geo["pads"], geo["dilations"], group)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("cin,cout,group", GROUPINGS)
@pytest.mark.parametrize("k,stride,dil,pad", GEOMETRIES[:4])
@pytest.mark.parametrize("bias", [True, False])
def test_planned_conv_float64_matches_the_loop(cin: int, cout: int, group: int, k: int, stride: int, dil: int,
                                               pad: tuple[int, int], bias: bool) -> None:
    rng = np.random.default_rng(cin + cout + group + k + stride + dil + bias)
    x, w, b = _case(cin, cout, group, k, 2, rng, size=5)
    pads = _pads(pad, 2)
    got = _planned_twice(x, w, b if bias else None, strides=(stride,) * 2, pads=pads, dilations=(dil,) * 2,
                         group=group)
    want = naive_conv(x, w, b if bias else None, (stride,) * 2, pads, (dil,) * 2, group)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("shape,w_shape,group,stride,pad", [
    ((2, 32, 20, 20), (32, 1, 3, 3), 32, 1, 1),    # depthwise, 400 pixels: padded, then moved channels-last
    ((2, 72, 32, 32), (72, 1, 3, 3), 72, 2, 1),    # MobileNet's, a power-of-two image
    ((3, 576, 4, 4), (576, 1, 5, 5), 576, 1, 2),   # small image, many channels
    ((2, 40, 16, 16), (40, 1, 3, 3), 40, 1, 0),    # no padding
    ((2, 32, 26, 26), (32, 1, 3, 3), 32, 1, 1),    # 20 pixels a channel and more: shifted multiply-adds
    ((1, 36, 30, 30), (36, 1, 5, 5), 36, 1, 0),    # the same, unpadded
    ((2, 16, 9, 9), (32, 1, 3, 3), 16, 2, 1),      # channel multiplier 2
    ((2, 64, 12, 12), (64, 2, 3, 3), 32, 1, 1),    # grouped
    ((3, 16, 15, 15), (40, 16, 1, 1), 1, 2, 0),    # pointwise, strided
    ((1, 3, 33, 33), (8, 3, 7, 7), 1, 2, 3),       # a stem
    ((2, 8, 1, 6), (8, 1, 3, 3), 8, 2, 1),         # strided depthwise: a stride phase of padding only
])
def test_planned_conv_model_sizes_match_pytorch(shape: tuple[int, ...], w_shape: tuple[int, ...], group: int,
                                                stride: int, pad: int) -> None:
    torch = require("torch", "torch")
    rng = np.random.default_rng(sum(shape))
    x = rng.standard_normal(shape).astype(np.float32)
    w = rng.standard_normal(w_shape).astype(np.float32)
    b = rng.standard_normal(w_shape[0]).astype(np.float32)
    got = _planned_twice(x, w, b, strides=(stride,) * 2, pads=(pad,) * 4, group=group)
    want = _torch_conv(torch, x, w, b, (stride,) * 2, (pad,) * 4, (1, 1), group)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_planned_conv_plans_again_for_new_shapes_weights_and_layouts() -> None:
    """One planned kernel called with another batch, image size, weights, bias, a
    non-contiguous input, float16 and a mixed dtype: each answer is the plain kernel's."""
    rng = np.random.default_rng(5)
    for group, w_shape in [(1, (6, 4, 3, 3)), (4, (4, 1, 3, 3)), (2, (6, 2, 1, 1))]:
        attrs = {"strides": (1, 2), "pads": (1, 0, 1, 1), "group": group}
        conv = planned_conv(**attrs)
        w = rng.standard_normal(w_shape)
        b = rng.standard_normal(w_shape[0])
        for x, wi, bi in [
            (rng.standard_normal((1, 4, 7, 7)), w, b),
            (rng.standard_normal((3, 4, 7, 7)), w, b),             # another batch
            (rng.standard_normal((3, 4, 9, 5)), w, b),             # another image
            (rng.standard_normal((3, 4, 9, 5)), w * 2, b),         # other weights
            (rng.standard_normal((3, 4, 9, 5)), w * 2, None),      # no bias
            (rng.standard_normal((3, 9, 5, 4)).transpose(0, 3, 1, 2), w, b),  # not contiguous
            (rng.standard_normal((2, 4, 6, 6)).astype(np.float16), w.astype(np.float16), b.astype(np.float16)),
            (rng.standard_normal((2, 4, 6, 6)).astype(np.float32), w.astype(np.float32), b.astype(np.float32)),
        ]:
            for _ in range(2):
                got = conv(x, wi, bi)
                want = CONV(x, wi, bi, **attrs)
                assert got.dtype == want.dtype and got.shape == want.shape
                np.testing.assert_allclose(got, naive_conv(x, wi, bi, (1, 2), (1, 0, 1, 1), (1, 1), group),
                                           rtol=1e-2 if x.dtype == np.float16 else 1e-5, atol=1e-2)


def test_planned_conv_zeroes_the_borders_of_reused_work_arrays() -> None:
    """The planned kernels pad into per-thread work arrays that other convolutions used
    before: with every work array filled with NaN between the calls (and made too small
    for the next), each result is still the plain kernel's."""
    rng = np.random.default_rng(8)
    cases = [((2, 4, 7, 7), (6, 4, 3, 3), 1), ((2, 4, 7, 7), (4, 1, 3, 3), 4), ((2, 40, 7, 7), (40, 1, 3, 3), 40),
             ((2, 40, 17, 17), (40, 1, 3, 3), 40), ((2, 40, 9), (40, 1, 5), 40), ((1, 6, 5, 5, 5), (6, 3, 3, 3, 3), 2)]
    for shape, w_shape, group in cases * 2:
        n = len(shape) - 2
        attrs = {"strides": (2,) * n, "pads": (1,) * n + (2,) * n, "group": group}
        x = rng.standard_normal(shape)
        w = rng.standard_normal(w_shape)
        for slot in range(3):
            nn._scratch(slot, (1 << 12,), np.dtype(np.float64)).fill(np.nan)
        got = planned_conv(**attrs)(x, w, None)
        np.testing.assert_allclose(got, CONV(x, w, None, **attrs), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("images_per_slice", [1, 2, 5])
def test_planned_depthwise_goes_through_a_batch_in_slices(monkeypatch: pytest.MonkeyPatch,
                                                           images_per_slice: int) -> None:
    """Channels-last depthwise layers take a large batch in slices (cache-sized): with
    slices of one, two (the last one short) and all five images, on a padded large image
    (moved channels-last in two steps), a small one and an unpadded one, with a bias."""
    rng = np.random.default_rng(10)
    for shape, k, stride, pad in [((5, 32, 17, 17), 3, 2, 1), ((5, 48, 6, 6), 5, 1, 2), ((5, 40, 9, 9), 3, 2, 0)]:
        padded_bytes = shape[1] * (shape[2] + 2 * pad) * (shape[3] + 2 * pad) * 8
        monkeypatch.setattr(nn, "DEPTHWISE_SLICE", padded_bytes * images_per_slice)
        x = rng.standard_normal(shape)
        w = rng.standard_normal((shape[1], 1, k, k))
        b = rng.standard_normal(shape[1])
        attrs = {"strides": (stride,) * 2, "pads": (pad,) * 4, "group": shape[1]}
        got = _planned_twice(x, w, b, **attrs)
        np.testing.assert_allclose(got, CONV(x, w, b, **attrs), rtol=1e-12, atol=1e-12)


def _channels_last(a: np.ndarray) -> np.ndarray:
    """``a``'s values in a channels-last array, seen as [N, C, *spatial]."""
    moved = np.ascontiguousarray(np.moveaxis(a, 1, -1))
    return np.moveaxis(moved, -1, 1)


def _torch_case(shape: tuple[int, ...], w_shape: tuple[int, ...], group: int, stride: int, pad: int,
                bias: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, dict[str, Any], np.ndarray]:
    """Random float32 x, w, b (or None), the geometry, and PyTorch's answer."""
    torch = require("torch", "torch")
    rng = np.random.default_rng(sum(shape) + bias)
    n = len(shape) - 2
    x = rng.standard_normal(shape).astype(np.float32)
    w = rng.standard_normal(w_shape).astype(np.float32)
    b = rng.standard_normal(w_shape[0]).astype(np.float32) if bias else None
    geo = {"strides": (stride,) * n, "pads": (pad,) * 2 * n, "dilations": (1,) * n}
    return x, w, b, geo, _torch_conv(torch, x, w, b, geo["strides"], geo["pads"], geo["dilations"], group)


@pytest.mark.parametrize("shape,w_shape,group,stride,pad", [
    ((2, 40, 8, 8), (40, 1, 5, 5), 40, 1, 2),      # depthwise, small image
    ((2, 32, 20, 20), (32, 1, 3, 3), 32, 2, 1),    # depthwise, large image (its input moved in two steps)
    ((2, 48, 6, 6), (48, 1, 3, 3), 48, 1, 0),      # depthwise, unpadded
    ((3, 40, 6, 6), (24, 40, 1, 1), 1, 1, 0),      # 1x1: one GEMM of channels-last rows
    ((3, 40, 1, 1), (24, 40, 1, 1), 1, 1, 0),      # 1x1 on 1x1 (squeeze-excite)
    ((2, 40, 9), (16, 40, 1), 1, 1, 0),            # 1x1, 1-D
    ((2, 16, 6, 6), (24, 16, 3, 3), 1, 2, 1),      # dense 3x3 (its input copied channels-first)
    ((2, 16, 9, 9), (16, 1, 3, 3), 16, 1, 1),      # depthwise on few channels (shifted multiply-adds)
    ((2, 16, 10, 10), (16, 1, 3, 3), 16, 2, 1),    # the same, strided (on the input's stride phases)
    ((2, 8, 11, 11), (16, 1, 5, 5), 8, 3, 2),      # strided, channel multiplier 2
])
@pytest.mark.parametrize("bias", [True, False])
def test_planned_conv_takes_channels_last_inputs(shape: tuple[int, ...], w_shape: tuple[int, ...], group: int,
                                                 stride: int, pad: int, bias: bool) -> None:
    """The planned kernels leave a channels-last result (depthwise layers of many channels,
    1x1 layers after them) for the next convolution: every path given a channels-last
    input (a view, not C-contiguous) answers as PyTorch does for the same values."""
    x, w, b, geo, want = _torch_case(shape, w_shape, group, stride, pad, bias)
    conv = planned_conv(group=group, **geo)
    for xi in (x, _channels_last(x), x, _channels_last(x)):  # one plan, either layout on each call
        np.testing.assert_allclose(conv(xi, w, b), want, rtol=1e-4, atol=1e-4)


def test_planned_convs_keep_a_layer_chain_channels_last() -> None:
    """A MobileNet block on the planned kernels (expand 1x1, depthwise, an activation,
    squeeze-excite scaling, project 1x1, residual add, another depthwise): the depthwise
    result stays channels-last through the elementwise ops into the 1x1 GEMMs, and the
    chain's answer is PyTorch's."""
    torch = require("torch", "torch")
    F = torch.nn.functional
    rng = np.random.default_rng(11)
    x = rng.standard_normal((2, 16, 10, 10)).astype(np.float32)
    params = [rng.standard_normal(s).astype(np.float32) * 0.3 for s in
              [(48, 16, 1, 1), (48,), (48, 1, 3, 3), (48,), (16, 48, 1, 1), (16,), (16, 1, 3, 3), (16,)]]
    expand, dw, project = planned_conv(), planned_conv(pads=(1,) * 4, group=48), planned_conv()
    dw2 = planned_conv(pads=(1,) * 4, group=16)
    for _ in range(2):
        h = expand(x, *params[0:2])
        d = dw(h, *params[2:4])
        assert np.moveaxis(d, 1, -1).flags.c_contiguous  # channels-last
        a = d * np.clip(d + 3, 0, 6) / 6
        a = a * a.mean(axis=(2, 3), keepdims=True)
        p = project(a, *params[4:6])
        assert np.moveaxis(p, 1, -1).flags.c_contiguous  # still channels-last
        got = dw2(p + x, *params[6:8])
    t = [torch.from_numpy(v) for v in (x, *params)]
    th = F.conv2d(t[0], t[1], t[2])
    td = F.conv2d(th, t[3], t[4], padding=1, groups=48)
    ta = F.hardswish(td)
    ta = ta * ta.mean(dim=(2, 3), keepdim=True)
    tp = F.conv2d(ta, t[5], t[6])
    want = F.conv2d(tp + t[0], t[7], t[8], padding=1, groups=16).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_planned_conv_from_two_threads() -> None:
    """Two threads running planned kernels at once (each has its own work arrays; one
    kernel is shared, planned for another shape by the other thread)."""
    import threading

    rng = np.random.default_rng(9)
    conv = planned_conv(pads=(1, 1, 1, 1), group=32)
    w = rng.standard_normal((32, 1, 3, 3))
    inputs = [rng.standard_normal((b, 32, 10, 10)) for b in (1, 2)]
    wants = [CONV(x, w, None, pads=(1, 1, 1, 1), group=32) for x in inputs]
    bad: list[int] = []

    def work(i: int) -> None:
        for _ in range(200):
            if not np.allclose(conv(inputs[i], w), wants[i], rtol=1e-12, atol=1e-12):
                bad.append(i)

    threads = [threading.Thread(target=work, args=(i,)) for i in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not bad


def test_planned_conv_does_not_write_its_inputs() -> None:
    rng = np.random.default_rng(6)
    for group, w_shape, pads in [(1, (4, 4, 1, 1), (0,) * 4), (4, (4, 1, 3, 3), (1,) * 4),
                                 (32, (32, 1, 3, 3), (0,) * 4), (2, (4, 2, 3, 3), (0,) * 4)]:
        x = rng.standard_normal((2, w_shape[1] * group, 5, 5))
        w = rng.standard_normal(w_shape)
        b = rng.standard_normal(w_shape[0])
        copies = [a.copy() for a in (x, w, b)]
        _planned_twice(x, w, b, pads=pads, group=group)
        for a, c in zip((x, w, b), copies):
            np.testing.assert_array_equal(a, c)


def test_python_backend_plans_convolutions_with_constant_weights(monkeypatch: pytest.MonkeyPatch) -> None:
    """The python backend runs a Conv whose weights are constants (its bias an Identity of
    one) through a planned kernel, and one whose weights are an argument through the plain
    one, at two batch sizes of a symbolic batch, against the loop oracle."""
    rng = np.random.default_rng(7)
    g = Graph("planned", [TensorType("f64", ("n", 32, 6, 6)), TensorType("f64", (8, 32, 1, 1))], ["x", "wp"])
    blk = g.start_block
    wd = rng.standard_normal((32, 1, 3, 3))
    bd = rng.standard_normal(32)
    c1 = g.add("Constant", [], blk, {"value": wd})
    c2 = g.add("Constant", [], blk, {"value": bd})
    shared = g.add("Identity", [c2], blk)  # as ONNX files share an initializer
    h = g.add("Conv", [g.args[0], c1, shared], blk, {"group": 32, "pads": (1, 1, 1, 1), "strides": (2, 2)})
    y = g.add("Conv", [h, g.args[1]], blk)
    g.end_block.append_input(g.add("Return", [y], blk))
    nx.verify(g)
    plans: list[tuple[int, ...]] = []
    plan = nn._conv_plan

    def counted(x: Any, *args: Any) -> Any:
        plans.append(x.shape)
        return plan(x, *args)

    monkeypatch.setattr(nn, "_conv_plan", counted)
    exe = nx.compile(g, backend="python")
    wp = rng.standard_normal((8, 32, 1, 1))
    for batch in (1, 1, 3, 3, 1):
        x = rng.standard_normal((batch, 32, 6, 6))
        want = naive_conv(naive_conv(x, wd, bd, (2, 2), (1, 1, 1, 1), (1, 1), 32), wp, None, (1, 1), (0,) * 4,
                          (1, 1), 1)
        np.testing.assert_allclose(exe(x, wp), want, rtol=1e-12, atol=1e-12)
    assert [s[0] for s in plans] == [1, 3, 1]  # the depthwise conv, planned once per batch size


CONVT = get_op("ConvTranspose").kernel


@pytest.mark.parametrize("n", [1, 2, 3])
@pytest.mark.parametrize("cin,cout_per_group,group", [(4, 3, 1), (4, 3, 2), (4, 1, 4), (6, 2, 3)])
@pytest.mark.parametrize("k,stride,dil,pad,opad", [(3, 1, 1, 1, 0), (3, 2, 1, 1, 1), (2, 2, 1, 0, 0),
                                                    (3, 2, 2, 2, 1), (1, 1, 1, 0, 0)])
def test_conv_transpose_matches_pytorch(n: int, cin: int, cout_per_group: int, group: int, k: int, stride: int,
                                        dil: int, pad: int, opad: int) -> None:
    """ConvTranspose (one matmul batched over the groups, then the kernel positions'
    scatter-adds) against torch's conv_transpose, bias and output_padding included."""
    torch = require("torch", "torch")
    rng = np.random.default_rng(n + cin + group + k + stride + dil)
    x = rng.standard_normal((2, cin) + (5,) * n).astype(np.float32)
    w = rng.standard_normal((cin, cout_per_group) + (k,) * n).astype(np.float32)
    b = rng.standard_normal(cout_per_group * group).astype(np.float32)
    got = CONVT(x, w, b, strides=(stride,) * n, pads=(pad,) * 2 * n, dilations=(dil,) * n, group=group,
                output_padding=(opad,) * n)
    fn = (torch.nn.functional.conv_transpose1d, torch.nn.functional.conv_transpose2d,
          torch.nn.functional.conv_transpose3d)[n - 1]
    want = fn(torch.from_numpy(x), torch.from_numpy(w), torch.from_numpy(b), stride=stride, padding=pad,
              output_padding=opad, groups=group, dilation=dil).numpy()
    assert got.dtype == np.float32 and got.flags.c_contiguous
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("shape,w_shape,stride,pad", [
    ((2, 16, 8, 8), (72, 16, 1, 1), 1, 0),         # 1x1: the input's transposed view times [C, M]
    ((3, 24, 5), (40, 24, 1), 1, 0),               # 1-D
    ((2, 16, 1, 1), (48, 16, 1, 1), 1, 0),         # on 1x1
    ((2, 16, 8, 8), (32, 16, 3, 3), 2, 1),         # not a 1x1: the flag changes nothing
])
@pytest.mark.parametrize("bias", [True, False])
def test_planned_conv_leaves_a_channels_last_result_when_asked(shape: tuple[int, ...], w_shape: tuple[int, ...],
                                                                stride: int, pad: int, bias: bool) -> None:
    """``planned_conv(channels_last=True)``: a 1x1 layer given a channels-first input
    answers as PyTorch does, its result channels-last; either layout of the input, on
    each call of one plan."""
    x, w, b, geo, want = _torch_case(shape, w_shape, 1, stride, pad, bias)
    conv = planned_conv(channels_last=True, **geo)
    for xi in (x, _channels_last(x), x):
        got = conv(xi, w, b)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
        if w_shape[2] == 1:
            assert np.moveaxis(got, 1, -1).flags.c_contiguous


def _expand_block(channels: int, image: int, silu: bool) -> tuple[Graph, list[np.ndarray]]:
    """1x1 expansion (16 -> ``channels``), Relu (or SiLU: x * Sigmoid(x)), a 3x3 depthwise
    layer of stride 2."""
    rng = np.random.default_rng(channels)
    params = [rng.standard_normal(s) * 0.3 for s in [(channels, 16, 1, 1), (channels,), (channels, 1, 3, 3)]]
    g = Graph("expand", [TensorType("f64", ("n", 16, image, image))], ["x"])
    blk = g.start_block
    w1, b1, wd = (g.add("Constant", [], blk, {"value": p}) for p in params)
    e = g.add("Conv", [g.args[0], w1, b1], blk)
    h = g.add("Mul", [e, g.add("Sigmoid", [e], blk)], blk) if silu else g.add("Relu", [e], blk)
    y = g.add("Conv", [h, wd], blk, {"group": channels, "pads": (1, 1, 1, 1), "strides": (2, 2)})
    g.end_block.append_input(g.add("Return", [y], blk))
    nx.verify(g)
    return g, params


@pytest.mark.parametrize("channels,last", [(48, True), (16, False)])
@pytest.mark.parametrize("silu", [False, True])
def test_python_backend_leaves_an_expansion_channels_last_for_the_depthwise_layer(
        monkeypatch: pytest.MonkeyPatch, channels: int, last: bool, silu: bool) -> None:
    """The python backend asks a 1x1 layer for a channels-last result where (through a
    Relu, or SiLU's Sigmoid and Mul) a depthwise layer that computes channels-last takes
    it (48 channels), not where the depthwise layer computes channels-first (16); the
    answer is the loop oracle's."""
    asked: list[bool] = []
    plan = nn.planned_conv

    def recorded(*args: Any, channels_last: bool = False, **kw: Any) -> Any:
        asked.append(channels_last)
        return plan(*args, channels_last=channels_last, **kw)

    monkeypatch.setattr(lowering, "planned_conv", recorded)
    g, (w1, b1, wd) = _expand_block(channels, 6, silu)
    exe = nx.compile(g, backend="python")
    x = np.random.default_rng(1).standard_normal((2, 16, 6, 6))
    e = naive_conv(x, w1, b1, (1, 1), (0,) * 4, (1, 1), 1)
    h = e / (1 + np.exp(-e)) if silu else np.maximum(e, 0)
    want = naive_conv(h, wd, None, (2, 2), (1,) * 4, (1, 1), channels)
    np.testing.assert_allclose(exe(x), want, rtol=1e-12, atol=1e-12)
    assert asked == [last, False]
