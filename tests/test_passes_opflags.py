"""Op properties the passes read (``OpDef.may_fail``, ``may_fail_on_int``,
``commutative``) instead of name lists of their own.

The registry test pins the flags to the lists LICM and CSE used before (family lists,
``Gather``/``Reshape``, integer division; the commutative names), with the differences
written out and explained.  The kernels are checked against the flags (a commutative op
gives the same result both ways; an integer-division op raises on a zero divisor only
for integers), and LICM and CSE are checked on graphs whose results plain Python gives.
"""

from __future__ import annotations

import numpy as np
import pytest

import nexus.ops  # noqa: F401  (registers every op family)
from nexus.ir import parse
from nexus.ir.opdef import OpDef, all_ops
from nexus.ops import FAMILIES
from nexus.passes import optimize

# The built-in families (tests elsewhere may register ops of their own).
OPS = {name: op for name, op in all_ops().items() if op.family in (*FAMILIES, "autodiff", "debug")}

# --- the lists the passes used before (the oracle) -------------------------------------
_OLD_SAFE_FAMILIES = {"math", "reduce", "linalg", "shape", "activation", "nn"}
_OLD_MAY_FAIL = {"Gather", "Reshape"}
_OLD_INT_DIV = {"Div", "FloorDiv", "Mod", "Pow"}
_OLD_COMMUTATIVE = {"Add", "Mul", "Maximum", "Minimum", "Equal", "NotEqual", "And", "Or", "Xor"}
# Dropped on purpose: maximum/minimum of +0.0 and -0.0 depend on the order.
NOT_COMMUTATIVE_NOW = {"Maximum", "Minimum"}
# Ops added since: the integer bitwise ops (shifts raise on a negative count).
NEW_COMMUTATIVE = {"BitwiseAnd", "BitwiseOr", "BitwiseXor"}
NEW_INT_MAY_FAIL = {"LeftShift", "RightShift"}


def _old_may_fail(op: OpDef) -> bool:
    return op.name != "Constant" and (op.name in _OLD_MAY_FAIL or op.family not in _OLD_SAFE_FAMILIES)


# Ops of formerly "unknown" families that cannot fail whatever their values.
NOW_SAFE = {"OnesLike", "ZerosLike", "StackNew", "StackPush", "CumProdGrad"}
# Ops of "safe" families whose kernels raise on some values of their shape inputs.
# RoiAlign (added since, family nn): a batch index out of range raises.
NOW_MAY_FAIL = {"Expand", "Tile", "Pad", "ConstantOfShape", "Range", "CheckDims", "Resize", "Append", "RoiAlign"}


def test_may_fail_matches_the_old_lists() -> None:
    old = {name for name, op in OPS.items() if _old_may_fail(op)}
    new = {name for name, op in OPS.items() if op.may_fail}
    assert new == (old - NOW_SAFE) | NOW_MAY_FAIL
    assert NOW_SAFE <= old and not NOW_MAY_FAIL & old  # the differences are real differences
    assert {"Assert", "Slice", "GatherND", "ScatterND", "TopK", "NonZero"} <= new


def test_may_fail_on_int_and_commutative_match_the_old_lists() -> None:
    assert {name for name, op in OPS.items() if op.may_fail_on_int} == _OLD_INT_DIV | NEW_INT_MAY_FAIL
    assert {name for name, op in OPS.items() if op.commutative} == (
        _OLD_COMMUTATIVE - NOT_COMMUTATIVE_NOW) | NEW_COMMUTATIVE
    for op in all_ops().values():  # control ops too: every flag is a plain bool
        assert {type(op.may_fail), type(op.may_fail_on_int), type(op.commutative)} == {bool}, op.name


@pytest.mark.parametrize("name", sorted((_OLD_COMMUTATIVE - NOT_COMMUTATIVE_NOW) | NEW_COMMUTATIVE))
def test_commutative_kernels_ignore_the_order(name: str) -> None:
    op = OPS[name]
    assert len(op.inputs) == 2 and not op.variadic
    rng = np.random.default_rng(0)
    if name in ("And", "Or", "Xor"):
        a, b = rng.random(16) < 0.5, rng.random(16) < 0.5
    elif name in NEW_COMMUTATIVE:
        a, b = rng.integers(-100, 100, 16), rng.integers(-100, 100, 16)
    else:  # signed zeros included: commutative means bit for bit
        a = np.concatenate([rng.integers(-3, 4, 16).astype(np.float64), [0.0, -0.0]])
        b = np.concatenate([rng.integers(-3, 4, 16).astype(np.float64), [-0.0, 0.0]])
    assert op.kernel is not None
    ab, ba = np.asarray(op.kernel(a, b)), np.asarray(op.kernel(b, a))
    np.testing.assert_array_equal(ab, ba)
    if ab.dtype.kind == "f":
        np.testing.assert_array_equal(np.signbit(ab), np.signbit(ba))


@pytest.mark.parametrize("name", sorted(NEW_INT_MAY_FAIL))
def test_shifts_raise_on_a_negative_count(name: str) -> None:
    kernel = OPS[name].kernel
    assert kernel is not None
    with pytest.raises(ValueError, match="negative shift count"):
        kernel(np.array([2, 2], np.int64), np.array([1, -1], np.int64))


@pytest.mark.parametrize("name", sorted(_OLD_INT_DIV))
def test_int_failures_are_int_only(name: str) -> None:
    op = OPS[name]
    assert op.kernel is not None
    bad = np.array([0, -1], np.int64)  # a zero divisor; a negative power
    with pytest.raises((ZeroDivisionError, ValueError)):
        for x in bad:
            op.kernel(np.array([2, 2], np.int64), np.array([x, x], np.int64))
    with np.errstate(all="ignore"):
        op.kernel(np.array([2.0]), bad[:1].astype(np.float64))  # floats give inf/nan


def test_kernels_of_newly_flagged_ops_can_raise() -> None:
    cases = {
        "Expand": (np.ones(3), np.array([2], np.int64)),
        "Tile": (np.ones(2), np.array([-1], np.int64)),
        "ConstantOfShape": (np.array([-1], np.int64),),
        "Range": (np.int64(0), np.int64(3), np.int64(0)),
    }
    for name, args in cases.items():
        kernel = OPS[name].kernel
        assert kernel is not None
        kw = {"value": np.zeros(1)} if name == "ConstantOfShape" else {}
        with pytest.raises((ValueError, ZeroDivisionError, IndexError)):
            kernel(*args, **kw)


_LOOP = """
graph @z {
^entry:
  %0 = Start : (i64,)
  %n = Proj %0 {num = 0} : i64
  %zero = Constant {value = tensor<i64: 0>} : i64
  %one = Constant {value = tensor<i64: 1>} : i64
  %fzero = Constant {value = tensor<f64: 0.0>} : f64
  %fone = Constant {value = tensor<f64: 1.0>} : f64
  %data = Constant {value = tensor<f64[3]: [1.0, 2.0, 4.0]>} : f64[3]
  %j0 = Jmp : X
^header(%j0, %back):
  %i = Phi %zero, %i2 : i64
  %acc = Phi %fzero, %acc2 : f64
  %c = Less %i, %n : bool
  %cond = Cond %c : (X, X)
  %f = Proj %cond {num = 0} : X
  %t = Proj %cond {num = 1} : X
^body(%t):
  BODY
  %acc2 = Add %acc, %q : f64
  %i2 = Add %i, %one : i64
  %back = Jmp : X
^after(%f):
  %r = Return %acc : X
^exit(%r):
  End : X
}"""

BODIES = {
    # body -> (may LICM hoist it out of the conditionally run body?, plain-Python value)
    "float_div": ("%nf = Cast %n {to = \"f64\"} : f64\n  %q = Div %fone, %nf : f64", True,
                  lambda n: n * (1.0 / n) if n else 0.0),
    "int_div": ("%qi = FloorDiv %one, %n : i64\n  %q = Cast %qi {to = \"f64\"} : f64", False,
                lambda n: float(n * (1 // n)) if n else 0.0),
    "gather": ("%q = Gather %data, %n {axis = 0} : f64", False,
               lambda n: n * [1.0, 2.0, 4.0][n] if n else 0.0),
}


@pytest.mark.parametrize("case", sorted(BODIES))
def test_licm_reads_the_flags(case: str) -> None:
    body, hoistable, oracle = BODIES[case]
    g = parse(_LOOP.replace("BODY", body))
    stats: dict = {}
    optimize(g, "licm", verify_each=True, stats=stats)
    # (the entry block already only jumps to the header: it is the preheader)
    hoisted = {n.op.name for n in g.nodes() if n.block is not None and n.block.name != "body"}
    failing_op = {"float_div": "Div", "int_div": "FloorDiv", "gather": "Gather"}[case]
    assert (failing_op in hoisted) == hoistable, (case, hoisted, stats)
    for n in (0, 1, 2):  # n = 0: zero trips; the op would fail (or give inf) there
        assert float(g(np.int64(n))) == pytest.approx(oracle(n))


def test_cse_merges_commutative_ops_only() -> None:
    g = parse("""
graph @c {
^entry:
  %0 = Start : (f32, f32)
  %a = Proj %0 {num = 0} : f32
  %b = Proj %0 {num = 1} : f32
  %s1 = Add %a, %b : f32
  %s2 = Add %b, %a : f32
  %d1 = Sub %a, %b : f32
  %d2 = Sub %b, %a : f32
  %m1 = Maximum %a, %b : f32
  %m2 = Maximum %b, %a : f32
  %x = Mul %s1, %s2 : f32
  %y = Mul %d1, %d2 : f32
  %z = Add %m1, %m2 : f32
  %w = Add %x, %y : f32
  %v = Add %w, %z : f32
  %r = Return %v : X
^exit(%r):
  End : X
}""")
    optimize(g, "cse", verify_each=True)
    count = {name: sum(n.op.name == name for n in g.nodes()) for name in ("Sub", "Maximum", "Add", "Mul")}
    # Maximum is not commutative bit for bit (signed zeros), so both stay.
    assert count == {"Sub": 2, "Maximum": 2, "Add": 4, "Mul": 2}
    a, b = np.float32(1.5), np.float32(-2.25)
    want = (a + b) * (b + a) + (a - b) * (b - a) + 2 * max(a, b)
    assert np.signbit(np.maximum(np.float32(0.0), np.float32(-0.0))) != np.signbit(
        np.maximum(np.float32(-0.0), np.float32(0.0)))  # why Maximum is not marked commutative
    assert float(g(a, b)) == pytest.approx(float(want))
