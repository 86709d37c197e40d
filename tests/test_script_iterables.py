"""Issue 30: Python that numba accepts, run by @nx.script with Python's semantics, each
checked against the same function run as plain Python (the oracle): enumerate/zip/
reversed over ranges and tensors with negative and run-time steps, tuples from the
enclosing scope, nx functions with NumPy's signature, NumPy scalar constructors and
dtype objects as values."""

from __future__ import annotations

import numpy as np
import pytest

import nexus as nx
from nexus.testing.extras import compiled_script

BACKENDS = ["python", "llvm", "xla"]

SHIFT = (1, -3)
AXES = (0, 1)
F32 = np.dtype("float32")


def agree(want, got):
    if isinstance(want, tuple):
        assert isinstance(got, tuple) and len(got) == len(want)
        pairs = list(zip(want, got))
    else:
        pairs = [(want, got)]
    for w, g in pairs:
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-6)
        assert np.asarray(g).dtype == np.asarray(w).dtype or isinstance(w, (int, float))


def same(fn, *cases, backend="python"):
    """``fn`` on each tuple of arguments in ``cases``: the script (compiled once on
    ``backend``) gives what plain Python gives."""
    run = compiled_script(fn, backend)
    for args in cases:
        agree(fn(*args), run(*args))
        if backend == "python":
            nx.verify(run.graph_for(*args))


def enum_down(x: int, y: int):
    t = 0
    for i, j in enumerate(range(x, y, -1)):
        t = t * 7 + i * 3 + j
    return t


def rev_range(x: int, y: int, s: int):
    t = 0
    for i in reversed(range(x, y, s)):
        t = t * 5 + i
    return t


def zip_ranges(x: int, y: int, s: int):
    t = 0
    for i, j in zip(range(x, y, s), reversed(range(y))):
        t = t * 3 + i - j
    return t


def enum_zip_rows(v, x: int):
    t = 0.0
    for i, (r, j) in enumerate(zip(v, range(x, 100)), 2):
        t = t * 3 + i * r + j
    return t


def rev_rows(v):
    t = 0.0
    for r in reversed(v):
        t = t * 2 + r
    return t


def enum_start_kw(v, s: int):
    t = 0.0
    for i, r in enumerate(reversed(v), start=s):
        t = t * 2 + i * r
    return t


@pytest.mark.parametrize("backend", BACKENDS)
def test_enumerate_negative_range(backend):
    same(enum_down, (10, 3), (3, 10), (4, 4), (-2, -9), backend=backend)


STEPS = [(0, 10, 3), (10, 0, -3), (5, 5, 1), (10, -7, -4), (2, 9, 2), (9, 2, 2), (0, 1, -1)]


@pytest.mark.parametrize("backend", BACKENDS)
def test_reversed_and_zip_runtime_step(backend):
    same(rev_range, *STEPS, backend=backend)
    same(zip_ranges, *STEPS, backend=backend)


def test_zero_runtime_step_raises_as_python_does():
    with pytest.raises(ValueError):
        rev_range(0, 5, 0)
    with pytest.raises(Exception, match="must not be zero"):
        nx.script(rev_range)(0, 5, 0)


@pytest.mark.parametrize("backend", BACKENDS)
def test_enumerate_zip_tensor_rows(backend):
    v = np.array([1.5, 2.0, 3.0, 4.0])
    same(enum_zip_rows, (v, 7), (v, 98), (v, 200), backend=backend)
    same(rev_rows, (v,), backend=backend)
    same(enum_start_kw, (v, -3), (v, 4), backend=backend)


def test_reversed_enumerate_refused_as_python_does():
    def f(x: int):
        t = 0
        for i, j in reversed(enumerate(range(x))):
            t += i + j
        return t
    with pytest.raises(TypeError):
        f(3)
    with pytest.raises(nx.ScriptError, match="reversed\\(\\) needs a sequence"):
        nx.script(f)(3)


def roll_global(a):
    return np.roll(a, SHIFT, AXES)


def roll_closure_positional():
    shift = (1, -3)
    axis = (0, 1)

    def f(a):
        return np.roll(a, shift, axis) + shift[1]
    return f


def roll_closure_keyword():
    shift = (2, -1)

    def f(a):
        return np.roll(a, shift, axis=(0, 1)) + shift[0]
    return f


A34 = np.arange(12.0).reshape(3, 4)


@pytest.mark.parametrize("backend", BACKENDS)
def test_global_and_closure_tuples_are_constants(backend):
    same(roll_global, (A34,), backend=backend)
    same(roll_closure_positional(), (A34,), backend=backend)
    same(roll_closure_keyword(), (A34,), backend=backend)


def test_nested_closure_tuple_of_arrays_and_numbers():
    pair = (np.array([1.0, 2.0, 3.0]), (2, 0.5))

    def f(a):
        return a * pair[0] + pair[1][0] * pair[1][1]
    same(f, (np.arange(3.0),))


def nx_roll_numpy(a, s: int):
    return nx.roll(a, s, 0), nx.roll(a, -2, axis=1), nx.roll(a, 5), nx.roll(a, SHIFT, AXES)


def np_roll_numpy(a, s: int):
    return np.roll(a, s, 0), np.roll(a, -2, axis=1), np.roll(a, 5), np.roll(a, SHIFT, AXES)


@pytest.mark.parametrize("backend", BACKENDS)
def test_nx_roll_takes_numpy_signature(backend):
    run = compiled_script(nx_roll_numpy, backend)
    for s in (1, -4, 7):
        agree(np_roll_numpy(A34, s), run(A34, s))


F64 = np.float64
I32 = np.dtype("int32")


def scalar_ctors(a, x: float):
    return a.astype(F32) * np.float32(x), np.uint32(7) + np.uint32(3), np.float64(np.int32(3)), \
        a.astype(np.uint8), np.zeros(2, dtype=I32) + np.int32(x), np.float32(x) * 2, np.uint32(7) * 3


@pytest.mark.parametrize("backend", BACKENDS)
def test_numpy_scalar_constructors_and_dtype_values(backend):
    same(scalar_ctors, (np.arange(3.0), 2.0), (np.arange(4.0) * 60.5, -1.25), backend=backend)


def test_numpy_scalar_kinds_match_numpy():
    got = nx.script(scalar_ctors)(np.arange(3.0), 1.25)
    want = scalar_ctors(np.arange(3.0), 1.25)
    for g, w in zip(got, want):
        assert np.asarray(g).dtype == np.asarray(w).dtype, (g, w)


def test_numpy_scalar_of_runtime_scalar():
    def f(x: float):
        return np.float32(x) * 2
    got = nx.script(f)(1.25)
    assert np.asarray(got).dtype == np.float32 and float(got) == f(1.25)
