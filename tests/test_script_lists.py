"""Lists in scripts (held as their stacked tensor) against plain Python running the same
source, and the python backend's in-place append: amortised O(1) (a list grows by
doubling its buffer, counted here, not timed), and never visible through another value."""

from __future__ import annotations

import numpy as np
import pytest

import nexus as nx
from nexus.ops.shape import append_owned

PROGRAMS = {
    "loop": '''
def f(x, n: int):
    ys = []
    for t in range(n):
        ys.append(x * t)
    return np.stack(ys) if n else x
''',
    "slice kept, then more appends": '''
def f(x, n: int):
    ys = [x]
    for t in range(n):
        ys.append(x * t)
    first = ys[:2]
    one = ys[-1]
    for t in range(3):
        ys.append(x + t)
    return np.stack(first), one, np.stack(ys)
''',
    "nested loops, an element appended again": '''
def f(x, n: int):
    ys = [x]
    for i in range(n):
        for j in range(i):
            ys.append(ys[j] * 0.5 + x)
    return np.stack(ys)
''',
    "two lists": '''
def f(x, n: int):
    a = []
    b = []
    for t in range(n):
        a.append(x + t)
        b.append(np.stack(a).sum(axis=0))
    return np.stack(a) - np.stack(b) if n else x
''',
}


@pytest.mark.parametrize("name", list(PROGRAMS))
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_lists_match_python(name: str, dtype: type) -> None:
    src = PROGRAMS[name]
    ns: dict = {"np": np}
    exec(compile(src, "<oracle>", "exec"), ns)  # noqa: S102  (the test's own source)
    f = nx.script_source(src, "f", {"np": np})
    x = np.arange(6, dtype=dtype).reshape(2, 3) / 7
    for n in (0, 1, 5, 40):
        want, got = ns["f"](x, n), f(x, n)
        for w, g in zip(want if isinstance(want, tuple) else (want,), got if isinstance(got, tuple) else (got,)):
            np.testing.assert_allclose(g, w, rtol=1e-6 if dtype == np.float32 else 1e-14)
            assert np.asarray(g).dtype == np.asarray(w).dtype


def test_a_loops_append_runs_in_place() -> None:
    f = nx.script_source(PROGRAMS["loop"], "f", {"np": np})
    f(np.ones(3), 4)
    assert "_append_owned" in nx.compile(f.graph_for(np.ones(3), 4)).source()


def test_append_owned_grows_by_doubling() -> None:
    lst = np.zeros((0, 3))
    buffers = set()
    for k in range(1000):
        lst = append_owned(lst, np.full(3, float(k)))
        buffers.add(id(lst.base))
    np.testing.assert_array_equal(lst, np.repeat(np.arange(1000.0)[:, None], 3, axis=1))
    assert len(buffers) <= 10  # 4, 8, 16, ..., 1024 rows: a new buffer only when full


def test_append_owned_never_writes_where_another_view_looks() -> None:
    lst = np.zeros((0, 2))
    for k in range(5):
        lst = append_owned(lst, np.full(2, float(k)))
    keep = lst  # a second reference to the list: appending to it must copy
    grown = append_owned(keep, np.full(2, 9.0))
    assert grown.base is not keep.base and keep.shape == (5, 2)
    lst = keep
    del keep
    head = lst[:3]  # a view of the first rows while the list itself lives on
    longer = append_owned(head, np.full(2, 7.0))
    np.testing.assert_array_equal(lst[3], [3.0, 3.0])  # row 3 of the list is not overwritten
    np.testing.assert_array_equal(longer[-1], [7.0, 7.0])
    assert longer.shape == (4, 2)


def test_append_owned_checks_like_append() -> None:
    lst = append_owned(np.zeros((0, 2)), np.ones(2))
    with pytest.raises(ValueError, match="shape"):
        append_owned(lst, np.ones(3))


def test_many_lists_in_one_function() -> None:
    """Each list literal costs one rebuild to learn its element type; a function with more
    lists than the per-variable retry bound still builds (it once stopped after 8 rebuilds)."""
    lines = ["def f(x, n: int):", "    out = x"]
    for i in range(12):
        lines += [f"    l{i} = [x * {i}]", "    for k in range(n):", f"        l{i}.append(l{i}[-1] + k)",
                  f"    out = out + np.stack(l{i}).sum(axis=0)"]
    src = "\n".join(lines + ["    return out", ""])
    ns: dict = {"np": np}
    exec(compile(src, "<oracle>", "exec"), ns)  # noqa: S102  (the test's own source)
    x = np.array([0.5, -1.0])
    np.testing.assert_allclose(nx.script_source(src, "f", {"np": np})(x, 3), ns["f"](x, 3), rtol=1e-14)


def test_a_second_name_for_a_list_is_refused() -> None:
    """Python would make ``zs`` the same list as ``ys`` (later appends show through both);
    a script's list is a value, so the assignment is refused at its line, not run differently."""
    src = "def f(x):\n    ys = [x]\n    zs = ys\n    ys.append(x * 2)\n    return np.stack(zs)\n"
    with pytest.raises(nx.ScriptError, match="`ys` is a list") as info:
        nx.script_source(src, "f", {"np": np})(np.ones(2))
    assert info.value.line == 3
    for ok in ("    zs = ys[:]\n", "    ys = np.stack(ys)\n    zs = ys\n", "    ys = ys\n    zs = x\n"):
        src = "def f(x):\n    ys = [x, x * 2]\n" + ok + "    return zs\n"
        ns: dict = {"np": np}
        exec(compile(src, "<oracle>", "exec"), ns)  # noqa: S102  (the test's own source)
        x = np.array([1.0, 3.0])
        np.testing.assert_array_equal(nx.script_source(src, "f", {"np": np})(x), np.asarray(ns["f"](x)))
