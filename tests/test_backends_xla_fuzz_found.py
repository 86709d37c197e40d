"""Programs of the script fuzzer (``python -m nexus.testing.py_gen --backend xla``),
minimised by hand, on which the xla backend failed inside JAX instead of agreeing with
Python or refusing by name.  The oracle is plain Python running the same function.  (The
fuzzer's programs kept whole, for every backend, are replayed by ``test_fuzz_found.py``.)"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from nexus.testing.extras import require

require("jax", "xla")

import nexus as nx  # noqa: E402


def _outcome(fn: Any, args: tuple[Any, ...]) -> tuple[bool, Any]:
    try:
        return True, fn(*args)
    except Exception as e:  # noqa: BLE001  (an error is an outcome to compare)
        return False, e


def _two_bounds(b: int, v: np.ndarray) -> np.ndarray:
    # Seed 1's program 466, minimised: `w` comes out of the first loop padded to one bound
    # (it is a size-1 stand-in until assigned) and `v` is carried through the second padded
    # to another; `v - w` met the two bounds unequal inside JAX ("incompatible shapes").
    for _ in range(3):
        if b >= 4:
            w = np.copy(v + 1.0)
            w[::-1] = 2.0
            w = np.tanh(np.roll(w, 1))
    for j in range(b % 7):
        if j < 3:
            ls = [(v - w)]
            v = np.tanh(ls[-1])
    return v


@pytest.mark.parametrize("b", [18, 2, 0])
def test_operands_padded_to_different_bounds_meet_in_an_elementwise_op(b: int) -> None:
    v = np.array([-0.16, 0.43, -1.12], np.float32)
    ok_py, want = _outcome(_two_bounds, (b, v))
    ok_xla, got = _outcome(nx.compile(nx.script(_two_bounds), backend="xla"), (b, v))
    assert ok_xla == ok_py, f"Python: {want!r}; xla: {got!r}"
    if ok_py:
        np.testing.assert_allclose(got, want, rtol=1e-6)
    else:
        assert type(got) is type(want)
