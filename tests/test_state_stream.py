"""Acceptance tests of streams (issue 16): a streaming RNN fed in chunks equals the whole
sequence at once and a NumPy RNN; a running-mean normaliser keeps the statistics of all
data seen over 1,000 calls (NumPy mean/var of the concatenation); a saved stream
restored in a new process continues exactly as an uninterrupted one and as NumPy."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import nexus as nx
from nexus import Tensor

ROOT = Path(__file__).resolve().parents[1]
_rng = np.random.default_rng(16)
W = (_rng.normal(size=(4, 3)) * 0.5).astype(np.float32)
U = (_rng.normal(size=(4, 4)) * 0.5).astype(np.float32)
B = (_rng.normal(size=4) * 0.1).astype(np.float32)
H = nx.state("h", np.zeros(4, np.float32))


@nx.script
def rnn(xs: Tensor["T", 3]):  # type: ignore[no-untyped-def]  # noqa: F821, UP037  ("T" is a dim name)
    h = H.read()
    ys = np.zeros((xs.shape[0], 4), np.float32)
    for t in range(xs.shape[0]):
        h = np.tanh(W @ xs[t] + U @ h + B)
        ys[t] = h
    H.assign(h)
    return ys


def numpy_rnn(xs: np.ndarray, h: np.ndarray | None = None) -> np.ndarray:
    """The oracle: the same recurrence in plain NumPy, one step at a time."""
    h = np.zeros(4, np.float32) if h is None else h
    out = []
    for x in xs:
        h = np.tanh(W @ x + U @ h + B)
        out.append(h)
    return np.array(out)


@pytest.mark.parametrize("chunk", [1, 7, 64])
def test_rnn_in_chunks_equals_the_whole_sequence(chunk: int) -> None:
    xs = _rng.normal(size=(150, 3)).astype(np.float32)
    whole = nx.stream(rnn).step(xs)
    np.testing.assert_allclose(whole, numpy_rnn(xs), rtol=1e-5, atol=1e-6)
    s = nx.stream(rnn)
    parts = [s.step(xs[i:i + chunk]) for i in range(0, len(xs), chunk)]
    # Chunking changes nothing: the same float32 operations in the same order.
    np.testing.assert_array_equal(np.concatenate(parts), whole)
    np.testing.assert_allclose(s.snapshot()["h"], numpy_rnn(xs)[-1], rtol=1e-5, atol=1e-6)


def test_reset_snapshot_restore() -> None:
    xs = _rng.normal(size=(20, 3)).astype(np.float32)
    s = nx.stream(rnn)
    s.step(xs[:10])
    snap = s.snapshot()
    after = s.step(xs[10:])
    s.restore(snap)
    np.testing.assert_array_equal(s.step(xs[10:]), after)
    s.reset()
    np.testing.assert_array_equal(s.step(xs[:10]), nx.stream(rnn).step(xs[:10]))
    assert s.snapshot()["h"] is not s.store.values["h"]  # a snapshot is a copy


# --- a running-mean normaliser, built with the DSL ---------------------------------------
EPS = 1e-8


def normaliser() -> nx.Graph:
    """Chan et al.'s pairwise update of count, mean and M2 per call; returns the chunk
    normalised with the statistics of all data seen so far (this chunk included)."""
    count = nx.state("count", np.zeros((), np.float64))
    mean = nx.state("mean", np.zeros(4, np.float64))
    m2 = nx.state("m2", np.zeros(4, np.float64))
    with nx.function("normalise", x=("f64", ("N", 4))) as f:
        x = f.args[0]
        n_a, mean_a, m2_a = count.read(), mean.read(), m2.read()
        n_b = nx.cast(nx.dim_size(x, axis=0), to="f64")
        mean_b = nx.reduce_mean(x, axes=(0,))
        d_b = x - mean_b
        m2_b = nx.reduce_sum(d_b * d_b, axes=(0,))
        n = n_a + n_b
        delta = mean_b - mean_a
        new_mean = mean_a + delta * (n_b / n)
        new_m2 = m2_a + m2_b + delta * delta * (n_a * n_b / n)
        count.assign(n)
        mean.assign(new_mean)
        m2.assign(new_m2)
        f.returns((x - new_mean) / nx.sqrt(new_m2 / n + EPS))
    return f.graph


def test_running_mean_over_1000_calls() -> None:
    s = nx.stream(normaliser())
    rng = np.random.default_rng(3)
    seen: list[np.ndarray] = []
    for call in range(1000):
        x = rng.normal(loc=5.0, scale=[1.0, 2.0, 0.5, 10.0], size=(int(rng.integers(1, 6)), 4))
        out = s.step(x)
        seen.append(x)
        if call % 97 == 0 or call == 999:
            data = np.concatenate(seen)
            mu, var = data.mean(axis=0), data.var(axis=0)
            np.testing.assert_allclose(out, (x - mu) / np.sqrt(var + EPS), rtol=1e-9, atol=1e-9)
    data = np.concatenate(seen)
    snap = s.snapshot()
    assert snap["count"] == len(data)
    np.testing.assert_allclose(snap["mean"], data.mean(axis=0), rtol=1e-12)
    np.testing.assert_allclose(snap["m2"] / snap["count"], data.var(axis=0), rtol=1e-10)


# --- a snapshot saved, restored in a new process -------------------------------------------
def test_saved_stream_continues_in_a_new_process(tmp_path: Path) -> None:
    xs = _rng.normal(size=(40, 3)).astype(np.float32)
    s = nx.stream(rnn)
    s.step(xs[:25])
    s.save(tmp_path / "rnn.nx")
    np.save(tmp_path / "rest.npy", xs[25:])
    code = (
        "import sys, numpy as np, nexus as nx\n"
        "d = sys.argv[1]\n"
        "s = nx.load_stream(d + '/rnn.nx')\n"
        "rest = np.load(d + '/rest.npy')\n"
        "np.save(d + '/out.npy', np.concatenate([s.step(rest[:6]), s.step(rest[6:])]))\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True,
                          timeout=120, env=env)
    assert done.returncode == 0, done.stderr
    resumed = np.load(tmp_path / "out.npy")
    uninterrupted = s.step(xs[25:])  # the stream that was never saved goes on from the same state
    np.testing.assert_array_equal(resumed, uninterrupted)
    np.testing.assert_allclose(resumed, numpy_rnn(xs)[25:], rtol=1e-5, atol=1e-6)


def test_saved_snapshot_loads_without_code(tmp_path: Path) -> None:
    # The state file is safetensors: raw bytes and a JSON header, readable without Nexus.
    s = nx.stream(normaliser())
    s.step(np.arange(8.0).reshape(2, 4))
    s.save(tmp_path / "norm.nx")
    from safetensors.numpy import load_file

    state = load_file(str(tmp_path / "norm.nx.state.safetensors"))
    np.testing.assert_array_equal(state["mean"], [2.0, 3.0, 4.0, 5.0])
    assert state["count"] == 2.0
