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


@pytest.mark.parametrize("k", [222, 368])  # a value unassigned on one path; a carry padded on entry only
def test_the_program_agrees_with_python_or_is_refused_by_name(k: int) -> None:
    src = (FOUND / f"seed40_program{k}.txt").read_text()
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
