"""Convolutional layers on the llvm backend (nexus.backends.llvm.conv): Conv through BLAS,
batch norm, max/average/global pooling, against torch's functional ops; and what real
models need around them: weights read from the constant table (one cached object for
any weights), buffers kept between calls and calls from several threads at once."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import nexus as nx
from nexus.testing.extras import require

require("llvmlite", "llvm")
require("scipy", "llvm")

from nexus.backends.llvm import LLVMExecutable  # noqa: E402


def _graph(build: Any, *shapes: tuple[str, tuple[int, ...]]) -> Any:
    args = {f"a{i}": s for i, s in enumerate(shapes)}
    with nx.function("layer", **args) as f:
        f.returns(build(*f.args))
    return f.graph


def _whole(g: Any) -> LLVMExecutable:
    exe = nx.compile(g, backend="llvm")
    assert isinstance(exe, LLVMExecutable), getattr(exe, "reason", exe)
    return exe


CONVS = [  # spatial size, C, M, kernel, strides, pads, dilations, group, bias
    ((9,), 3, 4, (3,), (1,), (1, 1), (1,), 1, True),
    ((12, 10), 4, 6, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 1, False),
    ((12, 11), 4, 6, (3, 2), (2, 1), (0, 1, 2, 0), (1, 2), 2, True),
    ((15, 15), 3, 8, (7, 7), (2, 2), (3, 3, 3, 3), (1, 1), 1, False),
    ((8, 8), 8, 8, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 8, True),  # depthwise
    ((8, 8), 6, 4, (1, 1), (1, 1), (0, 0, 0, 0), (1, 1), 1, True),  # its own im2col
    ((7, 7), 6, 4, (1, 1), (2, 2), (0, 0, 0, 0), (1, 1), 1, False),
    ((5, 6, 4), 2, 3, (3, 3, 2), (1, 2, 1), (1, 0, 1, 1, 1, 0), (1, 1, 2), 1, True),
    ((10, 13), 6, 9, (2, 3), (3, 2), (2, 0, 1, 3), (2, 2), 3, True),  # strided and dilated along the row
    ((4, 4), 2, 2, (3, 3), (1, 1), (4, 4, 4, 4), (1, 1), 1, False),  # rows wholly in the padding
]


@pytest.mark.parametrize("dtype", ["f32", "f64"])
@pytest.mark.parametrize("case", CONVS, ids=lambda c: f"{len(c[0])}d-k{c[3]}-s{c[4]}-g{c[7]}")
def test_conv_matches_torch(case: tuple[Any, ...], dtype: str) -> None:
    torch = require("torch", "torch")
    sp, c, m, ks, strides, pads, dil, group, bias = case
    npdt = np.float32 if dtype == "f32" else np.float64
    rng = np.random.default_rng(len(sp) + c)
    x = rng.standard_normal((2, c, *sp)).astype(npdt)
    w = rng.standard_normal((m, c // group, *ks)).astype(npdt)
    b = rng.standard_normal(m).astype(npdt)
    n = len(sp)

    def build(xa: Any) -> Any:
        ins = [xa, nx.constant(w)] + ([nx.constant(b)] if bias else [])
        return nx.conv(*ins, strides=list(strides), pads=list(pads), dilations=list(dil), group=group)

    got = _whole(_graph(build, (dtype, x.shape)))(x)
    conv = [torch.nn.functional.conv1d, torch.nn.functional.conv2d, torch.nn.functional.conv3d][n - 1]
    tx = torch.nn.functional.pad(torch.tensor(x), [p for d in reversed(range(n)) for p in (pads[d], pads[d + n])])
    want = conv(tx, torch.tensor(w), torch.tensor(b) if bias else None, stride=strides, dilation=dil,
                groups=group).numpy()
    tol = 1e-4 if dtype == "f32" else 1e-11
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


def test_conv_of_run_time_weights_and_bias_on_a_batch_of_three() -> None:
    torch = require("torch", "torch")
    rng = np.random.default_rng(7)
    x, w, b = rng.standard_normal((3, 4, 9, 7)), rng.standard_normal((6, 2, 3, 3)), rng.standard_normal(6)
    g = _graph(lambda xa, wa, ba: nx.conv(xa, wa, ba, strides=[2, 1], pads=[1, 0, 0, 2], group=2),
               ("f64", x.shape), ("f64", w.shape), ("f64", b.shape))
    got = _whole(g)(x, w, b)
    tx = torch.nn.functional.pad(torch.tensor(x), [0, 2, 1, 0])
    want = torch.nn.functional.conv2d(tx, torch.tensor(w), torch.tensor(b), stride=(2, 1), groups=2).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-11, atol=1e-11)


@pytest.mark.parametrize("constant", [True, False])
def test_batch_norm_matches_the_python_backend_bit_for_bit(constant: bool) -> None:
    torch = require("torch", "torch")
    rng = np.random.default_rng(4)
    x = rng.standard_normal((2, 5, 3, 4)).astype(np.float32)
    s, bb, mu = (rng.standard_normal(5).astype(np.float32) for _ in range(3))
    var = rng.random(5).astype(np.float32) + 0.1
    if constant:
        g = _graph(lambda xa: nx.relu(nx.batch_normalization(xa, *map(nx.constant, (s, bb, mu, var)), epsilon=1e-3)),
                   ("f32", x.shape))
        args: tuple[Any, ...] = (x,)
    else:
        g = _graph(lambda xa, *p: nx.batch_normalization(xa, *p, epsilon=1e-3), ("f32", x.shape),
                   *[("f32", (5,))] * 4)
        args = (x, s, bb, mu, var)
    got = _whole(g)(*args)
    np.testing.assert_array_equal(got, nx.compile(g, backend="python")(*args))
    want = torch.nn.functional.batch_norm(torch.tensor(x), torch.tensor(mu), torch.tensor(var), torch.tensor(s),
                                          torch.tensor(bb), eps=1e-3)
    if constant:
        want = torch.relu(want)
    np.testing.assert_allclose(got, want.numpy(), rtol=1e-5, atol=1e-6)


POOLS = [  # kernel, strides, pads, ceil_mode, count_include_pad
    ((3, 3), (2, 2), (1, 1, 1, 1), False, False),
    ((2, 2), (2, 2), (0, 0, 0, 0), True, False),
    ((3, 2), (1, 2), (1, 0, 1, 1), False, True),
    ((3, 3), (2, 2), (1, 1, 1, 1), True, True),
]


@pytest.mark.parametrize("case", POOLS)
def test_pools_match_torch(case: tuple[Any, ...]) -> None:
    torch = require("torch", "torch")
    ks, strides, pads, ceil, include = case
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 3, 9, 8)).astype(np.float32)
    x[0, 1, 2, 3] = np.nan
    common = dict(kernel_shape=list(ks), strides=list(strides), pads=list(pads), ceil_mode=ceil)
    gmax = _graph(lambda xa: nx.max_pool(xa, **common), ("f32", x.shape))
    gavg = _graph(lambda xa: nx.average_pool(xa, count_include_pad=include, **common), ("f32", x.shape))
    np.testing.assert_array_equal(_whole(gmax)(x), nx.compile(gmax, backend="python")(x))
    np.testing.assert_allclose(_whole(gavg)(x), nx.compile(gavg, backend="python")(x), rtol=1e-6)
    # torch pads symmetrically: compare where the pads are
    if pads[:2] == pads[2:]:
        tx = torch.tensor(x)
        want = torch.nn.functional.max_pool2d(tx, ks, strides, pads[:2], ceil_mode=ceil).numpy()
        np.testing.assert_array_equal(_whole(gmax)(x), want)
        want = torch.nn.functional.avg_pool2d(tx, ks, strides, pads[:2], ceil_mode=ceil,
                                              count_include_pad=include).numpy()
        np.testing.assert_allclose(_whole(gavg)(x), want, rtol=1e-5, atol=1e-6)


def test_global_average_pool() -> None:
    x = np.random.default_rng(2).standard_normal((2, 3, 5, 7))
    got = _whole(_graph(nx.global_average_pool, ("f64", x.shape)))(x)
    np.testing.assert_allclose(got, x.mean(axis=(2, 3), keepdims=True), rtol=1e-13)


def _small_cnn() -> Any:
    torch = require("torch", "torch")
    from torch import nn

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.stem = nn.Sequential(nn.Conv2d(3, 8, 5, 2, 2, bias=False), nn.BatchNorm2d(8), nn.ReLU(),
                                      nn.MaxPool2d(3, 2, 1))
            self.a = nn.Sequential(nn.Conv2d(8, 8, 3, 1, 1), nn.BatchNorm2d(8), nn.ReLU(), nn.Conv2d(8, 8, 3, 1, 1))
            self.b = nn.Sequential(nn.Conv2d(8, 8, 3, 1, 1, groups=8), nn.Conv2d(8, 16, 1))
            self.fc = nn.Linear(16, 10)

        def forward(self, x: Any) -> Any:
            h = self.stem(x)
            h = torch.relu(h + self.a(h))
            h = nn.functional.adaptive_avg_pool2d(self.b(h), 1)
            return self.fc(torch.flatten(h, 1))

    torch.manual_seed(0)
    net = Net().eval()
    with torch.no_grad():  # running statistics that are not the identity
        for m in net.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.uniform_(-0.5, 0.5)
                m.running_var.uniform_(0.5, 2.0)
    return net


def test_a_small_cnn_from_torch_compiles_whole_and_agrees() -> None:
    torch = require("torch", "torch")
    net = _small_cnn()
    x = torch.randn(2, 3, 32, 32)
    g = nx.from_torch(net, (x,))
    exe = _whole(g)
    with torch.no_grad():
        want = net(x).numpy()
    for _ in range(3):  # buffers kept from the call before give the same answer
        np.testing.assert_allclose(exe(x.numpy()), want, rtol=1e-4, atol=1e-5)


def test_weights_stay_out_of_the_object_and_its_cache_key(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    ws = [rng.standard_normal((64, 64)) for _ in range(2)]
    exes = []
    for w in ws:
        g = _graph(lambda xa, w=w: nx.matmul(xa, nx.constant(w)), ("f64", (3, 64)))
        exe = nx.compile(g, backend="llvm", cache=tmp_path)
        assert isinstance(exe, LLVMExecutable)
        assert len(exe.ir) < w.nbytes  # the 32 KB of weights are not in the text
        exes.append(exe)
    assert [e.jit.cached for e in exes] == [False, True]  # one object for both sets of weights
    assert len(list(tmp_path.glob("*.o"))) == 1
    x = rng.standard_normal((3, 64))
    for exe, w in zip(exes, ws):
        np.testing.assert_allclose(exe(x), x @ w, rtol=1e-12)


def test_calls_from_several_threads_at_once() -> None:
    rng = np.random.default_rng(3)
    w1, w2 = rng.standard_normal((32, 256)), rng.standard_normal((256, 8))
    g = _graph(lambda xa: nx.matmul(nx.tanh(nx.matmul(xa, nx.constant(w1))), nx.constant(w2)), ("f64", (64, 32)))
    exe = _whole(g)
    bad: list[int] = []

    def work(k: int) -> None:
        x = np.full((64, 32), 0.01 * k)
        want = np.tanh(x @ w1) @ w2
        for _ in range(40):
            if not np.allclose(exe(x), want, rtol=1e-12):
                bad.append(k)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not bad
