"""The auto backend: one graph across ONNX Runtime, LLVM and the python backend, with
``exe.partitions`` saying where each region runs and why.  The oracles are plain Python
running the same function and torch eager."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import nexus as nx
from nexus.backends import auto
from nexus.ir.extras import MissingExtra
from nexus.testing.extras import require


def collatz(n: int):  # noqa: ANN201
    steps = 0
    while n != 1:
        if n % 2 == 0:
            n = n // 2
        else:
            n = 3 * n + 1
        steps += 1
    return steps


def relay(x, w, n: int):  # noqa: ANN001, ANN201
    i = 0
    while i < n:
        x = np.tanh(x @ w) + x
        i += 1
    return x


RNG = np.random.default_rng(1)
X = RNG.standard_normal((4, 8)).astype(np.float32)
W = (RNG.standard_normal((8, 8)) / 4).astype(np.float32)


def _exe(f: Any) -> auto.Mixed:
    exe = f._exes[f.graph]  # type: ignore[attr-defined]
    assert isinstance(exe, auto.Mixed)
    return exe


def test_a_scalar_loop_becomes_native_code() -> None:
    require("llvmlite", "llvm")
    f = nx.compile(nx.script(collatz), backend="auto")
    for n in (1, 6, 27, 97):
        assert f(n) == collatz(n)
    assert [p.engine for p in _exe(f).partitions if p.engine != "python"] == ["llvm"]


def test_a_loop_with_a_matrix_product_runs_whole_on_onnxruntime() -> None:
    """A loop of dense ops is ONNX Runtime's Loop at its own kernels' speed: one session."""
    require("onnxruntime", "onnx")
    f = nx.compile(nx.script(relay), backend="auto")
    for n in (0, 1, 4):
        np.testing.assert_allclose(f(X, W, n), relay(X, W, n), rtol=1e-5, atol=1e-6)
    (whole,) = _exe(f).partitions
    assert whole.engine == "onnxruntime" and any(n.endswith(" = MatMul") for n in whole.nodes)
    assert "%?" not in " ".join(whole.nodes)  # every node by its text-form name
    assert {m.op.name for m in whole.members} >= {"MatMul"} and all(m.graph is _exe(f).graph for m in whole.members)


def test_a_loop_with_a_matrix_product_stays_off_llvm() -> None:
    f = nx.compile(nx.script(relay), backend="auto", dense="python")
    np.testing.assert_allclose(f(X, W, 4), relay(X, W, 4), rtol=1e-5, atol=1e-6)
    assert "llvm" not in [p.engine for p in _exe(f).partitions]


def test_a_static_model_runs_whole_on_onnxruntime() -> None:
    torch = require("torch", "torch")
    require("onnxruntime", "onnx")
    m = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU(), torch.nn.Flatten(),
                            torch.nn.Linear(4 * 4 * 4, 3)).eval()
    x = torch.randn(2, 3, 6, 6)
    exe = nx.compile(nx.from_torch(m, (x,)), backend="auto")
    with torch.no_grad():
        np.testing.assert_allclose(exe(x.numpy()), m(x).numpy(), rtol=1e-4, atol=1e-6)
    (whole,) = exe.partitions  # type: ignore[attr-defined]
    assert whole.engine == "onnxruntime" and "Conv" in " ".join(whole.nodes)


def test_overrides_and_missing_engines(monkeypatch: pytest.MonkeyPatch) -> None:
    f = nx.compile(nx.script(collatz), backend="auto", loops="python", dense="python")
    assert f(27) == collatz(27)
    assert all(p.engine == "python" for p in _exe(f).partitions)
    with pytest.raises(ValueError, match="loops is 'llvm' or 'python'"):
        nx.compile(nx.script(collatz), backend="auto", loops="xla")(3)
    monkeypatch.setattr(auto.importlib.util, "find_spec", lambda name: None)
    f = nx.compile(nx.script(collatz), backend="auto")
    assert f(27) == collatz(27)
    why = " ".join(p.why for p in _exe(f).partitions)
    assert "llvmlite is not installed" in why and "onnxruntime is not installed" in why
    with pytest.raises(MissingExtra, match="llvm extra"):
        nx.compile(nx.script(collatz), backend="auto", loops="llvm")(3)


W_SMALL = (RNG.standard_normal((8, 8)) / 4).astype(np.float32)
W_BIG = (RNG.standard_normal((8, 1 << 14)) / 4).astype(np.float32)


def relay_small(x, n: int):  # noqa: ANN001, ANN201
    i = 0
    while i < n:
        x = np.tanh(x @ W_SMALL) + x
        i += 1
    return x


def relay_big(x, n: int):  # noqa: ANN001, ANN201
    i = 0
    while i < n:
        x = np.tanh(x @ W_BIG)[:, :8] + x
        i += 1
    return x


def test_a_loop_of_small_constant_products_runs_whole_as_native_code() -> None:
    """Matrix-vector work in a loop: one native kernel with BLAS calls, nothing in Python."""
    require("llvmlite", "llvm")
    require("onnxruntime", "onnx")
    f = nx.compile(nx.script(relay_small), backend="auto")
    for n in (0, 1, 5):
        np.testing.assert_allclose(f(X, n), relay_small(X, n), rtol=1e-5, atol=1e-6)
    (whole,) = _exe(f).partitions
    assert whole.engine == "llvm" and "compile natively" in whole.why
    assert {m.op.name for m in whole.members} >= {"MatMul", "Tanh", "Less"}


def test_a_loop_with_a_big_constant_product_runs_whole_as_native_code() -> None:
    """A layer's weights, however big, are packed by the llvm backend when compiling."""
    require("llvmlite", "llvm")
    require("onnxruntime", "onnx")
    f = nx.compile(nx.script(relay_big), backend="auto")
    for x in (X, np.tile(X, (4, 1)), X[:1]):  # rows below, inside and across the packed kernel's
        np.testing.assert_allclose(f(x, 3), relay_big(x, 3), rtol=1e-4, atol=1e-5)
    assert [p.engine for p in _exe(f).partitions] == ["llvm"]


def test_a_loop_with_a_big_run_time_product_stays_with_onnxruntime() -> None:
    require("llvmlite", "llvm")
    require("onnxruntime", "onnx")
    w = (RNG.standard_normal((300, 300)) / 20).astype(np.float32)
    x = RNG.standard_normal((4, 300)).astype(np.float32)
    f = nx.compile(nx.script(relay), backend="auto")
    np.testing.assert_allclose(f(x, w, 3), relay(x, w, 3), rtol=1e-4, atol=1e-5)
    assert "llvm" not in [p.engine for p in _exe(f).partitions]
