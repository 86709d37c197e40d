"""The llvm backend's optimisation levels (issue 34, nexus.backends.llvm.target): O3 for
small modules, a cheaper level for large ones, ``opt_level=`` to choose; every level gives
NumPy's results, and the level is part of the object cache's key."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from nexus.testing.extras import require

require("llvmlite", "llvm")

import nexus as nx  # noqa: E402
from nexus.backends.llvm import LLVMExecutable, target  # noqa: E402
from nexus.passes.examples import rnn, rnn_inputs, rnn_reference  # noqa: E402

RNG = np.random.default_rng(34)
W = RNG.standard_normal((16, 24)).astype(np.float32)


def _layer() -> nx.Graph:
    """A MatMul through BLAS, then a fused elementwise stretch with tanh, erf and exp."""
    with nx.function("layer", x=("f32", (37, 16))) as f:
        (x,) = f.args
        y = nx.matmul(x, nx.constant(W))
        f.returns(nx.tanh(y * 0.5) + nx.erf(y) - nx.exp(nx.relu(y) * -1.0))
    return f.graph


def _layer_oracle(x: np.ndarray) -> np.ndarray:
    from math import erf

    y = x.astype(np.float64) @ W.astype(np.float64)
    return np.tanh(y * 0.5) + np.vectorize(erf)(y) - np.exp(-np.maximum(y, 0.0))


def _compile(g: nx.Graph, **options: object) -> LLVMExecutable:
    exe = nx.compile(g, backend="llvm", **options)
    assert isinstance(exe, LLVMExecutable), getattr(exe, "reason", exe)
    return exe


@pytest.mark.parametrize("level", [0, 1, 2, 3])
def test_every_level_gives_numpys_results(level: int) -> None:
    x = RNG.standard_normal((37, 16)).astype(np.float32)
    exe = _compile(_layer(), opt_level=level, cache=False)
    assert exe.jit.level == level
    np.testing.assert_allclose(exe(x).astype(np.float64), _layer_oracle(x), rtol=2e-5, atol=2e-5)
    # a loop: the RNN with T at run time, against its NumPy reference
    args = rnn_inputs(7, 5, 6)
    got = _compile(rnn(7, 5, 6), opt_level=level, cache=False)(*args)
    np.testing.assert_allclose(got, rnn_reference(*args), rtol=1e-5, atol=1e-6)


def test_the_level_is_chosen_by_size(monkeypatch: pytest.MonkeyPatch) -> None:
    x = RNG.standard_normal((37, 16)).astype(np.float32)
    small = _compile(_layer(), cache=False)
    assert small.jit.level == 3 and target.instructions(small.ir) <= target.LARGE
    monkeypatch.setattr(target, "LARGE", target.instructions(small.ir) - 1)  # the same module counts as large
    large = _compile(_layer(), cache=False)
    assert large.jit.level == 2
    np.testing.assert_allclose(large(x).astype(np.float64), _layer_oracle(x), rtol=2e-5, atol=2e-5)
    assert _compile(_layer(), cache=False, opt_level=3).jit.level == 3  # the option wins over the size


def test_the_level_is_part_of_the_cache_key(tmp_path: Path) -> None:
    x = RNG.standard_normal((37, 16)).astype(np.float32)
    first = [_compile(_layer(), cache=tmp_path, opt_level=lv) for lv in (3, 2, 3, 2)]
    assert [e.jit.cached for e in first] == [False, False, True, True]
    assert len(list(tmp_path.glob("*.o"))) == 2
    for e in first:
        np.testing.assert_allclose(e(x).astype(np.float64), _layer_oracle(x), rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("bad", [4, -1, "3", True, 2.0])
def test_a_bad_level_is_refused_in_one_line(bad: object) -> None:
    with pytest.raises(ValueError, match="opt_level is 0, 1, 2, 3 or None"):
        nx.compile(_layer(), backend="llvm", opt_level=bad)


def test_assembly_and_ir_at_a_chosen_level() -> None:
    from nexus.backends.llvm.backend import asm, llvm_ir

    with nx.function("axpb", x=("f32", ("N",))) as f:
        (x,) = f.args
        f.returns(x * 2.0 + 1.0)
    g = f.graph
    o3, o2, o1 = (llvm_ir(g, opt_level=lv) for lv in (3, 2, 1))
    # O3 and O2 vectorise the fused loop (O3 also interleaves it); O1 leaves it scalar
    assert re.search(r"<\d+ x float>", o3) and re.search(r"<\d+ x float>", o2)
    assert not re.search(r"<\d+ x float>", o1)
    assert len(o3) > len(o2) > len(o1)
    assert "ret" in asm(g, opt_level=0)
