"""The interpreter against plain Python: seed graphs, Phi edge semantics, parallel copies,
Call, Proj of tuples, argument conversion, errors and the iteration limit."""

from __future__ import annotations

import numpy as np
import pytest

import nexus as nx
from nexus import seeds
from nexus.backends.python.interpreter import source
from nexus.ir.graph import Graph
from nexus.ir.node import Block, Node, SourceLoc
from nexus.ir.types import TensorType


def const(g: Graph, b: Block, value: object, dtype: str = "int64") -> Node:
    return g.add("Constant", [], b, {"value": np.array(value, dtype=dtype)})


def counted_loop(g: Graph, n: Node, carried: list[Node]) -> tuple[Block, Block, list[Node], Node]:
    """A ``for i in range(n)`` skeleton: returns (body, exit, header phis, i)."""
    e = g.start_block
    head = g.new_block("header", [g.add("Jmp", [], e)])
    i = g.add("Phi", [const(g, e, 0)], head, name="i")
    phis = [g.add("Phi", [v], head) for v in carried]
    c = g.add("Cond", [g.add("Less", [i, n], head)], head)
    body = g.new_block("body", [g.add("Proj", [c], head, {"num": 1})])
    exit_ = g.new_block("exit", [g.add("Proj", [c], head, {"num": 0})])
    return body, exit_, phis, i


def close_loop(g: Graph, body_end: Block, phis: list[Node], nexts: list[Node]) -> None:
    head = phis[0].block
    assert head is not None
    head.append_input(g.add("Jmp", [], body_end))
    for p, v in zip(phis, nexts):
        p.append_input(v)


def ret(g: Graph, b: Block, *values: Node) -> None:
    g.end_block.append_input(g.add("Return", list(values), b))


# --- seed graphs ------------------------------------------------------------------------
def py_first_example(y: float) -> float:
    x = 5.0
    while x < 100:
        s, p = x + y, x * y
        if s > 50:
            x = x + 1
        elif p < 30:
            break
    return x * y


@pytest.mark.parametrize("parallel", [None, False, True])
def test_seed_graphs(parallel: bool | None) -> None:
    a, b = 1.0, 2.0
    assert nx.run(seeds.ifelse(), parallel=parallel) == ((a + b) if a < b else (a - b)) * 2
    total, i = 0, 1
    while i <= 10:
        if i == 5:
            i += 1
            continue
        total += i
        i += 1
        if total > 25:
            break
    r = seeds.skip5_loop()(parallel=parallel)
    assert r == total and type(r) is np.int32  # a NumPy scalar of the declared dtype
    for y in (50.0, 2.0):
        assert seeds.first_example(y)(parallel=parallel) == py_first_example(y)


def test_endless_loop_hits_the_iteration_limit() -> None:
    with pytest.raises(nx.NexusRuntimeError, match=r"more than 500 blocks \(max_iterations\).*\^"):
        nx.run(seeds.first_example(10.0), max_iterations=500)
    assert nx.run(seeds.first_example(50.0), max_iterations=10_000) == 5000.0


def test_iteration_limit_counts_blocks_entered() -> None:
    g = seeds.ifelse()  # entry, then, join: three blocks
    assert nx.run(g, max_iterations=3) == 6.0
    with pytest.raises(nx.NexusRuntimeError, match="max_iterations"):
        nx.run(g, max_iterations=2)


# --- Phis -----------------------------------------------------------------------------
def test_parallel_copy_swap_and_rotation() -> None:
    """``a, b = b, a`` and ``x, y, z = y, z, x`` through Phis; a chain ``q = p`` reads the old p."""
    g = Graph("swap", [TensorType("i64", ())])
    e = g.start_block
    init = [const(g, e, v) for v in (1, 2, 10, 20, 30, 7)]
    body, exit_, (a, b, x, y, z, p, q), i = counted_loop(g, g.args[0], [*init, const(g, e, 0)])
    one = const(g, body, 1)
    close_loop(g, body, [i, a, b, x, y, z, p, q], [g.add("Add", [i, one], body), b, a, y, z, x,
                                                    g.add("Add", [p, one], body), p])
    ret(g, exit_, a, b, x, y, z, p, q)

    def py(n: int) -> tuple[int, ...]:
        a, b, x, y, z, p, q = 1, 2, 10, 20, 30, 7, 0
        for _ in range(n):
            a, b, x, y, z, p, q = b, a, y, z, x, p + 1, p
        return a, b, x, y, z, p, q

    for n in range(5):
        assert nx.run(g, n) == py(n)
    assert "parallel copy" in source(g)


def test_phi_selects_by_edge_not_by_predecessor_block() -> None:
    """Both exits of one Cond enter the same block: the Phi must follow the edge."""
    g = Graph("edges", [TensorType("bool", ())])
    e = g.start_block
    c = g.add("Cond", [g.args[0]], e)
    f, t = g.add("Proj", [c], e, {"num": 0}), g.add("Proj", [c], e, {"num": 1})
    join = g.new_block("join", [t, f])
    ret(g, join, g.add("Phi", [const(g, e, 1), const(g, e, 0)], join))
    assert nx.run(g, True) == 1 and nx.run(g, False) == 0


# --- Call and Proj ----------------------------------------------------------------------
def two_results() -> Graph:
    f = Graph("divmod_like", [TensorType("i64", ()), TensorType("i64", ())])
    a, b = f.args
    ret(f, f.start_block, f.add("Add", [a, b], f.start_block), f.add("Mul", [a, b], f.start_block))
    return f


def test_call_and_proj_of_multi_output() -> None:
    f = two_results()
    assert nx.run(f, 3, 4) == (7, 12)
    g = Graph("caller", [TensorType("i64", ()), TensorType("i64", ())])
    e = g.start_block
    call = g.add("Call", list(g.args), e, {"callee": f})
    s, m = g.add("Proj", [call], e, {"num": 0}), g.add("Proj", [call], e, {"num": 1})
    single = Graph("sq", [TensorType("i64", ())])
    ret(single, single.start_block, single.add("Mul", [single.args[0], single.args[0]], single.start_block))
    sq = g.add("Call", [s], e, {"callee": single})
    ret(g, e, g.add("Sub", [sq, m], e))
    for a, b in [(3, 4), (-2, 5), (0, 0)]:
        assert nx.run(g, a, b) == (a + b) ** 2 - a * b
        assert g(a, b, parallel=True) == (a + b) ** 2 - a * b


def test_call_inside_a_loop_and_limit_propagates() -> None:
    f = two_results()
    g = Graph("loop_call", [TensorType("i64", ())])
    e = g.start_block
    body, exit_, (acc,), i = counted_loop(g, g.args[0], [const(g, e, 0)])
    call = g.add("Call", [i, i], body, {"callee": f})
    acc2 = g.add("Add", [acc, g.add("Proj", [call], body, {"num": 1})], body)
    close_loop(g, body, [i, acc], [g.add("Add", [i, const(g, body, 1)], body), acc2])
    ret(g, exit_, acc)
    assert nx.run(g, 10) == sum(k * k for k in range(10))
    endless = Graph("calls_endless")
    ret(endless, endless.start_block, endless.add("Call", [], endless.start_block,
                                                  {"callee": seeds.first_example(10.0)}))
    with pytest.raises(nx.NexusRuntimeError, match="max_iterations"):
        nx.run(endless, max_iterations=1000)


# --- arguments and results ---------------------------------------------------------------
def test_arguments_are_converted_to_declared_dtypes() -> None:
    g = Graph("id", [TensorType("i32", ()), TensorType("f32", (2,))])
    ret(g, g.start_block, *g.args)
    a, b = nx.run(g, 3, np.array([1.5, 2.5]))
    assert type(a) is np.int32 and a == 3
    assert b.dtype == np.float32 and list(b) == [1.5, 2.5]
    with pytest.raises(nx.BindingError, match=r"argument 0 \(%0\): argument of dtype float64 cannot be "
                                                   r"passed as i32"):
        nx.run(g, 1.5, np.zeros(2))
    with pytest.raises(nx.BindingError, match="takes 2 arguments, got 1"):
        nx.run(g, 1)


def test_graph_changes_are_seen() -> None:
    """The prepared code is cached per graph version: an edit takes effect."""
    g = Graph("edit", [TensorType("i64", ())])
    e = g.start_block
    add = g.add("Add", [g.args[0], const(g, e, 1)], e)
    r = g.add("Return", [add], e)
    g.end_block.append_input(r)
    assert nx.run(g, 1) == 2
    mul = g.add("Mul", [g.args[0], const(g, e, 10)], e)
    g.set_input(r, 0, mul)
    assert nx.run(g, 1) == 10


# --- errors ----------------------------------------------------------------------------
def div_loop() -> Graph:
    """q = 100 / (3 - i) for i in range(n): divides by zero when i reaches 3."""
    g = Graph("div_loop", [TensorType("i64", ())])
    e = g.start_block
    body, exit_, (acc,), i = counted_loop(g, g.args[0], [const(g, e, 0)])
    den = g.add("Sub", [const(g, body, 3), i], body)
    q = g.add("Div", [const(g, body, 100), den], body, name="q", loc=SourceLoc("prog.py", 42, 8))
    close_loop(g, body, [i, acc], [g.add("Add", [i, const(g, body, 1)], body), g.add("Add", [acc, q], body)])
    ret(g, exit_, acc)
    return g


@pytest.mark.parametrize("parallel", [False, True])
def test_division_by_zero_names_node_block_and_line(parallel: bool) -> None:
    g = div_loop()
    assert nx.run(g, 3, parallel=parallel) == 100 // 3 + 100 // 2 + 100
    with pytest.raises(nx.NexusRuntimeError) as info:
        nx.run(g, 5, parallel=parallel)
    msg = str(info.value)
    assert msg.startswith("Div %q in ^body (created at prog.py:42:8): ZeroDivisionError")
    assert "division by zero" in msg
    assert info.value.node is not None and info.value.node.name == "q"


@pytest.mark.parametrize("parallel", [False, True])
def test_kernel_error_in_a_parallel_group_names_the_node(parallel: bool) -> None:
    g = Graph("gather", [TensorType("f32", (4,)), TensorType("i64", ())])
    e = g.start_block
    x, k = g.args
    b = g.add("Tanh", [x], e)  # first in the group: runs in this thread; the Gather goes to the pool
    a = g.add("Gather", [x, k], e, name="pick", loc=SourceLoc("m.py", 7))
    ret(g, e, a, b)
    assert nx.run(g, np.arange(4.0), 2, parallel=parallel)[0] == 2.0
    with pytest.raises(nx.NexusRuntimeError, match=r"^Gather %pick in \^entry \(created at m.py:7:0\): IndexError"):
        nx.run(g, np.arange(4.0), 9, parallel=parallel)


def test_missing_terminator_is_reported() -> None:
    g = Graph("open")
    e = g.start_block
    b = g.new_block("dangling", [g.add("Jmp", [], e)])
    const(g, b, 1)
    with pytest.raises(nx.NexusRuntimeError, match=r"block \^dangling has no terminator"):
        nx.run(g)


def test_odd_names_do_not_break_the_generated_code() -> None:
    g = Graph("odd name's \"graph\"", [TensorType("i64", ())])
    e = g.start_block
    b = g.new_block("blk'\n\"x", [g.add("Jmp", [], e)])
    v = g.add("Add", [g.args[0], const(g, b, 1)], b, name="v'\n#1")
    ret(g, b, v)
    assert nx.run(g, 1) == 2 and nx.run(g, 1, max_iterations=5) == 2
    h = Graph("no'term")
    h.new_block("open'\n", [h.add("Jmp", [], h.start_block)])
    with pytest.raises(nx.NexusRuntimeError, match="has no terminator"):
        nx.run(h)


def test_deeply_nested_conditions_compile() -> None:
    """80 nested ifs: inlining stops before CPython's indentation limit."""
    g = Graph("deep", [TensorType("f64", ())])
    b = g.start_block
    for k in range(80):
        c = g.add("Cond", [g.add("Greater", [g.args[0], const(g, b, float(k), "float64")], b)], b)
        out = g.new_block(f"ret{k}", [g.add("Proj", [c], b, {"num": 0})])
        ret(g, out, const(g, out, k))
        b = g.new_block(f"next{k}", [g.add("Proj", [c], b, {"num": 1})])
    ret(g, b, const(g, b, 80))

    def py(x: float) -> int:
        return next((k for k in range(80) if not x > k), 80)

    for x in (-1.0, 0.5, 50.5, 79.0, 1e9):
        assert nx.run(g, x) == py(x)


@pytest.mark.parametrize("parallel", [False, True])
def test_proj_of_multi_output_ops(parallel: bool) -> None:
    """Split and TopK return tuples; Proj picks their parts as data."""
    g = Graph("parts", [TensorType("f32", (6,))])
    e = g.start_block
    x = g.args[0]
    split = g.add("Split", [x], e, {"num_outputs": 3})
    p0, p1, p2 = (g.add("Proj", [split], e, {"num": k}) for k in range(3))
    topk = g.add("TopK", [x, const(g, e, 2)], e)
    vals, idx = g.add("Proj", [topk], e, {"num": 0}), g.add("Proj", [topk], e, {"num": 1})
    ret(g, e, g.add("Sub", [g.add("Mul", [p0, p2], e), p1], e), vals, idx)
    xv = np.array([3.0, -1.0, 7.0, 2.0, 5.0, 0.5], np.float32)
    a, b, c = np.split(xv, 3)
    got, top_vals, top_idx = nx.run(g, xv, parallel=parallel)
    np.testing.assert_array_equal(got, a * c - b)
    order = np.argsort(-xv, kind="stable")[:2]
    np.testing.assert_array_equal(top_vals, xv[order])
    np.testing.assert_array_equal(top_idx, order)


def test_return_of_no_values_gives_an_empty_tuple() -> None:
    # A graph run only for its effects: the reference semantics return ().
    g = Graph("nothing")
    r = g.add("Return", [], g.start_block)
    g.end_block.append_input(r)
    nx.verify(g)
    assert nx.run(g) == ()


def test_run_binds_symbolic_dims_and_names_both_arguments() -> None:
    g = Graph("pair", [TensorType("f32", ("N",)), TensorType("f32", ("N",))], ["x", "y"])
    r = g.add("Return", [g.add("Add", [g.args[0], g.args[1]], g.start_block)], g.start_block)
    g.end_block.append_input(r)
    np.testing.assert_array_equal(nx.run(g, np.ones(3, np.float32), np.ones(3, np.float32)), np.full(3, 2.0))
    with pytest.raises(TypeError) as info:
        nx.run(g, np.ones(3, np.float32), np.ones(4, np.float32))
    msg = str(info.value)
    assert "'x'" in msg and "'y'" in msg and "N" in msg and "3" in msg and "4" in msg
    with pytest.raises(TypeError, match="rank"):
        nx.run(g, np.ones((3, 1), np.float32), np.ones(3, np.float32))


def test_dims_checked_inline_agree_with_bind_shapes() -> None:
    # The inline check and the solver must accept and reject the same calls.
    from nexus.ir.binding import BindingError, bind_shapes

    g = Graph("mm", [TensorType("f32", ("N", "K")), TensorType("f32", ("K", 3))], ["a", "b"])
    r = g.add("Return", [g.add("MatMul", [g.args[0], g.args[1]], g.start_block)], g.start_block)
    g.end_block.append_input(r)
    rng = np.random.default_rng(0)
    for shape_a, shape_b in [((2, 4), (4, 3)), ((2, 4), (5, 3)), ((2, 4), (4, 2)), ((0, 4), (4, 3)), ((4,), (4, 3))]:
        a, b = rng.random(shape_a, dtype=np.float32), rng.random(shape_b, dtype=np.float32)
        try:
            bind_shapes(g, [a, b])
            solver_ok = True
        except BindingError:
            solver_ok = False
        if solver_ok:
            np.testing.assert_allclose(nx.run(g, a, b), a @ b, rtol=1e-6)
        else:
            with pytest.raises(BindingError):
                nx.run(g, a, b)


def test_shape_arithmetic_of_the_batch_size_is_memoised(monkeypatch: pytest.MonkeyPatch) -> None:
    """The Reshape targets a graph computes from its argument's batch size (DimSize, then
    small integer arithmetic) run once per batch size and are read from the memo after: the
    answers agree with NumPy for batch sizes seen before, new ones, and after the memo
    is emptied (two entries kept); the memoised nodes run only on the calls that fill it."""
    from nexus.backends.python import codegen
    from nexus.backends.python.trace import node_counts

    monkeypatch.setattr(codegen, "MEMO_MIN", 1)
    monkeypatch.setattr(codegen, "MEMO_SIZE", 2)
    g = Graph("memo", [TensorType("f64", ("n", 6, 4))], ["x"])
    b = g.start_block
    x = g.args[0]
    n = g.add("DimSize", [x], b, {"axis": 0})
    twice = g.add("Mul", [n, const(g, b, 2)], b)
    shape = g.add("Concat", [g.add("Reshape", [twice, const(g, b, [1])], b), const(g, b, [3, 4])], b, {"axis": 0})
    y = g.add("Reshape", [x, shape], b)  # [2n, 3, 4]
    flat = g.add("Concat", [g.add("Reshape", [n, const(g, b, [1])], b), const(g, b, [-1])], b, {"axis": 0})
    z = g.add("Reshape", [g.add("Mul", [y, y], b), flat], b)  # [n, 24]
    g.end_block.append_input(g.add("Return", [z, shape], b))
    nx.verify(g)
    assert "_memo0" in source(g)
    exe = nx.compile(g, backend="python")
    rng = np.random.default_rng(3)
    for batch in (1, 2, 1, 3, 5, 1, 2):
        data = rng.standard_normal((batch, 6, 4))
        got, got_shape = exe(data)
        np.testing.assert_array_equal(got, (data.reshape(2 * batch, 3, 4) ** 2).reshape(batch, -1))
        np.testing.assert_array_equal(got_shape, [2 * batch, 3, 4])  # returned: computed on every call
    counts = node_counts(g, np.zeros((7, 6, 4)))  # a new batch size: the memo is filled
    again = node_counts(g, np.zeros((7, 6, 4)))  # then read
    assert counts[twice] == 1 and counts[flat] == 1
    assert again[flat] == 0 and again[twice] == 0 and again[shape] == 1  # the returned shape runs each time
