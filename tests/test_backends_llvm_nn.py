"""The llvm backend's rules for the ops real models are made of (issue 34): the activations
fused as elementwise rules, Softmax / LogSoftmax, LayerNormalization, Concat, Gather of a
tensor of indices, and MatMul / Gemm of transposed operands.  Each graph must compile whole
(an ``LLVMExecutable``, no op left to Python) and agree with NumPy in f64 (the oracle) and
with the python backend (the kernels' own order of operations)."""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pytest

from nexus.testing.extras import require

require("llvmlite", "llvm")

import nexus as nx  # noqa: E402
from nexus.backends.llvm import matmul  # noqa: E402
from nexus.backends.llvm.backend import LLVMExecutable  # noqa: E402
from nexus.ir.graph import Graph  # noqa: E402
from nexus.ir.node import Block, Node  # noqa: E402
from nexus.ir.types import TensorType, sym  # noqa: E402

N, M = sym("N"), sym("M")
RNG = np.random.default_rng(34)
# Tolerance against the f64 oracle, per dtype (f16 is rounded once from f32).
TOL = {"f16": 2e-3, "f32": 2e-6, "f64": 1e-13}


def graph(types: Sequence[TensorType], build: Callable[..., Node]) -> Graph:
    g = Graph("t", list(types))
    b = g.start_block
    g.end_block.append_input(g.add("Return", [build(g, b, *g.args)], b))
    return g


def const(g: Graph, b: Block, value: np.ndarray) -> Node:
    return g.add("Constant", [], b, {"value": value})


def native(g: Graph) -> Any:
    """``g`` compiled on llvm, which must take it whole."""
    exe = nx.compile(g, backend="llvm")
    assert isinstance(exe, LLVMExecutable), getattr(exe, "stayed_out", None)
    return exe


def check(g: Graph, args: Sequence[Any], want: np.ndarray, dtype: str, sums: bool = False) -> np.ndarray:
    """Run ``g`` on llvm: the dtype, the f64 oracle ``want`` and the python backend's answer
    (to a few ulps; ``sums``: products summed in another order than NumPy's, to the
    oracle's tolerance of the largest element)."""
    got = native(g)(*args)
    assert got.dtype == np.dtype(dtype.replace("f", "float")) and got.shape == want.shape
    scale = max(1.0, float(np.max(np.abs(want)))) if sums and want.size else 1.0
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=TOL[dtype], atol=TOL[dtype] * scale)
    ref = nx.compile(g, backend="python")(*args)
    ulps = 4 * np.finfo(got.dtype).eps * scale
    np.testing.assert_allclose(got, ref, rtol=TOL[dtype] if sums else ulps, atol=TOL[dtype] * scale if sums else ulps)
    return got


def _erf(x: np.ndarray) -> np.ndarray:
    return np.vectorize(math.erf, otypes=[np.float64])(x)


ACTIVATIONS: dict[str, tuple[dict[str, Any], Callable[[np.ndarray], np.ndarray]]] = {
    "Gelu": ({}, lambda x: 0.5 * x * (1 + _erf(x / math.sqrt(2)))),
    "Gelu-tanh": ({"approximate": "tanh"},
                  lambda x: 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))),
    "HardSigmoid": ({"alpha": 0.25, "beta": 0.4}, lambda x: np.clip(0.25 * x + 0.4, 0, 1)),
    "HardSwish": ({}, lambda x: x * np.clip(x + 3, 0, 6) / 6),
    "LeakyRelu": ({"alpha": 0.1}, lambda x: np.where(x >= 0, x, 0.1 * x)),
    "Softplus": ({}, lambda x: np.logaddexp(0.0, x)),
}


@pytest.mark.parametrize("dtype", ["f16", "f32", "f64"])
@pytest.mark.parametrize("name", list(ACTIVATIONS))
def test_activations_fuse_into_the_chain_and_agree(name: str, dtype: str) -> None:
    attrs, ref = ACTIVATIONS[name]
    op = name.split("-")[0]
    # (x * 2 + 1) -> activation -> - 0.5: one fused loop, symbolic rows
    g = graph([TensorType(dtype, (N, 7))], lambda g, b, x: g.add("Sub", [g.add(op, [g.add(
        "Add", [g.add("Mul", [x, const(g, b, np.array(2, dtype.replace("f", "float")))], b),
                const(g, b, np.array(1, dtype.replace("f", "float")))], b)], b, attrs),
        const(g, b, np.array(0.5, dtype.replace("f", "float")))], b))
    x = (RNG.normal(size=(5, 7)) * 3).astype(dtype.replace("f", "float"))
    x[0, :3] = [np.nan, 40.0, -40.0]  # NaN passes through; no overflow at large |x|
    pre = x.astype(np.float64) * 2 + 1
    with np.errstate(invalid="ignore"):
        want = ref(pre) - 0.5
    tol = TOL[dtype] * (8 if name == "Gelu-tanh" and dtype == "f32" else 1)  # tanh of f32 is emitted inline
    got = native(g)(x)
    assert got.dtype == x.dtype and np.isnan(got[0, 0])
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=tol, atol=tol * 40)
    np.testing.assert_allclose(got, nx.compile(g, backend="python")(x), rtol=4 * np.finfo(x.dtype).eps,
                               atol=4 * np.finfo(x.dtype).eps)


def test_erf_of_f32_is_within_3_ulp_of_math_erf_over_a_dense_grid() -> None:
    # the Erf op on f32 is emitted inline too (Gelu's erf): its three pieces, tiny values,
    # the ends and NaN against math.erf in f64, in units of the f32 result's last place
    g = graph([TensorType("f32", (N,))], lambda g, b, x: g.add("Erf", [x], b))
    assert "erff" not in native(g).source()  # no libm call per element
    x = np.concatenate([np.linspace(-6, 6, 60001), np.geomspace(1e-38, 1e-2, 60), -np.geomspace(1e-38, 1e-2, 60),
                        [0.0, -0.0, np.inf, -np.inf, np.nan]]).astype(np.float32)
    got = native(g)(x)
    want = _erf(x.astype(np.float64))
    fin = ~np.isnan(x)
    ulp = np.spacing(np.abs(want[fin]).astype(np.float32)).astype(np.float64)
    assert np.max(np.abs(got[fin] - want[fin]) / ulp) <= 3
    assert np.isnan(got[-1]) and np.signbit(got[-4]) and got[-3] == 1 and got[-2] == -1


def test_gelu_of_f32_is_exact_gelu_to_rounding_over_a_dense_grid() -> None:
    # f32's erf is emitted inline (a vectorisable polynomial, not libm's erff): checked against
    # math.erf in f64 across its three pieces (|x| < 1, < 4, beyond), tiny values and NaN
    g = graph([TensorType("f32", (N,))], lambda g, b, x: g.add("Gelu", [x], b))
    x = np.concatenate([np.linspace(-9, 9, 40001), np.geomspace(1e-30, 1e-3, 50), -np.geomspace(1e-30, 1e-3, 50),
                        [0.0, np.inf, -np.inf, np.nan]]).astype(np.float32)
    x64 = x.astype(np.float64)
    with np.errstate(invalid="ignore"):
        want = 0.5 * x64 * (1 + _erf(x64 / math.sqrt(2)))
    got = native(g)(x)
    fin = np.isfinite(x)
    # |1 + erf| in f32 rounds to ~6e-8 absolute (as with libm's erff): the bound scales with |x|
    err = np.abs(got[fin].astype(np.float64) - want[fin])
    assert np.all(err <= 4 * np.finfo(np.float32).eps * np.abs(want[fin]) + 2e-7 * np.abs(x64[fin])), \
        float(np.max(err / (np.abs(x64[fin]) + 1e-300)))
    with np.errstate(invalid="ignore"):
        np.testing.assert_array_equal(got[~fin], nx.compile(g, backend="python")(x)[~fin])  # inf, -inf, NaN


@pytest.mark.parametrize("dtype", ["f16", "f32", "f64"])
def test_prelu_with_a_broadcast_slope(dtype: str) -> None:
    np_dt = dtype.replace("f", "float")
    g = graph([TensorType(dtype, (N, 3, 4)), TensorType(dtype, (3, 1))], lambda g, b, x, s: g.add("PRelu", [x, s], b))
    x = RNG.normal(size=(2, 3, 4)).astype(np_dt)
    s = np.array([[0.1], [-0.5], [2.0]], np_dt)
    x64 = x.astype(np.float64)
    check(g, (x, s), np.where(x64 >= 0, x64, x64 * s.astype(np.float64)), dtype)


def _softmax(x: np.ndarray, axis: int) -> np.ndarray:
    e = np.exp(x - np.max(x, axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


@pytest.mark.parametrize("dtype", ["f16", "f32", "f64"])
@pytest.mark.parametrize("axis", [-1, 0, 1])
@pytest.mark.parametrize("log", [False, True])
def test_softmax_over_each_axis_after_a_fused_chain(dtype: str, axis: int, log: bool) -> None:
    np_dt = dtype.replace("f", "float")
    op = "LogSoftmax" if log else "Softmax"
    g = graph([TensorType(dtype, (N, 3, 5))],
              lambda g, b, x: g.add(op, [g.add("Mul", [x, x], b)], b, {"axis": axis}))
    x = (RNG.normal(size=(4, 3, 5)) * 2).astype(np_dt)
    sq = x.astype(np.float64) ** 2
    want = np.log(_softmax(sq, axis)) if log else _softmax(sq, axis)
    check(g, (x,), want, dtype)


def test_softmax_propagates_nan_to_its_row_only() -> None:
    g = graph([TensorType("f32", (N, 4))], lambda g, b, x: g.add("Softmax", [x], b, {"axis": 1}))
    x = np.array([[1, 2, np.nan, 0], [1, 2, 3, 4], [-np.inf, 0, 0, 0], [np.inf, 0, 0, 0]], np.float32)
    got = native(g)(x)
    with np.errstate(invalid="ignore"):
        want = _softmax(x.astype(np.float64), 1)
    assert np.isnan(got[0]).all() and np.isnan(want[0]).all()
    np.testing.assert_allclose(got[1:3], want[1:3], rtol=2e-6)
    assert np.isnan(got[3]).all() == np.isnan(want[3]).all()  # inf - inf
    x2 = np.array([[np.nan, np.nan, np.nan, np.nan], [0, np.nan, 0, 0]], np.float32)
    assert np.isnan(native(g)(x2)).all()  # max over NaNs is NaN, first or last
    lg = graph([TensorType("f64", (N, 4))], lambda g, b, x: g.add("LogSoftmax", [x], b, {"axis": -1}))
    out = native(lg)(x.astype(np.float64))
    assert np.isnan(out[0]).all() and not np.isnan(out[1]).any()


def _layer_norm(x: np.ndarray, scale: np.ndarray, bias: np.ndarray | None, axis: int, eps: float) -> np.ndarray:
    axes = tuple(range(axis % x.ndim, x.ndim))
    mean = x.mean(axis=axes, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=axes, keepdims=True)
    out = (x - mean) / np.sqrt(var + eps) * scale
    return out + bias if bias is not None else out


@pytest.mark.parametrize("dtype", ["f16", "f32", "f64"])
@pytest.mark.parametrize("axis, pshape", [(-1, (6,)), (1, (4, 6)), (1, (6,))])
@pytest.mark.parametrize("bias", [True, False])
def test_layer_norm_over_trailing_axes(dtype: str, axis: int, pshape: tuple[int, ...], bias: bool) -> None:
    np_dt = dtype.replace("f", "float")
    types = [TensorType(dtype, (N, 4, 6)), TensorType(dtype, pshape)] + ([TensorType(dtype, pshape)] if bias else [])
    g = graph(types, lambda g, b, x, *p: g.add("LayerNormalization", [g.add("Add", [x, x], b), *p], b,
                                                {"axis": axis, "epsilon": 1e-3}))
    x = (RNG.normal(size=(3, 4, 6)) * 3 + 1).astype(np_dt)
    params = [RNG.normal(size=pshape).astype(np_dt) for _ in types[1:]]
    p64 = [p.astype(np.float64) for p in params]
    want = _layer_norm(2 * x.astype(np.float64), p64[0], p64[1] if bias else None, axis, 1e-3)
    check(g, (x, *params), want, dtype)


def test_concat_of_three_on_a_middle_axis_with_symbolic_dims() -> None:
    g = graph([TensorType("f32", (2, N, 3)), TensorType("f32", (2, 1, 3)), TensorType("f32", (2, M, 3))],
              lambda g, b, x, y, z: g.add("Concat", [g.add("Neg", [x], b), y, z], b, {"axis": 1}))
    exe = native(g)
    for n, m in ((2, 4), (0, 1), (3, 0)):
        x, y, z = (RNG.normal(size=(2, k, 3)).astype(np.float32) for k in (n, 1, m))
        got = exe(x, y, z)
        np.testing.assert_array_equal(got, np.concatenate([-x, y, z], axis=1))
    # f64 and i64 on the last axis, a Constant among the inputs
    c = np.arange(4.0).reshape(2, 2)
    h = graph([TensorType("f64", (2, N)), TensorType("f64", (2, 3))],
              lambda g, b, x, y: g.add("Concat", [x, const(g, b, c), y], b, {"axis": -1}))
    x, y = RNG.normal(size=(2, 5)), RNG.normal(size=(2, 3))
    np.testing.assert_array_equal(native(h)(x, y), np.concatenate([x, c, y], axis=-1))
    ints = graph([TensorType("i64", (N,)), TensorType("i64", (3,))], lambda g, b, x, y: g.add("Concat", [x, y, x], b,
                                                                                                 {"axis": 0}))
    a = np.arange(4)
    np.testing.assert_array_equal(native(ints)(a, -a[:3]), np.concatenate([a, -a[:3], a]))


def test_concat_of_dims_the_type_rule_assumed_equal_checks_them() -> None:
    g = graph([TensorType("f32", (N, 2)), TensorType("f32", (M, 3))],
              lambda g, b, x, y: g.add("Concat", [x, y], b, {"axis": 1}))
    exe = native(g)
    x, y = np.ones((4, 2), np.float32), np.zeros((4, 3), np.float32)
    np.testing.assert_array_equal(exe(x, y), np.concatenate([x, y], axis=1))
    with pytest.raises(ValueError):
        np.concatenate([x, y[:3]], axis=1)
    with pytest.raises(nx.NexusRuntimeError, match="ValueError") as e:
        exe(x, y[:3])
    assert isinstance(e.value.__cause__, ValueError) and e.value.node is not None
    assert e.value.node.op.name == "Concat"


@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("idt", ["i64", "i32"])
def test_gather_of_a_tensor_of_indices_is_np_take(axis: int, idt: str) -> None:
    table = RNG.normal(size=(6, 5)).astype(np.float32)
    g = graph([TensorType(idt, (N, 2))], lambda g, b, i: g.add("Gather", [const(g, b, table), i], b, {"axis": axis}))
    exe = native(g)
    size = table.shape[axis]
    idx = np.array([[0, -1], [size - 1, -size], [2, 1]], idt.replace("i", "int"))
    np.testing.assert_array_equal(exe(idx), np.take(table, idx, axis=axis))
    np.testing.assert_array_equal(exe(idx[:0]), np.take(table, idx[:0], axis=axis))


def test_gather_rows_of_a_run_time_table_then_layer_norm() -> None:
    # an embedding lookup feeding a LayerNorm, f64, as a model's first ops are
    g = graph([TensorType("f64", (M, 8)), TensorType("i64", (N,)), TensorType("f64", (8,))],
              lambda g, b, t, i, s: g.add("LayerNormalization", [g.add("Gather", [t, i], b, {"axis": 0}), s], b))
    t, s = RNG.normal(size=(10, 8)), RNG.normal(size=8)
    i = np.array([3, -1, 0, 9, -10])
    check(g, (t, i, s), _layer_norm(np.take(t, i, axis=0), s, None, -1, 1e-5), "f64")


@pytest.mark.parametrize("bad", [6, -7, 2**40])
def test_gather_index_out_of_range_raises_index_error_naming_the_node(bad: int) -> None:
    table = np.arange(12.0).reshape(6, 2)
    g = graph([TensorType("i64", (N,))], lambda g, b, i: g.add("Gather", [const(g, b, table), i], b, {"axis": 0}))
    node = next(n for n in g.nodes() if n.op.name == "Gather")
    exe = native(g)
    with pytest.raises(IndexError):
        np.take(table, np.array([0, bad]), axis=0)
    with pytest.raises(nx.NexusRuntimeError, match="IndexError") as e:
        exe(np.array([0, bad]))
    assert isinstance(e.value.__cause__, IndexError)
    assert e.value.node is node and "Gather" in str(e.value)


def _blas() -> bool:
    return matmul._blas_symbol("f64") is not None


@pytest.mark.parametrize("strategy", ["auto", "loops"])
@pytest.mark.parametrize("dtype", ["f32", "f64"])
def test_matmul_against_a_transposed_constant_weight(strategy: str, dtype: str,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(matmul, "STRATEGY", strategy)
    np_dt = dtype.replace("f", "float")
    w = RNG.normal(size=(7, 4)).astype(np_dt)
    bias = RNG.normal(size=7).astype(np_dt)
    g = graph([TensorType(dtype, (N, 4))], lambda g, b, x: g.add("Gelu", [g.add("Add", [g.add(
        "MatMul", [x, g.add("Transpose", [const(g, b, w)], b, {"perm": [1, 0]})], b), const(g, b, bias)], b)], b))
    x = RNG.normal(size=(3, 4)).astype(np_dt)
    pre = x.astype(np.float64) @ w.astype(np.float64).T + bias
    check(g, (x,), 0.5 * pre * (1 + _erf(pre / math.sqrt(2))), dtype)
    check(g, (x[:0],), np.zeros((0, 7)), dtype)


@pytest.mark.parametrize("dtype", ["f32", "f64"])
@pytest.mark.parametrize("form", ["Gemm transB", "Transpose then Gemm", "MatMul"])
def test_products_by_constant_weights_at_each_row_count(dtype: str, form: str) -> None:
    # a constant weight is packed into panels when compiling (a kernel of its own between
    # PANEL_ROWS rows, BLAS outside them): rows across both bounds and the blocks of rows,
    # columns that do not fill the last panel, the bias fused after the product
    if not _blas():
        pytest.skip("no BLAS: the products are loop nests")
    np_dt = dtype.replace("f", "float")
    lo, hi = matmul.PANEL_ROWS
    k = 37
    for n in (13, 3 * matmul.PANEL_BYTES // int(dtype[1:]) * 8):
        w = RNG.normal(size=(k, n)).astype(np_dt)
        bias = RNG.normal(size=n).astype(np_dt)

        def build(g: Graph, b: Block, x: Node, w: np.ndarray = w, bias: np.ndarray = bias) -> Node:
            if form == "MatMul":
                return g.add("Add", [g.add("MatMul", [x, const(g, b, w)], b), const(g, b, bias)], b)
            if form == "Gemm transB":
                wt = const(g, b, np.ascontiguousarray(w.T))
                return g.add("Gemm", [x, wt, const(g, b, bias)], b, {"transB": True})
            wt = g.add("Transpose", [const(g, b, np.ascontiguousarray(w.T))], b, {"perm": [1, 0]})
            return g.add("Gemm", [x, wt, const(g, b, bias)], b)

        g = graph([TensorType(dtype, (M, k))], build)
        for rows in sorted({1, lo - 1, lo, lo + 1, 2 * matmul.ROW_BLOCK + 3, hi, hi + 1}):
            x = RNG.normal(size=(rows, k)).astype(np_dt)
            check(g, (x,), x.astype(np.float64) @ w.astype(np.float64) + bias, dtype, sums=True)


@pytest.mark.parametrize("lib", ["numpy", "scipy"])
@pytest.mark.parametrize("dtype", ["f32", "f64"])
def test_each_blas_the_backend_may_call_gives_numpys_product(lib: str, dtype: str,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    # NumPy's OpenBLAS (64-bit integers) where its wheel has one, SciPy's (32-bit) otherwise:
    # both called, transposed operands and all, against NumPy's product in f64
    if lib == "scipy":
        monkeypatch.setattr(matmul, "_numpy_blas", lambda name: None)
    elif matmul._numpy_blas("dgemm") is None:
        pytest.skip("this NumPy bundles no OpenBLAS of 64-bit integers")
    monkeypatch.setattr(matmul, "_SYMBOLS", {})
    sym = matmul._blas_symbol(dtype)
    if sym is None:
        pytest.skip("SciPy is not installed")
    assert sym.endswith("64") == (lib == "numpy")
    np_dt = dtype.replace("f", "float")
    g = graph([TensorType(dtype, (N, 5)), TensorType(dtype, (M, 5))],
              lambda g, b, x, y: g.add("MatMul", [x, g.add("Transpose", [y], b, {"perm": [1, 0]})], b))
    exe = native(g)
    assert sym in exe.source()
    x, y = RNG.normal(size=(70, 5)).astype(np_dt), RNG.normal(size=(9, 5)).astype(np_dt)
    tol = TOL[dtype]
    np.testing.assert_allclose(exe(x, y), x.astype(np.float64) @ y.astype(np.float64).T, rtol=tol, atol=tol)


@pytest.mark.parametrize("strategy", ["auto", "loops"])
@pytest.mark.parametrize("side", ["a", "b", "both"])
def test_matmul_of_a_transposed_run_time_operand(strategy: str, side: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(matmul, "STRATEGY", strategy)

    def t(g: Graph, b: Block, v: Node, on: bool) -> Node:
        return g.add("Transpose", [v], b, {"perm": [1, 0]}) if on else v

    ta, tb = side in ("a", "both"), side in ("b", "both")
    ashape, bshape = ((4, N) if ta else (N, 4)), ((M, 4) if tb else (4, M))
    g = graph([TensorType("f64", ashape), TensorType("f64", bshape)],
              lambda g, b, x, y: g.add("MatMul", [t(g, b, x, ta), t(g, b, y, tb)], b))
    exe = native(g)
    for n, m in ((3, 5), (1, 1), (0, 2)):
        x = RNG.normal(size=(4, n) if ta else (n, 4))
        y = RNG.normal(size=(m, 4) if tb else (4, m))
        want = (x.T if ta else x) @ (y.T if tb else y)
        np.testing.assert_allclose(exe(x, y), want, rtol=1e-13, atol=1e-13)
    if strategy == "auto" and _blas():  # BLAS reads the operand with its transpose flag: no copy
        assert "i8 84" in exe.source()  # 'T'


@pytest.mark.parametrize("dtype", ["f32", "f64", "i64"])
def test_gemm_with_transposes_alpha_beta_and_a_broadcast_bias(dtype: str) -> None:
    np_dt = dtype.replace("f", "float").replace("i", "int")
    alpha, beta = (2.0, 3.0) if dtype == "i64" else (0.5, 2.0)
    w = (RNG.normal(size=(7, 4)) * 4).astype(np_dt)
    g = graph([TensorType(dtype, (4, N)), TensorType(dtype, (7,))], lambda g, b, x, c: g.add(
        "Gemm", [x, const(g, b, w), c], b, {"transA": True, "transB": True, "alpha": alpha, "beta": beta}))
    x, c = (RNG.normal(size=(4, 3)) * 4).astype(np_dt), (RNG.normal(size=7) * 4).astype(np_dt)
    want = alpha * x.astype(np.float64).T @ w.astype(np.float64).T + beta * c.astype(np.float64)
    if dtype == "i64":
        np.testing.assert_array_equal(native(g)(x, c), want.astype(np.int64))
        return
    check(g, (x, c), want, dtype)


@pytest.mark.parametrize("strategy", ["auto", "loops"])
@pytest.mark.parametrize("ashape, bshape, atype, btype", [
    ((2, 3, 4, 5), (2, 3, 5, 6), (N, 3, 4, 5), (N, 3, 5, 6)),   # attention's q @ k^T
    ((2, 1, 4, 5), (3, 5, 6), (N, 1, 4, 5), (M, 5, 6)),         # batch dims broadcast
    ((4, 5), (2, 3, 5, 6), (4, 5), (N, 3, 5, 6)),
    ((2, 3, 4, 5), (5, 6), (N, 3, 4, 5), (5, 6)),
    ((0, 4, 5), (0, 5, 2), (N, 4, 5), (N, 5, 2)),
])
def test_matmul_of_stacks_of_matrices(strategy: str, ashape: tuple[int, ...], bshape: tuple[int, ...],
                                      atype: tuple[Any, ...], btype: tuple[Any, ...],
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(matmul, "STRATEGY", strategy)
    for dtype in ("f32", "f64", "i64"):
        np_dt = dtype.replace("f", "float").replace("i", "int")
        g = graph([TensorType(dtype, atype), TensorType(dtype, btype)], lambda g, b, x, y: g.add("MatMul", [x, y], b))
        x, y = ((RNG.normal(size=s) * 4).astype(np_dt) for s in (ashape, bshape))
        want = np.matmul(x.astype(np.float64), y.astype(np.float64))
        if dtype == "i64":
            np.testing.assert_array_equal(native(g)(x, y), np.matmul(x, y))
        else:
            check(g, (x, y), want, dtype, sums=True)


def test_matmul_of_stacks_checks_contraction_dims_the_type_rule_assumed() -> None:
    g = graph([TensorType("f64", (2, 3, N)), TensorType("f64", (2, M, 4))],
              lambda g, b, x, y: g.add("MatMul", [x, y], b))
    exe = native(g)
    np.testing.assert_allclose(exe(np.ones((2, 3, 5)), np.ones((2, 5, 4))), np.full((2, 3, 4), 5.0))
    with pytest.raises(nx.NexusRuntimeError, match="ValueError"):
        exe(np.ones((2, 3, 5)), np.ones((2, 6, 4)))


def test_expand_broadcasts_both_ways_and_checks_like_numpy() -> None:
    for shape in ([2, 1, 4, 1], [1, 2, 1, 1], [1, 1, 1, 1], [3, 1, 0, 3]):
        g = graph([TensorType("f32", (N, 1, 3))],
                  lambda g, b, x: g.add("Neg", [g.add("Expand", [x, const(g, b, np.array(shape))], b)], b))
        exe = native(g)
        for n in (1, 2, 3):
            x = RNG.normal(size=(n, 1, 3)).astype(np.float32)
            try:
                want = -np.broadcast_to(x, np.broadcast_shapes(x.shape, tuple(shape)))
            except ValueError:  # N = 3 against 2: fails as NumPy does
                with pytest.raises(nx.NexusRuntimeError, match="ValueError") as e:
                    exe(x)
                assert e.value.node is not None and e.value.node.op.name == "Expand"
                continue
            np.testing.assert_array_equal(exe(x), want)
    # a bool mask broadcast to more dims, as an attention mask is
    mask = np.array([[True], [False]])
    h = graph([TensorType("bool", (2, 1))], lambda g, b, m: g.add("Expand", [m, const(g, b, np.array([3, 2, 4]))], b))
    np.testing.assert_array_equal(native(h)(mask), np.broadcast_to(mask, (3, 2, 4)))


SLICES = [(0, 3, 1), (1, -1, 1), (-3, 100, 1), (5, 0, -1), (-1, -100, -1), (0, 2**63 - 1, 2), (-2**63, 2, 1),
          (7, 1, -2), (2, 2, 1), (100, -100, -3)]


@pytest.mark.parametrize("symbolic", [False, True])
def test_slice_with_constant_bounds_is_python_slicing(symbolic: bool) -> None:
    # the sliced rows summed: a result dim like Min(3, N) stays inside the kernel
    for start, end, step in SLICES:
        g = graph([TensorType("f32", (N, 5) if symbolic else (6, 5))], lambda g, b, x: g.add("ReduceSum", [g.add(
            "Mul", [s := g.add("Slice", [x, *(const(g, b, np.array([v])) for v in (start, end, 0, step))], b), s],
            b)], b, {"axes": (0,), "keepdims": False}))
        exe = native(g)
        for rows in ((0, 1, 6, 11) if symbolic else (6,)):
            x = np.arange(rows * 5, dtype=np.float32).reshape(rows, 5)
            np.testing.assert_array_equal(exe(x), (x[start:end:step] ** 2).sum(0), err_msg=str((start, end, step)))
    # two axes at once, the result's dims static
    h = graph([TensorType("f64", (4, 6))], lambda g, b, x: g.add("Slice", [x, *(const(g, b, np.array(v)) for v in (
        [1, -1], [4, 0], [0, 1], [2, -2]))], b))
    x = RNG.normal(size=(4, 6))
    np.testing.assert_array_equal(native(h)(x), x[1:4:2, -1:0:-2])


def _encoder(torch: Any) -> Any:
    """A one-layer transformer encoder with an embedding and a classifier, in torch."""

    class Encoder(torch.nn.Module):  # type: ignore[misc, name-defined]
        def __init__(self) -> None:
            super().__init__()
            self.emb = torch.nn.Embedding(50, 16)
            self.pos = torch.nn.Parameter(torch.randn(8, 16) * 0.1)
            self.qkv, self.out = torch.nn.Linear(16, 48), torch.nn.Linear(16, 16)
            self.ln1, self.ln2 = torch.nn.LayerNorm(16), torch.nn.LayerNorm(16)
            self.ff = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 16))
            self.head = torch.nn.Linear(16, 5)

        def forward(self, ids: Any) -> Any:
            b, s = ids.shape
            x = self.emb(ids) + self.pos[:s]
            q, k, v = self.qkv(x).view(b, s, 3, 2, 8).permute(2, 0, 3, 1, 4)
            att = torch.softmax(q @ k.transpose(-1, -2) / 8 ** 0.5, dim=-1)
            h = self.ln1(x + self.out((att @ v).transpose(1, 2).reshape(b, s, -1)))
            h = self.ln2(h + self.ff(h))
            pooled = torch.cat([h[:, :1], h.mean(1, keepdim=True)], dim=1)
            return torch.log_softmax(self.head(pooled), dim=-1)

    torch.manual_seed(0)
    return Encoder().eval()


def test_a_transformer_encoder_from_torch_is_one_native_kernel() -> None:
    torch = require("torch", "torch")
    module = _encoder(torch)
    g = nx.from_torch(module, (torch.randint(0, 50, (2, 8)),),
                      dynamic_shapes=({0: torch.export.Dim("batch", min=1, max=64)},))
    ops = {n.op.name for n in g.nodes()}
    assert {"Gather", "Gemm", "MatMul", "Softmax", "LayerNormalization", "Gelu", "LogSoftmax", "Concat",
            "Slice"} <= ops
    exe = native(g)
    for batch in (1, 3):
        ids = torch.randint(0, 50, (batch, 8), generator=torch.Generator().manual_seed(batch))
        with torch.no_grad():
            want = module(ids).numpy()
        np.testing.assert_allclose(exe(ids.numpy()), want, rtol=1e-5, atol=1e-5)
    bad = np.array([[0, 1, 2, 3, 4, 5, 6, 50]])
    with pytest.raises(nx.NexusRuntimeError, match="IndexError"):  # the embedding's lookup
        exe(bad)


def test_the_inner_loop_over_a_head_dim_vectorises_without_gathers() -> None:
    # [batch, seq, heads, 32]: LLVM unrolled the loop over 32 and vectorised the one around it
    # with a gather and a scatter per element (18x slower); it stays a loop and vectorises
    g = graph([TensorType("f32", (N, 64, 4, 32))],
              lambda g, b, x: g.add("Neg", [g.add("Transpose", [x], b, {"perm": [0, 2, 1, 3]})], b))
    exe = native(g)
    text = exe.optimized_ir()
    assert "masked.gather" not in text and "masked.scatter" not in text
    assert re.search(r"<(4|8|16) x float>", text)
    x = RNG.normal(size=(2, 64, 4, 32)).astype(np.float32)
    np.testing.assert_array_equal(exe(x), -np.transpose(x, (0, 2, 1, 3)))


def test_softmax_exp_of_f32_is_within_two_ulp_down_to_subnormals() -> None:
    # softmax([0, d])[1] = e^d / (1 + e^d): e^d itself from -110 (0) through the subnormals up
    g = graph([TensorType("f32", (N, 2))], lambda g, b, x: g.add("Softmax", [x], b, {"axis": 1}))
    d = np.concatenate([np.linspace(-110, 0, 20001), [-np.inf, -87.33, -103.9, -103.98, -104.0]]).astype(np.float32)
    got = native(g)(np.stack([np.zeros_like(d), d], 1))[:, 1].astype(np.float64)
    d64 = d.astype(np.float64)
    want = (np.exp(d64) / (1 + np.exp(d64))).astype(np.float32)
    ulp = np.spacing(np.abs(want)).astype(np.float64)
    assert (np.abs(got - want) <= 2 * ulp).all()
    assert got[-5] == 0.0 and got[0] == 0.0
    big = np.array([[88.0, 0.0], [-3.0, 88.7]], np.float32)  # shifted by the row max: no overflow
    np.testing.assert_allclose(native(g)(big), _softmax(big.astype(np.float64), 1), rtol=2e-7, atol=1e-38)


@pytest.mark.parametrize("attrs,dim", [({"num_outputs": 3}, 7), ({"num_outputs": 3}, 6), ({"split": (1, 4, 2)}, 7)])
@pytest.mark.parametrize("symbolic", [False, True])
def test_split_parts_are_views_at_their_offsets(attrs: dict[str, Any], dim: int, symbolic: bool) -> None:
    """Split along a middle axis, the parts recombined (so the kernel returns one tensor):
    part k times k+1, concatenated; NumPy's array_split sizes are ONNX's for these."""
    shape = (2, N if symbolic else dim, 3)

    def build(g: Graph, b: Block, x: Node) -> Node:
        s = g.add("Split", [x], b, {"axis": 1, **attrs})
        parts = [g.add("Proj", [s], b, {"num": k}) for k in range(3)]
        scaled = [g.add("Mul", [p, const(g, b, np.array(k + 1, np.float64))], b) for k, p in enumerate(parts)]
        return g.add("Concat", scaled, b, {"axis": 1})

    g = graph([TensorType("f64", shape)], build)
    x = RNG.standard_normal((2, dim, 3))
    bounds = np.cumsum(attrs["split"])[:-1] if "split" in attrs else [-(-dim // 3) * k for k in (1, 2)]
    want = np.concatenate([p * (k + 1) for k, p in enumerate(np.split(x, bounds, axis=1))], axis=1)
    check(g, [x], want, "f64")


@pytest.mark.parametrize("op", ["exp", "sigmoid"])
def test_exp_and_sigmoid_on_f32_are_inline_and_within_a_few_ulps(op: str) -> None:
    """Exp and Sigmoid on f32 compute exp in arithmetic (rules.exp_f32), so their loop
    vectorises: no libm call is left, and every result is within 3 ulp of the f64 oracle
    (where it is a normal float) or equal to it (inf, 0, NaN)."""
    x = np.concatenate([np.linspace(-110, 95, 200_001, dtype=np.float32),
                        np.array([np.inf, -np.inf, np.nan, 0.0, -0.0, 88.7, 88.8, -87.3, -103.9], np.float32)])
    with nx.function("f", x=("f32", ("N",))) as fn:
        (v,) = fn.args
        fn.returns(getattr(nx, op)(v))
    exe = native(fn.graph)
    ir_text = exe.optimized_ir()
    assert "expf" not in ir_text and "llvm.exp." not in ir_text and re.search(r"<\d+ x float>", ir_text)
    got = exe(x).astype(np.float64)
    x64 = x.astype(np.float64)
    with np.errstate(over="ignore"):
        want = np.exp(x64) if op == "exp" else 1.0 / (1.0 + np.exp(-x64))
    tiny = np.finfo(np.float32).tiny
    with np.errstate(over="ignore"):
        want32 = want.astype(np.float32)
    normal = np.isfinite(want32) & (np.abs(want32) >= tiny)
    ulp = np.spacing(np.abs(want32[normal])).astype(np.float64)
    assert np.max(np.abs(got[normal] - want[normal]) / ulp) <= 3.0
    rest = ~normal & ~np.isnan(x64)  # inf, and below the normal range (sigmoid's 1 / (1 + inf) is 0, as NumPy's)
    np.testing.assert_allclose(got[rest], want32[rest], rtol=0, atol=tiny)
    assert np.isnan(got[np.isnan(x64)]).all()
