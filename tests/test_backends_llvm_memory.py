"""SetItem on the llvm backend (``x[i] = v`` as a store): results against NumPy on copies,
arguments never written, in-place writes only where nothing can see them."""

from __future__ import annotations

import numpy as np
import pytest

from nexus.testing.extras import require

require("llvmlite", "llvm")

import nexus as nx  # noqa: E402
from nexus.backends.base import NexusRuntimeError  # noqa: E402
from nexus.backends.llvm.backend import LLVMExecutable  # noqa: E402


@nx.script
def _rows(a, i: int, v: float):
    b = a * 2.0
    b[i, 1] = v
    b[-1] = v + 1
    b[0] = a[2]
    return b


@nx.script
def _fill(x, n: int):
    y = x * 1.0
    z = y
    for i in range(n):
        y[i] = y[i] + 1.0
    return y, z


@nx.script
def _arg(x, i: int):
    x[i] = 7
    return x


def _numpy_rows(a: np.ndarray, i: int, v: float) -> np.ndarray:
    b = a * 2.0
    b[i, 1] = v
    b[-1] = v + 1
    b[0] = a[2]
    return b


def test_setitem_int_indices_and_row_broadcast_match_numpy() -> None:
    a = np.arange(12.0).reshape(3, 4)
    exe = nx.compile(_rows.graph_for(a, 1, 5.0), backend="llvm")
    assert isinstance(exe, LLVMExecutable)
    for i in (0, 1, -2, -3):
        np.testing.assert_array_equal(exe(a, i, 5.5), _numpy_rows(a, i, 5.5))
    with pytest.raises(NexusRuntimeError, match="IndexError"):
        exe(a, 3, 1.0)
    with pytest.raises(NexusRuntimeError, match="IndexError"):
        exe(a, -4, 1.0)


def test_setitem_in_a_loop_is_a_value_and_leaves_the_argument_alone() -> None:
    x = np.arange(6.0)
    keep = x.copy()
    exe = nx.compile(_fill.graph_for(x, 3), backend="llvm")
    assert isinstance(exe, LLVMExecutable)
    y, z = exe(x, 4)
    np.testing.assert_array_equal(y, [1, 2, 3, 4, 4, 5])
    np.testing.assert_array_equal(z, keep)  # SetItem is a value: the earlier name keeps the old one
    np.testing.assert_array_equal(x, keep)


def test_setitem_never_writes_into_an_argument() -> None:
    x = np.arange(5, dtype=np.int64)
    exe = nx.compile(_arg.graph_for(x, 1), backend="llvm")
    assert isinstance(exe, LLVMExecutable)
    np.testing.assert_array_equal(exe(x, -1), [0, 1, 2, 3, 7])
    np.testing.assert_array_equal(x, np.arange(5))


def _loop_blocks(ir_text: str) -> dict[str, str]:
    """The basic blocks of the emitted function that lie on a cycle (a loop), by label."""
    import re

    body: dict[str, str] = {}
    label = ""
    for line in ir_text.splitlines():
        m = re.match(r'^"?([\w.]+)"?:', line)
        if m:
            label = m.group(1)
            body[label] = ""
        elif label:
            body[label] += line + "\n"
    succ = {b: set(re.findall(r'label %"([\w.]+)"', text)) for b, text in body.items()}

    def reach(start: str) -> set[str]:
        seen, work = set(), list(succ.get(start, ()))
        while work:
            b = work.pop()
            if b not in seen:
                seen.add(b)
                work.extend(succ.get(b, ()))
        return seen

    return {b: text for b, text in body.items() if b in reach(b)}


def test_setitem_in_a_loop_writes_in_place() -> None:
    """No copy of the array (memcpy) and no allocation inside the loop: the writes go into
    the buffer, which one copy before the loop made the function's own (``z = y`` keeps y)."""
    x = np.zeros(100_000)
    exe = nx.compile(_fill.graph_for(x, 3), backend="llvm")
    loops = _loop_blocks(exe.source())
    assert any(b.startswith("b.for") for b in loops)  # the script's loop is found
    assert not [b for b, text in loops.items() if "memcpy" in text or "malloc" in text]
    y, _ = exe(x, 100_000)
    np.testing.assert_array_equal(y, np.ones(100_000))


@nx.script
def _lazy_reader(x, i: int):
    y = x + 1.0
    w = y * 2.0
    y[i] = 100.0
    return w, y


def test_setitem_copies_when_a_lazy_value_still_reads_the_buffer() -> None:
    x = np.arange(4.0)
    exe = nx.compile(_lazy_reader.graph_for(x, 0), backend="llvm")
    assert isinstance(exe, LLVMExecutable)
    w, y = exe(x, 2)
    np.testing.assert_array_equal(w, (x + 1.0) * 2.0)
    np.testing.assert_array_equal(y, [1, 2, 100, 4])
