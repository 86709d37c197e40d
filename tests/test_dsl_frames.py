"""Rebinding Python variables of running frames (nexus.frontend.dsl.frames), on the
interpreter the suite runs on.

Before 3.13 ``frame.f_locals`` of a function is a snapshot and a write reaches the frame
only through ``PyFrame_LocalsToFast``; from 3.13 on it is PEP 667's write-through proxy.
Each path runs on its own interpreter (.ci/run runs this file on 3.11, 3.12 and 3.13),
for every kind of scope the DSL meets: function locals, closure cells, a nested function's
free variables, generator frames, comprehensions (separate frames on 3.11, inlined into
the function by PEP 709 from 3.12 on), class bodies and modules.  The DSL tests build the
same programs as plain Python and compare."""

from __future__ import annotations

import sys
import types
from collections.abc import Iterator
from typing import Any

import numpy as np

import nexus as nx
from nexus.frontend.dsl import frames as dsl_frames
from nexus.frontend.dsl.frames import frame_locals, set_frame_locals

PEP_667 = sys.version_info >= (3, 13)


def rebind(**updates: Any) -> None:
    """Rebind variables of the caller's frame, as the DSL rebinds its user's frame."""
    set_frame_locals(sys._getframe(1), updates)


# --- the path this interpreter takes ---------------------------------------------------
def test_this_interpreter_takes_its_own_path() -> None:
    f_locals = sys._getframe().f_locals
    if PEP_667:
        assert dsl_frames._locals_to_fast is None
        assert type(f_locals).__name__ == "FrameLocalsProxy"
    else:
        assert dsl_frames._locals_to_fast is not None
        assert type(f_locals) is dict


def test_writing_f_locals_alone_rebinds_only_from_313() -> None:
    """Why there are two paths: before PEP 667 a write to the snapshot is lost."""
    def f() -> int:
        x = 1
        sys._getframe().f_locals["x"] = 2
        return x

    assert f() == (2 if PEP_667 else 1)


# --- each kind of scope ----------------------------------------------------------------
def test_function_locals() -> None:
    def f() -> tuple[Any, ...]:
        x, y = 1, "kept"
        rebind(x=2)
        rebind()  # nothing to rebind: a no-op
        try:
            unbound  # noqa: B018, F821  (still unbound: only named variables are written)
        except UnboundLocalError:
            still_unbound = True
        unbound = 0  # noqa: F841
        return x, y, still_unbound

    assert f() == (2, "kept", True)


def test_snapshot_is_a_copy() -> None:
    x = 1
    snap = frame_locals(sys._getframe())
    snap["x"] = 2
    assert x == 1 and snap["x"] == 2


def test_closure_cell_of_the_frame() -> None:
    def f() -> tuple[int, int]:
        x = 1

        def read() -> int:
            return x

        rebind(x=2)
        return x, read()

    assert f() == (2, 2)


def test_free_variable_of_a_nested_function() -> None:
    def outer() -> tuple[int, int]:
        x = 1

        def inner() -> int:
            nonlocal x
            rebind(x=2)
            return x

        return inner(), x

    assert outer() == (2, 2)


def test_generator_frame_across_yields() -> None:
    def gen() -> Iterator[int]:
        x = 1
        rebind(x=2)
        yield x
        rebind(x=3)
        yield x

    assert list(gen()) == [2, 3]
    assert list(x for x in [1] if (rebind(x=5) or True)) == [5]  # a generator expression's own frame


def test_comprehension_scope() -> None:
    """A variable a comprehension reads (a cell on 3.11, an inlined local from 3.12), and
    a write to the enclosing function while a comprehension runs in it."""
    def f() -> tuple[list[int], int, list[int], list[int]]:
        x, y = 1, 0
        before = [x + k for k in range(2)]
        rebind(x=10)
        frame = sys._getframe()
        seen = [(set_frame_locals(frame, {"y": k}), k)[1] for k in range(3)]
        return [x + k for k in range(2)], y, before, seen

    assert f() == ([10, 11], 2, [1, 2], [0, 1, 2])


def test_class_body_and_module() -> None:
    class C:
        x = 1
        rebind(x=2)
        y = x

    assert (C.x, C.y) == (2, 2)
    module = types.ModuleType("nexus_test_rebind")
    module.__dict__["rebind"] = rebind
    exec("x = 1\nrebind(x=2)\ny = x\n", module.__dict__)  # noqa: S102  (a module frame of our own)
    assert (module.x, module.y) == (2, 2)


# --- the DSL in those scopes, against plain Python -------------------------------------
def helper_loop(x: Any, n: Any) -> Any:
    k = nx.constant(0)
    with nx.while_loop(k < n):
        x = x * 2.0
        k = k + 1
    return x


def test_dsl_loop_carries_a_closure_cell_and_a_nonlocal() -> None:
    def build() -> nx.Graph:
        with nx.function("cells") as f:
            s = nx.constant(0.0)
            t = nx.constant(1.0)

            def add(i: Any) -> None:  # rebinds the outer loop-carried s through its cell
                nonlocal s
                s = s + i

            def loop(n: int) -> None:  # opens a region of its own over a free variable
                nonlocal t
                k = nx.constant(0)
                with nx.while_loop(k < n):
                    t = t * 3.0
                    k = k + 1

            i = nx.constant(0.0)
            with nx.while_loop(i < 4.0):
                add(i)
                i = i + 1.0
            loop(2)
            loop(1)
            f.returns(s + t)
        return f.graph

    def python() -> float:
        s, t = 0.0, 1.0
        for i in range(4):
            s = s + i
        for _ in range(3):
            t = t * 3.0
        return s + t

    assert build()() == python() == 33.0


def test_dsl_in_a_generator_frame() -> None:
    def graphs() -> Iterator[nx.Graph]:
        for limit in (5, 10):
            with nx.function("count") as f:
                s = nx.constant(0)
                i = nx.constant(0)
                with nx.while_loop(i < limit):
                    s = s + i
                    yield_point = i  # noqa: F841  (a generator frame holds the region)
                    i = i + 1
                f.returns(s)
            yield f.graph

    assert [int(g()) for g in graphs()] == [sum(range(5)), sum(range(10))]


def test_dsl_with_comprehensions_in_a_loop() -> None:
    """Comprehensions read loop-carried values, call helpers that open regions, and
    shadow a loop-carried name; 3.11 runs them in frames of their own, 3.12 inlines them."""
    def build() -> nx.Graph:
        with nx.function("comprehensions") as f:
            x = nx.constant(1.0)
            n = nx.constant(0)
            with nx.while_loop(n < 2):
                terms = [x * c for c in (1.0, 2.0)]
                ys = [helper_loop(x, 2) for x in terms]  # shadows x; a region per element
                zs = list(helper_loop(x, m) for m in (1, 2))
                x = x + ys[0] + ys[1] + zs[0] + zs[1]
                n = n + 1
            f.returns(x)
        return f.graph

    def python() -> float:
        x = 1.0
        for _ in range(2):
            terms = [x * c for c in (1.0, 2.0)]
            ys = [x * 4.0 for x in terms]
            zs = [x * 2.0, x * 4.0]
            x = x + ys[0] + ys[1] + zs[0] + zs[1]
        return x

    assert build()() == np.float32(python())
