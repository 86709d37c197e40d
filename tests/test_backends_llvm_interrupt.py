"""Native code can be stopped: Ctrl-C ends an endless llvm loop with KeyboardInterrupt, and
``max_iterations`` bounds it as on the python backend (the python backend and plain Python
are the oracles)."""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

import nexus as nx
from nexus import seeds
from nexus.backends.base import NexusRuntimeError
from nexus.testing.extras import require

require("llvmlite", "llvm")

ROOT = Path(__file__).resolve().parents[1]

# i stops moving when n is 10**12: the loop never ends (and LLVM cannot prove it does nothing)
CHILD = textwrap.dedent("""
    import signal, time
    import nexus as nx

    @nx.script
    def spin(n: int) -> int:
        s = 0
        i = 0
        while i < n:
            s = (s + i * i) % 1000003
            i = i + 1 - n // 1000000000000
        return s

    f = nx.compile(spin, backend="llvm")
    before = signal.getsignal(signal.SIGINT)
    print("small", f(10), flush=True)
    for _ in range(2):
        print("started", flush=True)
        try:
            f(10 ** 12)
            print("returned", flush=True)
        except KeyboardInterrupt:
            print("KeyboardInterrupt", flush=True)
    print("after", f(10), signal.getsignal(signal.SIGINT) is before, flush=True)
""")


def _python_spin(n: int) -> int:
    s = i = 0
    while i < n:
        s = (s + i * i) % 1000003
        i = i + 1 - n // 1000000000000
    return s


def test_sigint_stops_an_endless_native_loop_twice_and_leaves_nothing_behind(tmp_path: Path) -> None:
    script = tmp_path / "spin.py"  # a file: @nx.script reads its function's source
    script.write_text(CHILD)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    p = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True, env=env)
    assert p.stdout is not None
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(x) for x in p.stdout], daemon=True).start()  # type: ignore[union-attr]

    def line() -> str:
        try:  # a hang guard, generous: on a loaded machine the child needs seconds to compile; the stop takes ms
            return lines.get(timeout=120).strip()
        except queue.Empty:
            pytest.fail("the child printed nothing for 120 s: the native loop did not stop")

    try:
        assert line().split() == ["small", str(_python_spin(10))]
        for _ in range(2):
            assert line() == "started"
            time.sleep(1.0)  # well inside the native loop (its handler is armed after ~1000 iterations)
            p.send_signal(signal.SIGINT)
            assert line() == "KeyboardInterrupt"
        # the same executable still computes, and Python's SIGINT handler is back
        assert line().split() == ["after", str(_python_spin(10)), "True"]
        assert p.wait(timeout=60) == 0
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


def _graphs() -> list[tuple[nx.Graph, tuple[int, ...]]]:
    from bench.graphs import w2_count

    return [(seeds.skip5_loop(), ()), (w2_count(), (3,)), (w2_count(), (0,))]


@pytest.mark.parametrize("k", range(3))
def test_max_iterations_fails_where_the_python_backend_does(k: int) -> None:
    g, args = _graphs()[k]
    for limit in range(0, 40):
        try:
            want: object = nx.run(g, *args, max_iterations=limit)
        except NexusRuntimeError as e:
            want = e
        exe = nx.compile(g, backend="llvm", max_iterations=limit)
        if isinstance(want, NexusRuntimeError):
            with pytest.raises(NexusRuntimeError) as got:
                exe(*args)
            assert str(got.value) == str(want), limit
            assert "(max_iterations) and was about to enter ^" in str(got.value)
        else:
            assert int(exe(*args)) == int(want)  # type: ignore[call-overload]


def test_max_iterations_bounds_an_endless_native_loop_and_a_bounded_one_runs() -> None:
    from bench.graphs import w2_count

    g = w2_count()
    n = 100_000
    want = 0
    for i in range(n):
        want = (want + i * i) % 1000003
    # 2 blocks per iteration, the start block, the header's last entry and the exit block
    exe = nx.compile(g, backend="llvm", max_iterations=2 * n + 3)
    assert int(exe(n)) == want
    with pytest.raises(NexusRuntimeError, match=r"graph @w2_count: entered more than 200002 blocks "
                                                 r"\(max_iterations\) and was about to enter \^exit"):
        nx.compile(g, backend="llvm", max_iterations=2 * n + 2)(n)

    @nx.script
    def spin(n: int) -> int:
        s = 0
        i = 0
        while i < n:
            s = (s + i * i) % 1000003
            i = i + 1 - n // 1000000000000
        return s

    with pytest.raises(NexusRuntimeError, match=r"entered more than 1000000 blocks \(max_iterations\)"):
        nx.compile(spin, backend="llvm", max_iterations=1_000_000)(10 ** 12)
    assert int(nx.compile(spin, backend="llvm", max_iterations=1_000_000)(1000)) == _python_spin(1000)


def test_max_iterations_is_checked() -> None:
    with pytest.raises(TypeError, match="max_iterations is a non-negative int"):
        nx.compile(seeds.skip5_loop(), backend="llvm", max_iterations=-1)


def test_a_partitioned_graph_bounds_its_native_loop_too() -> None:
    import numpy as np

    from nexus.backends.llvm.partition import Partitioned
    from nexus.testing.ports import boxes, nms

    b, s = boxes(np.random.default_rng(0), 200)
    g = nms.graph_for(b, s, 0.5)
    exe = nx.compile(g, backend="llvm", max_iterations=10 ** 6)
    assert isinstance(exe, Partitioned) and exe.kernels
    assert np.array_equal(exe(b, s, 0.5), nms.fn(b, s, 0.5))
    # the kernel counts its own loop from 0, as a Call's callee does on the python backend
    with pytest.raises(NexusRuntimeError, match=r"graph @nms\.loop0: entered more than 50 blocks"):
        nx.compile(g, backend="llvm", max_iterations=50)(b, s, 0.5)
