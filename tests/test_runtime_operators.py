"""The python backend emits Python operators from ``OpDef.operator`` where they compute
what the op means, and the kernel where they do not; NumPy and Python are the oracles."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import nexus as nx
from nexus.backends.python import NexusRuntimeError
from nexus.ir.graph import Graph
from nexus.ir.opdef import all_ops
from nexus.ir.types import TensorType

# op -> NumPy's function of the same meaning (the oracle)
NUMPY: dict[str, Callable[..., Any]] = {
    "Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Div": np.true_divide, "FloorDiv": np.floor_divide,
    "Mod": np.mod, "MatMul": np.matmul, "Less": np.less, "LessEqual": np.less_equal,
    "Greater": np.greater, "GreaterEqual": np.greater_equal, "Equal": np.equal, "NotEqual": np.not_equal,
    "And": np.logical_and, "Or": np.logical_or, "Xor": np.logical_xor, "Neg": np.negative, "Not": np.logical_not,
    "BitwiseAnd": np.bitwise_and, "BitwiseOr": np.bitwise_or, "BitwiseXor": np.bitwise_xor, "BitwiseNot": np.invert,
}
OPERATOR_OPS = sorted(o.name for o in all_ops().values() if o.operator)


def one_node(op: str, dtype: str, shapes: list[tuple[int, ...]], const: Any = None) -> Graph:
    """``op`` of the arguments (the last input a Constant when ``const`` is given)."""
    n_args = len(shapes) - (const is not None)
    g = Graph("f", [TensorType(dtype, s) for s in shapes[:n_args]])
    ins = list(g.args)
    if const is not None:
        ins.append(g.add("Constant", [], g.start_block, {"value": np.asarray(const)}))
    y = g.add(op, ins, g.start_block, name="y")
    g.end_block.append_input(g.add("Return", [y], g.start_block))
    return g


def test_every_operator_op_has_an_oracle_here() -> None:
    assert OPERATOR_OPS == sorted(NUMPY)


@pytest.mark.parametrize("op", OPERATOR_OPS)
def test_operator_form_matches_numpy(op: str) -> None:
    opdef = all_ops()[op]
    rng = np.random.default_rng(3)
    dtype = "bool" if op in ("And", "Or", "Xor", "Not") else "i64" if op.startswith("Bitwise") else "f64"
    shape = [(3, 3)] * len(opdef.inputs)
    draw = {"bool": lambda s: rng.uniform(0.5, 2.0, s) > 1.2, "i64": lambda s: rng.integers(-99, 99, s),
            "f64": lambda s: rng.uniform(0.5, 2.0, s)}[dtype]
    args = [draw(s) for s in shape]
    exe = nx.compile(one_node(op, dtype, shape))
    got = exe(*args)
    np.testing.assert_allclose(got, NUMPY[op](*args), rtol=1e-12)
    spelled = f"{opdef.operator}a0" if len(args) == 1 else f"a0 {opdef.operator} a1"
    assert spelled in exe.source()


@pytest.mark.parametrize("op", ["FloorDiv", "Mod"])
def test_int_division_uses_the_operator_only_with_a_nonzero_constant(op: str) -> None:
    a = np.array([7, -7, 9], np.int64)
    sym = all_ops()[op].operator
    exe = nx.compile(one_node(op, "i64", [(3,), ()], const=np.int64(-2)))
    np.testing.assert_array_equal(exe(a), NUMPY[op](a, -2))
    assert f"a0 {sym} k" in exe.source()
    exe = nx.compile(one_node(op, "i64", [(3,), (3,)]))
    assert f" {sym} " not in exe.source().split("def ", 1)[1]
    with pytest.raises(ZeroDivisionError):
        7 // 0 if op == "FloorDiv" else 7 % 0  # noqa: B018  (the oracle: Python refuses it)
    with pytest.raises(NexusRuntimeError, match="division by zero"):
        exe(a, np.array([1, 0, 2], np.int64))


def test_int_div_truncates_and_is_not_the_slash_operator() -> None:
    a, b = np.array([7, -7, 7, -7], np.int64), np.array([2, 2, -2, -2], np.int64)
    exe = nx.compile(one_node("Div", "i64", [(4,), (4,)]))
    np.testing.assert_array_equal(exe(a, b), [int(x / y) for x, y in zip(a.tolist(), b.tolist())])
    assert " / " not in exe.source().split("def ", 1)[1]


@pytest.mark.parametrize("op", ["Maximum", "Minimum"])
@pytest.mark.parametrize("dtype", ["f64", "f32", "i64"])
def test_scalar_maximum_minimum_keep_numpys_nan_and_signed_zero(op: str, dtype: str) -> None:
    # The python backend writes these as conditional expressions on scalars: NaN must win
    # from either side, and of two equal values (0.0, -0.0) NumPy returns the second.
    ref = {"Maximum": np.maximum, "Minimum": np.minimum}[op]
    exe = nx.compile(one_node(op, dtype, [(), ()]))
    assert " if " in exe.source()
    cast = np.dtype({"f64": np.float64, "f32": np.float32, "i64": np.int64}[dtype]).type
    values = [0.0, -0.0, 1.5, -2.0, float("nan"), float("inf")] if dtype != "i64" else [0, -3, 7]
    for a in values:
        for b in values:
            got, want = exe(cast(a), cast(b)), ref(cast(a), cast(b))
            assert np.asarray(got).dtype == np.asarray(want).dtype
            np.testing.assert_array_equal(got, want)
            assert np.signbit(got) == np.signbit(want), (a, b)


@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
def test_vector_argmax_argmin_as_the_array_method(op: str) -> None:
    # Emitted as `_i64(x.argmax())`: NumPy's first index on ties and at a NaN, and an i64 result.
    ref = {"ArgMax": np.argmax, "ArgMin": np.argmin}[op]
    g = Graph("f", [TensorType("f64", (5,))])
    y = g.add(op, [g.args[0]], g.start_block, {"axis": 0, "keepdims": False}, name="y")
    g.end_block.append_input(g.add("Return", [y], g.start_block))
    exe = nx.compile(g)
    assert f".{op.lower()}()" in exe.source()
    for x in ([1.0, 3.0, 3.0, -1.0, -1.0], [0.0, np.nan, 2.0, np.nan, -5.0], [2.0] * 5):
        got = exe(np.array(x))
        assert isinstance(got, np.int64) and got == ref(np.array(x))
