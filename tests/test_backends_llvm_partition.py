"""Partitioning on the llvm backend: loops that compile are outlined into native kernels,
called from the python backend, when other ops of the graph have no llvm rule."""

from __future__ import annotations

import numpy as np

from nexus.testing.extras import require

require("llvmlite", "llvm")

import nexus as nx  # noqa: E402
from nexus.backends.llvm.partition import Partitioned  # noqa: E402


@nx.script
def _outer_has_cumsum(x, n: int):
    acc = 0.0
    for t in range(n):
        c = np.cumsum(x)          # no llvm rule: this loop stays in Python
        s = 0.0
        for i in range(len(x)):   # this one becomes a kernel
            s = s + c[i] * (t + 1)
        acc = acc + s
    return acc


@nx.script
def _loop_then_slice(x, n: int):
    y = np.zeros(len(x))
    k = 0
    for i in range(len(x)):
        if x[i] > 0.0:
            y[k] = x[i] * 2.0
            k += 1
    return y[:k], n


def test_inner_loop_is_outlined_when_the_outer_loop_cannot_compile() -> None:
    x = np.array([1.0, -2.0, 3.5])
    exe = nx.compile(_outer_has_cumsum.graph_for(x, 3), backend="llvm")
    assert isinstance(exe, Partitioned)
    assert len(exe.kernels) == 1 and exe.missing.get("CumSum") == 1
    assert exe.stayed_out.get("CumSum") == 1
    assert "Mul" not in exe.stayed_out  # the inner loop's arithmetic is native
    for n in (0, 1, 4):
        want = sum(float(np.cumsum(x).sum()) * (t + 1) for t in range(n))
        assert abs(exe(x, n) - want) < 1e-12


def test_loop_with_setitem_is_a_kernel_and_the_slice_runs_in_python() -> None:
    x = np.array([1.0, -2.0, 3.5, 0.0, 4.0])
    exe = nx.compile(_loop_then_slice.graph_for(x, 0), backend="llvm")
    assert isinstance(exe, Partitioned) and len(exe.kernels) == 1
    assert "SetItem" not in exe.stayed_out and "Slice" in exe.stayed_out
    y, n = exe(x, 7)
    np.testing.assert_array_equal(y, x[x > 0] * 2.0)
    assert n == 7
    np.testing.assert_array_equal(exe(-x, 1)[0], (-x)[-x > 0] * 2.0)


@nx.script
def _strided(v, n: int):
    w = v[1:-3:2]                 # a dim ceil((len(v) - 4) / 2): the kernel's argument binds a fresh symbol
    c = np.cumsum(v)[0]           # no rule: the graph is partitioned
    s = 0.0
    for i in range(n):            # the kernel's only array is w
        s = s + w[0] * i + c
    return s


def test_a_kernel_argument_with_a_dim_expression_binds() -> None:
    v = np.arange(9.0)
    exe = nx.compile(_strided.graph_for(v, 2), backend="llvm")
    assert isinstance(exe, Partitioned)
    for n in (0, 3):
        assert exe(v, n) == sum(v[1:-3:2][0] * i + v[0] for i in range(n))
