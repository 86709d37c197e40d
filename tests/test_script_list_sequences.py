"""Script lists whose items differ in shape are sequences (``seq<...>``), against plain
Python running the same source; lists whose items share a shape stay stacked tensors.
The backends that hold no sequences refuse them by name and source line."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import nexus as nx
from nexus.testing.extras import require

PROGRAMS = {
    "prefixes, returned": '''
def f(x):
    out = []
    for i in range(x.shape[0]):
        out.append(x[:i + 1])
    return out
''',
    "len, index, iterate": '''
def f(x):
    out = []
    for i in range(x.shape[0]):
        out.append(x[i:] * 2.0)
    s = 0.0
    for v in out:
        s = s + v.sum()
    return len(out), out[0], out[-1], s, out[len(out) // 2]
''',
    "concatenate": '''
def f(x):
    out = []
    for i in range(x.shape[0]):
        out.append(x[:i + 1])
    return np.concatenate(out), out[:]
''',
    "boolean masks": '''
def f(x):
    out = []
    for t in range(3):
        out.append(x[x > t - 1])
    return out, np.concatenate(out)
''',
    "enumerate, reversed": '''
def f(x):
    out = []
    for i in range(x.shape[0]):
        out.append(x[:i])
    acc = [0.0]
    for k, v in enumerate(reversed(out)):
        acc.append(v.sum() * k)
    return np.stack(acc)
''',
    "appends in a branch": '''
def f(x):
    out = [x]
    for i in range(x.shape[0]):
        if i % 2 == 0:
            out.append(x[i:])
    return out
''',
    "a literal of two shapes": '''
def f(x):
    out = [x, x[1:]]
    out.append(x + 1.0)
    return out
''',
    "stack and concatenate on other axes": '''
def f(x):
    out = []
    for i in range(2):
        out.append(x[:, i:i + 2] * 1.0)
    return np.stack(out, axis=-1), np.concatenate(out, axis=1)
''',
    "item assignment": '''
def f(x):
    out = []
    for i in range(x.shape[0]):
        out.append(x[:i + 1])
    out[1] = x * 3.0
    out[-1] = x[:1]
    return out
''',
    "NumPy reads it as an array": '''
def f(x):
    out = []
    for i in range(3):
        m = x[x > 0]                   # a mask's count, taken in the loop: a sequence
        out.append(m * i)
    return np.sum(out), np.array(out), np.mean(out, axis=0), np.exp(out), np.asarray(out, dtype=np.float32)
''',
    "a loop variable that shrinks": '''
def f(x):
    out = []
    w = x
    for i in range(3):
        out.append(w)
        w = w[1:]
    return out
''',
    "a loop variable that grows": '''
def f(x):
    out = []
    w = x
    for i in range(3):
        w = np.concatenate([w, w])
        out.append(w)
    return out
''',
    "a list per iteration": '''
def f(x):
    sums = []
    for i in range(x.shape[0]):
        row = []
        for j in range(i):
            row.append(x[j:i])
        sums.append(len(row) * 1.0)
        if len(row):
            sums.append(np.concatenate(row).sum())
    return np.stack(sums)
''',
}


def _same(got: Any, want: Any) -> None:
    if isinstance(want, (list, tuple)):
        assert type(got) is type(want) and len(got) == len(want), (got, want)
        for g, w in zip(got, want):
            _same(g, w)
        return
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-14)
    assert np.asarray(got).dtype == np.asarray(want).dtype


def _both(src: str) -> tuple[Any, Any]:
    ns: dict = {"np": np}
    exec(compile(src, "<oracle>", "exec"), ns)  # noqa: S102  (the test's own source)
    return ns["f"], nx.script_source(src, "f", {"np": np})


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_sequence_lists_match_python(name: str) -> None:
    py, f = _both(PROGRAMS[name])
    x = np.arange(12.0).reshape(3, 4) if "axes" in name else np.arange(5.0) - 1.5
    _same(f(x), py(x))
    g = f.graph_for(x)
    nx.verify(g)
    ops = {n.op.name for n in g.nodes()}
    assert "SequenceInsert" in ops


def test_an_empty_sequence_list_and_other_lengths() -> None:
    py, f = _both(PROGRAMS["prefixes, returned"])
    for x in (np.zeros(0), np.ones(1), np.arange(7.0)):
        _same(f(x), py(x))
    py, f = _both(PROGRAMS["concatenate"])
    with pytest.raises(ValueError):
        py(np.zeros(0))
    with pytest.raises(Exception, match="empty sequence"):  # NumPy: "need at least one array"
        f(np.zeros(0))


def test_an_index_out_of_range_raises_index_error_as_python() -> None:
    src = "def f(x, k: int):\n    out = []\n    for i in range(3):\n        out.append(x[:i])\n    return out[k]\n"
    py, f = _both(src)
    x = np.arange(4.0)
    for k in (-3, -1, 0, 2):
        _same(f(x, k), py(x, k))
    with pytest.raises(IndexError):
        py(x, 3)
    with pytest.raises(Exception) as info:
        f(x, 3)
    assert isinstance(info.value, IndexError) or isinstance(info.value.__cause__, IndexError) \
        or "IndexError" in str(info.value)


def test_items_of_one_shape_stay_a_stacked_tensor() -> None:
    """Rows of an argument (the symbol `m` in every item) and items of a shape fixed by ints
    are the stacked tensor the backends compile; the script returns that array."""
    src = '''
def f(x):
    out = []
    for i in range(x.shape[0]):
        out.append(x[i] * 2.0)
    fixed = [np.zeros(3)]
    for i in range(x.shape[0]):
        fixed.append(np.ones(3) * i)
    h = x[0]
    hs = []
    for t in range(x.shape[0]):        # an RNN's states: a loop variable of one shape
        h = np.tanh(x[t] + h * 0.5)
        hs.append(h)
    return out, np.stack(fixed), np.stack(hs)
'''
    py, f = _both(src)
    x = np.arange(6.0).reshape(3, 2)
    got, want = f(x), py(x)
    np.testing.assert_array_equal(got[0], np.stack(want[0]))
    np.testing.assert_array_equal(got[1], want[1])
    np.testing.assert_allclose(got[2], want[2], rtol=1e-14)
    ops = [n.op.name for n in f.graph_for(x).nodes()]
    assert ops.count("Append") == 4 and not any(o.startswith("Sequence") for o in ops)


def test_items_of_a_size_fixed_before_the_loop_stay_stacked() -> None:
    """A mask taken before the loop (a run-time size, but one for every iteration), and a
    list of one item of such a size, are stacked; a slice to the loop's counter is not."""
    src = '''
def f(x):
    m = x[x > 0]
    out = []
    for i in range(3):
        out.append(m * i)
    one = [np.tanh(x[x < 1])]
    return np.stack(out), np.stack(one)
'''
    py, f = _both(src)
    x = np.arange(5.0) - 1.5
    _same(f(x), py(x))
    ops = [n.op.name for n in f.graph_for(x).nodes()]
    assert ops.count("Append") == 2 and not any(o.startswith("Sequence") for o in ops)


def test_slicing_a_sequence_list_is_refused_at_its_line() -> None:
    src = "def f(x):\n    out = []\n    for i in range(3):\n        out.append(x[:i])\n    return out[1:]\n"
    with pytest.raises(nx.ScriptError, match="slicing a list") as info:
        nx.script_source(src, "f", {"np": np})(np.arange(4.0))
    assert info.value.line == 5


def test_items_of_another_rank_are_refused() -> None:
    src = "def f(x):\n    out = [x]\n    for i in range(3):\n        out.append(x[:i])\n    out.append(x[0])\n" \
          "    return out\n"
    with pytest.raises(nx.ScriptError, match="one dtype and rank") as info:
        nx.script_source(src, "f", {"np": np})(np.arange(4.0))
    assert info.value.line == 5


@pytest.mark.parametrize("backend,module,extra", [("xla", "jax", "xla"), ("llvm", "llvmlite", "llvm")])
def test_backends_without_sequences_refuse_by_op_and_line(backend: str, module: str, extra: str) -> None:
    require(module, extra)
    f = nx.script_source(PROGRAMS["prefixes, returned"], "f", {"np": np})
    with pytest.raises(Exception, match=r"SequenceEmpty %out .*:3:4\).*seq<f64") as info:
        nx.compile(f, backend=backend)(np.arange(4.0))
    assert backend in str(info.value)


def test_auto_runs_a_sequence_list() -> None:
    py, f = _both(PROGRAMS["concatenate"])
    x = np.arange(5.0)
    _same(nx.compile(f, backend="auto")(x), py(x))
