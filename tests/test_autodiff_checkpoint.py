"""Checkpointed tape mode: the same gradients as storing everything, with peak memory
growing like sqrt(T) instead of T (measured with tracemalloc)."""

from __future__ import annotations

import math
import tracemalloc
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import nexus as nx
from nexus.autodiff.examples import damped_loop, rnn


def _rnn_args(T: int, B: int = 4, D: int = 32, H: int = 32) -> list[Any]:
    rng = np.random.default_rng(T)
    return [rng.normal(size=(T, B, D)), rng.normal(size=(H, D)) * 0.1, rng.normal(size=(H, H)) * 0.1,
            rng.normal(size=(B, H)), T]


@pytest.mark.parametrize("every", [1, 2, 5, 1000])
def test_checkpointed_rnn_gradients_equal_full_tape(every: int) -> None:
    g, args = rnn(batched=True), _rnn_args(13)
    want = nx.grad(g, argnums=(1, 2, 3), mode="tape")(*args)
    got = nx.grad(g, argnums=(1, 2, 3), mode="tape", checkpoint=every)(*args)
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("every", [1, 3, 7])
def test_checkpointed_while_loop_with_break_and_continue(every: int) -> None:
    x, w = np.full(5, 3.0), np.full(5, 0.1)
    args = (x, w, 0.1, 6.0, 40)
    want = nx.grad(damped_loop(), argnums=(0, 1), mode="graph")(*args)
    got = nx.grad(damped_loop(), argnums=(0, 1), mode="tape", checkpoint=every)(*args)
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-12)


def _peak(fn: Callable[[], Any]) -> int:
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_checkpoint_peak_memory_grows_like_sqrt_t() -> None:
    g = rnn(batched=True)
    peaks: dict[tuple[str, int], int] = {}
    for every in (None, 4):  # warm up: the first call compiles the recorder and the VJPs, once
        nx.grad(g, argnums=(1, 2, 3), mode="tape", checkpoint=every)(*_rnn_args(8))
    for T in (128, 512):
        args = _rnn_args(T)
        every = int(math.sqrt(T))  # one state entry (the loop header) per iteration
        peaks["full", T] = _peak(lambda args=args: nx.grad(g, argnums=(1, 2, 3), mode="tape")(*args))
        peaks["ckpt", T] = _peak(lambda args=args, every=every: nx.grad(
            g, argnums=(1, 2, 3), mode="tape", checkpoint=every)(*args))
    # (measured: full 0.66 -> 2.5 MB, checkpointed 0.14 -> 0.22 MB)
    assert peaks["full", 512] > 3.2 * peaks["full", 128]  # storing everything: linear in T
    assert peaks["ckpt", 512] < 2.5 * peaks["ckpt", 128]  # checkpoints: about sqrt(T)
    assert peaks["ckpt", 512] < peaks["full", 512] / 5


def test_checkpoint_needs_tape_mode() -> None:
    with pytest.raises(ValueError, match="tape"):
        nx.grad(rnn(), mode="graph", checkpoint=4)()
