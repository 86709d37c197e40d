"""Python's bitwise operators in @nx.script (&, |, ^, ~, <<, >> and their augmented forms):
ints use the integer bitwise ops, bools the logical ones, mixed bool/int follows Python.
The oracle is the same function run as plain Python (NumPy for tensors)."""

from __future__ import annotations

import random

import numpy as np
import pytest

import nexus as nx
from nexus.frontend.script import ScriptError, script_source
from nexus.passes import optimize

OPS = ["&", "|", "^", "<<", ">>"]


def outcome(fn, *args):  # type: ignore[no-untyped-def]
    try:
        return "ok", fn(*args)
    except (ValueError, nx.NexusRuntimeError) as e:
        return "raised", type(e).__name__


@nx.script
def nested(n: int, m: int) -> int:
    t = 0
    for i in range(-n, n):
        for j in range(-m, m):
            t = t + ((i ^ j) & 1)
            t += (i | j) - (i & ~j) + ((i << (j % 5)) >> 2) + (~i >> (j % 70))
            t ^= j << 3
    return t


@pytest.mark.parametrize("n,m", [(0, 3), (1, 1), (3, 4), (7, 5)])
def test_nested_loops_agree_with_python(n: int, m: int) -> None:
    want = nested.fn(n, m)
    got = nested(n, m)
    assert got == want and isinstance(got, int)
    ops = {node.op.name for node in nested.graph.nodes()}
    assert {"BitwiseXor", "BitwiseAnd", "BitwiseOr", "BitwiseNot", "LeftShift", "RightShift"} <= ops


@pytest.mark.parametrize("sym", OPS)
def test_each_operator_on_random_ints_with_negatives(sym: str) -> None:
    f = script_source(f"def f(a, b):\n    return a {sym} b\n", "f")
    rng = random.Random(sym)
    for _ in range(200):
        a = rng.choice([rng.randint(-2**40, 2**40), rng.randint(-300, 300), 0, -1])
        # counts past 63 only for >>: there int64 and Python agree; << keeps in range
        b = rng.randint(0, 20) if sym == "<<" else rng.randint(0, 80) if sym == ">>" else rng.randint(-2**40, 2**40)
        want = eval(f"a {sym} b")  # noqa: S307  (plain Python, the oracle)
        got = f(a, b)
        assert got == want and type(got) is int, (a, sym, b, got, want)


def test_invert_matches_python() -> None:
    f = script_source("def f(a):\n    return ~a, ~(a > 0), ~~a\n", "f")
    for a in [0, 1, -1, 5, -6, 2**62, -(2**63), 2**63 - 1]:
        assert f(a) == f.fn(a)
        assert [type(v) for v in f(a)] == [int, int, int]


@pytest.mark.parametrize("sym", ["&", "|", "^"])
def test_bools_stay_logical_and_mix_with_ints_as_python(sym: str) -> None:
    f = script_source(f"def f(a, b):\n    return (a > 0) {sym} (b > 0), (a > 0) {sym} b, True {sym} b\n", "f")
    for a in (-2, 3):
        for b in (-3, 0, 3, 6):
            want = f.fn(a, b)
            got = f(a, b)
            assert got == want and [type(v) for v in got] == [type(v) for v in want], (a, b)
    assert script_source("def f(a):\n    return True & a\n", "f")(3) == 1


def test_shift_of_a_bool_is_an_int() -> None:
    f = script_source("def f(a):\n    return (a > 0) << 3, 1 << (a > 0)\n", "f")
    for a in (-1, 1):
        assert f(a) == f.fn(a)
        assert [type(v) for v in f(a)] == [int, int]


@pytest.mark.parametrize("sym", ["<<", ">>"])
def test_negative_shift_count_raises_like_python(sym: str) -> None:
    f = script_source(f"def f(a, b):\n    return a {sym} b\n", "f")
    with pytest.raises(ValueError, match="negative shift count"):
        f.fn(5, -1)
    with pytest.raises(nx.NexusRuntimeError, match="negative shift count"):
        f(5, -1)
    assert outcome(f, 5, -1)[0] == outcome(f.fn, 5, -1)[0] == "raised"


def test_shift_past_64_bits_wraps_as_documented() -> None:
    """Where int64 and Python's ints part: a << b keeps the low 64 bits (0 once b >= 64);
    a >> b agrees with Python for every count."""
    f = script_source("def f(a, b):\n    return a << b, a >> b\n", "f")
    for a, b in [(1, 63), (1, 64), (3, 100), (-5, 64), (-5, 200), (2**62, 2)]:
        left, right = f(a, b)
        want_left = (a << b) & (2**64 - 1)
        want_left -= 2**64 if want_left >= 2**63 else 0
        assert (left, right) == (want_left, a >> b), (a, b)


def test_tensors_follow_numpy() -> None:
    f = script_source("def f(x, y, m):\n    return (x & 6) | (y ^ x), x << 2, ~m, m & (x > 2), ~x\n", "f")
    x, y = np.arange(-4, 4, dtype=np.int32), np.arange(8, dtype=np.int32)[::-1].copy()
    m = np.array([True, False] * 4)
    got = f(x, y, m)
    want = ((x & 6) | (y ^ x), x << 2, ~m, m & (x > 2), ~x)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype, (g.dtype, w.dtype)
        np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("src,message", [
    ("def f(x):\n    return x & 1\n", "`&` needs integers or bools, not f64"),
    ("def f(x):\n    return 3 >> x\n", "`>>` needs integers or bools, not f64"),
    ("def f(x):\n    return ~x\n", "`~` needs an integer or a bool, not f64"),
])
def test_floats_are_refused_at_build(src: str, message: str) -> None:
    with pytest.raises(ScriptError, match=message) as info:
        script_source(src, "f")(1.5)
    assert "instead:" in str(info.value)
    ns: dict = {}
    exec(compile(src, "<oracle>", "exec"), ns)  # noqa: S102  (plain Python, the oracle)
    with pytest.raises(TypeError):  # Python refuses them too
        ns["f"](1.5)


def test_optimizer_keeps_a_failing_shift_on_its_path() -> None:
    """A shift by a negative constant in a branch not taken must not fail: constant folding
    leaves it, and LICM does not hoist it out of the branch (may_fail_on_int)."""
    src = ("def f(a, n):\n    t = 0\n    for i in range(n):\n        if a > 0:\n            t = t + (5 << -1)\n"
           "        t = t ^ (i << 2)\n    return t\n")
    f = script_source(src, "f")
    g = optimize(f.graph_for(-1, 4).clone()[0])
    assert nx.run(g, -1, 4) == f.fn(-1, 4)
    with pytest.raises(nx.NexusRuntimeError, match="negative shift count"):
        nx.run(g, 1, 4)
    with pytest.raises(ValueError):
        f.fn(1, 4)
