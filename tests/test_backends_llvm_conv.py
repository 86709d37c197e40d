"""What real models need on the llvm backend: weights read from the constant table (one
cached object for any weights), buffers kept between calls and calls from several threads
at once."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import numpy as np

import nexus as nx
from nexus.testing.extras import require

require("llvmlite", "llvm")
require("scipy", "llvm")

from nexus.backends.llvm import LLVMExecutable  # noqa: E402


def _graph(build: Any, *shapes: tuple[str, tuple[int, ...]]) -> Any:
    args = {f"a{i}": s for i, s in enumerate(shapes)}
    with nx.function("layer", **args) as f:
        f.returns(build(*f.args))
    return f.graph


def _whole(g: Any) -> LLVMExecutable:
    exe = nx.compile(g, backend="llvm")
    assert isinstance(exe, LLVMExecutable), getattr(exe, "reason", exe)
    return exe


def test_weights_stay_out_of_the_object_and_its_cache_key(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    ws = [rng.standard_normal((64, 64)) for _ in range(2)]
    exes = []
    for w in ws:
        g = _graph(lambda xa, w=w: nx.matmul(xa, nx.constant(w)), ("f64", (3, 64)))
        exe = nx.compile(g, backend="llvm", cache=tmp_path)
        assert isinstance(exe, LLVMExecutable)
        assert len(exe.ir) < w.nbytes  # the 32 KB of weights are not in the text
        exes.append(exe)
    assert [e.jit.cached for e in exes] == [False, True]  # one object for both sets of weights
    assert len(list(tmp_path.glob("*.o"))) == 1
    x = rng.standard_normal((3, 64))
    for exe, w in zip(exes, ws):
        np.testing.assert_allclose(exe(x), x @ w, rtol=1e-12)


def test_calls_from_several_threads_at_once() -> None:
    rng = np.random.default_rng(3)
    w1, w2 = rng.standard_normal((32, 256)), rng.standard_normal((256, 8))
    g = _graph(lambda xa: nx.matmul(nx.tanh(nx.matmul(xa, nx.constant(w1))), nx.constant(w2)), ("f64", (64, 32)))
    exe = _whole(g)
    bad: list[int] = []

    def work(k: int) -> None:
        x = np.full((64, 32), 0.01 * k)
        want = np.tanh(x @ w1) @ w2
        for _ in range(40):
            if not np.allclose(exe(x), want, rtol=1e-12):
                bad.append(k)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not bad
