"""The NumPy surface of @nx.script: each function and method against NumPy itself."""

from __future__ import annotations

import numpy as np
import pytest

import nexus as nx
from nexus.frontend.script import ScriptError, script_source

# name -> the expression a one-argument function returns (NumPy spelling, run by both).
CASES = {
    "clip": "np.clip(x, -1.0, 1.0)", "clip_none": "np.clip(x, None, 0.5)", "stack": "np.stack([x, x])",
    "stack1": "np.stack([x, x], axis=1)", "stack_neg": "np.stack((x, x), axis=-1)",
    "concat": "np.concatenate([x, x], axis=1)", "concat_none": "np.concatenate([x, x], axis=None)",
    "reshape": "np.reshape(x, (4, -1))", "m_reshape": "x.reshape(2, -1)", "m_reshape2": "x.reshape((2, 6))",
    "argmax": "np.argmax(x, axis=1)", "argmax0": "np.argmax(x)", "argmin_m": "x.argmin(axis=0)",
    "mean": "x.mean()", "mean_k": "x.mean(axis=1, keepdims=True)", "sum_k": "np.sum(x, axis=-1, keepdims=True)",
    "sum_m": "x.sum(axis=1)", "max_m": "x.max(axis=0)", "min": "np.min(x, axis=1)", "var": "np.var(x, axis=1)",
    "var_ddof": "np.var(x, axis=0, ddof=1)", "std": "x.std()", "prod": "np.prod(x, axis=0)",
    "any": "np.any(x > 0, axis=1)", "all": "np.all(x > -5)", "cumsum": "np.cumsum(x, axis=1)",
    "cumsum_flat": "np.cumsum(x)", "sort": "np.sort(x, axis=-1)", "argsort": "np.argsort(x, axis=-1)",
    "argsort0": "np.argsort(x, axis=0)", "astype": "x.astype(np.float64)", "astype_i": "x.astype(np.int64)",
    "einsum": "np.einsum('ij,kj->ik', x, x)", "T": "x.T", "transpose": "np.transpose(x)",
    "swapaxes": "np.swapaxes(x, 0, 1)", "moveaxis": "np.moveaxis(np.expand_dims(x, 0), 0, 2)",
    "expand": "np.expand_dims(x, 0)", "squeeze": "np.squeeze(np.expand_dims(x, 0), axis=0)",
    "where3": "np.where(x > 0, x, 0.0)", "exp": "np.exp(x)", "sqrt": "np.sqrt(np.abs(x))",
    "log1p": "np.log1p(np.abs(x))", "expm1": "np.expm1(x)", "power": "np.power(np.abs(x), 2.0)",
    "isnan": "np.isnan(np.log(x))", "isinf": "np.isinf(np.log(np.abs(x) * 0.0))",
    "maximum": "np.maximum(x, 0.0)", "logical": "np.logical_and(x > 0, np.logical_not(x > 1))",
    "matmul": "x @ x.T", "dot": "np.dot(x, x.T)", "outer": "np.outer(x[0], x[1])",
    "take": "np.take(x, np.array([0, 2]), axis=0)", "take_flat": "np.take(x, np.array([5, 1]))",
    "tal": "np.take_along_axis(x, np.argsort(x, axis=1), axis=1)", "flip": "np.flip(x, axis=1)",
    "flip_all": "np.flip(x)", "tile": "np.tile(x, (2, 1))", "tile1": "np.tile(x[0], 3)",
    "bcast": "np.broadcast_to(x[0], (3, 4))", "shape": "x.shape", "size": "x.size", "ndim": "x.ndim",
    "len": "len(x)", "copy": "x.copy()", "tuple1": "(x,)", "linspace": "np.linspace(0.0, 1.0, 5)",
    "linspace_open": "np.linspace(-1.0, 1.0, num=4, endpoint=False)", "eye": "np.eye(3)",
    "eye_k": "np.eye(3, 4, k=1)", "log": "np.log(np.abs(x) + 1.0)", "sign": "np.sign(x)",
    "split": "np.split(x, 2, axis=1)", "split_at": "np.split(x, [1], axis=0)",
    "zeros_like": "np.zeros_like(x)", "full_like": "np.full_like(x, 2.5)", "ones": "np.ones((2, 3))",
    "full": "np.full((2, 2), 7)", "arange": "np.arange(2, 11, 3)", "array": "np.array([1.0, 2.0, 3.5])",
    "array_vals": "np.array([x[0, 0], x[1, 1]])", "scalar_f32": "x * 2.0 + 1", "ravel": "x.ravel()",
    "f32_scalar": "np.float32(3.0) * x",
    "roll": "np.roll(x, 1)", "roll_axis": "np.roll(x, -1, axis=1)", "roll_axes": "np.roll(x, (1, 2), axis=(0, 1))",
    "repeat": "np.repeat(x, 2)", "repeat_axis": "np.repeat(x, 3, axis=0)", "m_repeat": "x.repeat(2, axis=1)",
    "repeat_list": "np.repeat(x, [1, 0, 2], axis=0)", "pad": "np.pad(x, 1)",
    "pad_edge": "np.pad(x, ((1, 2), (0, 1)), mode='edge')", "pad_reflect": "np.pad(x, (1, 2), mode='reflect')",
    "pad_value": "np.pad(x, [(1, 1), (2, 2)], constant_values=5.0)", "cumprod": "np.cumprod(x, axis=1)",
    "cumprod_flat": "np.cumprod(x)", "m_cumprod": "x.cumprod(axis=0)", "norm": "np.linalg.norm(x)",
    "norm_axis": "np.linalg.norm(x, axis=1)", "norm_1": "np.linalg.norm(x, ord=1, axis=0, keepdims=True)",
    "norm_inf": "np.linalg.norm(x, ord=np.inf, axis=1)", "norm_3": "np.linalg.norm(x, 3, axis=1)",
    "stack_array": "np.stack(x, axis=1)", "concat_array": "np.concatenate(x)",
    "list_append": "_append_rows(x)",
}


def _append_rows(x):  # type: ignore[no-untyped-def]
    rows = [x[0]]
    for t in range(1, x.shape[0]):
        if x[t, 0] > -0.5:
            rows.append(x[t] * 2.0)
    return np.stack(rows), len(rows)


def _fn(name: str, expr: str):  # type: ignore[no-untyped-def]
    text = f"def f_{name}(x):\n    return {expr}\n"
    ns: dict = {"np": np, "nx": nx, "_append_rows": _append_rows}
    exec(compile(text, f"<case {name}>", "exec"), ns)  # noqa: S102
    return ns[f"f_{name}"], script_source(text, f"f_{name}", {"np": np, "nx": nx,
                                                               "_append_rows": nx.script(_append_rows)})


def _same(got, want) -> None:  # type: ignore[no-untyped-def]
    if isinstance(want, tuple | list):
        assert isinstance(got, tuple) and len(got) == len(want), (got, want)
        for g, w in zip(got, want):
            _same(g, w)
        return
    g, w = np.asarray(got), np.asarray(want)
    assert g.shape == w.shape and g.dtype == w.dtype, (g.shape, g.dtype, w.shape, w.dtype)
    np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-6, equal_nan=True)


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_matches_numpy(name: str) -> None:
    py, scripted = _fn(name, CASES[name])
    for seed in range(2):
        x = np.random.default_rng(seed).standard_normal((3, 4)).astype(np.float32)
        _same(scripted(x), py(x))


def test_unknown_numpy_function_names_it() -> None:
    with pytest.raises(ScriptError, match="NumPy function `fft2` is not supported"):
        script_source("def f(x):\n    return np.fft.fft2(x)\n", "f", {"np": np})(np.ones((2, 2)))


def test_unknown_method_lists_the_supported_ones() -> None:
    with pytest.raises(ScriptError, match="tolist"):
        script_source("def f(x):\n    return x.tolist()\n", "f", {"np": np})(np.ones(2))
