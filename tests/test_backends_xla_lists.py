"""Lists grown in loops on the xla backend, against plain Python running the same source.

A list is held as its stacked tensor, so one appended to in one arm of an If, or on every
iteration of a loop, has no one shape; the backend pads it to a bound with its true size
beside (a ``Padded`` value).  Each program here must give Python's result on both the
python and the xla backends, or (xla only, a loop whose trip count it cannot bound)
be refused by an ``XlaLoweringError`` that names the node.  These programs once came back
from xla as empty lists, with no error.
"""

from __future__ import annotations

import numpy as np
import pytest

import nexus as nx
from nexus.testing.extras import require

require("jax", "xla")

from nexus.backends.xla import XlaLoweringError  # noqa: E402

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
# Whose loop has a run-time trip count and no bound the xla backend can find.
UNBOUNDED = {"append under if", "append under if and else, two in one arm", "len of a list appended under if",
             "nested loops", "append after continue, then for v in out", "np.stack of a list of vectors"}


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
        for n in (0, 1, 7):
            want = oracle(x, n)
            if backend == "xla" and name in UNBOUNDED:
                with pytest.raises(XlaLoweringError, match=r"Append %out .*created at .*no static bound"):
                    exe(x, n)
                continue
            _same(exe(x, n), want)
