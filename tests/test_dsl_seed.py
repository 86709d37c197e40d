"""Seed 000's DSL examples, built with the with-statement DSL, against plain Python."""

from __future__ import annotations

import numpy as np
import pytest

import nexus as nx
from nexus.ir import parse, print_graph, structurally_equal, verify


def roundtrip(g: nx.Graph) -> nx.Graph:
    """Every DSL graph verifies, prints and parses back to an equal graph."""
    verify(g)
    back = parse(print_graph(g))
    assert structurally_equal(g, back), print_graph(g)
    return back


# --- if/else: d = 6 ---------------------------------------------------------------------
def ifelse_python() -> float:
    a, b = 1.0, 2.0
    c = a + b if a < b else a - b
    return c * 2.0


def build_ifelse() -> nx.Graph:
    with nx.function("ifelse") as f:
        a = nx.constant(1.0, name="a")
        b = nx.constant(2.0, name="b")
        with nx.if_cond(nx.less(a, b)):
            with nx.then():
                c = nx.add(a, b, name="c_then")
            with nx.else_():
                c = nx.subtract(a, b, name="c_else")
        d = nx.multiply(c, 2.0, name="d")
        f.returns(d)
    return f.graph


def test_ifelse_gives_6() -> None:
    g = build_ifelse()
    assert ifelse_python() == 6.0
    assert g() == ifelse_python()
    assert roundtrip(g)() == 6.0
    phis = [n for n in g.nodes() if n.op.name == "Phi"]
    assert len(phis) == 1 and {v.name for v in phis[0].inputs} == {"c_then", "c_else"}


# --- the skip-5 loop: sum = 31 -----------------------------------------------------------
def skip5_python() -> int:
    s, i = 0, 1
    while i <= 10:
        if i == 5:
            i = i + 1
            continue
        s = s + i
        i = i + 1
        if s > 25:
            break
    return s


def build_skip5() -> nx.Graph:
    with nx.function("skip5") as f:
        sum_val = nx.constant(0, dtype="i32", name="sum_init")
        i = nx.constant(1, dtype="i32", name="i_init")
        with nx.while_loop(nx.less_equal(i, 10)):
            with nx.if_cond(nx.equal(i, 5)):
                with nx.then():
                    i = nx.add(i, 1, name="i_increment_skip")
                    nx.continue_()
            sum_val = nx.add(sum_val, i, name="sum_update")
            i = nx.add(i, 1, name="i_increment")
            with nx.if_cond(nx.greater(sum_val, 25)):
                with nx.then():
                    nx.break_()
        f.returns(sum_val)
    return f.graph


def test_skip5_loop_gives_31() -> None:
    g = build_skip5()
    assert skip5_python() == 31
    out = g()
    assert out == 31 and np.asarray(out).dtype == np.int32
    assert roundtrip(g)() == 31


def test_skip5_loop_is_minimal_ssa() -> None:
    g = build_skip5()
    header = next(b for b in g.blocks if b.name and b.name.startswith("while"))
    # two loop-carried variables, nothing else (sum_init, i_init, 10, 5, 1, 25 are not)
    assert sorted(p.name or "" for p in header.phis) == ["i", "sum_val"]
    assert len(header.preds) == 3  # entry, continue, back edge
    # the loop condition's first evaluation (before the loop) is not left behind
    for graph in (g, build_first(50.0)):
        assert not [n for n in graph.nodes() if n.op.kind == "data" and not n.has_uses()]


# --- the first example ------------------------------------------------------------------
def first_python(y: float, max_iterations: int = 10_000) -> float:
    x, limit, step = 5.0, 100.0, 1.0
    n = 0
    while x < limit:
        n += 1
        if n > max_iterations:
            raise RuntimeError("endless")
        s, p = x + y, x * y
        if s > 50.0:
            x = x + step
        else:
            if p < 30.0:
                break
            else:
                continue
    return x * y


def build_first(y_value: float) -> nx.Graph:
    with nx.function("first_example") as f:
        x = nx.constant(5.0, name="x")
        y = nx.constant(y_value, name="y")
        limit = nx.constant(100.0, name="limit")
        step = nx.constant(1.0, name="step")
        with nx.while_loop(nx.less(x, limit)):
            sum_val = nx.add(x, y, name="sum")
            product = nx.multiply(x, y, name="product")
            with nx.if_cond(nx.greater(sum_val, 50.0)):
                with nx.then():
                    x = nx.add(x, step, name="x_update")
                with nx.else_():
                    with nx.if_cond(nx.less(product, 30.0)):
                        with nx.then():
                            nx.break_()
                        with nx.else_():
                            nx.continue_()
        final_result = nx.multiply(x, y, name="final_result")  # after the loop (see seeds/README)
        f.returns(final_result)
    return f.graph


@pytest.mark.parametrize("y, expected", [(50.0, 5000.0), (2.0, 10.0)])
def test_first_example(y: float, expected: float) -> None:
    assert first_python(y) == expected
    g = build_first(y)
    assert g() == np.float32(first_python(y))
    assert roundtrip(g)() == expected


def test_first_example_as_printed_never_ends() -> None:
    with pytest.raises(RuntimeError):
        first_python(10.0)
    g = build_first(10.0)
    with pytest.raises(nx.NexusRuntimeError, match="max_iterations"):
        g(max_iterations=2000)


# --- the loop condition is re-evaluated; the decorator form -------------------------------
def test_condition_built_before_the_loop_is_reevaluated() -> None:
    @nx.graph(n="i64")
    def count(n):
        i = nx.constant(0)
        total = nx.constant(0)
        cond = i < n  # built before the loop, from i and n
        with nx.while_loop(cond):
            total = total + i * i
            i = i + 1
        return total, i

    for n in (0, 1, 7):
        want = sum(k * k for k in range(n)), max(n, 0)
        assert tuple(int(v) for v in count(n)) == want
    roundtrip(count)


def test_callable_condition_and_graph_arguments() -> None:
    @nx.graph
    def collatz(x: nx.TensorType("i64", ())):  # the argument type as an annotation
        steps = nx.constant(0)
        with nx.while_loop(lambda: x != 1):
            with nx.if_cond(x % 2 == 0):
                with nx.then():
                    x = x // 2
                with nx.else_():
                    x = 3 * x + 1
            steps = steps + 1
        return steps

    def collatz_py(x: int) -> int:
        steps = 0
        while x != 1:
            x = x // 2 if x % 2 == 0 else 3 * x + 1
            steps += 1
        return steps

    for x in (1, 6, 27):
        assert int(collatz(x)) == collatz_py(x)


def test_nested_loops_with_break_and_tensors() -> None:
    w = np.arange(9, dtype=np.float32).reshape(3, 3) / 10

    @nx.graph(h=("f32", (3,)), t_max="i64")
    def rnn(h, t_max):
        t = nx.constant(0)
        with nx.while_loop(t < t_max):
            h = nx.tanh(w @ h + 0.5)
            j = nx.constant(0)
            with nx.while_loop(j < 3):
                j = j + 1
                with nx.if_cond(h[0] > 10.0):
                    with nx.then():
                        nx.break_()
                h = h * 0.5
            t = t + 1
        return h

    def rnn_py(h: np.ndarray, t_max: int) -> np.ndarray:
        for _ in range(t_max):
            h = np.tanh(w @ h + np.float32(0.5))
            for _ in range(3):
                if h[0] > 10.0:
                    break
                h = h * np.float32(0.5)
        return h

    h0 = np.array([0.1, -0.2, 0.3], dtype=np.float32)
    np.testing.assert_allclose(rnn(h0, 4), rnn_py(h0, 4), rtol=1e-6)
    roundtrip(rnn)


def test_early_return_from_a_loop() -> None:
    @nx.graph(limit="i64")
    def first_square_over(limit):
        i = nx.constant(1)
        with nx.while_loop(True):
            with nx.if_cond(i * i > limit):
                with nx.then():
                    nx.return_(i)
            i = i + 1

    for limit in (0, 10, 99):
        want = next(i for i in range(1, 100) if i * i > limit)
        assert int(first_square_over(limit)) == want


# --- frames, module level, changing shapes -------------------------------------------------
def helper_loop(x, n):  # type: ignore[no-untyped-def]
    """A helper with its own regions, called inside another graph's loop."""
    k = nx.constant(0)
    with nx.while_loop(k < n):
        with nx.if_cond(x > 100.0):
            with nx.then():
                nx.break_()
        x = x * 2.0
        k = k + 1
    return x


def test_regions_in_helper_functions() -> None:
    @nx.graph(x="f32", m="i64")
    def outer(x, m):
        j = nx.constant(0)
        with nx.while_loop(j < m):
            x = helper_loop(x, 3) + 1.0
            j = j + 1
        return x

    def outer_py(x: float, m: int) -> float:
        for _ in range(m):
            for _ in range(3):
                if x > 100:
                    break
                x = x * 2
            x = x + 1
        return x

    for x, m in [(1.5, 4), (0.25, 0), (-3.0, 2)]:
        assert outer(x, m) == np.float32(outer_py(x, m))


MODULE_LEVEL = '''
import nexus as nx
with nx.function("skip5") as f:
    sum_val = nx.constant(0, dtype="i32", name="sum_init")
    i = nx.constant(1, dtype="i32", name="i_init")
    with nx.while_loop(nx.less_equal(i, 10)):
        with nx.if_cond(nx.equal(i, 5)):
            with nx.then():
                i = nx.add(i, 1, name="i_increment_skip")
                nx.continue_()
        sum_val = nx.add(sum_val, i, name="sum_update")
        i = nx.add(i, 1, name="i_increment")
        with nx.if_cond(nx.greater(sum_val, 25)):
            with nx.then():
                nx.break_()
    f.returns(sum_val)
result = f.graph()
'''


def test_module_level_program(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import runpy

    path = tmp_path / "seed_module.py"
    path.write_text(MODULE_LEVEL)
    ns = runpy.run_path(str(path))
    assert ns["result"] == skip5_python() == 31


def test_shape_growing_in_a_loop_widens_the_phi() -> None:
    @nx.graph(x=("f32", (1,)), n="i64")
    def grow(x, n):
        i = nx.constant(0)
        with nx.while_loop(i < n):
            x = nx.concat(x, x + 1.0, axis=0)
            i = i + 1
        return x

    def grow_py(x: np.ndarray, n: int) -> np.ndarray:
        for _ in range(n):
            x = np.concatenate([x, x + np.float32(1)])
        return x

    x0 = np.ones(1, np.float32)
    np.testing.assert_array_equal(grow(x0, 3), grow_py(x0, 3))
    header_phi = next(p for b in grow.blocks for p in b.phis if p.name == "x")
    assert header_phi.type.shape is not None and not isinstance(header_phi.type.shape[0], int)
    roundtrip(grow)
