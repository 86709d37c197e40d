"""Parallel execution of Kahn groups gives the sequential results; the cost model sends
only heavy groups to the pool."""

from __future__ import annotations

import builtins
import sys
from typing import Any

import numpy as np
import pytest

import nexus as nx
from bench.graphs import w2_count, w3_rnn, w6_chains
from nexus import seeds
from nexus.backends.python.interpreter import source


def w6_numpy(x: np.ndarray, ws: list[np.ndarray], chains: int, depth: int) -> np.ndarray:
    outs = []
    for c in range(chains):
        v = x
        for k in range(depth):
            v = np.maximum(v @ ws[c * depth + k], 0)
        outs.append(v)
    return sum(outs[1:], outs[0])


@pytest.mark.parametrize("n,chains,depth", [(8, 4, 3), (64, 4, 3), (32, 3, 2)])
def test_w6_like_parallel_equals_sequential(n: int, chains: int, depth: int) -> None:
    rng = np.random.default_rng(n)
    x = rng.normal(size=(n, n)).astype(np.float32)
    ws = [(rng.normal(size=(n, n)) / np.sqrt(n)).astype(np.float32) for _ in range(chains * depth)]
    g = w6_chains(n, chains, depth)
    want = w6_numpy(x, ws, chains, depth)
    seq = nx.run(g, x, *ws, parallel=False)
    np.testing.assert_allclose(seq, want, rtol=1e-5, atol=1e-5)
    for parallel in (True, None):
        np.testing.assert_array_equal(nx.run(g, x, *ws, parallel=parallel), seq)


def test_rnn_parallel_equals_sequential_and_numpy() -> None:
    rng = np.random.default_rng(1)
    T, B, D, H = 7, 3, 5, 4
    xs = rng.normal(size=(T, B, D)).astype(np.float32)
    w, u = rng.normal(size=(D, H)).astype(np.float32), rng.normal(size=(H, H)).astype(np.float32)
    h = h0 = rng.normal(size=(B, H)).astype(np.float32)
    for t in range(T):
        h = np.tanh(xs[t] @ w + h @ u)
    g = w3_rnn(D, H, B)
    for parallel in (False, True, None):
        np.testing.assert_allclose(nx.run(g, xs, w, u, h0, T, parallel=parallel), h, rtol=1e-5)
    np.testing.assert_array_equal(nx.run(g, xs, w, u, h0, 0), h0)


def test_seed_and_count_graphs_parallel() -> None:
    for make in seeds.ALL.values():
        g = make()
        assert nx.run(g, parallel=True) == nx.run(g, parallel=False)
    s = 0
    for i in range(1000):
        s = (s + i * i) % 1000003
    assert nx.run(w2_count(), 1000, parallel=True) == s == nx.run(w2_count(), 1000)


def _no_threadpoolctl(real: Any) -> Any:
    def fake(name: str, *args: Any, **kwargs: Any) -> Any:
        if name == "threadpoolctl":
            raise ImportError(name)
        return real(name, *args, **kwargs)

    return fake


def submitted(src: str) -> list[str]:
    return [line.split("# ")[1].split()[0] for line in src.splitlines() if "_submit(" in line]


def test_cost_model_decides_what_goes_to_the_pool(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(sys.modules, "threadpoolctl", raising=False)
    monkeypatch.setattr(builtins, "__import__", _no_threadpoolctl(builtins.__import__))
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "1")
    assert sorted(set(submitted(source(w6_chains(512), parallel=None)))) == ["MatMul", "Relu"]
    # BLAS already multithreaded: a graph with BLAS ops runs on this thread alone (our
    # threads would fight BLAS's workers); a graph without them still uses the pool.
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "4")
    assert submitted(source(w6_chains(512), parallel=None)) == []
    g = nx.Graph("relus", [nx.TensorType("f32", (512, 512))], ["x"])
    x, e = g.args[0], g.start_block
    total = g.add("Add", [g.add("Relu", [x], e), g.add("Sigmoid", [x], e)], e)
    g.end_block.append_input(g.add("Return", [total], e))
    assert sorted(submitted(source(g, parallel=None))) in (["Relu"], ["Sigmoid"])
    big, small = w6_chains(512), w6_chains(8)
    assert "_submit" not in source(small, parallel=None)
    assert "_submit" in source(small, parallel=True)
    assert "_submit" not in source(big, parallel=False)
    # Scalar code never goes to the pool unless forced.
    assert "_submit" not in source(w2_count(), parallel=None)
    assert "_submit" in source(w2_count(), parallel=True)


def test_kahn_groups_of_the_w6_block() -> None:
    """4 chains of (matmul, relu) x 3: six groups of four independent nodes, then the sums."""
    from nexus.backends.python.plan import make_plan

    g = w6_chains(8)
    (entry,) = [bp for b, bp in make_plan(g).blocks.items() if b is g.start_block]
    sizes = [len(grp) for grp in entry.groups]
    assert sizes == [4, 4, 4, 4, 4, 4, 1, 1, 1]  # ((a + b) + c) + d: the adds form a chain
    assert [{n.op.name for n in grp} for grp in entry.groups[:6]] == [{"MatMul"}, {"Relu"}] * 3
