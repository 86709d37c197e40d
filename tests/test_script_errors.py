"""Unsupported constructs and type errors in @nx.script: each fails with a ScriptError that
names the construct, gives the line (and column, with a caret under the quoted line) and
says what to write instead."""

from __future__ import annotations

import textwrap

import numpy as np
import pytest

import nexus as nx
from nexus.frontend.script import ScriptError, script_source
from nexus.passes import optimize

# (source of `f`, expected text in the message, 1-based line of the error, call args or
# None when the error comes at decoration)
CASES: list[tuple[str, str, int, tuple | None]] = [
    ("def f(x):\n    try:\n        y = x\n    except ValueError:\n        y = 0\n    return y\n",
     "`try` statements are not supported", 2, None),
    ("def f(x):\n    with open('a') as fh:\n        pass\n    return x\n", "`with` statements", 2, None),
    ("def f(x):\n    g = lambda t: t + 1\n    return x\n", "`lambda` is not supported", 2, None),
    ("def f(x):\n    return sum(t for t in range(3))\n", "generator expressions", 2, None),
    ("def f(x):\n    y = [t * 2 for t in range(3)]\n    return x\n", "list comprehensions", 2, None),
    ("def f(x):\n    y = x\n    yield y\n", "generators (`yield`)", 3, None),
    ("G = 1\n\ndef f(x):\n    global G\n    G = x\n    return x\n", "`global` is not supported", 4, None),
    ("def f(x):\n    class A:\n        pass\n    return x\n", "class definitions", 2, None),
    ("def f(x):\n    def g(t):\n        return t\n    return g(x)\n", "nested function definitions", 2, None),
    ("def f(*xs):\n    return 0\n", "`*args` parameters", 1, None),
    ("def f(x, **kw):\n    return x\n", "`**kwargs` parameters", 1, None),
    ("def f(x, *, y):\n    return x\n", "keyword-only", 1, None),
    ("def f(x, y=2):\n    return x\n", "default parameter values", 1, None),
    ("def f(x):\n    s = f'{x}'\n    return x\n", "f-strings", 2, None),
    ("def f(x):\n    y = x\n    del y\n    return x\n", "`del` is not supported", 3, None),
    ("def f(x):\n    import math\n    return x\n", "`import` inside a script", 2, None),
    ("def f(x):\n    if (y := x) > 0:\n        return y\n    return x\n", "assignment expressions", 2, None),
    ("def f(x):\n    if x > 0:\n        raise ValueError(x)\n    return x\n",
     "an exception's arguments must be constants", 3, (1,)),
    ("def f(x):\n    if x > 0:\n        raise 3\n    return x\n", "`raise` takes an exception class", 3, (1,)),
    ("def f(x):\n    raise ValueError('no') from ValueError\n", "only supported with `from None`", 2, (1,)),
    ("def f(x):\n    x.a = 1.0\n    return x\n", "setting attributes is not supported", 2, None),
    ("def f(x):\n    d = {'a': x}\n    return x\n", "dict literals", 2, None),
    ("def f(x):\n    s = {x}\n    return x\n", "set literals", 2, None),
    ("def f(x):\n    match x:\n        case 1:\n            return 1\n    return 0\n", "`match` statements", 2, None),
    ("def f(x):\n    return g(*x)\n", "`*` unpacking", 2, None),
    # errors found when the graph is built (first call)
    ("def f(x):\n    a = b = []\n    return x\n", "a list can be stored in one variable", 2, (1,)),
    ("def f(x):\n    print(x)\n    return x\n", "print() is not supported", 2, (1,)),
    ("def f(x, y):\n    if x is y:\n        return 0\n    return x\n",
     "the `is` comparison is only supported against None", 2, (1, 2)),
    ("def f(x):\n    if x in (1, 2):\n        return 0\n    return 1\n",
     "`in` is supported for a number on the left", 2, (np.ones(3),)),
    ("def f(n):\n    s = 0\n    for i in range(n):\n        s = s + 0.5\n    return s\n",
     "variable `s` has different types on different paths", 4, (3,)),
    ("def f(x):\n    if x > 0:\n        y = 1\n    else:\n        y = 1.5\n    return y\n",
     "variable `y` has different types on different paths", 6, (1,)),
    ("def f(x):\n    for k in (1, 2.5):\n        x = x + k\n    return x\n",
     "the items this `for` loop walks have different types (f64, i64)", 2, (1,)),
    ("def f(x):\n    for k in {1, 2}:\n        x = x + k\n    return x\n", "set literals", 2, None),
    ("def f(x):\n    if x:\n        return 1\n    return 0\n",
     "the truth value of a tensor of shape [x_0] is ambiguous", 2, (np.ones(3),)),
    ("def f(a, b):\n    return a ** b\n", "`**` on integers needs a constant exponent", 2, (2, 3)),
    ("def f(a, b):\n    return a & b\n", "`&` needs integers or bools, not f64", 2, (2.0, 3)),
    ("def f(x):\n    return x.tolist()\n", "tensor attribute `.tolist` is not supported", 2, (np.ones(3),)),
    ("def f(x):\n    if x > 0:\n        return x, x\n    return x\n",
     "this return gives 1 values but an earlier one gives 2", 4, (1,)),
    ("def f(x):\n    if x > 0:\n        return 1\n    return 2.5\n",
     "this return gives f64 but an earlier return gives i64", 4, (1,)),
    ("def f(x):\n    return nx.no_such_op(x)\n", "`nx.no_such_op` is not an op of the registry", 2, (1.0,)),
    ("def f(x):\n    return undefined_name + x\n", "name `undefined_name` is not defined", 2, (1,)),
    ("def f(x):\n    return x[0, 1]\n", "too many indices (2) for a tensor of rank 1", 2, (np.ones(3),)),
    ("def f(x):\n    a, b = x, x, x\n    return a\n", "cannot unpack 3 values into 2 names", 2, (1,)),
    ("def f(x):\n    for i in range(1.5):\n        x = x + i\n    return x\n", "range() needs ints", 2, (1,)),
    ("def f(x):\n    t = (x, x)\n    if x > 0:\n        t = x\n    return x\n", "`t` holds a tuple elsewhere", 4, (1,)),
    ("def f(x):\n    t = (x, x)\n    if x > 0:\n        t = (x, x, x)\n    return t[0]\n",
     "`t` holds a tuple of another length elsewhere", 4, (1,)),
    ("def f(x):\n    return 2 ** 70 + x\n", "does not fit in int64", 2, (1,)),
]


@pytest.mark.parametrize("source,message,line,args", CASES, ids=[c[1][:40] for c in CASES])
def test_unsupported_construct(source: str, message: str, line: int, args: tuple | None) -> None:
    with pytest.raises(ScriptError) as info:
        f = script_source(source, "f", {"nx": nx, "np": np})
        assert args is not None, "expected an error at decoration"
        f(*args)
    err = info.value
    text = str(err)
    assert message in text, text
    assert err.line == line, text
    assert "^" in text and "instead:" in text or "undefined" in text, text
    quoted = source.splitlines()[line - 1].rstrip()
    assert quoted in text, text  # the source line is quoted


def test_error_points_at_column() -> None:
    src = "def f(x):\n    y = x + 1\n    z = [t for t in range(3)]\n    return y\n"
    with pytest.raises(ScriptError) as info:
        script_source(src, "f")
    err = info.value
    assert (err.line, err.col) == (3, 8)
    lines = str(err).splitlines()
    caret = next(i for i, ln in enumerate(lines) if ln.strip() == "^")
    assert lines[caret].index("^") == lines[caret - 1].index("[")


def test_decorated_function_error_gives_file_line() -> None:
    with pytest.raises(ScriptError) as info:

        @nx.script
        def bad(x):
            with open("x"):
                pass
            return x

    err = info.value
    assert err.file.endswith("test_script_errors.py")
    assert 'with open("x"):' in str(err)
    import inspect

    assert err.line == inspect.currentframe().f_lineno - 9  # type: ignore[union-attr]


def test_runtime_assert_raises_with_message() -> None:
    f = script_source("def f(x):\n    assert x > 0, 'x must be positive'\n    return x * 2\n", "f")
    assert f(3) == 6
    with pytest.raises(AssertionError) as info:  # Python's exception and arguments
        f(-1)
    assert info.value.args == ("x must be positive",)
    assert "line 2" in "".join(info.value.__notes__)  # the assert's source line


def test_assert_without_message_raises_as_python() -> None:
    f = script_source(textwrap.dedent("""
        def f(x):
            assert x < 10
            return x
    """), "f")
    with pytest.raises(AssertionError) as info:  # as Python: no message of its own
        f(11)
    assert info.value.args == () and "line 3" in "".join(info.value.__notes__)


def test_range_zero_step_at_runtime() -> None:
    f = script_source("def f(n, s):\n    t = 0\n    for i in range(0, n, s):\n        t = t + i\n    return t\n", "f")
    assert f(10, 3) == f.fn(10, 3) == 18
    assert f(-10, -3) == f.fn(-10, -3)
    with pytest.raises(nx.NexusRuntimeError, match="must not be zero"):
        f(10, 0)


def test_index_out_of_range_raises() -> None:
    f = script_source("def f(x, i):\n    return x[i]\n", "f")
    assert f(np.arange(3.0), -1) == 2.0
    with pytest.raises(nx.NexusRuntimeError):
        f(np.arange(3.0), 5)


def test_nonlocal_is_rejected_at_decoration() -> None:
    v = 1

    def make() -> None:
        @nx.script
        def f(x):
            nonlocal v
            v = x
            return x

    with pytest.raises(ScriptError, match="`nonlocal` is not supported") as info:
        make()
    assert "nonlocal v" in str(info.value) and "instead:" in str(info.value)
    assert v == 1


XS = [1, 2]


def test_mutating_a_python_list_is_rejected() -> None:
    f = script_source("def f(x):\n    XS.append(x)\n    return x\n", "f", {"XS": XS})
    with pytest.raises(ScriptError, match="global `XS` is a list") as info:
        f(1)
    assert info.value.line == 2 and "instead:" in str(info.value)


def test_assert_survives_optimization() -> None:
    f = script_source("def f(x):\n    y = x * 2\n    assert y < 10, 'too big'\n    return x\n", "f")
    assert f(1) == 1
    g = optimize(f.graph.clone()[0])
    assert nx.run(g, 2) == 2
    with pytest.raises(nx.NexusRuntimeError, match="too big"):
        nx.run(g, 7)


MATMUL_SRC = 'def f(a: nx.Tensor["N", 3], b: nx.Tensor[4, "M"]):\n    c = a * 2.0\n    return {expr}\n'


@pytest.mark.parametrize("expr", ["c @ b", "nx.matmul(c, b)", "np.matmul(c, b)"])
def test_matmul_shape_mismatch_names_shapes_and_dims(expr: str) -> None:
    """A shape error is not a dtype error: the message gives both shapes, the two dims that
    must agree and where they are, and no hint about float(...)/int(...)."""
    f = script_source(MATMUL_SRC.format(expr=expr), "f", {"nx": nx, "np": np})
    with pytest.raises(ScriptError) as info:
        f(np.ones((2, 3)), np.ones((4, 5)))
    err = info.value
    text = str(err)
    assert err.line == 3, text
    assert "f64[N, 3]" in text and "f64[4, M]" in text, text
    assert "dim 1 of the left operand is 3" in text and "dim 0 of the right operand is 4" in text, text
    assert "float(" not in text and "int(" not in text, text
    lines = text.splitlines()
    caret = next(i for i, ln in enumerate(lines) if ln.strip() == "^")
    assert lines[caret - 1].strip() == f"return {expr}"
    assert lines[caret].index("^") == lines[caret - 1].index(expr)


def test_matmul_shape_mismatch_hints_a_transpose_when_one_fits() -> None:
    src = 'def f(a: nx.Tensor["N", 3], b: nx.Tensor[4, 3]):\n    return a @ b\n'
    with pytest.raises(ScriptError) as info:
        script_source(src, "f", {"nx": nx})(np.ones((2, 3)), np.ones((4, 3)))
    text = str(info.value)
    assert "dim 1 of the left operand is 3" in text and "dim 0 of the right operand is 4" in text, text
    assert "instead:" in text and "b.T" in text, text
    # the hint is right: with it the script runs, and gives NumPy's result
    g = script_source(src.replace("a @ b", "a @ b.T"), "f", {"nx": nx})
    a, b = np.arange(6.0).reshape(2, 3), np.arange(12.0).reshape(4, 3)
    np.testing.assert_allclose(g(a, b), a @ b.T)


def test_matmul_batch_dims_that_do_not_broadcast() -> None:
    src = 'def f(a: nx.Tensor[2, "N", 3], b: nx.Tensor[5, 3, "M"]):\n    return a @ b\n'
    with pytest.raises(ScriptError) as info:
        script_source(src, "f", {"nx": nx})(np.ones((2, 4, 3)), np.ones((5, 3, 6)))
    text = str(info.value)
    assert "f64[2, N, 3]" in text and "f64[5, 3, M]" in text and "batch dims [2] and [5]" in text, text
    assert "float(" not in text, text


def test_broadcast_mismatch_has_no_conversion_hint() -> None:
    src = 'def f(a: nx.Tensor[3], b: nx.Tensor[4]):\n    return a + b\n'
    with pytest.raises(ScriptError) as info:
        script_source(src, "f", {"nx": nx})(np.ones(3), np.ones(4))
    text = str(info.value)
    assert "[3]" in text and "[4]" in text and "float(" not in text, text


def test_dtype_error_keeps_the_conversion_hint() -> None:
    src = "def f(a):\n    return nx.relu(a)\n"
    with pytest.raises(ScriptError) as info:
        script_source(src, "f", {"nx": nx})(np.ones(2, bool))
    assert "float(" in str(info.value), str(info.value)
