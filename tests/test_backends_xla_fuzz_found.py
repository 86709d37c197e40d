"""Programs of the script fuzzer (``python -m nexus.testing.py_gen --seed 40 --backend
xla``) on which the xla backend failed inside JAX (an AssertionError, a TypeError about
a loop's carry) instead of agreeing with Python or refusing by name.  Each must now do
one of those two: the oracle is plain Python running the same source.  The programs and
their inputs are kept in ``fixtures/xla_fuzz_found`` (the generator has changed since:
the same seed now draws other programs)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from nexus.testing.extras import require

require("jax", "xla")

import nexus as nx  # noqa: E402
from nexus.backends.xla.trace import XlaLoweringError  # noqa: E402
from nexus.testing.py_gen import same  # noqa: E402

FOUND = Path(__file__).parent / "fixtures" / "xla_fuzz_found"


def _outcome(fn: Any, args: tuple[Any, ...]) -> tuple[bool, Any]:
    try:
        return True, fn(*args)
    except Exception as e:  # noqa: BLE001  (an error is an outcome to compare)
        return False, e


@pytest.mark.parametrize("name", [
    "seed40_program222",  # a value unassigned on one path
    "seed40_program368",  # a carry padded on entry only
    "seed3_program885",  # a conditional XLA:CPU folded into a tuple constant, then aborted on
])
def test_the_program_agrees_with_python_or_is_refused_by_name(name: str) -> None:
    src = (FOUND / f"{name}.txt").read_text()
    runs = json.loads(src.splitlines()[2].removeprefix("# inputs: "))
    py: dict[str, Any] = {"script": lambda fn: fn}
    exec(compile(src, "<py_gen program>", "exec"), py)  # noqa: S102  (the fuzzer's program)
    exe = nx.compile(nx.script_source(src, "f", {"script": nx.script}), backend="xla", strict_float=True)
    for run in runs:
        args = tuple(np.array(a["array"], dtype=a["dtype"]) if isinstance(a, dict) else a for a in run)
        ok_py, want = _outcome(py["f"], args)
        ok_xla, got = _outcome(exe, args)
        if not ok_xla and isinstance(got, XlaLoweringError):
            assert got.node is not None  # named
            continue
        assert ok_xla == ok_py, f"Python: {want!r}; xla: {got!r}"
        if ok_py:
            assert same(want, got)
        else:
            assert type(got) is type(want)


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
