"""Values are freed after their last use: a loop's peak memory does not grow with its trip
count, and a chain of big temporaries holds at most a few of them at once."""

from __future__ import annotations

import tracemalloc

import numpy as np

import nexus as nx
from nexus.ir.graph import Graph
from nexus.ir.types import TensorType

N = 256  # a 256 x 256 f64 temporary is 512 KiB
SIZE = N * N * 8


def loop_with_big_temporaries() -> Graph:
    """acc = 0; for i < n: t = x * 1.5; u = t + x; acc += sum(u); return acc"""
    g = Graph("mem_loop", [TensorType("f64", (N, N)), TensorType("i64", ())], ["x", "n"])
    x, n = g.args
    e = g.start_block

    def c(b: object, v: object, dt: str) -> object:
        return g.add("Constant", [], b, {"value": np.array(v, dtype=dt)})  # type: ignore[arg-type]

    zero_i, zero_f = c(e, 0, "int64"), c(e, 0.0, "float64")
    head = g.new_block("header", [g.add("Jmp", [], e)])
    i = g.add("Phi", [zero_i], head)
    acc = g.add("Phi", [zero_f], head)
    cond = g.add("Cond", [g.add("Less", [i, n], head)], head)
    body = g.new_block("body", [g.add("Proj", [cond], head, {"num": 1})])
    exit_ = g.new_block("exit", [g.add("Proj", [cond], head, {"num": 0})])
    t = g.add("Mul", [x, c(body, 1.5, "float64")], body)
    u = g.add("Add", [t, x], body)
    acc2 = g.add("Add", [acc, g.add("ReduceSum", [u], body)], body)
    head.append_input(g.add("Jmp", [], body))
    i.append_input(g.add("Add", [i, c(body, 1, "int64")], body))
    acc.append_input(acc2)
    g.end_block.append_input(g.add("Return", [acc], exit_))
    return g


def peak(fn: object, *args: object) -> tuple[object, int]:
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        out = fn(*args)  # type: ignore[operator]
        return out, tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()


def test_loop_peak_memory_does_not_grow_with_trip_count() -> None:
    g = loop_with_big_temporaries()
    x = np.ones((N, N))
    nx.run(g, x, 1)  # compile outside the measurement
    r3, p3 = peak(nx.run, g, x, 3)
    r60, p60 = peak(nx.run, g, x, 60)
    assert r3 == 3 * 2.5 * N * N and r60 == 60 * 2.5 * N * N
    assert p60 < p3 + SIZE // 4, (p3, p60)
    assert p60 < 3 * SIZE  # t and u at most, plus small change


def test_straight_chain_frees_each_temporary() -> None:
    g = Graph("chain", [TensorType("f64", (N, N))])
    e = g.start_block
    v = g.args[0]
    two = g.add("Constant", [], e, {"value": np.array(2.0)})
    for _ in range(12):
        v = g.add("Mul", [v, two], e)
    g.end_block.append_input(g.add("Return", [g.add("ReduceSum", [v], e)], e))
    x = np.ones((N, N))
    nx.run(g, x)
    r, p = peak(nx.run, g, x)
    assert r == N * N * 2.0**12
    assert p < 2.5 * SIZE, p / SIZE  # two live temporaries, not twelve
