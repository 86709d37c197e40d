"""Loop headers get Phis only for the variables the loop assigns (others are read from
the loop's entry), and a wrong name analysis is caught at sealing and rebuilt with Phis.
Oracle: the same functions run as plain Python/NumPy."""

from __future__ import annotations

import numpy as np
import pytest

import nexus as nx
import nexus.frontend.script.source as script_source


def rnn(xs, w, u, h, T: int):
    t = 0
    while t < T:
        h = np.tanh(xs[t] @ w + h @ u)
        t += 1
    return h


def nested(n: int, m: int, k: int):
    total = 0
    i = 0
    while i < n:
        for j in range(m):
            if j % 2 == 0:
                continue
            total = total + i * j + k
            if total > 500:
                break
        i += 1
    return total


def _args(T: int) -> tuple[object, ...]:
    rng = np.random.default_rng(1)
    f = np.float32
    return (rng.normal(size=(T, 1, 8)).astype(f), rng.normal(size=(8, 8)).astype(f) / 3,
            rng.normal(size=(8, 8)).astype(f) / 3, rng.normal(size=(1, 8)).astype(f), T)


def _phis(g: nx.Graph) -> list[str]:
    return sorted(n.name or "?" for n in g.nodes() if n.op.name == "Phi")


def test_invariants_get_no_header_phi() -> None:
    f = nx.script(rnn)
    args = _args(5)
    np.testing.assert_allclose(f(*args), rnn(*args), rtol=1e-5, atol=1e-6)
    assert _phis(f.graph) == ["h", "t"]  # not xs, w, u or T


@pytest.mark.parametrize("n,m,k", [(0, 3, 1), (4, 5, 2), (30, 9, -1)])
def test_nested_loops_match_python(n: int, m: int, k: int) -> None:
    assert nx.script(nested)(n, m, k) == nested(n, m, k)


def test_missed_assignment_is_rebuilt_with_a_phi(monkeypatch: pytest.MonkeyPatch) -> None:
    # Pretend the analysis found no assignments at all: every loop variable is then
    # wrongly taken as invariant, and sealing must notice and build again with Phis.
    monkeypatch.setattr(script_source.ParsedFunction, "names_bound_in", lambda self, stmt: frozenset())

    def fresh_rnn(xs, w, u, h, T: int):
        t = 0
        while t < T:
            h = np.tanh(xs[t] @ w + h @ u)
            t += 1
        return h

    def fresh_nested(n: int, m: int, k: int):
        total = 0
        i = 0
        while i < n:
            for j in range(m):
                if j % 2 == 0:
                    continue
                total = total + i * j + k
                if total > 500:
                    break
            i += 1
        return total

    # max_iterations: a graph that lost a loop variable's Phi would loop forever.
    args = _args(4)
    f = nx.script(fresh_rnn)
    got = nx.run(f.graph_for(*args), *args, max_iterations=1000)
    np.testing.assert_allclose(got, rnn(*args), rtol=1e-5, atol=1e-6)
    assert _phis(f.graph) == ["h", "t"]
    g = nx.script(fresh_nested)
    for n, m, k in [(0, 3, 1), (4, 5, 2), (30, 9, -1)]:
        assert int(nx.run(g.graph_for(n, m, k), n, m, k, max_iterations=10_000)) == nested(n, m, k)
