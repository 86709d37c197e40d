"""Issue 30: ``raise`` in a script, as numba takes it (an exception class, or a call of
one with constant arguments).  The path raises at run time and ends there; a script call
raises the same exception as plain Python (class and arguments), on every backend.  The
oracle is each function run as plain Python."""

from __future__ import annotations

import numpy as np
import pytest

import nexus as nx
from nexus.testing.extras import compiled_script

BACKENDS = ["python", "llvm", "xla"]


class ShapeError(Exception):
    """A user's own exception class (module level, as numba needs it too)."""


def checks(a: int, x: float):
    if a > 5:
        raise ValueError("a is too big")
    if a < -5:
        raise IndexError
    if a == 3:
        raise ShapeError("three", 3, 2.5, None)
    if a == -3:
        raise ZeroDivisionError()
    return x * a


def in_loop(n: int, v):
    s = 0.0
    for i in range(n):
        s = s + float(v[i % 3])
        if s > 4.0:
            raise RuntimeError("the sum passed 4")
        while s < -2.0:
            s = s + 1.0
            if i == 2:
                raise AssertionError("negative at step 2")
    return s


def _checked_sqrt(p):  # noqa: ANN001, ANN202  (inlined: its raise ends the caller's path)
    if p < 0.0:
        raise ValueError("math domain error")
    return p ** 0.5


def through_helper(x: float, y: float):
    return _checked_sqrt(x) + _checked_sqrt(y)


def always(a: int):
    raise NotImplementedError("not yet")


def dead_after_raise(a: int):
    if a > 0:
        raise ValueError("positive")
        y = no_such_name + "text"  # noqa: F821, F841  (dead: never lowered)
    return a


def bare_and_from_none(a: int):
    if a > 0:
        raise
    if a < 0:
        raise KeyError("k") from None
    return a


def one_side_raises(a: int, x: float):
    y = x if a > 0 else _fails(a)
    return y * 2.0


def _fails(a):  # noqa: ANN001, ANN202
    raise OverflowError("no value")


CASES = [
    (checks, [(1, 2.0), (6, 1.0), (-6, 1.0), (3, 1.0), (-3, 1.0), (-5, 0.5)]),
    (in_loop, [(2, np.array([1.0, 0.5, 2.0])), (5, np.array([1.0, 0.5, 2.0])), (3, np.array([-3.0, 0.5, -4.0])),
               (4, np.array([-1.0, -0.5, -4.0]))]),
    (through_helper, [(4.0, 9.0), (-1.0, 4.0), (4.0, -0.5)]),
    (always, [(1,)]),
    (dead_after_raise, [(1,), (-1,)]),
    (bare_and_from_none, [(1,), (-1,), (0,)]),
    (one_side_raises, [(1, 2.0), (-1, 2.0)]),
]


def described(fn, args):  # noqa: ANN001, ANN201
    """What ``fn(*args)`` gives: ("value", the value) or ("raised", class, arguments)."""
    try:
        return "value", fn(*args)
    except Exception as e:  # noqa: BLE001  (an exception is an outcome to compare)
        return "raised", type(e), e.args


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("fn, inputs", CASES, ids=[c[0].__name__ for c in CASES])
def test_raise_acts_as_in_python(fn, inputs, backend):  # noqa: ANN001
    run = compiled_script(fn, backend)
    wants = [described(fn, args) for args in inputs]
    assert any(w[0] == "raised" for w in wants), "a case list must take a raising path"
    for args, want in zip(inputs, wants):
        got = described(run, args)
        if want[0] == "raised":  # the same class, with the same arguments
            assert got == want, args
        else:
            assert got[0] == "value", (args, got)
            np.testing.assert_allclose(np.asarray(got[1]), np.asarray(want[1]), rtol=1e-12)


def test_the_exception_names_the_line_of_the_raise():
    import inspect

    with pytest.raises(ValueError) as info:
        nx.script(checks)(9, 1.0)
    assert str(info.value) == "a is too big"
    note = info.value.__notes__[-1]
    line = int(note.rsplit("line ", 1)[1].rstrip(")"))
    src, first = inspect.getsourcelines(checks)
    assert src[line - first].strip() == 'raise ValueError("a is too big")'


def test_a_raise_ends_its_path():
    """Code after a raise is dead: not lowered (its name error is never found), and the
    path ends with the failing check and a Return, as a path returning None does."""
    s = nx.script(dead_after_raise)
    g = s.graph_for(1)
    nx.verify(g)
    asserts = [n for n in g.nodes() if n.op.name == "Assert"]
    assert len(asserts) == 1 and asserts[0].attrs["message"].startswith("raise ValueError('positive')")
    assert asserts[0].block is not None and any(u.op.name == "Return" for u in asserts[0].block.members)


@nx.script
def _raising_callee(a: int):
    if a > 2:
        raise ValueError("callee says no")
    return a + 1


def calls_a_raising_script(a: int):
    return _raising_callee(a) * 2


def test_a_called_scripts_raise_reaches_the_caller():
    run = nx.script(calls_a_raising_script)
    assert run(1) == 4
    with pytest.raises(ValueError) as info:
        run(5)
    assert info.value.args == ("callee says no",)


def test_exception_classes_of_one_name_stay_apart():
    """Two classes of one module and name (a class made again, as a test re-run makes it)
    raise as themselves: the Assert's message names each with its own key."""
    from nexus.frontend.script.control import raise_message, raised_error

    first = type("Twin", (ValueError,), {"__module__": "somewhere"})
    second = type("Twin", (ValueError,), {"__module__": "somewhere"})
    m1, m2 = raise_message(first, ["a", 1], 3), raise_message(second, [], 4)
    assert m1 != m2.replace("()", "('a', 1)").replace("line 4", "line 3")
    e1, e2 = raised_error(m1), raised_error(m2)
    assert type(e1) is first and e1.args == ("a", 1)
    assert type(e2) is second and e2.args == ()
    assert raised_error("raise NoSuchError() (line 3)") is None  # not a class: the backend's error stands


def _squared_unless(x: float, n: int) -> float:
    if n > 3:
        raise ValueError("too big", 3)
    for i in range(n):
        y = x * i
    return y * x


@pytest.mark.parametrize("n", [5, 0, 2])
def test_the_gradient_of_a_script_raises_what_python_raises(n: int) -> None:
    # nx.grad(script) called directly raised NexusRuntimeError (an Assert's message) where
    # nx.compile(nx.grad(script)) already raised Python's exception.
    try:
        _squared_unless(2.0, n)
        want = None
    except (ValueError, UnboundLocalError) as e:
        want = e
    grad = nx.grad(nx.script(_squared_unless))
    if want is None:
        # d/dx (x * (n - 1) * x) = 2 x (n - 1)
        np.testing.assert_allclose(grad(2.0, n), 2 * 2.0 * (n - 1))
    else:
        with pytest.raises(type(want)) as info:
            grad(2.0, n)
        if isinstance(want, ValueError):
            assert info.value.args == want.args


def _assert_then_unbound(a: int, b: int, v: np.ndarray) -> np.ndarray:
    for _ in v:
        if a > 0:
            w = v + 1.0
    assert a > b, "check"
    return w


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("a, b", [(-1, 5), (1, -5), (-1, -5)])
def test_the_first_failing_check_in_program_order_raises(backend: str, a: int, b: int) -> None:
    # py_gen seed 0, program 188, minimised: the assert and the read of `w` became two
    # Asserts of one block with nothing between them, and the read's ran first
    # (UnboundLocalError where Python raises AssertionError).
    v = np.ones(3)
    try:
        want: object = _assert_then_unbound(a, b, v)
    except (AssertionError, UnboundLocalError) as e:
        want = e
    fn = compiled_script(_assert_then_unbound, backend)
    if isinstance(want, Exception):
        with pytest.raises(type(want)):
            fn(a, b, v)
    else:
        np.testing.assert_allclose(fn(a, b, v), want)


def _assert_then_divide(a: int, b: int) -> int:
    assert b != 0, "nonzero"
    return a // b


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("b", [0, 2])
def test_an_op_that_may_fail_waits_for_the_check_before_it(backend: str, b: int) -> None:
    # The python backend ran the division first: ZeroDivisionError where Python raises
    # AssertionError.
    fn = compiled_script(_assert_then_divide, backend)
    if b == 0:
        with pytest.raises(AssertionError):
            fn(7, b)
    else:
        assert fn(7, b) == _assert_then_divide(7, b)
