"""Programs of the script fuzzer (``python -m nexus.testing.py_gen --seed 40 --backend
xla``) on which the xla backend failed inside JAX (an AssertionError, a TypeError about
a loop's carry) instead of agreeing with Python or refusing by name.  Each must now do
one of those two: the oracle is plain Python running the same source."""

from __future__ import annotations

import random
from typing import Any

import pytest

from nexus.testing.extras import require

require("jax", "xla")

import nexus as nx  # noqa: E402
from nexus.backends.xla.trace import XlaLoweringError  # noqa: E402
from nexus.testing.py_gen import Gen, random_inputs, same  # noqa: E402


def _outcome(fn: Any, args: tuple[Any, ...]) -> tuple[bool, Any]:
    try:
        return True, fn(*args)
    except Exception as e:  # noqa: BLE001  (an error is an outcome to compare)
        return False, e


@pytest.mark.parametrize("k", [222, 368])  # a value unassigned on one path; a carry padded on entry only
def test_the_program_agrees_with_python_or_is_refused_by_name(k: int) -> None:
    seed = 40
    rng = random.Random(seed * 1_000_003 + k)  # as py_gen.fuzz draws program k of the seed
    arrays = k % 2 == 0
    f32 = arrays and k % 4 == 2
    src = Gen(rng, arrays=arrays, f32=f32, max_depth=3, numpy=True, partial=True).program()
    py: dict[str, Any] = {"script": lambda fn: fn}
    exec(compile(src, "<py_gen program>", "exec"), py)  # noqa: S102  (the fuzzer's program)
    exe = nx.compile(nx.script_source(src, "f", {"script": nx.script}), backend="xla", strict_float=True)
    for _ in range(3):
        args = random_inputs(rng, arrays, f32)
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
