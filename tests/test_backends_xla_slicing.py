"""Slices on the xla backend (nexus.backends.xla.slicing), against plain Python running
the same source.

A slice whose bounds or step are known only at run time (``v[i % 3:]``), or that slices
a padded value (a list grown in a loop), has a data-dependent length: the backend gives a
``Padded`` window with the true length beside.  The padded values then flow through
Gather (rows of a padded list), SetItem (negative indices count from the true end), Append,
``np.pad`` and ``reshape``.  Each program here must give Python's result; where Python
raises (an index out of range), XLA cannot raise and the run is not compared (as in the
fuzzer, see nexus.backends.xla's module doc).  A program the backend refuses must be
refused by an XlaLoweringError naming the node, never a JAX error.
"""

from __future__ import annotations

import numpy as np
import pytest

import nexus as nx
from nexus.testing.extras import require

require("jax", "xla")

from nexus.backends.xla import XlaLoweringError  # noqa: E402  (after the skip)

# Each program takes (x: f64[4], i: int, j: int); every one is compiled once and run on all
# of INPUTS (one signature: one XLA compile per program).
PROGRAMS = {
    "run-time start": '''
def f(x, i: int, j: int):
    return x[i % 3:], x[i:]
''',
    "run-time stop": '''
def f(x, i: int, j: int):
    return x[:j], x[:i % 3]
''',
    "run-time start and stop, clamped": '''
def f(x, i: int, j: int):
    return x[i:j], x[i - 10:j + 10], x[-100:100], x[i:-100], x[100:i:-1]
''',
    "static negative steps from run-time starts": '''
def f(x, i: int, j: int):
    return x[i::-2], x[j:i:-1], x[::-3]
''',
    "run-time step of either sign": '''
def f(x, i: int, j: int):
    k = j % 5 - 2
    if k == 0:
        k = 3
    return x[i:j:k], x[j:i:k], x[-1:-100:k], x[0:100:k]
''',
    "a slice of a slice, its length and sum": '''
def f(x, i: int, j: int):
    y = x[i % 4:]
    z = y[:j]
    return len(z), z.sum(), y[::-1], len(x[i:j])
''',
    "a loop over a run-time slice": '''
def f(x, i: int, j: int):
    t = 0.0
    for v in x[i:]:
        t = t * 2.0 + v
    return t
''',
    "a list of constants sliced at run time": '''
def f(x, i: int, j: int):
    ls = [1, 2, 3, 4, 5, 6]
    return ls[i:j:2], ls[j:i:-1], ls[i % 4:]
''',
    "one run-time bound of a matrix slice": '''
def f(x, i: int, j: int):
    m = np.outer(x, x)
    return m[1:3, j:], m[i:, 2]
''',
    "slices of a list grown in a loop": '''
def f(x, i: int, j: int):
    out = []
    for t in range(i % 7):
        out.append(t * 3)
    return out[1:], out[::-1], out[j::-2], out[-2:], out[j % 4:j]
''',
    "slices of a list grown under an if": '''
def f(x, i: int, j: int):
    out = []
    for t in range(6):
        if (t + i) % 3 != 0:
            out.append(x[t % 4] + t)
    return out[:j], out[j:], len(out[1::2])
''',
    "rows of a padded list": '''
def f(x, i: int, j: int):
    out = []
    for t in range(i % 6 + 1):
        out.append(x * t)
    m = np.stack(out)
    return m[j % len(out)], m[-1], m[:, 1], out[0]
''',
    "np.pad of a padded vector": '''
def f(x, i: int, j: int):
    out = []
    for t in range(i % 6):
        if t % 2 == 0 or j > 0:
            out.append(x[t % 4])
    v = np.array(out)
    return np.pad(v, (1, 2)), np.pad(v, (0, 3), constant_values=7.0)
''',
    "np.pad of a padded vector, edge mode": '''
def f(x, i: int, j: int):
    out = [x[0]]
    for t in range(i % 6):
        out.append(x[t % 4] * j)
    v = np.array(out)
    return np.pad(v, (2, 1), mode="edge")
''',
    "reshape(-1) of padded values": '''
def f(x, i: int, j: int):
    out = []
    rows = []
    for t in range(i % 6):
        out.append(x[t % 4] + j)
        rows.append(x * t)
    return np.array(out).reshape(-1), np.array(rows).reshape(-1), np.array(rows).reshape(-1, 2)
''',
    "a run-time-length slice appended to a list": '''
def f(x, i: int, j: int):
    out = []
    out.append(x[:i % 5])
    return out, len(out[0])
''',
    "SetItem with negative indices on a padded list": '''
def f(x, i: int, j: int):
    out = []
    for t in range(i % 6 + 1):
        out.append(t)
    out[-1] = 100
    out[j % len(out) - len(out)] = -7
    return out
''',
    "SetItem of a slice of a padded vector": '''
def f(x, i: int, j: int):
    out = []
    for t in range(i % 6 + 1):
        out.append(t * 1.5)
    v = np.array(out)
    v[1:] = 0.5
    v[-1] = 9.0
    return v
''',
    # Once wrong: a padded operand of true size 1 was not broadcast (x[3:] * x gave one entry).
    "a run-time slice of size 1 broadcasts": '''
def f(x, i: int, j: int):
    a = x[i % 4:i % 4 + 1]
    return x[i % 2 + 2:] * x[:2], a + x[j % 4:], np.where(a > 0, x, -x), a * a
''',
    "new axes and transposes of a run-time slice": '''
def f(x, i: int, j: int):
    a = x[i % 4:]
    return np.outer(a, x), (x[:, None] * a).T, np.squeeze(a[None, :], axis=0), a[:, None].sum(axis=1)
''',
    # Once refused (py_gen --seed 0 --backend xla, program 256): np.sort (a TopK of k known
    # while compiling) gave a padded vector, and a list of such rows grown in a loop had two
    # padded axes.
    "a list of sorted rows grown in a loop": '''
def f(x, i: int, j: int):
    v = np.sort(x)
    ls = [np.tanh(v)]
    for t in range(i % 5):
        ls.append(np.tanh(ls[-1] * 0.5 + t))
    return ls[0] * len(ls), np.pad(v, (0, 2), mode="edge")[:-2], v[j:]
''',
    # Once refused (py_gen --seed 0 --backend xla, programs 300, 390): CumSum and CumProd
    # of a padded value.
    "cumsum and cumprod of padded values": '''
def f(x, i: int, j: int):
    a = x[i % 4:]
    out = []
    for t in range(j % 5):
        out.append(x[t % 4] * t)
    v = np.array(out)
    return np.cumsum(a), np.cumprod(a), np.cumsum(v), np.cumprod(v + 1.0), np.cumsum(np.outer(a, x), axis=1)
''',
    # Once refused (py_gen --seed 0 --backend xla, program 798): the arm that returns early
    # never reads `x`, and its zeros of shape [0] padded `x` to a run-time size, so the list
    # of its rows had two padded axes.
    "a value no arm that returns early reads": '''
def f(x, i: int, j: int):
    for k1 in range(2, 3):
        for k2 in range(0, j % 6, 3):
            if i > 3:
                return 1.0, x
        if j % 2 == 0:
            break
        if i % 3 != 0:
            x = np.copy(x)
            x[x > 0.5] += 2.0
            x = np.tanh(np.roll(x, -2))
        break
    ls = [x - x, x]
    for t in range(3):
        ls.append(np.tanh(ls[-1] * 0.5 + t))
    return len(ls) * 1.0, ls[0] * len(ls)
''',
}

INPUTS = [(i, j) for i in (0, 1, 2, 5, -3, -9, 11) for j in (0, 3, -1, 6, -6)]
X = np.array([1.0, -2.0, 3.0, -0.5])


def _program(src: str) -> tuple[object, nx.ScriptFunction]:
    ns: dict = {"np": np}
    exec(compile(src, "<oracle>", "exec"), ns)  # noqa: S102  (the test's own source)
    return ns["f"], nx.script_source(src, "f", {"np": np})


def _same(got: object, want: object) -> None:
    gs = got if isinstance(got, tuple) else (got,)
    ws = want if isinstance(want, tuple) else (want,)
    assert len(gs) == len(ws)
    for g, w in zip(gs, ws):
        assert np.shape(g) == np.shape(w), (g, w)
        np.testing.assert_allclose(np.asarray(g, dtype=float), np.asarray(w, dtype=float), rtol=1e-14)


def _check(src: str, inputs: list[tuple[int, int]]) -> int:
    """Runs ``src`` on xla and in Python on ``inputs``; how many runs were compared."""
    oracle, f = _program(src)
    exe = nx.compile(f, backend="xla")
    compared = 0
    for i, j in inputs:
        try:
            want = oracle(X.copy(), i, j)  # type: ignore[operator]
        except (IndexError, ValueError, ZeroDivisionError):
            continue  # XLA cannot raise: not compared
        _same(exe(X.copy(), i, j), want)
        compared += 1
    return compared


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_slices_match_python(name: str) -> None:
    assert _check(PROGRAMS[name], INPUTS) > len(INPUTS) // 2


def test_a_padded_slice_is_returned_at_its_true_length() -> None:
    """The result of a run-time slice is cut to its true length after the call (and a
    second call of the same signature does not compile again)."""
    _, f = _program(PROGRAMS["run-time stop"])
    exe = nx.compile(f.graph_for(X, 0, 0), backend="xla")
    for j in (0, 2, 4, 9, -1, -5):
        got, _ = exe(X, 0, j)
        np.testing.assert_array_equal(got, X[:j])
    assert exe.compiles == 1


REFUSED = {
    # Two axes of run-time length: a Padded value has one.
    "run-time bounds on two axes": ('''
def f(x, i: int, j: int):
    m = np.outer(x, x)
    return m[i:, :j]
''', "Slice"),
    # A list grown along its rows whose rows have a run-time length: two padded axes.
    "run-time-length slices appended in a loop": ('''
def f(x, i: int, j: int):
    out = []
    s = x[:i % 5]                      # sliced in the loop, the list would be a sequence
    for t in range(3):
        out.append(s * t)
    return out
''', "Append %out .*padded along axis"),
    # An outer product of two run-time slices: padded along both axes of its result.
    "an outer product of two run-time slices": ('''
def f(x, i: int, j: int):
    return np.outer(x[i % 4:], x[:j])
''', "Mul"),
}


@pytest.mark.parametrize("name", list(REFUSED))
def test_two_padded_axes_are_refused_by_name(name: str) -> None:
    src, what = REFUSED[name]
    _, f = _program(src)
    exe = nx.compile(f, backend="xla")
    with pytest.raises(XlaLoweringError, match=what):
        exe(X, 2, 3)
