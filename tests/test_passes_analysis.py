"""Loop forest, reducibility, liveness, and the analysis cache; LICM on the W3 RNN;
inlining; seed 004 through the default pipeline."""

from __future__ import annotations

import numpy as np
import pytest

from nexus.ir import Graph, TensorType, parse, verify
from nexus.ir.analysis import liveness
from nexus.passes import optimize
from nexus.passes.examples import rnn, rnn_inputs, rnn_reference, seed004
from nexus.passes.loops import IrreducibleError, check_reducible, loop_forest
from nexus.seeds import skip5_loop

NESTED = """
graph @nested {
^entry:
  %0 = Start : (i32,)
  %n = Proj %0 {num = 0} : i32
  %zero = Constant {value = tensor<i32: 0>} : i32
  %one = Constant {value = tensor<i32: 1>} : i32
  %j0 = Jmp : X
^outer(%j0, %oback):
  %i = Phi %zero, %i2 : i32
  %s = Phi %zero, %s_out : i32
  %c1 = Less %i, %n : bool
  %cond1 = Cond %c1 : (X, X)
  %f1 = Proj %cond1 {num = 0} : X
  %t1 = Proj %cond1 {num = 1} : X
^pre(%t1):
  %jp = Jmp : X
^inner(%jp, %iback):
  %k = Phi %zero, %k2 : i32
  %s_in = Phi %s, %s2 : i32
  %c2 = Less %k, %i : bool
  %cond2 = Cond %c2 : (X, X)
  %f2 = Proj %cond2 {num = 0} : X
  %t2 = Proj %cond2 {num = 1} : X
^ibody(%t2):
  %s2 = Add %s_in, %k : i32
  %k2 = Add %k, %one : i32
  %iback = Jmp : X
^olatch(%f2):
  %s_out = Add %s_in, %one : i32
  %i2 = Add %i, %one : i32
  %oback = Jmp : X
^after(%f1):
  %r = Return %s : X
^exit(%r):
  End : X
}
"""

IRREDUCIBLE = """
graph @irr {
^entry:
  %0 = Start : (bool, bool)
  %p = Proj %0 {num = 0} : bool
  %q = Proj %0 {num = 1} : bool
  %cond = Cond %p : (X, X)
  %f = Proj %cond {num = 0} : X
  %t = Proj %cond {num = 1} : X
^a(%t, %ba):
  %ca = Cond %q : (X, X)
  %af = Proj %ca {num = 0} : X
  %at = Proj %ca {num = 1} : X
^b(%f, %at):
  %ba = Jmp : X
^out(%af):
  %r = Return %p : X
^exit(%r):
  End : X
}
"""

# Some samples wrap around int32 on purpose; NumPy warns about that.
pytestmark = pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")


def _names(blocks: object) -> set[str]:
    return {b.name for b in blocks}  # type: ignore[attr-defined]


def test_loop_forest_of_skip5() -> None:
    g = skip5_loop()
    forest = loop_forest(g)
    assert forest.reducible
    (lp,) = forest.loops
    assert lp.header.name == "header"
    assert _names(lp.blocks) == {"header", "body", "skip", "update", "latch"}
    assert _names(lp.latches) == {"skip", "latch"}
    assert {(x.block.name, t.name) for x, t in lp.exits()} == {("header", "after"), ("update", "after")}
    assert lp.preheader() is g.start_block
    assert lp.depth == 1


def test_nested_loops_and_cache() -> None:
    g = parse(NESTED)
    verify(g)
    forest = loop_forest(g)
    assert loop_forest(g) is forest  # cached
    outer, inner = forest.loops
    assert outer.header.name == "outer" and inner.header.name == "inner"
    assert inner.parent is outer and outer.children == [inner]
    assert (outer.depth, inner.depth) == (1, 2)
    assert _names(inner.blocks) == {"inner", "ibody"}
    assert _names(outer.blocks) == {"outer", "pre", "inner", "ibody", "olatch"}
    assert inner.preheader() is not None and inner.preheader().name == "pre"
    assert forest.loop_of(next(b for b in g.blocks if b.name == "ibody")) is inner
    assert [lp.header.name for lp in forest.postorder()] == ["inner", "outer"]
    g.touch()
    assert loop_forest(g) is not forest  # invalidated by a mutation
    # Plain-Python oracle: s += i-th triangular sum plus one per outer step.
    for n in (0, 1, 4):
        s = 0
        for i in range(n):
            for k in range(i):
                s += k
            s += 1
        assert int(g(n)) == s


def test_irreducible_cfg_is_reported() -> None:
    g = parse(IRREDUCIBLE)
    verify(g)
    forest = loop_forest(g)
    assert not forest.reducible
    assert forest.loops == []  # no natural loop: the cycle a <-> b has two entries
    with pytest.raises(IrreducibleError, match="irreducible"):
        check_reducible(g)
    assert "irreducible" in forest.describe()
    # The passes leave an irreducible graph valid and equivalent.
    # (With q true the cycle never ends; with q false control leaves a for out.)
    h, _ = g.clone()
    optimize(h, verify_each=True)
    for p in (True, False):
        assert bool(h(p, False, max_iterations=50)) == bool(g(p, False, max_iterations=50)) == p


def test_liveness_of_skip5() -> None:
    g = skip5_loop()
    live = liveness(g)
    blocks = {b.name: b for b in g.blocks}
    by_name = {n.name: n for n in g.nodes() if n.name}
    assert live.live_out[blocks["entry"]] == {by_name["sum_init"], by_name["i_init"]}
    # Phis of the header are defined there, so they are not live into it.
    assert by_name["i"] not in live.live_in[blocks["header"]]
    assert {by_name["i"], by_name["sum"]} <= live.live_in[blocks["body"]]
    assert by_name["sum_update"] in live.live_out[blocks["update"]]
    assert by_name["i_increment"] in live.live_out[blocks["latch"]]
    assert liveness(g) is live


def test_licm_on_w3_rnn_hoists_invariants() -> None:
    g = rnn(6, 3, 5)
    ins = rnn_inputs(6, 3, 5)
    before = g(*ins)
    stats: dict[str, dict[str, int]] = {}
    optimize(g, "licm", verify_each=True, stats=stats)
    body = next(b for b in g.blocks if b.name == "body")
    hoisted = {n.name for n in g.start_block.members}
    assert {"W_ih_T", "W_hh_T", "bias", "one", "T"} <= hoisted
    assert {n.op.name for n in body.members} == {"Gather", "MatMul", "Add", "Tanh", "Jmp"}
    assert stats["licm"]["hoisted"] == 5
    after = g(*ins)
    np.testing.assert_array_equal(after, before)
    np.testing.assert_allclose(after, rnn_reference(*ins), rtol=1e-5, atol=1e-6)


def test_licm_zero_trip_loop_keeps_trapping_op() -> None:
    # 1 // n with n == 0 inside a loop that never runs must not raise after LICM.
    g = parse("""
graph @z {
^entry:
  %0 = Start : (i64,)
  %n = Proj %0 {num = 0} : i64
  %zero = Constant {value = tensor<i64: 0>} : i64
  %one = Constant {value = tensor<i64: 1>} : i64
  %j0 = Jmp : X
^header(%j0, %back):
  %i = Phi %zero, %i2 : i64
  %acc = Phi %zero, %acc2 : i64
  %c = Less %i, %n : bool
  %cond = Cond %c : (X, X)
  %f = Proj %cond {num = 0} : X
  %t = Proj %cond {num = 1} : X
^body(%t):
  %q = FloorDiv %one, %n : i64
  %acc2 = Add %acc, %q : i64
  %i2 = Add %i, %one : i64
  %back = Jmp : X
^after(%f):
  %r = Return %acc : X
^exit(%r):
  End : X
}""")
    optimize(g, verify_each=True)
    assert int(g(0)) == 0
    assert int(g(3)) == 0


def _callee() -> Graph:
    g = Graph("scale_add", [TensorType("f32", ()), TensorType("f32", ())], ["a", "b"])
    a, b = g.args
    two = g.add("Constant", [], g.start_block, {"value": np.array(2.0, np.float32)})
    out = g.add("Add", [g.add("Mul", [a, two], g.start_block), b], g.start_block)
    r = g.add("Return", [out], g.start_block)
    g.end_block.append_input(r)
    return g


def test_inline_calls_in_a_loop_and_nested() -> None:
    callee = _callee()
    outer = Graph("twice", [TensorType("f32", ())], ["x"])
    (x,) = outer.args
    c1 = outer.add("Call", [x, x], outer.start_block, {"callee": callee})
    c2 = outer.add("Call", [c1, x], outer.start_block, {"callee": callee})
    outer.end_block.append_input(outer.add("Return", [c2], outer.start_block))
    g = Graph("main", [TensorType("f32", ()), TensorType("i32", ())], ["x", "n"])
    x, n = g.args
    e = g.start_block
    zero = g.add("Constant", [], e, {"value": np.array(0, np.int32)})
    header = g.new_block("header", [g.add("Jmp", [], e)])
    i = g.add("Phi", [zero], header)
    acc = g.add("Phi", [x], header)
    cond = g.add("Cond", [g.add("Less", [i, n], header)], header)
    f = g.add("Proj", [cond], header, {"num": 0})
    t = g.add("Proj", [cond], header, {"num": 1})
    body = g.new_block("body", [t])
    call = g.add("Call", [acc], body, {"callee": outer})
    one = g.add("Constant", [], body, {"value": np.array(1, np.int32)})
    header.append_input(g.add("Jmp", [], body))
    i.append_input(g.add("Add", [i, one], body))
    acc.append_input(call)
    after = g.new_block("after", [f])
    g.end_block.append_input(g.add("Return", [acc], after))
    verify(g)

    def oracle(xv: float, nv: int) -> np.float32:
        v = np.float32(xv)
        for _ in range(nv):
            w = v * np.float32(2) + v
            v = w * np.float32(2) + v
        return v

    want = [g(np.float32(0.5), k) for k in range(4)]
    stats: dict[str, dict[str, int]] = {}
    optimize(g, "inline", verify_each=True, stats=stats)
    assert stats["inline"]["inlined"] == 3  # the outer call, then its two inner calls
    assert not any(nd.op.name == "Call" for nd in g.nodes())
    for k in range(4):
        assert g(np.float32(0.5), k) == want[k] == oracle(0.5, k)
    optimize(g, verify_each=True)
    for k in range(4):
        assert g(np.float32(0.5), k) == want[k]


def test_seed004_default_pipeline_single_add() -> None:
    g = seed004()
    optimize(g, verify_each=True)
    data = [n for n in g.nodes() if n.op.kind == "data"]
    assert sorted(n.op.name for n in data) == ["Add", "Constant"]
    add = next(n for n in data if n.op.name == "Add")
    assert add.input(0) is g.args[0]
    assert int(add.input(1).attrs["value"]) == 103 and add.input(1).attrs["value"].dtype == np.int32
    assert len(g.blocks) == 2
    for x in (10, 0, -103, 2**31 - 1):
        assert int(g(x)) == ((x - 2 + 5 + 100 + 2**31) % 2**32) - 2**31
    assert int(g(10)) == 113


def test_effects_and_ordering_edges_are_kept() -> None:
    # An unused Call (effectful) survives DCE; nodes ordered by deps are neither merged,
    # removed nor hoisted, and the deps edges themselves survive every pass.
    g = parse("""
graph @fx {
^entry:
  %0 = Start : (f32, i32)
  %x = Proj %0 {num = 0} : f32
  %n = Proj %0 {num = 1} : i32
  %zero = Constant {value = tensor<i32: 0>} : i32
  %one = Constant {value = tensor<i32: 1>} : i32
  %a1 = Mul %x, %x : f32
  %a2 = Mul %x, %x deps(%a1) : f32
  %dead = Exp %x deps(%a2) : f32
  %j0 = Jmp : X
^header(%j0, %back):
  %i = Phi %zero, %i2 : i32
  %c = Less %i, %n : bool
  %cond = Cond %c : (X, X)
  %f = Proj %cond {num = 0} : X
  %t = Proj %cond {num = 1} : X
^body(%t):
  %inv = Neg %x deps(%a1) : f32
  %i2 = Add %i, %one : i32
  %back = Jmp : X
^after(%f):
  %s = Add %a1, %a2 : f32
  %r = Return %s : X
^exit(%r):
  End : X
}""")
    verify(g)
    callee = _callee()
    h = Graph("caller", [TensorType("f32", ())], ["x"])
    call = h.add("Call", [h.args[0], h.args[0]], h.start_block, {"callee": callee})
    h.end_block.append_input(h.add("Return", [h.args[0]], h.start_block))
    optimize(h, "dce,cse,licm,constfold,simplifycfg", verify_each=True)
    assert call.graph is h
    optimize(g, "constfold,cse,dce,licm,simplifycfg,dce", verify_each=True)
    names = {n.name: n for n in g.nodes() if n.name}
    assert {"a1", "a2", "dead", "inv"} <= set(names)
    assert names["a2"].deps == (names["a1"],) and names["dead"].deps == (names["a2"],)
    assert names["inv"].block.name == "body"
    assert float(g(np.float32(3.0), 2)) == 18.0


def test_default_pipeline_folds_seed_ifelse_completely() -> None:
    from nexus.seeds import ifelse

    g = ifelse()
    optimize(g, verify_each=True)
    a, b = 1.0, 2.0  # the seed's program in plain Python
    c = a + b if a < b else a - b
    (ret,) = g.returns
    assert len(g.blocks) == 2 and ret.input(0).op.name == "Constant"
    assert float(ret.input(0).attrs["value"]) == c * 2 == float(g())
