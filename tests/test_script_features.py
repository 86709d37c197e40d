"""The constructs of @nx.script, each checked against the same function run as plain
Python (``f.fn``) or against NumPy."""

from __future__ import annotations

import math

import numpy as np
import pytest

import nexus as nx
from nexus.frontend.script import script_source
from nexus.ir.printer import structural_diff
from nexus.testing.extras import compiled_script

SCALE = 3
TABLE = np.array([10.0, 20.0, 30.0])


def same(f, *args):
    """Run both ways; compare value and Python type (floats closely, arrays closely)."""
    want = f.fn(*args)
    got = f(*args)
    if isinstance(want, tuple):
        assert isinstance(got, tuple) and len(got) == len(want)
        for w, g in zip(want, got):
            _same_one(w, g)
    else:
        _same_one(want, got)
    g = f.graph
    nx.verify(g)
    assert structural_diff(nx.parse(nx.print_graph(g)), g) == ""
    return got


def _same_one(want, got):
    if isinstance(want, np.ndarray):
        np.testing.assert_allclose(got, want, rtol=1e-6)
        return
    if isinstance(want, bool):
        assert type(got) is bool and got == want
    elif isinstance(want, int):
        assert type(got) is int and got == want, (got, want)
    else:
        assert isinstance(got, float) and math.isclose(got, want, rel_tol=1e-12), (got, want)


@nx.script
def arith(a: int, b: int, x: float):
    return a / b, a // b, a % b, -a // b, a + x, x // 2, x % 1.5, a * 2 ** 3, ~a, +True, 7 / 2


@pytest.mark.parametrize("a,b,x", [(7, 2, 1.5), (-7, 2, -2.25), (7, -3, 10.0), (0, 5, 0.0)])
def test_arithmetic_python_semantics(a: int, b: int, x: float) -> None:
    same(arith, a, b, x)


@nx.script
def boolops(a: int, b: int):
    c = a and b
    d = a or b
    e = (a > 0) and (b > 0)
    f = not a
    g = 0 < a < b <= 10
    h = a if a > b else b
    return c, d, e, f, g, h


@pytest.mark.parametrize("a,b", [(0, 3), (2, 0), (2, 5), (-1, -1), (5, 12)])
def test_and_or_value_semantics(a: int, b: int) -> None:
    same(boolops, a, b)


def test_and_short_circuits_at_run_time() -> None:
    f = script_source("def f(x, i):\n    return i < 3 and x[i] > 0.0\n", "f")
    x = np.array([1.0, -1.0, 2.0])
    assert f(x, 0) is True and f(x, 1) is False
    assert f(x, 7) is False  # x[7] would raise: the right side must not run


@nx.script
def loops(n: int):
    total = 0
    for i in range(n):
        if i % 3 == 0:
            continue
        total += i
    else:
        total += 1000
    for j in range(10, 0, -3):
        total = total * 2 + j
    k = n
    while k > 0:
        k -= 2
        if k == 3:
            break
    else:
        total -= 1
    last = -1
    for i in range(2, n, 2):
        total += i
        last = i
    return total, k, last


@pytest.mark.parametrize("n", [0, 1, 5, 9, 12])
def test_for_while_else_break_continue(n: int) -> None:
    same(loops, n)


@nx.script
def runtime_range(a: int, b: int, s: int):
    acc = 0
    count = 0
    for i in range(a, b, s):
        acc = acc * 3 + i
        count += 1
    return acc, count


@pytest.mark.parametrize("a,b,s", [(0, 10, 3), (10, -5, -4), (3, 3, 1), (5, 0, 1), (-2, 7, 2)])
def test_range_runtime_bounds_and_steps(a: int, b: int, s: int) -> None:
    same(runtime_range, a, b, s)


@nx.script
def early_returns(x: int):
    if x < 0:
        return -1, 0.5
    i = 0
    while True:
        i += 1
        if i * i > x:
            return i, 1.5
        if i > 100:
            break
    return 0, 2.5


@pytest.mark.parametrize("x", [-3, 0, 10, 99, 20000])
def test_early_and_multiple_returns(x: int) -> None:
    same(early_returns, x)
    assert len(early_returns.graph.returns) == 3


@nx.script
def tensors(x, m):
    first = x[0]
    last = x[-1]
    mid = x[1:3]
    cols = m[:, 1:3]
    row = m[1]
    rev = x[::-1]
    s = 0.0
    for r in m:
        s = s + r[0]
    return first, last, mid, cols, row, rev, s, len(x), m.T


def test_subscripts_slices_and_iteration() -> None:
    x = np.arange(5.0)
    m = np.arange(12.0).reshape(3, 4)
    got = same(tensors, x, m)
    assert got[7] == 5


@nx.script
def calls(x, y: float):
    a = np.tanh(x) + np.exp(x) * math.exp(y)
    b = abs(y) + min(y, 2.0) + max(1, 3) + float(int(y)) + math.floor(y)
    c = np.maximum(x, 0.5) + SCALE + TABLE
    d = np.sum(x * x)
    return a, b, c, d, round(y)


def test_op_math_numpy_builtin_calls_and_globals() -> None:
    same(calls, np.array([0.1, -0.4, 2.0]), 2.75)
    same(calls, np.array([0.1, -0.4, 2.0]), -1.5)


def helper_absdiff(p, q):
    if p > q:
        return p - q
    return q - p


def helper_pair(p):
    return p + 1, p * 2


@nx.script
def uses_helpers(a: int, b: int):
    s, t = helper_pair(a)
    return helper_absdiff(a, b) + helper_absdiff(b, 3) + s * t


@pytest.mark.parametrize("a,b", [(1, 5), (9, 2), (3, 3)])
def test_inlined_helpers_with_several_returns(a: int, b: int) -> None:
    same(uses_helpers, a, b)
    assert not [n for n in uses_helpers.graph.nodes() if n.op.name == "Call"]


@nx.script
def callee(p: int, q: float):
    if p > 2:
        return q * p
    return q


@nx.script
def caller(n: int):
    t = 0.0
    for i in range(n):
        t = t + callee(i, 0.5)
    return t


def test_script_calls_script_through_call_node() -> None:
    same(caller, 6)
    calls_ = [n for n in caller.graph.nodes() if n.op.name == "Call"]
    assert len(calls_) == 1 and calls_[0].attrs["callee"] is callee.graphs[(("i64", 0), ("f64", 0))]


DOUBLE = """
graph @double {
^entry:
  %0 = Start : (f32[n])
  %x = Proj %0 {num = 0} : f32[n]
  %two = Constant {value = tensor<f32: 2.0>} : f32
  %y = Mul %x, %two : f32[n]
  %r = Return %y : X
^exit(%r):
  End : X
}
"""


@pytest.mark.parametrize("backend", ["python", "llvm", "xla"])
def test_script_calls_a_graph_it_was_given(backend: str) -> None:
    # an imported or parsed graph is called as a script is: one Call node of it
    double = nx.parse(DOUBLE)

    def plus_one(x):  # noqa: ANN001, ANN202
        return double(x) + 1.0

    x = np.arange(5, dtype=np.float32)
    np.testing.assert_array_equal(compiled_script(plus_one, backend)(x), x * np.float32(2) + np.float32(1))


def test_a_graph_called_with_the_wrong_arity_names_it() -> None:
    double = nx.parse(DOUBLE)

    def twice(x):  # noqa: ANN001, ANN202
        return double(x, x)

    with pytest.raises(nx.ScriptError, match="graph @double takes 1 arguments, got 2"):
        nx.script(twice)(np.ones(3, np.float32))


def make_closure(k: float):
    @nx.script
    def scaled(x):
        return x * k

    return scaled


def test_closure_variables_become_constants() -> None:
    f = make_closure(2.5)
    assert f(4.0) == 10.0
    assert any(n.op.name == "Constant" and float(n.attrs["value"]) == 2.5 for n in f.graph.nodes())


@nx.script
def swap_and_unpack(a: int, b: int):
    for _ in range(3):
        a, b = b, a + b
    c = a
    c += b
    return a, b, c


def test_tuple_assignment_is_parallel() -> None:
    same(swap_and_unpack, 1, 1)


ZERO1 = np.zeros(1)
ONE1 = np.ones(1)


@nx.script
def grow(n: int):
    acc = ZERO1
    for i in range(n):
        acc = np.concatenate((acc, ONE1 * i))
    return acc


def test_loop_carried_shape_that_grows_gets_symbolic_dim() -> None:
    out = same(grow, 4)
    np.testing.assert_allclose(out, [0.0, 0.0, 1.0, 2.0, 3.0])
    g = grow.graph
    header_phi = next(n for n in g.nodes() if n.op.name == "Phi" and n.name == "acc")
    assert header_phi.type.shape is not None and not isinstance(header_phi.type.shape[0], int)
    nx.verify(g)


def test_signature_cache_by_dtype_and_rank() -> None:
    f = script_source("def f(x, n):\n    return x * n\n", "f")
    f(np.ones(3, np.float32), 2)
    f(np.ones(7, np.float32), 5)
    assert len(f.graphs) == 1
    f(np.ones((2, 2), np.float32), 2)
    f(np.ones(3, np.float64), 2)
    f(1.5, 2)
    assert len(f.graphs) == 4
    assert f(1.5, 2) == 3.0


def test_weak_python_scalars_keep_tensor_dtype() -> None:
    f = script_source("def f(x, i):\n    return x + i * 2 + 1.5\n", "f")
    out = f(np.ones(2, np.float32), 3)
    assert out.dtype == np.float32
    np.testing.assert_allclose(out, [8.5, 8.5])
    assert f(np.arange(2), 1).dtype == np.float64  # an int tensor next to a Python float: float64


def test_keyword_arguments_and_string_annotations() -> None:
    src = ("from nexus import Tensor\n\n"
           "def f(x: 'Tensor[\"N\"]', n: 'int'):\n    return x * n\n")
    f = script_source(src, "f")
    np.testing.assert_allclose(f(x=np.ones(2), n=3), [3.0, 3.0])
    assert str(f.graph.args[0].type) == "f64[N]"


def test_graph_before_first_call_from_annotations() -> None:
    from nexus import Tensor

    @nx.script
    def g(x: Tensor["N", 3], k: int):  # noqa: F821, UP037
        return x * k

    assert str(g.graph.args[0].type) == "f32[N, 3]"
    with pytest.raises(nx.ScriptError, match="call it first"):
        _ = script_source("def f(x):\n    return x\n", "f").graph


def test_every_node_has_a_source_location() -> None:
    f = loops
    f(5)
    g = f.graph
    skip = {g.start, g.end, *g.args}
    assert all(n.loc is not None and n.loc.line > 0 for n in g.nodes() if n not in skip)
    lines = {n.loc.line for n in g.nodes() if n not in skip}
    assert set(f.source_map.values()) == {n.loc for n in g.nodes() if n not in skip}
    first = loops.fn.__code__.co_firstlineno
    assert min(lines) > first and max(lines) <= first + 25
