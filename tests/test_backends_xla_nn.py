"""The xla backend's lax rules for convolutions, pooling, normalisation and index ops
(``nexus/backends/xla/rules_nn.py``; they were host callbacks of the NumPy kernels).

Each op runs on random attributes drawn from its attribute space (spatial rank, strides,
asymmetric pads, dilations, groups, depthwise with several filters per channel, ceil mode,
count_include_pad, empty outputs, f16/f32/f64) and must agree with its NumPy kernel (the
python backend, the oracle).  The graph must compile without a host callback.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

from nexus.testing.extras import require

require("jax", "xla")

import nexus as nx  # noqa: E402
from nexus.ir.graph import Graph  # noqa: E402
from nexus.ir.types import TensorType  # noqa: E402

TOL = {"f16": 2e-3, "f32": 3e-5, "f64": 1e-12}
NP = {"f16": np.float16, "f32": np.float32, "f64": np.float64}


def one_op(op: str, args: Sequence[np.ndarray], attrs: dict[str, Any], consts: Sequence[np.ndarray] = ()) -> Graph:
    """A graph of one ``op`` node on ``args`` (graph arguments) then ``consts`` (constants)."""
    types = [TensorType({np.dtype(k): v for v, k in NP.items()}.get(a.dtype, str(a.dtype)) if a.dtype.kind == "f"
                        else "i64", tuple(a.shape)) for a in args]
    g = Graph("t", types)
    b = g.start_block
    ins = [*g.args, *(g.add("Constant", [], b, {"value": c}) for c in consts)]
    g.end_block.append_input(g.add("Return", [g.add(op, ins, b, attrs)], b))
    return g


def agree(g: Graph, args: Sequence[np.ndarray], dtype: str = "f64") -> None:
    exe = nx.compile(g, backend="xla")
    got = exe(*args)
    want = nx.compile(g, backend="python")(*args)
    assert got.dtype == want.dtype and got.shape == want.shape
    assert "custom_call" not in exe.source() and "callback" not in exe.source()  # no host kernel
    scale = max(1.0, float(np.max(np.abs(want.astype(np.float64)), initial=0.0)))
    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=TOL[dtype],
                               atol=TOL[dtype] * scale)


def _cases(seed: int, count: int) -> list[random.Random]:
    return [random.Random(seed * 1000 + k) for k in range(count)]


def _geometry(r: random.Random, n: int, ks: Sequence[int], pool: bool = False) -> dict[str, Any]:
    attrs: dict[str, Any] = {}
    if r.random() < 0.6:
        attrs["strides"] = tuple(r.randint(1, 3) for _ in range(n))
    if r.random() < 0.6:  # pooling: pads smaller than the kernel (the type rule)
        attrs["pads"] = tuple(r.randint(0, k - 1 if pool else 2) for k in (*ks, *ks))
    if r.random() < 0.4:
        attrs["dilations"] = tuple(r.randint(1, 2) for _ in range(n))
    return attrs


@pytest.mark.parametrize("r", _cases(1, 24), ids=[str(k) for k in range(24)])
def test_conv_agrees_with_its_kernel(r: random.Random) -> None:
    n = r.choice([1, 2, 2, 2, 3])
    dtype = r.choice(["f32", "f32", "f64", "f16"])
    kind = r.choice(["dense", "grouped", "depthwise", "depthwise"])
    c = r.choice([2, 3, 4, 6])
    group = {"dense": 1, "grouped": 2 if c % 2 == 0 else 1, "depthwise": c}[kind]
    m = group * r.randint(1, 3)
    ks = tuple(r.randint(1, 3) for _ in range(n))
    attrs = {**_geometry(r, n, ks), "group": group}
    x = np.random.default_rng(r.randint(0, 99)).standard_normal((r.randint(1, 2), c, *(r.randint(3, 7) for _ in ks)))
    w = np.random.default_rng(1).standard_normal((m, c // group, *ks))
    consts = [w.astype(NP[dtype])] + ([np.linspace(-1, 1, m).astype(NP[dtype])] if r.random() < 0.5 else [])
    agree(one_op("Conv", [x.astype(NP[dtype])], attrs, consts), [x.astype(NP[dtype])], dtype)


def test_conv_with_run_time_weights_and_an_empty_output() -> None:
    x = np.random.default_rng(2).standard_normal((2, 4, 5, 5)).astype(np.float32)
    w = np.random.default_rng(3).standard_normal((4, 1, 3, 3)).astype(np.float32)
    agree(one_op("Conv", [x, w], {"group": 4, "strides": (2, 1), "pads": (1, 0, 0, 2)}), [x, w], "f32")
    small = x[:, :, :2, :2]
    agree(one_op("Conv", [small, w], {"group": 4}), [small, w], "f32")  # a 3x3 kernel on 2x2: [2, 4, 0, 0]


@pytest.mark.parametrize("shape, w_shape, attrs", [
    ((2, 6, 9, 8), (4, 6, 1, 1), {"group": 1, "strides": (2, 3)}),  # 1x1: the input is its own columns
    ((3, 40, 2, 3), (6, 40, 1, 1), {"group": 1}),  # 1x1, more channels than positions: output transposed
    ((2, 12, 3, 3), (8, 6, 1, 1), {"group": 2, "strides": (2, 2)}),  # the same, grouped
    ((3, 3, 11, 10), (5, 3, 3, 3), {"group": 1, "strides": (2, 2), "pads": (1, 0, 1, 2)}),  # few channels
    ((2, 8, 7, 9), (6, 4, 3, 2), {"group": 2, "dilations": (2, 1), "pads": (2, 1, 0, 1)}),  # grouped
    ((1, 8, 6, 6), (4, 8, 3, 3), {"group": 1, "pads": (1, 1, 1, 1)}),  # many channels: XLA's convolution
    ((2, 4, 13), (6, 2, 3), {"group": 2, "strides": (3,)}),  # 1-d grouped
    ((1, 2, 4, 5, 3), (4, 2, 2, 2, 1), {"group": 1, "pads": (1, 0, 0, 0, 1, 0)}),  # 3-d, few channels
])
def test_dense_and_grouped_conv_paths_agree_with_the_kernel(shape: tuple[int, ...], w_shape: tuple[int, ...],
                                                            attrs: dict[str, Any]) -> None:
    """Each way ``_dense`` takes (products over the groups, column gathering, XLA's own)."""
    x = np.random.default_rng(11).standard_normal(shape).astype(np.float32)
    w = np.random.default_rng(12).standard_normal(w_shape).astype(np.float32)
    agree(one_op("Conv", [x], attrs, [w, np.linspace(-1, 1, w_shape[0]).astype(np.float32)]), [x], "f32")


@pytest.mark.parametrize("r", _cases(2, 12), ids=[str(k) for k in range(12)])
def test_conv_transpose_agrees_with_its_kernel(r: random.Random) -> None:
    n = r.choice([1, 2, 2, 3])
    c, group = r.choice([(2, 1), (4, 2), (3, 3), (4, 1)])
    mg = r.randint(1, 3)
    ks = tuple(r.randint(1, 3) for _ in range(n))
    attrs: dict[str, Any] = {**_geometry(r, n, ks), "group": group}
    strides = attrs.get("strides", (1,) * n)
    dil = attrs.get("dilations", (1,) * n)
    if r.random() < 0.5:  # output_padding < stride or dilation (ONNX)
        attrs["output_padding"] = tuple(r.randint(0, max(s, d) - 1) for s, d in zip(strides, dil))
    x = np.random.default_rng(r.randint(0, 99)).standard_normal((r.randint(1, 2), c, *(r.randint(2, 5) for _ in ks)))
    w = np.random.default_rng(4).standard_normal((c, mg, *ks))
    consts = [w] + ([np.linspace(-1, 1, mg * group)] if r.random() < 0.5 else [])
    agree(one_op("ConvTranspose", [x], attrs, consts), [x])


@pytest.mark.parametrize("op", ["MaxPool", "AveragePool"])
@pytest.mark.parametrize("r", _cases(3, 14), ids=[str(k) for k in range(14)])
def test_pooling_agrees_with_its_kernel(op: str, r: random.Random) -> None:
    n = r.choice([1, 2, 2, 3])
    dtype = r.choice(["f32", "f64", "f16"])
    ks = tuple(r.randint(1, 3) for _ in range(n))
    attrs: dict[str, Any] = {"kernel_shape": ks, **_geometry(r, n, ks, pool=True), "ceil_mode": r.random() < 0.5}
    if op == "AveragePool":
        attrs["count_include_pad"] = r.random() < 0.5
    x = np.random.default_rng(r.randint(0, 99)).standard_normal((2, 3, *(r.randint(2, 7) for _ in ks)))
    x = x.astype(NP[dtype])
    agree(one_op(op, [x], attrs), [x], dtype)


@pytest.mark.parametrize("op", ["MaxPool", "AveragePool"])
def test_pooling_over_large_windows_agrees_with_its_kernel(op: str) -> None:
    """Windows of more than 64 elements go through lax.reduce_window, not one op per position."""
    x = np.random.default_rng(7).standard_normal((2, 3, 12, 11))
    for ceil in (False, True):
        attrs = {"kernel_shape": (9, 8), "strides": (2, 3), "pads": (4, 0, 1, 3), "ceil_mode": ceil,
                 **({"count_include_pad": ceil} if op == "AveragePool" else {})}
        agree(one_op(op, [x], attrs), [x])


def test_global_average_pool_and_normalisations_agree_with_their_kernels() -> None:
    rng = np.random.default_rng(5)
    for dtype in ("f32", "f64", "f16"):
        x = rng.standard_normal((2, 3, 4, 5)).astype(NP[dtype])
        agree(one_op("GlobalAveragePool", [x], {}), [x], dtype)
        stats = [rng.standard_normal(3).astype(NP[dtype]) for _ in range(3)]
        stats.append(rng.uniform(0.5, 2, 3).astype(NP[dtype]))
        agree(one_op("BatchNormalization", [x], {"epsilon": 1e-3}, stats), [x], dtype)
        for axis in (-1, 1, 2):
            shape = x.shape[axis % 4:]
            scale = rng.standard_normal(shape).astype(NP[dtype])
            bias = rng.standard_normal(shape[-1:]).astype(NP[dtype])
            agree(one_op("LayerNormalization", [x], {"axis": axis}, [scale, bias]), [x], dtype)
            agree(one_op("LayerNormalization", [x], {"axis": axis, "epsilon": 0.1}, [scale]), [x], dtype)
        agree(one_op("Dropout", [x], {"ratio": 0.3}), [x], dtype)


def test_index_ops_agree_with_their_kernels() -> None:
    rng = np.random.default_rng(6)
    data = rng.standard_normal((3, 4, 5))
    for axis in (0, 1, -1):
        n = data.shape[axis]
        shape = list(data.shape)
        shape[axis] = 6
        idx = rng.integers(-n, n, shape)
        agree(one_op("GatherElements", [data, idx], {"axis": axis}), [data, idx])
    for b, k in ((0, 1), (0, 2), (0, 3), (1, 1), (1, 2), (2, 1)):
        dims = data.shape[b:b + k]
        idx = np.stack([rng.integers(-d, d, (*data.shape[:b], 2)) for d in dims], -1)
        agree(one_op("GatherND", [data, idx], {"batch_dims": b}), [data, idx])
    idx = rng.integers(-4, 4, (2, 3))
    for axis in (-1, 0, 1):
        agree(one_op("OneHot", [idx], {"axis": axis}, [np.array(4), np.array([0.5, 2.0])]), [idx])
