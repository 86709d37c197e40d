"""Golden text-in / text-out tests, one or more per pass.

Each case is an input graph and the expected graph, both written by hand in the text
form; the pass runs on the parsed input and the result must be structurally equal to the
parsed expectation.  Each case is also run before and after on sample inputs, and the
result must verify.
"""

from __future__ import annotations

import numpy as np
import pytest

from nexus.ir import parse, print_graph, structural_diff, verify
from nexus.passes import optimize

CASES: dict[str, tuple[str, str, str, list[tuple]]] = {}

# Some samples wrap around int32 on purpose; NumPy warns about that.
pytestmark = pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")


def case(name: str, pipeline: str, before: str, after: str, samples: list[tuple]) -> None:
    CASES[name] = (pipeline, before, after, samples)


# --- constfold ---------------------------------------------------------------------------
case("constfold_seed004_chain", "constfold,dce", """
graph @seed004 {
^entry:
  %0 = Start : (i32,)
  %input = Proj %0 {num = 0} : i32
  %c2 = Constant {value = tensor<i32: 2>} : i32
  %a = Sub %input, %c2 : i32
  %c5 = Constant {value = tensor<i32: 5>} : i32
  %b = Add %a, %c5 : i32
  %c100 = Constant {value = tensor<i32: 100>} : i32
  %output = Add %b, %c100 : i32
  %r = Return %output : X
^exit(%r):
  End : X
}""", """
graph @seed004 {
^entry:
  %0 = Start : (i32,)
  %input = Proj %0 {num = 0} : i32
  %c = Constant {value = tensor<i32: 103>} : i32
  %output = Add %input, %c : i32
  %r = Return %output : X
^exit(%r):
  End : X
}""", [(10,), (-5,), (2**31 - 50,), (-(2**31),)])

case("constfold_fold_and_float_identities", "constfold,dce", """
graph @f {
^entry:
  %0 = Start : (f32,)
  %x = Proj %0 {num = 0} : f32
  %two = Constant {value = tensor<f32: 2.0>} : f32
  %three = Constant {value = tensor<f32: 3.0>} : f32
  %six = Mul %two, %three : f32
  %one = Constant {value = tensor<f32: 1.0>} : f32
  %x1 = Mul %x, %one : f32
  %zero = Constant {value = tensor<f32: 0.0>} : f32
  %x0 = Add %x1, %zero : f32
  %nz = Constant {value = tensor<f32: -0.0>} : f32
  %xn = Add %x0, %nz : f32
  %y = Mul %xn, %six : f32
  %r = Return %y : X
^exit(%r):
  End : X
}""", """
graph @f {
^entry:
  %0 = Start : (f32,)
  %x = Proj %0 {num = 0} : f32
  %zero = Constant {value = tensor<f32: 0.0>} : f32
  %x0 = Add %x, %zero : f32
  %six = Constant {value = tensor<f32: 6.0>} : f32
  %y = Mul %x0, %six : f32
  %r = Return %y : X
^exit(%r):
  End : X
}""", [(1.5,), (-0.0,), (float("nan"),), (float("inf"),)])

case("constfold_int_identities_keep_div_by_zero", "constfold,dce", """
graph @g {
^entry:
  %0 = Start : (i64,)
  %x = Proj %0 {num = 0} : i64
  %zero = Constant {value = tensor<i64: 0>} : i64
  %xz = Mul %x, %zero : i64
  %s = Add %x, %xz : i64
  %d = Div %s, %zero : i64
  %r = Return %s, %d : X
^exit(%r):
  End : X
}""", """
graph @g {
^entry:
  %0 = Start : (i64,)
  %x = Proj %0 {num = 0} : i64
  %zero = Constant {value = tensor<i64: 0>} : i64
  %d = Div %x, %zero : i64
  %r = Return %x, %d : X
^exit(%r):
  End : X
}""", [])

case("constfold_shape_queries_of_static_shapes", "constfold,dce", """
graph @shp {
^entry:
  %0 = Start : (f32[2, 3],)
  %x = Proj %0 {num = 0} : f32[2, 3]
  %s = ShapeOf %x : i64[2]
  %d = DimSize %x {axis = 1} : i64
  %r = Return %s, %d : X
^exit(%r):
  End : X
}""", """
graph @shp {
^entry:
  %0 = Start : (f32[2, 3],)
  %x = Proj %0 {num = 0} : f32[2, 3]
  %s = Constant {value = tensor<i64[2]: [2, 3]>} : i64[2]
  %d = Constant {value = tensor<i64: 3>} : i64
  %r = Return %s, %d : X
^exit(%r):
  End : X
}""", [(np.zeros((2, 3), np.float32),)])

# --- dce -----------------------------------------------------------------------------------
case("dce_dead_chain_and_dead_phi_cycle", "dce", """
graph @loop {
^entry:
  %0 = Start : (i32,)
  %n = Proj %0 {num = 0} : i32
  %zero = Constant {value = tensor<i32: 0>} : i32
  %one = Constant {value = tensor<i32: 1>} : i32
  %unused = Mul %n, %n : i32
  %j0 = Jmp : X
^header(%j0, %back):
  %i = Phi %zero, %i2 : i32
  %dead = Phi %zero, %dead2 : i32
  %c = Less %i, %n : bool
  %cond = Cond %c : (X, X)
  %f = Proj %cond {num = 0} : X
  %t = Proj %cond {num = 1} : X
^body(%t):
  %i2 = Add %i, %one : i32
  %dead2 = Add %dead, %i : i32
  %back = Jmp : X
^after(%f):
  %r = Return %i : X
^exit(%r):
  End : X
}""", """
graph @loop {
^entry:
  %0 = Start : (i32,)
  %n = Proj %0 {num = 0} : i32
  %zero = Constant {value = tensor<i32: 0>} : i32
  %one = Constant {value = tensor<i32: 1>} : i32
  %j0 = Jmp : X
^header(%j0, %back):
  %i = Phi %zero, %i2 : i32
  %c = Less %i, %n : bool
  %cond = Cond %c : (X, X)
  %f = Proj %cond {num = 0} : X
  %t = Proj %cond {num = 1} : X
^body(%t):
  %i2 = Add %i, %one : i32
  %back = Jmp : X
^after(%f):
  %r = Return %i : X
^exit(%r):
  End : X
}""", [(0,), (7,)])

# --- cse -----------------------------------------------------------------------------------
case("cse_dominating_and_commutative_not_siblings", "cse,dce", """
graph @h {
^entry:
  %0 = Start : (f32, f32, bool)
  %a = Proj %0 {num = 0} : f32
  %b = Proj %0 {num = 1} : f32
  %p = Proj %0 {num = 2} : bool
  %s1 = Add %a, %b : f32
  %cond = Cond %p : (X, X)
  %f = Proj %cond {num = 0} : X
  %t = Proj %cond {num = 1} : X
^then(%t):
  %s2 = Add %b, %a : f32
  %m1 = Mul %s2, %a : f32
  %j1 = Jmp : X
^else(%f):
  %m2 = Mul %s1, %a : f32
  %j2 = Jmp : X
^join(%j1, %j2):
  %v = Phi %m1, %m2 : f32
  %m3 = Mul %s1, %a : f32
  %w = Sub %v, %m3 : f32
  %r = Return %w : X
^exit(%r):
  End : X
}""", """
graph @h {
^entry:
  %0 = Start : (f32, f32, bool)
  %a = Proj %0 {num = 0} : f32
  %b = Proj %0 {num = 1} : f32
  %p = Proj %0 {num = 2} : bool
  %s1 = Add %a, %b : f32
  %cond = Cond %p : (X, X)
  %f = Proj %cond {num = 0} : X
  %t = Proj %cond {num = 1} : X
^then(%t):
  %m1 = Mul %s1, %a : f32
  %j1 = Jmp : X
^else(%f):
  %m2 = Mul %s1, %a : f32
  %j2 = Jmp : X
^join(%j1, %j2):
  %v = Phi %m1, %m2 : f32
  %m3 = Mul %s1, %a : f32
  %w = Sub %v, %m3 : f32
  %r = Return %w : X
^exit(%r):
  End : X
}""", [(1.0, 2.0, True), (3.0, -1.0, False)])

# --- simplifycfg -------------------------------------------------------------------------
case("simplifycfg_constant_branch_merges_to_one_block", "simplifycfg", """
graph @k {
^entry:
  %0 = Start : (f32,)
  %x = Proj %0 {num = 0} : f32
  %yes = Constant {value = tensor<bool: true>} : bool
  %cond = Cond %yes : (X, X)
  %f = Proj %cond {num = 0} : X
  %t = Proj %cond {num = 1} : X
^then(%t):
  %a = Neg %x : f32
  %j1 = Jmp : X
^else(%f):
  %b = Exp %x : f32
  %j2 = Jmp : X
^join(%j1, %j2):
  %v = Phi %a, %b : f32
  %r = Return %v : X
^exit(%r):
  End : X
}""", """
graph @k {
^entry:
  %0 = Start : (f32,)
  %x = Proj %0 {num = 0} : f32
  %yes = Constant {value = tensor<bool: true>} : bool
  %a = Neg %x : f32
  %r = Return %a : X
^exit(%r):
  End : X
}""", [(2.0,)])

case("simplifycfg_thread_empty_block", "simplifycfg", """
graph @m {
^entry:
  %0 = Start : (f32, bool)
  %x = Proj %0 {num = 0} : f32
  %p = Proj %0 {num = 1} : bool
  %cond = Cond %p : (X, X)
  %f = Proj %cond {num = 0} : X
  %t = Proj %cond {num = 1} : X
^then(%t):
  %a = Neg %x : f32
  %j1 = Jmp : X
^else(%f):
  %j2 = Jmp : X
^join(%j1, %j2):
  %v = Phi %a, %x : f32
  %r = Return %v : X
^exit(%r):
  End : X
}""", """
graph @m {
^entry:
  %0 = Start : (f32, bool)
  %x = Proj %0 {num = 0} : f32
  %p = Proj %0 {num = 1} : bool
  %cond = Cond %p : (X, X)
  %f = Proj %cond {num = 0} : X
  %t = Proj %cond {num = 1} : X
^then(%t):
  %a = Neg %x : f32
  %j1 = Jmp : X
^join(%j1, %f):
  %v = Phi %a, %x : f32
  %r = Return %v : X
^exit(%r):
  End : X
}""", [(2.0, True), (2.0, False)])

case("simplifycfg_trivial_phi_and_same_target_cond", "simplifycfg", """
graph @n {
^entry:
  %0 = Start : (i32, bool)
  %x = Proj %0 {num = 0} : i32
  %p = Proj %0 {num = 1} : bool
  %cond = Cond %p : (X, X)
  %f = Proj %cond {num = 0} : X
  %t = Proj %cond {num = 1} : X
^join(%f, %t):
  %v = Phi %x, %x : i32
  %w = Add %v, %v : i32
  %r = Return %w : X
^exit(%r):
  End : X
}""", """
graph @n {
^entry:
  %0 = Start : (i32, bool)
  %x = Proj %0 {num = 0} : i32
  %p = Proj %0 {num = 1} : bool
  %w = Add %x, %x : i32
  %r = Return %w : X
^exit(%r):
  End : X
}""", [(3, True), (4, False)])

# --- licm ----------------------------------------------------------------------------------
case("licm_hoists_invariants_not_trapping_int_div", "licm", """
graph @l {
^entry:
  %0 = Start : (f32, f32, i64)
  %a = Proj %0 {num = 0} : f32
  %b = Proj %0 {num = 1} : f32
  %n = Proj %0 {num = 2} : i64
  %zero = Constant {value = tensor<i64: 0>} : i64
  %acc0 = Constant {value = tensor<f32: 0.0>} : f32
  %j0 = Jmp : X
^header(%j0, %back):
  %i = Phi %zero, %i2 : i64
  %acc = Phi %acc0, %acc2 : f32
  %c = Less %i, %n : bool
  %cond = Cond %c : (X, X)
  %f = Proj %cond {num = 0} : X
  %t = Proj %cond {num = 1} : X
^body(%t):
  %ab = Mul %a, %b : f32
  %e = Exp %ab : f32
  %acc2 = Add %acc, %e : f32
  %one = Constant {value = tensor<i64: 1>} : i64
  %q = Div %one, %n : i64
  %i2 = Add %i, %one : i64
  %back = Jmp : X
^after(%f):
  %r = Return %acc : X
^exit(%r):
  End : X
}""", """
graph @l {
^entry:
  %0 = Start : (f32, f32, i64)
  %a = Proj %0 {num = 0} : f32
  %b = Proj %0 {num = 1} : f32
  %n = Proj %0 {num = 2} : i64
  %zero = Constant {value = tensor<i64: 0>} : i64
  %acc0 = Constant {value = tensor<f32: 0.0>} : f32
  %ab = Mul %a, %b : f32
  %e = Exp %ab : f32
  %one = Constant {value = tensor<i64: 1>} : i64
  %j0 = Jmp : X
^header(%j0, %back):
  %i = Phi %zero, %i2 : i64
  %acc = Phi %acc0, %acc2 : f32
  %c = Less %i, %n : bool
  %cond = Cond %c : (X, X)
  %f = Proj %cond {num = 0} : X
  %t = Proj %cond {num = 1} : X
^body(%t):
  %acc2 = Add %acc, %e : f32
  %q = Div %one, %n : i64
  %i2 = Add %i, %one : i64
  %back = Jmp : X
^after(%f):
  %r = Return %acc : X
^exit(%r):
  End : X
}""", [(0.5, 2.0, 3), (1.0, 1.0, 0)])

case("licm_makes_a_preheader_with_phi", "licm", """
graph @p {
^entry:
  %0 = Start : (f32, bool)
  %a = Proj %0 {num = 0} : f32
  %p = Proj %0 {num = 1} : bool
  %zero = Constant {value = tensor<i32: 0>} : i32
  %five = Constant {value = tensor<i32: 5>} : i32
  %cond0 = Cond %p : (X, X)
  %f0 = Proj %cond0 {num = 0} : X
  %t0 = Proj %cond0 {num = 1} : X
^header(%f0, %t0, %back):
  %i = Phi %zero, %five, %i2 : i32
  %acc = Phi %a, %a, %acc2 : f32
  %ten = Constant {value = tensor<i32: 10>} : i32
  %c = Less %i, %ten : bool
  %cond = Cond %c : (X, X)
  %f = Proj %cond {num = 0} : X
  %t = Proj %cond {num = 1} : X
^body(%t):
  %sq = Mul %a, %a : f32
  %acc2 = Add %acc, %sq : f32
  %one = Constant {value = tensor<i32: 1>} : i32
  %i2 = Add %i, %one : i32
  %back = Jmp : X
^after(%f):
  %r = Return %acc : X
^exit(%r):
  End : X
}""", """
graph @p {
^entry:
  %0 = Start : (f32, bool)
  %a = Proj %0 {num = 0} : f32
  %p = Proj %0 {num = 1} : bool
  %zero = Constant {value = tensor<i32: 0>} : i32
  %five = Constant {value = tensor<i32: 5>} : i32
  %cond0 = Cond %p : (X, X)
  %f0 = Proj %cond0 {num = 0} : X
  %t0 = Proj %cond0 {num = 1} : X
^pre(%f0, %t0):
  %i.pre = Phi %zero, %five : i32
  %ten = Constant {value = tensor<i32: 10>} : i32
  %sq = Mul %a, %a : f32
  %one = Constant {value = tensor<i32: 1>} : i32
  %jp = Jmp : X
^header(%back, %jp):
  %i = Phi %i2, %i.pre : i32
  %acc = Phi %acc2, %a : f32
  %c = Less %i, %ten : bool
  %cond = Cond %c : (X, X)
  %f = Proj %cond {num = 0} : X
  %t = Proj %cond {num = 1} : X
^body(%t):
  %acc2 = Add %acc, %sq : f32
  %i2 = Add %i, %one : i32
  %back = Jmp : X
^after(%f):
  %r = Return %acc : X
^exit(%r):
  End : X
}""", [(0.5, True), (0.5, False)])

# --- inline --------------------------------------------------------------------------------
case("inline_call_with_two_returns", "inline", """
graph @absdiff {
^entry:
  %0 = Start : (f32, f32)
  %x = Proj %0 {num = 0} : f32
  %y = Proj %0 {num = 1} : f32
  %c = Less %x, %y : bool
  %cond = Cond %c : (X, X)
  %f = Proj %cond {num = 0} : X
  %t = Proj %cond {num = 1} : X
^lt(%t):
  %d1 = Sub %y, %x : f32
  %r1 = Return %d1 : X
^ge(%f):
  %d2 = Sub %x, %y : f32
  %r2 = Return %d2 : X
^exit(%r1, %r2):
  End : X
}

graph @main {
^entry:
  %0 = Start : (f32, f32)
  %a = Proj %0 {num = 0} : f32
  %b = Proj %0 {num = 1} : f32
  %two = Constant {value = tensor<f32: 2.0>} : f32
  %a2 = Mul %a, %two : f32
  %d = Call %a2, %b {callee = @absdiff} : f32
  %e = Exp %d : f32
  %r = Return %e : X
^exit(%r):
  End : X
}""", """
graph @main {
^entry:
  %0 = Start : (f32, f32)
  %a = Proj %0 {num = 0} : f32
  %b = Proj %0 {num = 1} : f32
  %two = Constant {value = tensor<f32: 2.0>} : f32
  %a2 = Mul %a, %two : f32
  %j = Jmp : X
^ientry(%j):
  %c = Less %a2, %b : bool
  %cond = Cond %c : (X, X)
  %f = Proj %cond {num = 0} : X
  %t = Proj %cond {num = 1} : X
^lt(%t):
  %d1 = Sub %b, %a2 : f32
  %j1 = Jmp : X
^ge(%f):
  %d2 = Sub %a2, %b : f32
  %j2 = Jmp : X
^cont(%j1, %j2):
  %d = Phi %d1, %d2 : f32
  %e = Exp %d : f32
  %r = Return %e : X
^exit(%r):
  End : X
}""", [(1.0, 3.0), (4.0, 1.0)])


# Adjoint helpers whose input has the target's static shape, and a transpose of a
# transpose (graph-mode autodiff emits both); a real broadcast and a non-identity
# composition stay.
case("constfold_like_and_transpose_pairs", "constfold,dce", """
graph @g {
^entry:
  %0 = Start : (f32[N, 3], f32[N, 3], f32[3], f32[2, 3, 4])
  %a = Proj %0 {num = 0} : f32[N, 3]
  %b = Proj %0 {num = 1} : f32[N, 3]
  %c = Proj %0 {num = 2} : f32[3]
  %x = Proj %0 {num = 3} : f32[2, 3, 4]
  %s = SumToLike %a, %b : f32[N, 3]
  %k = BroadcastLike %s, %b : f32[N, 3]
  %r = ReshapeLike %k, %a : f32[N, 3]
  %u = SumToLike %a, %c : f32[3]
  %t1 = Transpose %a : f32[3, N]
  %t2 = Transpose %t1 {perm = [1, 0]} : f32[N, 3]
  %p1 = Transpose %x {perm = [1, 2, 0]} : f32[3, 4, 2]
  %p2 = Transpose %p1 {perm = [2, 0, 1]} : f32[2, 3, 4]
  %q = Transpose %p1 {perm = [1, 2, 0]} : f32[4, 2, 3]
  %m = Mul %r, %t2 : f32[N, 3]
  %ret = Return %m, %u, %p2, %q : X
^exit(%ret):
  End : X
}""", """
graph @g {
^entry:
  %0 = Start : (f32[N, 3], f32[N, 3], f32[3], f32[2, 3, 4])
  %a = Proj %0 {num = 0} : f32[N, 3]
  %b = Proj %0 {num = 1} : f32[N, 3]
  %c = Proj %0 {num = 2} : f32[3]
  %x = Proj %0 {num = 3} : f32[2, 3, 4]
  %u = SumToLike %a, %c : f32[3]
  %p1 = Transpose %x {perm = [1, 2, 0]} : f32[3, 4, 2]
  %q = Transpose %p1 {perm = [1, 2, 0]} : f32[4, 2, 3]
  %m = Mul %a, %a : f32[N, 3]
  %ret = Return %m, %u, %x, %q : X
^exit(%ret):
  End : X
}""", [(np.arange(6, dtype=np.float32).reshape(2, 3), np.ones((2, 3), np.float32),
        np.ones(3, np.float32), np.arange(24, dtype=np.float32).reshape(2, 3, 4))])


def _run(g, args):  # type: ignore[no-untyped-def]
    try:
        return ("ok", g(*args, max_iterations=10_000))
    except Exception as e:  # noqa: BLE001
        return ("error", type(e).__name__)


@pytest.mark.parametrize("name", sorted(CASES))
def test_golden(name: str) -> None:
    pipeline, before, after, samples = CASES[name]
    g = parse(before)
    verify(g)
    expected_results = [_run(g, s) for s in samples]
    optimize(g, pipeline, verify_each=True)
    expected = parse(after)
    verify(expected)
    diff = structural_diff(g, expected)
    assert not diff, f"{diff}\n--- got ---\n{print_graph(g)}--- expected ---\n{print_graph(expected)}"
    for s, want in zip(samples, expected_results):
        got = _run(g, s)
        assert got[0] == want[0]
        pairs = zip(got[1], want[1]) if isinstance(want[1], tuple) else [(got[1], want[1])]
        for a, b in pairs:
            np.testing.assert_array_equal(a, b)
            assert np.asarray(a).dtype == np.asarray(b).dtype


def test_seed004_sample_oracle() -> None:
    # Plain-Python oracle with int32 wraparound for the golden seed-004 case.
    g = parse(CASES["constfold_seed004_chain"][1])
    optimize(g, "constfold,dce")
    for x in (10, -5, 2**31 - 50, -(2**31)):
        want = ((x - 2 + 5 + 100 + 2**31) % 2**32) - 2**31
        assert int(g(x)) == want
