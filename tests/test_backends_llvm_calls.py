"""Calls of llvm executables through their CPython entries (nexus.backends.llvm.pyabi):
every argument kind the entries take, those they hand to the Python path, array results
reused only when nobody holds them, failures, threads and reference counts.  The oracle
is plain Python/NumPy running the same function."""

from __future__ import annotations

import sys
import threading
from typing import Any

import numpy as np
import pytest

import nexus as nx
from nexus.backends.base import NexusRuntimeError
from nexus.ir.binding import BindingError
from nexus.ir.types import dtype_of
from nexus.testing.extras import require

require("llvmlite", "llvm")

from nexus.backends.llvm import LLVMExecutable  # noqa: E402
from nexus.backends.llvm.pyabi import supported  # noqa: E402

pytestmark = pytest.mark.skipif(not supported(), reason="objects not laid out as the entries read them")


def seed(n: int) -> int:
    s = 0
    i = 1
    while i <= n:
        if i == 5:
            i += 1
            continue
        s += i
        i += 1
        if s > 25:
            break
    return s


def scaled(x: Any, a: Any) -> Any:
    return x * a + 1


def pick(x: Any, i: int) -> Any:
    return x[i]


def pair(x: Any, y: Any) -> Any:
    return x + y, x.sum()


def one(x: Any) -> Any:
    return (x * 2,)


def _compiled(fn: Any) -> Any:
    return nx.compile(nx.script(fn), backend="llvm")


def test_the_readme_call_runs_through_the_entry() -> None:
    exe = _compiled(seed)
    for n in (10, 0, 3, -4, 10**12):
        got = exe(n)
        assert got == seed(n) and type(got) is int
    assert type(type(exe).__call__).__name__ == "builtin_function_or_method"
    assert exe.graph is not None and exe.graph.name == "seed"


@pytest.mark.parametrize("a", [2, 2.5, True, np.float32(1.5), np.int32(3), np.int64(-2), np.float64(0.25),
                               np.bool_(False), np.int8(-3), np.uint16(7)])
def test_scalar_arguments_of_every_kind(a: Any) -> None:
    exe, ref = _compiled(scaled), nx.compile(nx.script(scaled), backend="python")
    for x in (a, a, 0.5, 3, a):  # new signatures between calls of the same one
        got = exe(x, x)
        assert got == scaled(x, x) and type(got) is type(ref(x, x))  # the script's result types


def test_a_signature_per_argument_class_and_the_graph_last_called() -> None:
    exe = _compiled(scaled)
    x32 = np.arange(5, dtype=np.float32)
    x64 = np.arange(6.0).reshape(2, 3)
    for x, a in [(x32, np.float32(2)), (x64, 2.0), (x32, np.float32(3)), (3, 4), (x64, 0.5)]:
        got, want = exe(x, a), scaled(x, a)
        assert got.dtype == want.dtype if isinstance(want, np.ndarray) else type(got) is type(want)
        np.testing.assert_array_equal(got, want)
        assert [t.dtype for t in exe.graph.arg_types] == [dtype_of(np.asarray(x).dtype),
                                                          dtype_of(np.asarray(a).dtype)]


def test_arguments_the_entry_leaves_to_the_python_path() -> None:
    exe = _compiled(scaled)
    x = np.arange(12.0).reshape(3, 4)
    exe(x, 2.0)
    for arg in (x.T, x[:, ::2], [[1.0, 2.0]], np.asfortranarray(x), np.arange(4)[None, :].astype(float)):
        np.testing.assert_array_equal(exe(arg, 2.0), scaled(np.asarray(arg), 2.0))
    exe(3, 4)
    with pytest.raises(Exception) as python_error:  # an int beyond i64: the python backend's error
        nx.compile(nx.script(scaled), backend="python")(3, 2**70)
    with pytest.raises(type(python_error.value)) as llvm_error:
        exe(3, 2**70)
    assert str(llvm_error.value) == str(python_error.value)


def test_dims_that_must_agree_are_checked_natively() -> None:
    add = nx.script_source('def add(x: nx.Tensor["N"], y: nx.Tensor["N"]):\n    return x + y\n', "add", {"nx": nx})
    exe = nx.compile(add, backend="llvm")
    a, b = np.arange(4.0), np.ones(4)
    np.testing.assert_array_equal(exe(a, b), a + b)
    with pytest.raises(BindingError, match="N"):
        exe(a, np.ones(5))


def test_array_results_are_reused_only_when_let_go() -> None:
    exe = _compiled(scaled)
    x = np.arange(1000.0)
    first = exe(x, 2.0)
    kept = first.copy()
    second = exe(x, 3.0)  # `first` is held: a new array
    assert second is not first
    np.testing.assert_array_equal(first, kept)
    np.testing.assert_array_equal(second, scaled(x, 3.0))
    address = second.ctypes.data
    del second
    third = exe(x, 4.0)  # nobody held the last one: written in place
    assert third.ctypes.data == address
    np.testing.assert_array_equal(third, scaled(x, 4.0))
    view = third[:10]
    del third
    fourth = exe(x, 5.0)  # a view still holds it
    np.testing.assert_array_equal(view, scaled(x, 4.0)[:10])
    np.testing.assert_array_equal(fourth, scaled(x, 5.0))
    assert sys.getrefcount(fourth) == 3  # the name, the argument and the slot of the entry


def test_several_results_and_a_one_tuple() -> None:
    x = np.arange(6.0).reshape(2, 3)
    got = _compiled(pair)(x, x)
    want = pair(x, x)
    assert isinstance(got, tuple) and len(got) == 2
    np.testing.assert_array_equal(got[0], want[0])
    assert got[1] == want[1]
    got1 = _compiled(one)(x)
    assert isinstance(got1, tuple) and len(got1) == 1
    np.testing.assert_array_equal(got1[0], x * 2)


def test_a_failure_raises_what_the_python_backend_raises() -> None:
    exe = _compiled(pick)
    x = np.arange(4.0)
    assert exe(x, 3) == pick(x, 3) and exe(x, -1) == pick(x, -1)
    with pytest.raises(NexusRuntimeError, match="IndexError") as native:
        exe(x, 4)
    with pytest.raises(NexusRuntimeError) as python:
        nx.compile(nx.script(pick), backend="python")(x, 4)
    assert native.value.node is not None and native.value.node.loc == python.value.node.loc
    assert exe(x, 2) == 2.0  # and the next call is fine


def test_graph_executables_return_numpy_scalars() -> None:
    exe = nx.compile(nx.script(seed).graph_for(10), backend="llvm")
    assert isinstance(exe, LLVMExecutable) and exe.entries
    got = exe(10)
    assert got == 31 and type(got) is np.int64
    assert exe(np.int64(3)) == seed(3)
    with pytest.raises(BindingError):
        exe(1.5)


def test_no_references_leak() -> None:
    exe = _compiled(pair)
    x = np.arange(8.0)
    before = sys.getrefcount(x)
    for _ in range(1000):
        exe(x, x)
    assert sys.getrefcount(x) == before
    s = _compiled(seed)
    n = 123456789
    before = sys.getrefcount(n)
    for _ in range(1000):
        s(n)
    assert sys.getrefcount(n) == before


def test_threads_get_arrays_of_their_own() -> None:
    exe = _compiled(scaled)
    x = np.arange(200_000.0)
    exe(x, 1.0)
    bad: list[str] = []

    def work(a: float) -> None:
        want = scaled(x, a)
        for _ in range(30):
            got = exe(x, a)
            if not np.array_equal(got, want):
                bad.append(f"a={a}")

    threads = [threading.Thread(target=work, args=(float(a),)) for a in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not bad
