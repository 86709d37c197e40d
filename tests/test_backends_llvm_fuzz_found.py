"""Programs of the script fuzzer (``python -m nexus.testing.py_gen --backend llvm``) on which
the llvm backend did not agree with Python.  Each must now agree or refuse by name; the
oracle is plain Python running the same source.  The programs and their inputs are kept in
``fixtures/llvm_fuzz_found`` (the generator changes: the same seed later draws others)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from nexus.testing.extras import require

require("llvmlite", "llvm")

import nexus as nx  # noqa: E402
from nexus.backends.base import MissingLoweringError  # noqa: E402
from nexus.testing.py_gen import same  # noqa: E402

FOUND = Path(__file__).parent / "fixtures" / "llvm_fuzz_found"


def _outcome(fn: Any, args: tuple[Any, ...]) -> tuple[bool, Any]:
    try:
        return True, fn(*args)
    except Exception as e:  # noqa: BLE001  (an error is an outcome to compare)
        return False, e


@pytest.mark.parametrize("name", [
    # A loop outlined to native code refused its call on entry (the carried v sized by an
    # unassigned stand-in) where Python goes on and raises UnboundLocalError in the loop:
    # the interpreter now runs a kernel that refuses on entry itself.
    "seed0_program570",
])
def test_the_program_agrees_with_python(name: str) -> None:
    src = (FOUND / f"{name}.txt").read_text()
    runs = json.loads(src.splitlines()[2].removeprefix("# inputs: "))
    py: dict[str, Any] = {"script": lambda fn: fn}
    exec(compile(src, "<py_gen program>", "exec"), py)  # noqa: S102  (the fuzzer's program)
    exe = nx.compile(nx.script_source(src, "f", {"script": nx.script}), backend="llvm")
    for run in runs:
        args = tuple(np.array(a["array"], dtype=a["dtype"]) if isinstance(a, dict) else a for a in run)
        ok_py, want = _outcome(py["f"], tuple(a.copy() if isinstance(a, np.ndarray) else a for a in args))
        ok_nx, got = _outcome(exe, args)
        assert not isinstance(got, MissingLoweringError), got
        assert ok_nx == ok_py, f"Python: {want!r}; llvm: {got!r}"
        if ok_py:
            assert same(want, got)
        else:
            assert type(got) is type(want), f"Python: {want!r}; llvm: {got!r}"
