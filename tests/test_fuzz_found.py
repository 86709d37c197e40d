"""Programs of the script fuzzer (``python -m nexus.testing.py_gen --backend xla|llvm``) on
which a backend failed: inside JAX (an AssertionError, a TypeError about a loop's carry,
XLA aborting the process) or by refusing a call where Python goes on.  Each must now agree
with Python or, where the backend's limits allow it, refuse by name (a node named).  The
oracle is plain Python running the same source.  The programs and their inputs are kept
in ``fixtures/<backend>_fuzz_found`` (the generator changes: the same seed later draws
other programs)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import nexus as nx
from nexus.testing.extras import BACKEND_MODULES, require
from nexus.testing.py_gen import same

FIXTURES = Path(__file__).parent / "fixtures"


def _outcome(fn: Any, args: tuple[Any, ...]) -> tuple[bool, Any]:
    try:
        return True, fn(*args)
    except Exception as e:  # noqa: BLE001  (an error is an outcome to compare)
        return False, e


# (backend, fixture, whether a refusal by name is an answer)
FOUND = [
    ("xla", "seed40_program222", True),  # a value unassigned on one path
    ("xla", "seed40_program368", True),  # a carry padded on entry only
    ("xla", "seed3_program885", True),  # a conditional XLA:CPU folded into a tuple constant, then aborted on
    # A loop outlined to native code refused its call on entry (the carried v sized by an
    # unassigned stand-in) where Python goes on and raises UnboundLocalError in the loop.
    ("llvm", "seed0_program570", False),
]


@pytest.mark.parametrize("backend, name, may_refuse", FOUND)
def test_the_program_agrees_with_python(backend: str, name: str, may_refuse: bool) -> None:
    require(BACKEND_MODULES[backend], backend)
    src = (FIXTURES / f"{backend}_fuzz_found" / f"{name}.txt").read_text()
    runs = json.loads(src.splitlines()[2].removeprefix("# inputs: "))
    py: dict[str, Any] = {"script": lambda fn: fn}
    exec(compile(src, "<py_gen program>", "exec"), py)  # noqa: S102  (the fuzzer's program)
    options = {"strict_float": True} if backend == "xla" else {}
    exe = nx.compile(nx.script_source(src, "f", {"script": nx.script}), backend=backend, **options)
    for run in runs:
        args = tuple(np.array(a["array"], dtype=a["dtype"]) if isinstance(a, dict) else a for a in run)
        ok_py, want = _outcome(py["f"], tuple(a.copy() if isinstance(a, np.ndarray) else a for a in args))
        ok_nx, got = _outcome(exe, args)
        if may_refuse and not ok_nx and type(got).__name__ == "XlaLoweringError":
            assert got.node is not None  # named
            continue
        assert ok_nx == ok_py, f"Python: {want!r}; {backend}: {got!r}"
        if ok_py:
            assert same(want, got)
        else:
            assert type(got) is type(want), f"Python: {want!r}; {backend}: {got!r}"
