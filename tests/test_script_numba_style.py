"""Issue 30: control-flow functions of the kind numba's own tests use (SSA corner cases,
flow control, loops over literals, implicit None returns), as a new user would write
them.  Each compiles as a script and gives what plain Python gives, raising where Python
raises (UnboundLocalError) and returning None where Python does.  The oracle is each
function run as plain Python on the same arguments."""

from __future__ import annotations

import copy

import numpy as np
import pytest

from nexus.testing.extras import compiled_script


def unbound_in_one_arm(n: int):
    if n:
        if n > 0:
            c = 0
        return c
    else:
        c += 1  # noqa: F821  (c is never assigned on this path: Python raises here)
        return c


def countdown_marks(marks):
    budget = 1
    i = 0
    total = 0
    while budget > 0 and i < len(marks):
        budget -= 1
        while marks[i]:
            if marks[i] > 0:
                budget += 10
                marks[i] -= 1
            else:
                marks[i] += 1
            total += budget
        total += budget
        i += 1
    return total, budget


def fills_without_return(k: int):
    out = np.zeros(3)
    for i in range(np.uint32(2)):
        out[i] = k
    for _ in range(2, 1):
        out[0] = -1.0


def reshape_twice_in_loop(arr):
    for _ in range(2):
        arr = arr.reshape(6)
        arr = arr.reshape(3, 2) * 2.0
    return arr


def copy_unless_five(x):
    if len(x) == 5:
        return x
    y = x.copy()
    for i in range(len(y)):
        y[i] += 1.0
    return y


def grows_after_first(skip: int, step: int, n: int):
    for i in range(n):
        if i == skip:
            continue
        if i == 0:
            acc = step
        else:
            acc = acc + step
    return acc


def loop_target_rebound(m: int, n: int, block):
    for t in range(1, m):
        for j in range(n):
            t = block * j
            if j == 0:
                first = t
            else:
                first = first + t
    return first


def enumerate_descending(x: int, y: int):
    out = 0
    for i, j in enumerate(range(x, y, -1)):
        out += i * j
    return out


def over_literals(x: int, y: int, s: float):
    out = 0
    for v in [x, y, 7]:
        out += v
    t = 0.0
    for w in (s, 2.5):
        t = t * 3.0 + w
    return out, t


def bound_reset_inside(x: int):
    for _ in range(x):
        x = 0
        for _ in range(x):
            return 1
    return 0


def one_if_equal(x: int, y: int):
    if x == y:
        return 1


def rows_from_lists(image, a: int, b: int):
    out = np.zeros(image.shape)
    for i in range(image.shape[0]):
        if a == 0:
            h = float(i)
        if b == 0:
            h = 2.0 * i
        out[i] = [h, -h, image[i, 0]]
    return out


def membership(x: int, v):
    r = 0
    if x in (1, 2, 5):
        r += 1
    if x not in [3, 4]:
        r += 10
    if float(x) in v:
        r += 100
    if v is not None:
        r += 1000
    return r


def _maybe_double(a):  # noqa: ANN001, ANN202
    if a > 0:
        y = a * 2
    return y


def helper_local_per_call(n: int, b: int):
    s = 0
    for i in range(n):
        s += _maybe_double(b - i)
    return s


def while_else_found(n: int, target: int):
    i = 0
    while i < n:
        if i == target:
            found = i * 10
            break
        i += 1
    else:
        found = -1
    return found


def zip_reversed(n: int, v):
    s = 0.0
    for k, r in zip(reversed(range(n)), v):
        s += k * r
    return s


def shape_in_a_tuple(x, k: int):
    dims = x.shape
    pair = (dims[0], 2.5)
    n, scale = pair
    q, r = divmod(n * k, 4)
    return n * scale + q, r


def tuple_read_before_assigned(n: int):
    s = 0
    for i in range(n):
        if i > 0:
            s += prev[0] * 10 + prev[1]  # noqa: F821  (assigned below, in an earlier iteration)
        prev = (i, i * 2)
    return s, prev[1]


def none_or_value(a: int, x: float):
    if a > 2:
        return None
    if a > 0:
        return x * a
    if a < -3:
        return


def narrow_int_sums(v, w):
    return v.sum(), np.cumsum(v), np.prod(w), (v > 1).sum()


def first_negative(v):
    found = None
    for i in range(len(v)):
        if v[i] < 0:
            found = i
            break
    return found


def best_above(v, t: float):
    best = None
    for i in range(len(v)):
        if v[i] > t and (best is None or v[i] > v[best]):
            best = i
    if best is None:
        return -1
    return best * 10


def running_max_or_none(v):
    m = v[0]
    for e in v:
        if e > 10:
            m = None
        elif m is not None:
            m = max(m, e)
    return m


def none_plus_one(a: int):
    x = None
    if a > 0:
        x = a * 2.5
    return x + 1.0


CASES = [
    (unbound_in_one_arm, [(1,), (0,), (-1,)]),
    (countdown_marks, [(np.array([1, 2]),), (np.array([0, 3]),), (np.array([-2, 1]),)]),
    (fills_without_return, [(2,)]),
    (reshape_twice_in_loop, [(np.arange(6.0).reshape(3, 2),)]),
    (copy_unless_five, [(np.ones(5),), (np.arange(3.0),)]),
    (grows_after_first, [(0, 2, 4), (1, 3, 4), (5, 2, 1), (0, 1, 1)]),
    (loop_target_rebound, [(3, 3, np.ones((1, 2))), (2, 0, np.ones((1, 2)))]),
    (enumerate_descending, [(10, 0), (0, -10), (-10, 10)]),
    (over_literals, [(1, 2, 0.5), (-3, 4, 2.0)]),
    (bound_reset_inside, [(5,), (0,)]),
    (one_if_equal, [(1, 1), (1, 2)]),
    (rows_from_lists, [(np.arange(9.0).reshape(3, 3), 0, 0), (np.arange(9.0).reshape(3, 3), 0, 1),
                       (np.arange(6.0).reshape(2, 3), 1, 1)]),
    (membership, [(x, np.array([0.0, 3.0, 5.0])) for x in range(7)]),
    (helper_local_per_call, [(3, 5), (3, 1), (0, 0)]),
    (while_else_found, [(10, 7), (3, 7)]),
    (zip_reversed, [(3, np.array([1.0, 2.0, 4.0])), (5, np.array([1.0, 2.0]))]),
    (shape_in_a_tuple, [(np.ones(5), 3), (np.ones(2), -3)]),
    (tuple_read_before_assigned, [(3,), (0,), (1,)]),
    (none_or_value, [(3, 1.5), (1, 1.5), (-4, 1.0), (0, 2.0)]),
    (narrow_int_sums, [(np.arange(1, 4, dtype=np.int32), np.arange(1, 4, dtype=np.uint8))]),
    (first_negative, [(np.array([1.0, -2.0, 3.0]),), (np.array([1.0]),)]),
    (best_above, [(np.array([1.0, 5.0, 3.0, 7.0]), 2.0), (np.array([1.0]), 2.0)]),
    (running_max_or_none, [(np.array([1.0, 3.0, 2.0]),), (np.array([1.0, 30.0, 2.0]),)]),
    (none_plus_one, [(1,), (-1,)]),
]


def outcome(fn, args):
    try:
        return True, fn(*copy.deepcopy(args))
    except Exception as e:  # noqa: BLE001  (an exception is an outcome to compare)
        return False, e


def assert_same(want, got):
    if isinstance(want, tuple):
        assert isinstance(got, tuple) and len(got) == len(want), got
        for w, g in zip(want, got):
            assert_same(w, g)
        return
    if want is None:
        assert got is None
        return
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-12)
    assert np.asarray(got).dtype == np.asarray(want).dtype or isinstance(want, (int, float))


@pytest.mark.parametrize("backend", ["python", "llvm", "xla"])
@pytest.mark.parametrize("fn, inputs", CASES, ids=[c[0].__name__ for c in CASES])
def test_numba_style_functions_act_as_in_python(fn, inputs, backend):
    run = compiled_script(fn, backend)
    for args in inputs:
        ok_py, want = outcome(fn, args)
        if backend == "xla" and (not ok_py or want is None):
            continue  # XLA cannot raise on run-time values (see nexus.backends.xla)
        ok_nx, got = outcome(run, args)
        assert ok_py == ok_nx, (args, want, got)
        if ok_py:
            assert_same(want, got)
        elif isinstance(want, TypeError):  # Python's words name the operation on None; ours the variable
            assert isinstance(got, TypeError) and "is None here" in str(got), got
        else:
            assert type(got) is type(want), got
            assert str(want) in str(got)
