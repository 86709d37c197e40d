"""Integer bitwise ops (BitwiseAnd, BitwiseOr, BitwiseXor, BitwiseNot, LeftShift,
RightShift): type rules, and kernels against plain Python ints (wrapped to the dtype's
two's complement) and NumPy's ufuncs, on random values with negatives and the extremes."""

from __future__ import annotations

import operator
import random
from collections.abc import Callable

import numpy as np
import pytest
import sympy

import nexus as nx
from nexus.ir.opdef import OpTypeError, get_op
from nexus.ir.types import TensorType
from nexus.ops.check import apply_op

INT_DTYPES = [np.int8, np.int16, np.int32, np.int64, np.uint8]
BINARY: dict[str, tuple[Callable[[int, int], int], Callable[..., np.ndarray]]] = {
    "BitwiseAnd": (operator.and_, np.bitwise_and),
    "BitwiseOr": (operator.or_, np.bitwise_or),
    "BitwiseXor": (operator.xor, np.bitwise_xor),
}


def wrap(x: int, dtype: type) -> int:
    """A Python int reduced to the dtype's width, read as two's complement when signed."""
    info = np.iinfo(dtype)
    bits = info.bits
    x &= (1 << bits) - 1
    if info.min < 0 and x >= 1 << (bits - 1):
        x -= 1 << bits
    return x


def values(dtype: type, n: int, seed: int) -> list[int]:
    """Random values of the dtype, with 0, +-1 and both extremes among them."""
    info = np.iinfo(dtype)
    rng = random.Random(seed)
    edge = [v for v in (0, 1, -1, info.min, info.max, info.min + 1, info.max - 1) if info.min <= v <= info.max]
    return edge + [rng.randint(int(info.min), int(info.max)) for _ in range(n - len(edge))]


def py_oracle(fn: Callable[..., int], dtype: type, *cols: list[int]) -> np.ndarray:
    return np.array([wrap(fn(*xs), dtype) for xs in zip(*cols)], dtype=dtype)


@pytest.mark.parametrize("name", sorted(BINARY))
@pytest.mark.parametrize("dtype", INT_DTYPES, ids=lambda d: d.__name__)
def test_binary_kernels_match_python_ints(name: str, dtype: type) -> None:
    py, ufunc = BINARY[name]
    a, b = values(dtype, 64, 1), values(dtype, 64, 2)
    got = apply_op(name, np.array(a, dtype), np.array(b, dtype))
    assert got.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(got, py_oracle(py, dtype, a, b))
    np.testing.assert_array_equal(got, ufunc(np.array(a, dtype), np.array(b, dtype)))


@pytest.mark.parametrize("dtype", INT_DTYPES, ids=lambda d: d.__name__)
def test_not_is_pythons_invert(dtype: type) -> None:
    x = values(dtype, 64, 3)
    got = apply_op("BitwiseNot", np.array(x, dtype))
    np.testing.assert_array_equal(got, py_oracle(operator.invert, dtype, x))
    np.testing.assert_array_equal(got, np.invert(np.array(x, dtype)))
    if np.iinfo(dtype).min < 0:  # ~x == -x - 1, Python's definition, holds without overflow
        np.testing.assert_array_equal(got, py_oracle(lambda v: -v - 1, dtype, x))


@pytest.mark.parametrize("dtype", INT_DTYPES, ids=lambda d: d.__name__)
def test_shifts_match_python_ints(dtype: type) -> None:
    """Counts from 0 to past the width: >> is Python's (floor division by 2**count, so
    negative numbers shift in ones and end at -1); << is Python's wrapped to the dtype,
    so the bits shifted out are lost and a count >= the width gives 0."""
    bits = np.iinfo(dtype).bits
    x = values(dtype, 80, 4)
    counts = [k % (bits + 6) for k in range(len(x))]
    xs, cs = np.array(x, dtype), np.array(counts, dtype)
    np.testing.assert_array_equal(apply_op("RightShift", xs, cs), py_oracle(operator.rshift, dtype, x, counts))
    np.testing.assert_array_equal(apply_op("LeftShift", xs, cs), py_oracle(operator.lshift, dtype, x, counts))
    np.testing.assert_array_equal(apply_op("RightShift", xs, cs), np.right_shift(xs, cs))
    np.testing.assert_array_equal(apply_op("LeftShift", xs, cs), np.left_shift(xs, cs))


def test_shifts_of_int64_by_64_and_more() -> None:
    """The defined behaviour where int64 and Python's unbounded ints part: 1 << 64 is 0."""
    x = np.array([1, -1, 5, -(2**63), 2**63 - 1], np.int64)
    for k in (63, 64, 65, 200):
        c = np.full(5, k, np.int64)
        np.testing.assert_array_equal(apply_op("LeftShift", x, c), [wrap(int(v) << k, np.int64) for v in x])
        np.testing.assert_array_equal(apply_op("RightShift", x, c), [int(v) >> k for v in x])
    assert apply_op("LeftShift", np.int64(1), np.int64(64)) == 0
    assert apply_op("RightShift", np.int64(-7), np.int64(64)) == -1


@pytest.mark.parametrize("name", ["LeftShift", "RightShift"])
def test_negative_shift_count_raises_like_python(name: str) -> None:
    with pytest.raises(ValueError, match="negative shift count"):
        1 << -1  # noqa: B018  (the oracle: Python refuses it)
    kernel = get_op(name).kernel
    assert kernel is not None
    with pytest.raises(ValueError, match=f"{name}: negative shift count"):
        kernel(np.array([1, 2, 3], np.int64), np.array([1, -2, 0], np.int64))
    with pytest.raises(ValueError, match="negative shift count"):
        kernel(np.int32(4), np.int32(-1))
    with pytest.raises(nx.NexusRuntimeError, match="negative shift count"):
        apply_op(name, np.array([1, 2], np.int64), np.array([0, -1], np.int64))
    assert get_op(name).may_fail_on_int and not get_op(name).may_fail


def test_scalars_and_broadcasting() -> None:
    a = np.arange(-6, 6, dtype=np.int32).reshape(3, 4)
    b = np.array([1, 2, 3, 7], np.int32)
    for name, (py, _) in BINARY.items():
        got = apply_op(name, a, b)
        assert got.shape == (3, 4) and got.dtype == np.int32
        want = [[py(int(x), int(y)) for x, y in zip(row, b)] for row in a]
        np.testing.assert_array_equal(got, want)
    assert apply_op("RightShift", np.int64(-9), np.int64(1)) == -9 >> 1 == -5
    assert apply_op("BitwiseXor", np.int64(6), np.int64(3)) == 6 ^ 3


def rule(name: str, *ins: TensorType) -> TensorType:
    op = get_op(name)
    assert op.type_rule is not None
    out = op.type_rule(list(ins), {}, [None] * len(ins))
    assert isinstance(out, TensorType)
    return out


@pytest.mark.parametrize("name", [*sorted(BINARY), "LeftShift", "RightShift"])
def test_binary_type_rules(name: str) -> None:
    n, m = sympy.Symbol("N"), sympy.Symbol("M")
    assert rule(name, TensorType("i32", (3, 1)), TensorType("i32", (4,))) == TensorType("i32", (3, 4))
    assert rule(name, TensorType("u8", (n, 1)), TensorType("u8", (1, m))) == TensorType("u8", (n, m))
    assert rule(name, TensorType("i64", ()), TensorType("i64", None)) == TensorType("i64", None)
    with pytest.raises(OpTypeError, match=f"{name}: input 0 has dtype f32"):
        rule(name, TensorType("f32", (3,)), TensorType("f32", (3,)))
    with pytest.raises(OpTypeError, match=f"{name}: input 0 has dtype bool"):  # And/Or/Xor are for bools
        rule(name, TensorType("bool", (3,)), TensorType("bool", (3,)))
    with pytest.raises(OpTypeError, match="dtype mismatch"):
        rule(name, TensorType("i64", (3,)), TensorType("i32", (3,)))
    with pytest.raises(OpTypeError, match="do not broadcast"):
        rule(name, TensorType("i64", (3,)), TensorType("i64", (4,)))


def test_not_type_rule() -> None:
    assert rule("BitwiseNot", TensorType("i8", (2, sympy.Symbol("K")))) == TensorType("i8", (2, sympy.Symbol("K")))
    for bad in ("f64", "bool"):
        with pytest.raises(OpTypeError, match=f"BitwiseNot: input 0 has dtype {bad}"):
            rule("BitwiseNot", TensorType(bad, ()))


def test_flags() -> None:
    for name in BINARY:
        assert get_op(name).commutative and not get_op(name).may_fail_on_int
    for name in ("LeftShift", "RightShift", "BitwiseNot"):
        assert not get_op(name).commutative
    assert not any(get_op(n).differentiable for n in [*BINARY, "BitwiseNot", "LeftShift", "RightShift"])
