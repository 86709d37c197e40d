"""Lists grown in loops on the xla backend, against plain Python running the same source.

A list is held as its stacked tensor, so one appended to in one arm of an If, or on every
iteration of a loop, has no one shape; the backend pads it to a bound with its true size
beside (a ``Padded`` value): for all its trips where a loop's trip count is static, else
for a capacity of trips that doubles (with a recompile) when a run needs more.  Each
program here must give Python's result on both the python and the xla backends; on xla
they once came back as empty lists, with no error.
"""

from __future__ import annotations

import numpy as np
import pytest

import nexus as nx
from nexus.testing.extras import require

require("jax", "xla")

# Each program takes (x: f64[4], n: int); loops over range(n) have a run-time trip count,
# those over range(5) or len(x) a static one.
PROGRAMS = {
    "append under if": '''
def f(x, n: int):
    out = []
    for i in range(n):
        if i % 2 == 0:
            out.append(i)
    return out
''',
    "append under if and else, two in one arm": '''
def f(x, n: int):
    out = []
    for i in range(n):
        if i % 3 == 0:
            out.append(i)
        else:
            out.append(-i)
            out.append(i * 10)
    return out
''',
    "len of a list appended under if": '''
def f(x, n: int):
    out = []
    for i in range(n):
        if i % 2 == 1:
            out.append(i)
    return len(out)
''',
    "nested loops": '''
def f(x, n: int):
    out = []
    for i in range(n):
        for j in range(3):
            if (i + j) % 3 == 0:
                out.append(i * 10 + j)
    return len(out), out
''',
    "nested loops, the inner trip count from the outer counter": '''
def f(x, n: int):
    out = []
    for i in range(n):
        for j in range(i):
            if (i + j) % 3 == 0:
                out.append(x[j % 4] * i)
    return len(out), out
''',
    "while loop, a list read back as it grows": '''
def f(x, n: int):
    out = [1]
    k = 0
    while len(out) < n:
        if k % 2 == 0:
            out.append(out[-1] * 2 % 1000)
        k += 1
    return out, k
''',
    "append after continue, then for v in out": '''
def f(x, n: int):
    out = []
    for i in range(n):
        if i % 3 == 1:
            continue
        out.append(i * 2)
    t = 0
    for v in out:
        t += v
    return t
''',
    "np.stack of a list of vectors": '''
def f(x, n: int):
    out = [x]
    for i in range(n):
        if i % 2 == 0:
            out.append(x * i)
    return np.stack(out).sum(axis=0), len(out)
''',
    "static trip count, appended under an if on the counter": '''
def f(x, n: int):
    out = []
    for i in range(5):
        if i % 2 == 0:
            out.append(x * i)
    return np.stack(out)
''',
    "static trip count, appended every iteration": '''
def f(x, n: int):
    out = []
    for i in range(5):
        out.append(x * i)
    return np.stack(out), out[-1]
''',
    "static trip count, appended under an if on data": '''
def f(x, n: int):
    out = []
    for i in range(len(x)):
        if x[i] > 0:
            out.append(x[i])
    return len(out), out
''',
    "two loops append to one list": '''
def f(x, n: int):
    out = []
    for i in range(3):
        out.append(i)
    for i in range(4):
        if i != 2:
            out.append(i * 10)
    return out, out[len(out) - 1]
''',
    "appended in one arm of an if, no loop": '''
def f(x, n: int):
    out = [x]
    if x[0] > 0:
        out.append(x * 2)
    return np.stack(out).sum(axis=0), len(out)
''',
}
def _program(name: str) -> tuple[object, nx.ScriptFunction]:
    src = PROGRAMS[name]
    ns: dict = {"np": np}
    exec(compile(src, "<oracle>", "exec"), ns)  # noqa: S102  (the test's own source)
    return ns["f"], nx.script_source(src, "f", {"np": np})


def _same(got: object, want: object) -> None:
    for g, w in zip(got if isinstance(got, tuple) else (got,), want if isinstance(want, tuple) else (want,),
                    strict=True):
        np.testing.assert_allclose(np.asarray(g, dtype=float), np.asarray(w, dtype=float), rtol=1e-14)
        assert np.shape(g) == np.shape(w)


@pytest.mark.parametrize("backend", ["python", "xla"])
@pytest.mark.parametrize("name", list(PROGRAMS))
def test_lists_grown_in_loops_match_python(name: str, backend: str) -> None:
    oracle, f = _program(name)
    exe = nx.compile(f, backend=backend)
    for x in (np.array([1.0, -2.0, 3.0, -0.5]), np.array([-1.0, 2.0, 0.5, 4.0])):
        # 100 trips outgrow the first bound of a run-time loop (64): xla compiles again.
        for n in (0, 1, 7, 100):
            _same(exe(x, n), oracle(x, n))


def test_a_run_time_loop_outgrowing_its_bound_compiles_again_once() -> None:
    """A list grown on a run-time trip count is padded for 64 trips at first; a run that
    needs more compiles again with the capacity doubled until it fits, and later calls of
    that signature keep the grown computation."""
    oracle, f = _program("append under if")
    exe = nx.compile(f.graph_for(np.zeros(4), 7), backend="xla")
    x = np.zeros(4)
    for n in (7, 300, 7, 300):
        _same(exe(x, n), oracle(x, n))
    assert exe.compiles == 2


BUFFERS = {
    "np.zeros_like of an annotated argument": '''
def f(x: Tensor[4]):
    out = np.zeros_like(x)
    for i in range(4):
        out[i] = x[i] * 2.0
    return out
''',
    "np.zeros(x.shape), a run-time trip count": '''
def f(x, n: int):
    out = np.zeros(x.shape)
    for i in range(n % 5):
        out[i % len(x)] = x[i % len(x)] + out[(i + 1) % len(x)] + 1.0
    return out
''',
}


@pytest.mark.parametrize("name", list(BUFFERS))
def test_buffers_written_in_loops_match_python(name: str) -> None:
    """`out = np.zeros_like(x)` then `out[i] = v` in a loop: the loop-carried buffer's type
    has a dim no value binds; its SetItem (a host kernel) takes the buffer's own shape.
    It once failed with "the size s0 of f64[s0] is not known while tracing"."""
    src = BUFFERS[name]
    ns: dict = {"np": np, "Tensor": nx.Tensor}
    exec(compile(src, "<oracle>", "exec"), ns)  # noqa: S102  (the test's own source)
    exe = nx.compile(nx.script_source(src, "f", {"np": np, "Tensor": nx.Tensor}), backend="xla")
    for x in (np.array([1.0, -2.0, 3.0, -0.5]), np.array([-1.0, 2.0, 0.5, 4.0])):
        args = (x,) if "n: int" not in src else (x, 7)
        _same(exe(*args), ns["f"](*args))


def test_a_masked_update_compiles() -> None:
    """`v[v > y] *= c` reads `v[v > y]` (a BooleanMask, padded in XLA) and writes it back
    where the mask holds; it was refused as "SetItem reads a value whose size is
    data-dependent"."""
    src = '''
def f(x, y: float):
    v = np.copy(x)
    for i in range(2):
        v[v > y] *= -1.5
        v[v < y] += 1.0
    return v
'''
    ns: dict = {"np": np}
    exec(compile(src, "<oracle>", "exec"), ns)  # noqa: S102  (the test's own source)
    exe = nx.compile(nx.script_source(src, "f", {"np": np}), backend="xla")
    for x in (np.array([1.0, -2.0, 3.0, -0.5]), np.zeros(0), np.array([5.0])):
        for y in (0.0, 10.0, -10.0):
            _same(exe(x, y), ns["f"](x, y))
