"""Elementwise ops and activations against PyTorch (independent oracle) on random inputs."""

from __future__ import annotations

import math

import numpy as np
import pytest

from nexus.ir.opdef import OpTypeError
from nexus.ops.check import apply_op
from nexus.testing.extras import require

torch = require("torch", "torch")
F = torch.nn.functional

RNG = np.random.default_rng(0)
SHAPES = [(), (0,), (3, 4)]
FLOAT_DTYPES = [np.float32, np.float64, np.float16]
TOL = {np.float16: 2e-3, np.float32: 1e-5, np.float64: 1e-10}


def rand(shape: tuple, dtype: type, lo: float = -3.0, hi: float = 3.0) -> np.ndarray:
    return RNG.uniform(lo, hi, size=shape).astype(dtype)


def oracle(fn, *xs: np.ndarray, **kw):  # type: ignore[no-untyped-def]
    """Run a torch function in float64 (f16 inputs too), return a NumPy array."""
    ts = [torch.from_numpy(np.asarray(x, dtype=np.float64)) for x in xs]
    return fn(*ts, **kw).numpy()


def close(got: np.ndarray, want: np.ndarray, dtype: type) -> None:
    got = np.asarray(got)
    assert got.dtype == np.dtype(dtype), (got.dtype, dtype)
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=TOL[dtype], atol=TOL[dtype])


UNARY = {
    "Sqrt": (torch.sqrt, 0.1, 4.0),
    "Rsqrt": (torch.rsqrt, 0.1, 4.0),
    "Reciprocal": (torch.reciprocal, 0.5, 4.0),
    "Sin": (torch.sin, -3, 3),
    "Cos": (torch.cos, -3, 3),
    "Erf": (torch.erf, -3, 3),
    "Asin": (torch.asin, -0.99, 0.99),
    "Acos": (torch.acos, -0.99, 0.99),
    "Atan": (torch.atan, -5, 5),
    "Asinh": (torch.asinh, -5, 5),
    "Acosh": (torch.acosh, 1.01, 5),
    "Atanh": (torch.atanh, -0.99, 0.99),
    "Floor": (torch.floor, -3, 3),
    "Ceil": (torch.ceil, -3, 3),
    "Sign": (torch.sign, -3, 3),
    "Gelu": (F.gelu, -3, 3),
    "Softplus": (F.softplus, -30, 30),
    "Sigmoid": (torch.sigmoid, -10, 10),  # exp(-x) overflows float16 beyond 11
    "LeakyRelu": (F.leaky_relu, -3, 3),
    "HardSigmoid": (lambda x: torch.clamp(0.2 * x + 0.5, 0, 1), -4, 4),  # ONNX's default alpha, beta
    "HardSwish": (F.hardswish, -5, 5),
}


@pytest.mark.parametrize("op", sorted(UNARY))
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
def test_unary_float(op: str, dtype: type, shape: tuple) -> None:
    fn, lo, hi = UNARY[op]
    x = rand(shape, dtype, lo, hi)
    want = oracle(fn, x)
    if dtype == np.float16 and op in ("Floor", "Ceil", "Sign"):
        want = oracle(fn, x.astype(np.float64))
    close(apply_op(op, x), want, dtype)


def test_round_half_to_even() -> None:
    x = np.array([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 0.49, -0.51], np.float32)
    close(apply_op("Round", x), torch.round(torch.from_numpy(x.astype(np.float64))).numpy(), np.float32)


def test_gelu_float32_is_relatively_exact_in_the_tails() -> None:
    """Gelu of float32 (computed from erfc, not 1 + erf) against x * erfc(-x / sqrt 2) / 2 in
    float64 by math.erfc, relative error 1e-4 at every point of [-13, 13] (the far negative
    tail, values down to 1e-38, included) and exact at 0, inf and NaN."""
    x = np.concatenate([np.linspace(-13, 13, 20001), [0.0, 1e-30, -1e-30, 3e38]]).astype(np.float32)
    want = np.array([0.5 * float(v) * math.erfc(-float(v) / math.sqrt(2)) for v in x])
    got = apply_op("Gelu", x)
    assert got.dtype == np.float32
    big = np.abs(want) > 1e-37  # float32's normal range
    np.testing.assert_allclose(got[big].astype(np.float64), want[big], rtol=1e-4, atol=0)
    np.testing.assert_allclose(got[~big], 0, atol=1e-37)
    special = apply_op("Gelu", np.array([np.inf, np.nan, -np.inf], np.float32))
    assert special[0] == np.inf and np.isnan(special[1:]).all()  # -inf * (1 + erf(-inf)) is NaN


def test_gelu_tanh() -> None:
    x = rand((5, 7), np.float32)
    close(apply_op("Gelu", x, approximate="tanh"), oracle(F.gelu, x, approximate="tanh"), np.float32)


def test_leaky_relu_alpha() -> None:
    x = rand((4, 5), np.float64)
    close(apply_op("LeakyRelu", x, alpha=0.2), oracle(F.leaky_relu, x, negative_slope=0.2), np.float64)


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.int8])
def test_sign_ints(dtype: type) -> None:
    x = RNG.integers(-5, 5, size=(3, 4)).astype(dtype)
    got = apply_op("Sign", x)
    assert got.dtype == dtype
    np.testing.assert_array_equal(got, [[(v > 0) - (v < 0) for v in row] for row in x.tolist()])


@pytest.mark.parametrize("op,fn", [("Softmax", torch.softmax), ("LogSoftmax", torch.log_softmax)])
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("shape,axis", [((5,), -1), ((3, 4), 0), ((2, 3, 4), 1), ((2, 0), -1)])
def test_softmax(op: str, fn, dtype: type, shape: tuple, axis: int) -> None:  # type: ignore[no-untyped-def]
    x = rand(shape, dtype, -10, 10)
    close(apply_op(op, x, axis=axis), oracle(fn, x, dim=axis), dtype)


def test_softmax_large_values_stable() -> None:
    x = np.array([1000.0, 1000.0, -1000.0], np.float32)
    np.testing.assert_allclose(apply_op("Softmax", x), [0.5, 0.5, 0.0])


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("xs,ss", [((2, 3, 4, 4), (3, 1, 1)), ((5,), ()), ((4, 6), (6,))])
def test_prelu(dtype: type, xs: tuple, ss: tuple) -> None:
    x, s = rand(xs, dtype), rand(ss, dtype, 0, 1)
    want = np.where(x.astype(np.float64) >= 0, x, x.astype(np.float64) * s.astype(np.float64))
    close(apply_op("PRelu", x, s), want, dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64])
def test_clip_broadcast(dtype: type) -> None:
    x = (rand((3, 4), np.float64) * 3).astype(dtype)
    lo, hi = np.array(-2, dtype), np.full((4,), 2, dtype)
    got = apply_op("Clip", x, lo, hi)
    assert got.dtype == dtype
    want = torch.clamp(torch.from_numpy(x), torch.from_numpy(lo), torch.from_numpy(hi)).numpy()
    np.testing.assert_array_equal(got, want)


def test_clip_min_above_max_gives_max() -> None:
    x = np.array([0.0, 5.0, -5.0], np.float32)
    got = apply_op("Clip", x, np.float32(3), np.float32(1))
    np.testing.assert_array_equal(got, torch.clamp(torch.from_numpy(x), 3.0, 1.0).numpy())


@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.bool_])
def test_where_broadcast(dtype: type) -> None:
    c = RNG.random((3, 1, 4)) > 0.5
    a = (rand((2, 4), np.float64) * 3).astype(dtype)
    b = (rand((3, 2, 1), np.float64) * 3).astype(dtype)
    got = apply_op("Where", c, a, b)
    assert got.dtype == dtype and got.shape == (3, 2, 4)
    np.testing.assert_array_equal(got, torch.where(torch.from_numpy(c), torch.from_numpy(a), torch.from_numpy(b)))


def test_scalars_stay_numpy_scalars_of_their_dtype() -> None:
    got = apply_op("Sqrt", np.float32(4.0))
    assert np.asarray(got).dtype == np.float32 and math.isclose(float(got), 2.0)


@pytest.mark.parametrize("op,args,msg", [
    ("Sqrt", [np.array([1, 2], np.int32)], "Sqrt: input 0 has dtype i32"),
    ("Where", [np.array([1.0]), np.array([1.0]), np.array([1.0])], r"condition \(input 0\) must be bool"),
    ("Where", [np.array([True]), np.array([1.0], np.float32), np.array([1.0])], "dtype mismatch"),
    ("Clip", [np.zeros(3, np.float32), np.float64(0), np.float32(1)], "dtype mismatch"),
    ("Softmax", [np.float32(1.0)], "needs rank >= 1"),
    ("PRelu", [np.zeros((2, 3), np.float32), np.zeros(4, np.float32)], "do not broadcast"),
])
def test_errors(op: str, args: list, msg: str) -> None:
    with pytest.raises(OpTypeError, match=msg):
        apply_op(op, *args)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("exponent", [3.0, 2.0, 2.5, -3.0, 0.5])
def test_pow_cubes_by_products_and_otherwise_is_numpys(dtype: type, exponent: float) -> None:
    """A float cubed is a * a * a (PyTorch's and ONNX Runtime's way; libm's pow is ~250x
    slower on negative bases): within two ulps of NumPy's power, same dtype; any other
    exponent is NumPy's power exactly."""
    x = np.random.default_rng(30).standard_normal((4, 50)).astype(dtype)
    e = np.asarray(exponent, dtype)
    with np.errstate(invalid="ignore"):
        got, want = apply_op("Pow", x, e), np.power(x, e)
    assert got.dtype == want.dtype
    if exponent == 3:
        np.testing.assert_array_max_ulp(got, want, maxulp=2)
    else:
        np.testing.assert_array_equal(got, want)
