"""Shape inference over CFGs (loops, branches, data-dependent sizes) and call-time binding.

Expected types are written by hand from the programs' meaning; runs of the same graphs
check that the inferred types describe the values actually computed."""

from __future__ import annotations

import numpy as np
import pytest
import sympy

from nexus.ir.binding import BindingError, bind_shapes
from nexus.ir.graph import Graph
from nexus.ir.node import Node
from nexus.ir.types import TensorType, parse_dim, sym
from nexus.ops.check import check_value
from nexus.passes.shapes import ShapeInferenceError, infer_shapes

T, D, H, N = sym("T"), sym("D"), sym("H"), sym("N")


def const(g: Graph, block, value, dtype=np.int64) -> Node:  # type: ignore[no-untyped-def]
    return g.add("Constant", [], block, {"value": np.array(value, dtype)})


def ret(g: Graph, block, *values: Node) -> None:  # type: ignore[no-untyped-def]
    r = g.add("Return", list(values), block)
    g.end_block.append_input(r)


def forget_types(g: Graph) -> None:
    """Make every computed type unknown-rank, so only the pass can bring them back."""
    for n in g.nodes():
        if n.op.name not in ("Start", "End", "Jmp", "Return", "Cond") and isinstance(n.type, TensorType):
            if n not in g.args:
                n.type = TensorType(n.type.dtype, None)


def rnn_graph() -> tuple[Graph, dict[str, Node]]:
    """Seed 001's RNN: h = tanh(W x_t + U h) for t < T, T = DimSize(x_sequence, 0)."""
    g = Graph("rnn", [TensorType("f32", (T, D)), TensorType("f32", (H,)),
                      TensorType("f32", (H, D)), TensorType("f32", (H, H))],
              ["x_sequence", "h0", "W", "U"])
    x, h0, W, U = g.args
    e = g.start_block
    steps = g.add("DimSize", [x], e, {"axis": 0}, name="T")
    t0, one = const(g, e, 0), const(g, e, 1)
    header = g.new_block("header", [g.add("Jmp", [], e)])
    t = g.add("Phi", [t0], header, name="t")
    h = g.add("Phi", [h0], header, name="h")
    cond = g.add("Cond", [g.add("Less", [t, steps], header)], header)
    exit_f = g.add("Proj", [cond], header, {"num": 0})
    body_t = g.add("Proj", [cond], header, {"num": 1})
    body = g.new_block("body", [body_t])
    xt = g.add("Gather", [x, t], body, name="x_t")
    wx = g.add("MatMul", [W, xt], body, name="wx")
    uh = g.add("MatMul", [U, h], body, name="uh")
    h1 = g.add("Tanh", [g.add("Add", [wx, uh], body)], body, name="h_next")
    t1 = g.add("Add", [t, one], body)
    header.append_input(g.add("Jmp", [], body))
    t.append_input(t1)
    h.append_input(h1)
    after = g.new_block("after", [exit_f])
    ret(g, after, h)
    return g, {"x_t": xt, "h": h, "h_next": h1, "t": t, "T": steps}


def test_rnn_infers_h_with_symbolic_t_without_running() -> None:
    g, n = rnn_graph()
    forget_types(g)
    infer_shapes(g)
    assert g.result_types == (TensorType("f32", (H,)),)
    assert n["x_t"].type == TensorType("f32", (D,))
    assert n["h_next"].type == TensorType("f32", (H,))
    assert n["t"].type == TensorType("i64", ())
    assert n["T"].type == TensorType("i64", ())


def test_rnn_types_describe_the_run() -> None:
    g, _ = rnn_graph()
    infer_shapes(g)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((5, 3)).astype(np.float32)
    h0 = np.zeros(4, np.float32)
    W = rng.standard_normal((4, 3)).astype(np.float32)
    U = rng.standard_normal((4, 4)).astype(np.float32)
    env = bind_shapes(g, [x, h0, W, U])
    assert env == {T: 5, D: 3, H: 4}
    out = g(x, h0, W, U)
    want = h0
    for row in x:  # plain NumPy oracle
        want = np.tanh(W @ row + U @ want)
    np.testing.assert_allclose(out, want, rtol=1e-5)
    result_type = g.result_types[0]
    assert isinstance(result_type, TensorType)
    check_value("rnn", TensorType("f32", tuple(sympy.sympify(d).subs(env) for d in result_type.shape or ())), out)


def test_rnn_specialised_arg_types() -> None:
    g, _ = rnn_graph()
    infer_shapes(g, [TensorType("f32", (7, 3)), TensorType("f32", (4,)),
                     TensorType("f32", (4, 3)), TensorType("f32", (4, 4))])
    assert g.result_types == (TensorType("f32", (4,)),)


def test_rnn_bad_specialisation_names_the_node() -> None:
    g, _ = rnn_graph()
    with pytest.raises(ShapeInferenceError, match=r"MatMul %wx in \^body: .*contraction dims differ"):
        infer_shapes(g, [TensorType("f32", (7, 3)), TensorType("f32", (4,)),
                         TensorType("f32", (4, 2)), TensorType("f32", (4, 4))])


def append_rows_graph() -> tuple[Graph, Node]:
    """acc = x[0:0]; for i < n: acc = concat(acc, x[None]) -- one row per iteration."""
    g = Graph("append", [TensorType("f32", (D,)), TensorType("i64", ())], ["row", "n"])
    row, n = g.args
    e = g.start_block
    row2 = g.add("Unsqueeze", [row], e, {"axes": (0,)})
    acc0 = g.add("Slice", [row2, const(g, e, [0]), const(g, e, [0])], e, name="empty")
    i0, one = const(g, e, 0), const(g, e, 1)
    header = g.new_block("header", [g.add("Jmp", [], e)])
    i = g.add("Phi", [i0], header, name="i")
    acc = g.add("Phi", [acc0], header, name="acc")
    cond = g.add("Cond", [g.add("Less", [i, n], header)], header)
    exit_f = g.add("Proj", [cond], header, {"num": 0})
    body = g.new_block("body", [g.add("Proj", [cond], header, {"num": 1})])
    acc1 = g.add("Concat", [acc, row2], body, {"axis": 0}, name="grown")
    i1 = g.add("Add", [i, one], body)
    header.append_input(g.add("Jmp", [], body))
    i.append_input(i1)
    acc.append_input(acc1)
    after = g.new_block("after", [exit_f])
    ret(g, after, acc)
    return g, acc1


def test_concat_in_loop_gets_symbolic_leading_dim() -> None:
    g, grown = append_rows_graph()
    forget_types(g)
    infer_shapes(g)
    (t,) = g.result_types
    assert isinstance(t, TensorType) and t.dtype == "f32" and t.shape is not None
    lead, width = t.shape
    assert width == D
    assert isinstance(lead, sympy.Symbol) and lead not in (D,)
    assert grown.type == TensorType("f32", (lead + 1, D))
    out = g(np.ones(3, np.float32), np.int64(4))
    assert out.shape == (4, 3)


def test_inference_is_idempotent() -> None:
    g, _ = append_rows_graph()
    infer_shapes(g)
    first = [str(n.type) for n in g.nodes()]
    infer_shapes(g)
    assert [str(n.type) for n in g.nodes()] == first


def branch_graph(op: str) -> tuple[Graph, dict[str, Node]]:
    """if DimSize(x, 0) == 4 (or != 4): ... ; the fact N = 4 holds in one branch only."""
    g = Graph("branch", [TensorType("f32", (N, 3))], ["x"])
    (x,) = g.args
    e = g.start_block
    n = g.add("DimSize", [x], e, {"axis": 0})
    c = g.add(op, [n, const(g, e, 4)], e)
    cond = g.add("Cond", [c], e)
    f = g.add("Proj", [cond], e, {"num": 0})
    t = g.add("Proj", [cond], e, {"num": 1})
    then = g.new_block("then", [t])
    a = g.add("Identity", [x], then, name="in_then")
    j1 = g.add("Jmp", [], then)
    other = g.new_block("else", [f])
    b = g.add("Identity", [x], other, name="in_else")
    j2 = g.add("Jmp", [], other)
    join = g.new_block("join", [j1, j2])
    phi = g.add("Phi", [a, b], join, name="merged")
    after = g.add("Identity", [x], join, name="after")
    ret(g, join, phi, after)
    return g, {"then": a, "else": b, "phi": phi, "after": after}


def test_branch_fact_stays_in_its_branch() -> None:
    g, n = branch_graph("Equal")
    infer_shapes(g)
    assert n["then"].type == TensorType("f32", (4, 3))
    assert n["else"].type == TensorType("f32", (N, 3))
    assert n["after"].type == TensorType("f32", (N, 3))
    phi = n["phi"].type
    assert isinstance(phi, TensorType) and phi.shape is not None
    assert phi.shape[1] == 3 and phi.shape[0] not in (4, N)  # joined: a fresh symbol


def test_not_equal_fact_holds_on_the_false_side() -> None:
    g, n = branch_graph("NotEqual")
    infer_shapes(g)
    assert n["then"].type == TensorType("f32", (N, 3))
    assert n["else"].type == TensorType("f32", (4, 3))


def test_shape_values_flow_into_reshape() -> None:
    """Reshape(x, [DimSize(x,0) * 3, -1]) with x: [N, 6, 2] -> [3*N, 4]."""
    g = Graph("r", [TensorType("f32", (N, 6, 2))], ["x"])
    (x,) = g.args
    e = g.start_block
    n3 = g.add("Mul", [g.add("DimSize", [x], e, {"axis": 0}), const(g, e, 3)], e)
    shape = g.add("Concat", [g.add("Unsqueeze", [n3], e, {"axes": (0,)}), const(g, e, [-1])], e, {"axis": 0})
    y = g.add("Reshape", [x, shape], e)
    ret(g, e, y)
    infer_shapes(g)
    assert y.type == TensorType("f32", (parse_dim("3*N"), 4))
    assert g(np.zeros((2, 6, 2), np.float32)).shape == (6, 4)


def test_shape_of_slice_and_range() -> None:
    g = Graph("s", [TensorType("f32", (N, D))], ["x"])
    (x,) = g.args
    e = g.start_block
    s = g.add("ShapeOf", [x], e)
    d = g.add("Gather", [s, const(g, e, 1)], e)
    r = g.add("Range", [const(g, e, 0), d, const(g, e, 1)], e, name="r")
    sl = g.add("Slice", [x, const(g, e, [1]), const(g, e, [2**63 - 1]), const(g, e, [0])], e, name="tail")
    ret(g, e, r, sl)
    infer_shapes(g)
    assert r.type == TensorType("i64", (D,))
    assert isinstance(sl.type, TensorType) and sl.type.shape is not None
    lead, width = sl.type.shape
    assert width == D
    for n in range(5):  # x[1:] has max(n - 1, 0) rows
        assert sympy.sympify(lead).subs(N, n) == max(n - 1, 0)


# --- binding -----------------------------------------------------------------------------
def test_bind_conflict_names_both_arguments_symbol_and_sizes() -> None:
    g, _ = rnn_graph()
    x, h0 = np.zeros((5, 3), np.float32), np.zeros(4, np.float32)
    W, U = np.zeros((4, 3), np.float32), np.zeros((6, 6), np.float32)
    with pytest.raises(BindingError) as e:
        bind_shapes(g, [x, h0, W, U])
    msg = str(e.value)
    assert "'U'" in msg and "'h0'" in msg and "H = 6" in msg and "H = 4" in msg


def test_bind_wrong_rank() -> None:
    g, _ = rnn_graph()
    with pytest.raises(BindingError, match=r"argument 1 'h0' has rank 2 .*f32\[H\] \(rank 1\)"):
        bind_shapes(g, [np.zeros((5, 3), np.float32), np.zeros((4, 1), np.float32),
                        np.zeros((4, 3), np.float32), np.zeros((4, 4), np.float32)])


def test_bind_bad_dtype() -> None:
    g = Graph("f", [TensorType("i64", (N,))], ["idx"])
    with pytest.raises(BindingError, match=r"argument 0 'idx' has dtype float32, the graph takes i64\[N\]"):
        bind_shapes(g, [np.zeros(3, np.float32)])


def test_bind_static_dim_and_expression() -> None:
    g = Graph("f", [TensorType("f32", (N, 4)), TensorType("f32", (parse_dim("2*N"),))], ["a", "b"])
    assert bind_shapes(g, [np.zeros((3, 4)), np.zeros(6)]) == {N: 3}
    with pytest.raises(BindingError, match="size 5 in dim 1"):
        bind_shapes(g, [np.zeros((3, 5)), np.zeros(6)])
    with pytest.raises(BindingError, match=r"2\*N = 6"):
        bind_shapes(g, [np.zeros((3, 4)), np.zeros(7)])
    g2 = Graph("g", [TensorType("f32", (parse_dim("2*N"),))], ["b"])
    assert bind_shapes(g2, [np.zeros(8)]) == {N: 4}


def test_bad_dtype_in_graph_is_a_clear_error() -> None:
    g = Graph("f", [TensorType("f32", (N,)), TensorType("f64", (N,))], ["a", "b"])
    a, b = g.args
    s = g.add("Add", [a, a], g.start_block, name="s")
    ret(g, g.start_block, s)
    s.set_input(1, b)
    with pytest.raises(ShapeInferenceError, match=r"Add %s in \^entry: .*dtype mismatch.*f32.*f64"):
        infer_shapes(g)


@pytest.mark.parametrize("make", [rnn_graph, append_rows_graph, lambda: branch_graph("Equal")],
                         ids=["rnn", "append", "branch"])
def test_inferred_graphs_verify_and_round_trip(make) -> None:  # type: ignore[no-untyped-def]
    from nexus.ir import parse, print_graph, structurally_equal, verify

    g, _ = make()
    infer_shapes(g)
    verify(g)
    text = print_graph(g)
    assert structurally_equal(g, parse(text)), text


def test_seed_graphs_keep_their_scalar_types() -> None:
    from nexus import seeds

    want = {"ifelse": "f32", "skip5_loop": "i32", "first_example": "f32"}
    for name, make in seeds.ALL.items():
        g = infer_shapes(make())
        assert g.result_types == (TensorType(want[name], ()),)


def test_script_rnn_with_named_dims_infers_h() -> None:
    """The same acceptance through the @nx.script frontend (seed 001's annotations)."""
    import nexus as nx

    script = getattr(nx, "script", None)
    if script is None:
        pytest.skip("the @nx.script frontend is not available")

    def rnn(x_sequence: nx.Tensor["T", "D"], h0: nx.Tensor["H"],  # noqa: UP037
            W: nx.Tensor["H", "D"], U: nx.Tensor["H", "H"]):  # type: ignore[no-untyped-def]  # noqa: UP037
        h = h0
        t = 0
        while t < x_sequence.shape[0]:
            h = nx.tanh(W @ x_sequence[t] + U @ h)
            t = t + 1
        return h

    g = script(rnn).graph
    forget_types(g)
    infer_shapes(g)
    assert g.result_types == (TensorType("f32", (H,)),)


def test_call_results_use_the_callers_dims() -> None:
    callee = Graph("double", [TensorType("f32", (N,))], ["x"])
    (x,) = callee.args
    cat = callee.add("Concat", [x, x], callee.start_block, {"axis": 0})
    ret(callee, callee.start_block, cat)
    # The caller's own dim is also called N elsewhere: substitution must not chain.
    g = Graph("caller", [TensorType("f32", (T,)), TensorType("f32", (N,))], ["a", "b"])
    a, b = g.args
    c1 = g.add("Call", [a], g.start_block, {"callee": callee}, name="c1")
    c2 = g.add("Call", [b], g.start_block, {"callee": callee}, name="c2")
    ret(g, g.start_block, c1, c2)
    forget_types(callee)
    forget_types(g)
    infer_shapes(g)
    assert c1.type == TensorType("f32", (2 * T,))
    assert c2.type == TensorType("f32", (2 * N,))
    assert cat.type == TensorType("f32", (2 * N,))
    out1, out2 = g(np.ones(3, np.float32), np.ones(2, np.float32))
    assert out1.shape == (6,) and out2.shape == (4,)


def test_float_constants_reach_the_rules() -> None:
    g = Graph("r", [])
    e = g.start_block
    f = [g.add("Constant", [], e, {"value": np.array(v, np.float32)}) for v in (0.0, 1.0, 0.25)]
    r = g.add("Range", f, e)
    ret(g, e, r)
    forget_types(g)
    infer_shapes(g)
    assert r.type == TensorType("f32", (4,))
