"""Run-time checks (``Assert``) on the xla backend, against plain Python running the same source.

XLA cannot raise inside a computation: the first failing check's code is carried out of it
(through ``lax.cond`` arms and ``lax.while_loop`` carries) and the executable raises the
python backend's error after the call.  Before, every run-time Assert passed: a read of a
variable that no path assigned returned a stand-in value with no error.

The oracle is plain Python: where it returns, xla must return the same; where it raises
UnboundLocalError, the script's own error must come (the python backend's, which
``tests/test_script_undefined.py`` checks against Python); where it falls off the end, None;
where it raises
anything else (an ``assert`` statement, ``range()`` with a zero step), xla must raise the
python backend's error for the same node, with the same message.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import nexus as nx
from nexus.backends.base import NexusRuntimeError
from nexus.testing.extras import require

require("jax", "xla")

# Each program takes (x: float, n: int).
PROGRAMS = {
    "unassigned after a run-time loop": '''
def f(x, n: int):
    for i in range(n):
        y = i * 2
    return y
''',
    "unassigned after a branch in a loop": '''
def f(x, n: int):
    for i in range(n):
        if i == 3:
            y = x * i
    return y
''',
    "unassigned after a while loop that breaks first": '''
def f(x, n: int):
    k = 0
    while k < n:
        k += 1
        if k > 2:
            break
        z = x + k
    return z
''',
    "read of an unassigned variable inside a loop": '''
def f(x, n: int):
    t = 0.0
    for i in range(4):
        if i == n:
            y = x
        t = t + y
    return t
''',
    "falls off its end": '''
def f(x, n: int):
    if n > 2:
        return x * 2
''',
    "falls off its end inside a loop's branch": '''
def f(x, n: int):
    for i in range(n):
        if i * x > 3.0:
            return i
''',
    "assert on run-time values": '''
def f(x, n: int):
    assert x > 0, "x must be positive"
    return x + n
''',
    "assert in a nested loop": '''
def f(x, n: int):
    t = 0.0
    for i in range(n):
        j = 0
        while j < i:
            assert t < 20.0 + x, "t ran away"
            t = t + x * j
            j += 1
    return t
''',
    "two failing asserts: the first wins": '''
def f(x, n: int):
    s = 0.0
    for i in range(n):
        if i > 1:
            assert x < i, "first"
        assert x > -i, "second"
        s = s + x
    return s
''',
    "range with a run-time zero step, then a loop": '''
def f(x, n: int):
    s = x
    for i in range(0, 5, n % 3):
        s = s + i
    return s
''',
    "a check in a called helper": '''
@script
def _half(v):
    assert v >= 0.0, "negative"
    return v / 2.0

def f(x, n: int):
    t = 0.0
    for i in range(n):
        t = t + _half(x - i)
    return t
''',
}
INPUTS = [(x, n) for x in (-1.5, 0.5, 4.0) for n in (0, 1, 2, 3, 5)]


def _program(name: str) -> tuple[Any, Any]:
    src = PROGRAMS[name]
    ns: dict[str, Any] = {"np": np, "script": lambda fn: fn}
    exec(compile(src, "<oracle>", "exec"), ns)  # noqa: S102  (the test's own source)
    return ns["f"], nx.script_source(src, "f", {"np": np, "script": nx.script})


def _outcome(fn: Any, *args: Any) -> tuple[bool, Any]:
    try:
        return True, fn(*args)
    except Exception as e:  # noqa: BLE001  (an error is an outcome to compare)
        return False, e


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_run_time_checks_raise_as_on_the_python_backend(name: str) -> None:
    oracle, f = _program(name)
    on_xla, on_python = nx.compile(f, backend="xla"), nx.compile(f, backend="python")
    failures = 0
    for x, n in INPUTS:
        ok_py, want = _outcome(oracle, x, n)
        ok_xla, got = _outcome(on_xla, x, n)
        if ok_py and want is not None:
            assert ok_xla, f"{name}{(x, n)}: Python returned {want!r}, xla raised {got!r}"
            np.testing.assert_allclose(got, want, rtol=1e-12)
            continue
        failures += 1
        if ok_py:  # fell off the end: None, as Python returns
            assert ok_xla and got is None, f"{name}{(x, n)}: Python returned None, xla gave {got!r}"
            assert _outcome(on_python, x, n) == (True, None)
            continue
        assert not ok_xla, f"{name}{(x, n)}: Python raised {want!r}, xla returned {got!r}"
        if isinstance(want, UnboundLocalError):
            assert isinstance(got, UnboundLocalError) and str(want).split("'")[1] in str(got)
        ok_ref, ref = _outcome(on_python, x, n)
        assert not ok_ref
        assert type(got) is type(ref) and str(got) == str(ref)
        assert type(got.__cause__) is type(ref.__cause__)
        if isinstance(ref, NexusRuntimeError):
            assert got.node is not None and got.node.op.name == "Assert"
    assert failures, f"{name}: no input makes Python raise; the program tests nothing"


def test_a_check_that_fails_on_static_values_raises_when_called() -> None:
    """An ``assert`` on constants fails on every run, as on the python backend: at the
    call, not while compiling."""
    def f(x: float) -> float:
        assert 1 > 2, "never"
        return x

    exe = nx.compile(nx.script(f), backend="xla")
    with pytest.raises(AssertionError, match="never"):  # Python's exception, as on the python backend
        exe(1.0)


def test_a_graph_whose_checks_all_pass_while_compiling_carries_no_failure_code() -> None:
    """Checks decided while tracing (a length, once shapes are specialised) leave nothing
    for run time: the loop carries no failure code and the computation does not return one."""
    def f(x: Any, n: int) -> Any:
        s = x
        for i in range(n):
            assert len(x) > 1, "too short"
            s = s * 0.5 + i
        return s

    x = np.ones(3)
    g = nx.script(f).graph_for(x, 3)
    assert any(n.op.name == "Assert" for n in g.nodes())
    exe = nx.compile(g, backend="xla")
    np.testing.assert_allclose(exe(x, 3), f(x, 3))
    compiled = exe.compiled(exe.build_arguments((x, 3)))
    assert compiled.checks == []
    assert "tensor<i32>" not in compiled.lowered_text


# Operands whose sizes are known only at run time (slices of run-time length, which xla
# pads to a bound): where NumPy cannot broadcast them, xla raised nothing and returned a
# sum over the padding (61.0 for `_sliced_in_branch(v, 5)`, where Python raises).
def _sliced(v: Any, n: int) -> Any:
    return v[:n] + v[1:]


def _sliced_in_branch(v: Any, n: int) -> float:
    acc = 0.0
    for i in range(3):
        if n > 0:
            acc += float(np.sum(v[:n] * v[i:]))
    return acc


def _sliced_in_while(v: Any, n: int, m: int) -> float:
    acc, i = 0.0, 0
    while i < m:
        acc += float(np.sum(v[:n] - v[:i + 1]))
        i += 1
    return acc


@pytest.mark.parametrize("fn, args", [
    (_sliced, (4,)), (_sliced, (2,)), (_sliced, (1,)),
    (_sliced_in_branch, (5,)), (_sliced_in_branch, (4,)), (_sliced_in_branch, (1,)), (_sliced_in_branch, (0,)),
    (_sliced_in_while, (1, 3)), (_sliced_in_while, (2, 1)), (_sliced_in_while, (2, 3)), (_sliced_in_while, (3, 5)),
])
def test_sizes_known_at_run_time_that_do_not_broadcast_raise_as_in_numpy(fn: Any, args: tuple[int, ...]) -> None:
    v = np.arange(5.0)
    try:
        want: Any = fn(v, *args)
    except ValueError as e:
        want = e
    exe = nx.compile(nx.script(fn), backend="xla")
    if isinstance(want, ValueError):
        with pytest.raises(NexusRuntimeError, match="broadcast") as info:
            exe(v, *args)
        assert isinstance(info.value.__cause__, ValueError)
    else:
        np.testing.assert_allclose(exe(v, *args), want)


# Integer division by zero, a negative shift count and an index out of range: Python
# raises; xla gave XLA's number (-2 for 7 // 0, 0 for 3 << -1) or clamped the index (v[7]
# was v[4]).
def _floordiv(a: int, b: int) -> int:
    return a // b


def _mod_in_loop(a: int, n: int) -> int:
    s = 0
    for i in range(n):
        s += a % (n - 1 - i)
    return s


def _shifts(a: int, n: int) -> int:
    s = 0
    for i in range(n):
        s += (a << (n - 2 - i)) + (a >> (n - 2 - i))
    return s


def _index(v: Any, i: int) -> Any:
    return v[i]


def _index_in_loop(v: Any, n: int) -> float:
    s = 0.0
    for k in range(n):
        if k % 2 == 0:
            s += v[k - n // 2]
    return s


@pytest.mark.parametrize("fn, args", [
    (_floordiv, (7, 0)), (_floordiv, (7, -2)), (_mod_in_loop, (9, 3)), (_mod_in_loop, (9, 0)),
    (_shifts, (5, 0)), (_shifts, (5, 1)), (_shifts, (5, 3)),
    (_index, (None, 4)), (_index, (None, 5)), (_index, (None, -5)), (_index, (None, -6)),
    (_index_in_loop, (None, 5)), (_index_in_loop, (None, 9)), (_index_in_loop, (None, 13)),
])
def test_division_by_zero_and_index_out_of_range_raise_as_in_python(fn: Any, args: tuple[Any, ...]) -> None:
    args = tuple(np.arange(5.0) if a is None else a for a in args)
    try:
        want: Any = fn(*args)
    except (ZeroDivisionError, IndexError, ValueError) as e:
        want = e
    exe = nx.compile(nx.script(fn), backend="xla")
    if isinstance(want, Exception):
        with pytest.raises(NexusRuntimeError) as info:
            exe(*args)
        assert type(info.value.__cause__) is type(want)
    else:
        np.testing.assert_allclose(exe(*args), want)


# A host kernel after a check that failed ran on the stand-in of an unassigned variable
# (`py_gen --seed 4`, program 88): SetItem raised "could not broadcast (2,) into (0,)" inside
# XLA, where Python raises UnboundLocalError before it.
def _set_after_unassigned(v: Any, n: int) -> Any:
    for i in range(n):
        k = i + 2
    w = np.copy(v)
    w[:k] = v[:2]
    return w


@pytest.mark.parametrize("n", [0, 1, 3])
def test_a_host_kernel_after_a_failed_check_does_not_run(n: int) -> None:
    # n = 3: the kernel itself raises on live values (w[:4] = v[:2]), which reached the
    # caller as XLA's INTERNAL error naming nothing; it is NumPy's error for SetItem now.
    v = np.arange(5.0)
    exe = nx.compile(nx.script(_set_after_unassigned), backend="xla")
    try:
        want = _set_after_unassigned(v, n)
    except UnboundLocalError:
        with pytest.raises(UnboundLocalError):
            exe(v, n)
        return
    except ValueError as e:
        with pytest.raises(NexusRuntimeError, match="SetItem") as info:
            exe(v, n)
        assert type(info.value.__cause__) is type(e) and str(info.value.__cause__) == str(e)
        return
    np.testing.assert_array_equal(exe(v, n), want)


def test_a_call_after_a_host_kernel_error_is_not_disturbed_by_it() -> None:
    # One executable: the kept error is raised once, by its own call.
    v = np.arange(5.0)
    exe = nx.compile(nx.script(_set_after_unassigned), backend="xla")
    outcomes = []
    for n in (1, 3, 1, 2, 3, 2):
        try:
            outcomes.append(exe(v, n).tolist())
        except NexusRuntimeError as e:
            outcomes.append(type(e.__cause__).__name__)
    want = []
    for n in (1, 3, 1, 2, 3, 2):
        try:
            want.append(_set_after_unassigned(v, n).tolist())
        except ValueError as e:
            want.append(type(e).__name__)
    assert outcomes == want
