"""Subscript assignment in @nx.script (SetItem): NumPy is the oracle for values, PyTorch
for gradients, tracemalloc for the in-place update of the python backend."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

import nexus as nx
from nexus.frontend.script import ScriptError


@nx.script
def _forms(x, y, i: int, lo: int, hi: int):
    y[i] = 3.0
    y[lo:hi] += 2.0
    y[::2] = y[::2] * 10.0
    x[0, 1] = 7.0
    x[x > 5.0] = -1.0
    x[1] = np.float32(2.5)
    x[:, -1] -= 1.0
    y[np.array([0, 0, 2])] = 5.0
    return y, x


def _forms_numpy(x, y, i, lo, hi):
    x, y = x.copy(), y.copy()
    y[i] = 3.0
    y[lo:hi] += 2.0
    y[::2] = y[::2] * 10.0
    x[0, 1] = 7.0
    x[x > 5.0] = -1.0
    x[1] = np.float32(2.5)
    x[:, -1] -= 1.0
    y[np.array([0, 0, 2])] = 5.0
    return y, x


@pytest.mark.parametrize("seed", range(6))
def test_index_forms_match_numpy(seed):
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((3, 4)) * 6).astype(np.float32)
    y = rng.standard_normal(7)
    i, lo, hi = int(rng.integers(-7, 7)), int(rng.integers(-8, 8)), int(rng.integers(-8, 8))
    x0, y0 = x.copy(), y.copy()
    got = _forms(x, y, i, lo, hi)
    want = _forms_numpy(x, y, i, lo, hi)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype
        np.testing.assert_array_equal(g, w)
    # Writing into an argument works on a copy: the caller's arrays never change.
    np.testing.assert_array_equal(x, x0)
    np.testing.assert_array_equal(y, y0)


def test_alias_is_a_copy():
    @nx.script
    def f(n: int):
        a = np.zeros(n)
        b = a
        b[0] = 1.0
        return a, b

    a, b = f(3)
    np.testing.assert_array_equal(a, [0.0, 0.0, 0.0])  # `b = a` names a value, not a buffer
    np.testing.assert_array_equal(b, [1.0, 0.0, 0.0])


@nx.script
def _fill(n: int):
    y = np.zeros(n)
    for t in range(n):
        y[t] = t * 2.0
    return y


def _peak(n: int) -> int:
    _fill(n)
    tracemalloc.start()
    try:
        _fill(n)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_loop_of_writes_updates_in_place():
    np.testing.assert_array_equal(_fill(5), np.arange(5) * 2.0)
    assert "_setitem_owned" in nx.compile(_fill.graph).source()
    small, big = _peak(10), _peak(10_000)
    # The result itself is 80,000 bytes; a copy per step would be 10,000 times that.
    assert big - small < 80_000 + 16_384, (small, big)


def test_nested_subscript_target_is_refused():
    with pytest.raises(ScriptError, match="x\\[i, j\\] = v"):
        @nx.script
        def f(x):
            x[0][1] = 1.0
            return x

        f(np.zeros((2, 2)))


def test_gradient_through_assignment_loop_matches_torch():
    torch = pytest.importorskip("torch")

    @nx.script
    def f(x, w):
        h = np.zeros(x.shape[0], dtype=np.float64)
        for t in range(x.shape[0]):
            h[t] = nx.tanh(x[t] * w + h[t - 1])
        h[0] = h[0] * 3.0
        return nx.reduce_sum(h * h)

    rng = np.random.default_rng(0)
    x, w = rng.standard_normal(6), 0.7
    xs = torch.tensor(x, requires_grad=True)
    ws = torch.tensor(w, requires_grad=True, dtype=torch.float64)
    hs = []
    for t in range(6):
        prev = hs[t - 1] if t >= 1 else torch.zeros((), dtype=torch.float64)
        if t == 0:
            prev = torch.zeros((), dtype=torch.float64)  # h[-1] is still 0 when t = 0
        hs.append(torch.tanh(xs[t] * ws + prev))
    hs[0] = hs[0] * 3.0
    loss = sum(h * h for h in hs)
    loss.backward()
    gx, gw = nx.grad(f, argnums=(0, 1))(x, np.float64(w))
    np.testing.assert_allclose(gx, xs.grad.numpy(), rtol=1e-10)
    np.testing.assert_allclose(gw, ws.grad.numpy(), rtol=1e-10)


def test_setitem_kernels_match_torch():
    torch = pytest.importorskip("torch")
    from nexus.ir.opdef import get_op

    rng = np.random.default_rng(1)
    data, value, g = rng.standard_normal((4, 5)), rng.standard_normal((2, 1)), rng.standard_normal((4, 5))
    idx = (np.int64(1), np.int64(3), np.int64(1), np.array([0, 4]))
    out = get_op("SetItem").kernel(data, value, *idx, kinds="si")
    v = torch.tensor(value, requires_grad=True)
    t = torch.tensor(data).clone()
    t[1:3, [0, 4]] = v.expand(2, 2)
    np.testing.assert_array_equal(out, t.detach().numpy())
    t.backward(torch.tensor(g))
    got = get_op("SetItemValueGrad").kernel(g, value, *idx, kinds="si")
    np.testing.assert_allclose(got, v.grad.numpy(), rtol=1e-12)
