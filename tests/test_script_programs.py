"""Small NumPy programs ported to @nx.script unchanged but for the decorator (issue 17).
Each runs as plain NumPy (``f.fn``, the undecorated function) and as a script on random
inputs and must agree; the differentiable ones also match PyTorch's gradients."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

import nexus as nx
from nexus.testing.ports import boxes as _boxes
from nexus.testing.ports import hmm as _hmm
from nexus.testing.ports import nms, viterbi


# --- 1. greedy non-maximum suppression, `keep[n] = i` --------------------------------------
@pytest.mark.parametrize("seed", range(4))
def test_nms(seed: int) -> None:
    boxes, scores = _boxes(np.random.default_rng(seed), 12)
    np.testing.assert_array_equal(nms(boxes, scores, 0.3), nms.fn(boxes, scores, 0.3))


# --- 2. Viterbi decoder, `dp[t, s] = ...` ---------------------------------------------------
@pytest.mark.parametrize("seed", range(4))
def test_viterbi(seed: int) -> None:
    args = _hmm(np.random.default_rng(seed), 4, 6, 9)
    path, best = viterbi(*args)
    want_path, want_best = viterbi.fn(*args)
    np.testing.assert_array_equal(path, want_path)
    np.testing.assert_allclose(best, want_best, rtol=1e-12)


def _peak(f, *args):  # type: ignore[no-untyped-def]
    """Peak traced memory of a second call (the first builds the graph)."""
    f(*args)
    tracemalloc.start()
    try:
        f(*args)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_viterbi_memory_is_constant_per_step() -> None:
    rng = np.random.default_rng(0)
    small = _hmm(rng, 3, 4, 10)
    big = (*small[:3], rng.integers(0, 4, 10_000))
    p_small = _peak(viterbi, *small)
    p_big = _peak(viterbi, *big)
    # dp (f64), bp and path (i64) for T = 10,000 and S = 3: 560 kB; a copy per write would be GBs.
    tables = 10_000 * 3 * 8 * 2 + 10_000 * 8
    assert p_big - p_small < tables + 64_000, (p_small, p_big)


def test_nms_memory_is_constant_per_step() -> None:
    rng = np.random.default_rng(0)
    p_small = _peak(nms, *_boxes(rng, 10), 2.0)  # 2.0: nothing is suppressed
    p_big = _peak(nms, *_boxes(rng, 300), 2.0)
    assert p_big - p_small < 300 * 8 * 10 + 64_000, (p_small, p_big)


# --- 3. a beam search step ------------------------------------------------------------------
@nx.script
def beam_step(log_probs, beam_scores, k: int):
    V = log_probs.shape[1]
    total = (beam_scores[:, None] + log_probs).reshape(-1)
    top = np.argsort(-total)[:k]
    return top // V, top % V, total[top]


def test_beam_step() -> None:
    rng = np.random.default_rng(3)
    lp, bs = np.log(rng.dirichlet(np.ones(7), 3)), rng.standard_normal(3)
    for got, want in zip(beam_step(lp, bs, 4), beam_step.fn(lp, bs, 4)):
        np.testing.assert_allclose(got, want)


# --- 4. top-k by argsort --------------------------------------------------------------------
@nx.script
def topk(x, k: int):
    idx = np.argsort(-x, axis=1)[:, :k]
    return np.take_along_axis(x, idx, axis=1), idx


def test_topk() -> None:
    x = np.random.default_rng(4).standard_normal((5, 8)).astype(np.float32)
    for got, want in zip(topk(x, 3), topk.fn(x, 3)):
        np.testing.assert_array_equal(got, want)


# --- 5. softmax and layernorm with keepdims --------------------------------------------------
@nx.script
def softmax_layernorm(x, g, b):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    p = e / e.sum(axis=-1, keepdims=True)
    mu = p.mean(-1, keepdims=True)
    var = ((p - mu) ** 2).mean(-1, keepdims=True)
    y = (p - mu) / np.sqrt(var + 1e-5) * g + b
    return np.sum(y * y * np.arange(x.shape[1]))


def test_softmax_layernorm_and_gradient() -> None:
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(5)
    x, g, b = rng.standard_normal((3, 6)), rng.standard_normal(6), rng.standard_normal(6)
    np.testing.assert_allclose(softmax_layernorm(x, g, b), softmax_layernorm.fn(x, g, b), rtol=1e-12)
    xt, gt, bt = (torch.tensor(a, requires_grad=True) for a in (x, g, b))
    e = torch.exp(xt - xt.max(dim=-1, keepdim=True).values)
    p = e / e.sum(dim=-1, keepdim=True)
    mu = p.mean(-1, keepdim=True)
    var = ((p - mu) ** 2).mean(-1, keepdim=True)
    y = (p - mu) / torch.sqrt(var + 1e-5) * gt + bt
    torch.sum(y * y * torch.arange(6)).backward()
    grads = nx.grad(softmax_layernorm, argnums=(0, 1, 2))(x, g, b)
    for got, t in zip(grads, (xt, gt, bt)):
        np.testing.assert_allclose(got, t.grad.numpy(), rtol=1e-8, atol=1e-10)


# --- 6. a k-means step ----------------------------------------------------------------------
@nx.script
def kmeans_step(X, C):
    d = ((X[:, None, :] - C[None, :, :]) ** 2).sum(axis=-1)
    assign = np.argmin(d, axis=1)
    newC = np.zeros_like(C)
    for k in range(C.shape[0]):
        mask = assign == k
        if mask.sum() > 0:
            newC[k] = X[mask].mean(axis=0)
        else:
            newC[k] = C[k]
    return newC, assign


def test_kmeans_step() -> None:
    rng = np.random.default_rng(6)
    X, C = rng.standard_normal((20, 2)), rng.standard_normal((4, 2)) * 3
    for got, want in zip(kmeans_step(X, C), kmeans_step.fn(X, C)):
        np.testing.assert_allclose(got, want, rtol=1e-12)


# --- 8. a running-max scan ------------------------------------------------------------------
@nx.script
def running_max(x):
    out = np.empty_like(x)
    m = x[0]
    for t in range(len(x)):
        m = max(m, x[t])
        out[t] = m
    return np.sum(out * np.arange(len(x)))


def test_running_max_and_gradient() -> None:
    torch = pytest.importorskip("torch")
    x = np.random.default_rng(8).standard_normal(9)
    np.testing.assert_allclose(running_max(x), running_max.fn(x), rtol=1e-12)
    xt = torch.tensor(x, requires_grad=True)
    m, outs = xt[0], []
    for t in range(9):
        m = torch.maximum(m, xt[t])
        outs.append(m)
    torch.sum(torch.stack(outs) * torch.arange(9)).backward()
    np.testing.assert_allclose(nx.grad(running_max)(x), xt.grad.numpy(), rtol=1e-12)


# --- 9. Floyd-Warshall ----------------------------------------------------------------------
@nx.script
def floyd_warshall(w):
    d = w.copy()
    n = d.shape[0]
    for k in range(n):
        for i in range(n):
            for j in range(n):
                if d[i, k] + d[k, j] < d[i, j]:
                    d[i, j] = d[i, k] + d[k, j]
    return d


def test_floyd_warshall() -> None:
    rng = np.random.default_rng(9)
    w = rng.uniform(1, 10, (6, 6))
    w[rng.random((6, 6)) < 0.4] = np.inf
    np.fill_diagonal(w, 0.0)
    d = floyd_warshall(w)
    np.testing.assert_array_equal(d, floyd_warshall.fn(w))
    np.testing.assert_array_equal(w[0, 0], 0.0)  # the argument itself is untouched


# --- 10. the seed-001 RNN, written with NumPy -----------------------------------------------
@nx.script
def rnn(x_sequence, h0, W, U, T: int):
    h = h0
    t = 0
    while t < T:
        x_t = x_sequence[t]
        h = np.tanh(W @ x_t + U @ h)
        t = t + 1
    return np.sum(h)


def test_seed_rnn_and_gradient() -> None:
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(10)
    xs, h0, W, U = rng.standard_normal((7, 5)), rng.standard_normal(4), rng.standard_normal((4, 5)), \
        rng.standard_normal((4, 4)) * 0.5
    np.testing.assert_allclose(rnn(xs, h0, W, U, 7), rnn.fn(xs, h0, W, U, 7), rtol=1e-12)
    ts = [torch.tensor(a, requires_grad=True) for a in (xs, h0, W, U)]
    h = ts[1]
    for t in range(7):
        h = torch.tanh(ts[2] @ ts[0][t] + ts[3] @ h)
    h.sum().backward()
    grads = nx.grad(rnn, argnums=(0, 1, 2, 3))(xs, h0, W, U, 7)
    for got, t in zip(grads, ts):
        np.testing.assert_allclose(got, t.grad.numpy(), rtol=1e-10, atol=1e-12)


# --- 11. an RNN that appends its outputs to a list and stacks them --------------------------
@nx.script
def rnn_outputs(xs, h0, W, U):
    outs = []
    h = h0
    for t in range(xs.shape[0]):
        h = np.tanh(W @ xs[t] + U @ h)
        outs.append(h)
    return np.stack(outs, axis=1)


def test_rnn_that_appends_to_a_list_and_its_gradient() -> None:
    from nexus.testing.extras import require

    rng = np.random.default_rng(11)
    W, U = rng.standard_normal((4, 5)), rng.standard_normal((4, 4)) * 0.5
    for T in (1, 6):  # one signature per length: the loop's list grows to T rows
        xs, h0 = rng.standard_normal((T, 5)), rng.standard_normal(4)
        got = rnn_outputs(xs, h0, W, U)
        np.testing.assert_allclose(got, rnn_outputs.fn(xs, h0, W, U), rtol=1e-12)
        assert got.shape == (4, T)
    torch = require("torch", "torch")
    weights = rng.standard_normal((4, 6))
    ts = [torch.tensor(a, requires_grad=True) for a in (xs, h0, W, U)]
    h, outs = ts[1], []
    for t in range(6):
        h = torch.tanh(ts[2] @ ts[0][t] + ts[3] @ h)
        outs.append(h)
    (torch.stack(outs, 1) * torch.tensor(weights)).sum().backward()

    @nx.script
    def loss(xs, h0, W, U, weights):
        return np.sum(rnn_outputs(xs, h0, W, U) * weights)

    grads = nx.grad(loss, argnums=(0, 1, 2, 3))(xs, h0, W, U, weights)
    for got, t in zip(grads, ts):
        np.testing.assert_allclose(got, t.grad.numpy(), rtol=1e-10, atol=1e-12)


def test_appending_values_of_another_rank_is_refused() -> None:
    src = "def f(x):\n    xs = [x]\n    xs.append(x[0])\n    return np.stack(xs)\n"
    with pytest.raises(nx.ScriptError, match="holds values of type"):
        nx.script_source(src, "f", {"np": np})(np.ones((2, 3)))
