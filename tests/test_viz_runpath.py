"""The path of one run (``nexus.viz.runpath``): block entries and control edges taken,
checked against the same programs written in plain Python that count their own branches."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

import nexus as nx
from nexus import seeds
from nexus.ir.graph import Graph
from nexus.ir.node import Block
from nexus.viz.runpath import run_path


def _named(path_blocks: Counter[Block], path_edges: Counter[tuple[Block, int]]) -> tuple[dict, dict]:
    return ({b.name: k for b, k in path_blocks.items()},
            {f"{b.name}.{i}": k for (b, i), k in path_edges.items()})


def skip5_counts() -> tuple[int, Counter[str]]:
    """seed 000's loop, counting each control edge it takes ("block.input")."""
    c: Counter[str] = Counter()
    total, i = 0, 1
    c["header.0"] += 1
    while True:
        if not i <= 10:
            c["after.0"] += 1
            break
        c["body.0"] += 1
        if i == 5:
            c["skip.0"] += 1
            i += 1
            c["header.1"] += 1
            continue
        c["update.0"] += 1
        total += i
        i += 1
        if total > 25:
            c["after.1"] += 1
            break
        c["latch.0"] += 1
        c["header.2"] += 1
    c["exit.0"] += 1
    return total, c


def first_example_counts(y: float) -> tuple[float, Counter[str]]:
    c: Counter[str] = Counter()
    x, yv = np.float32(5.0), np.float32(y)
    c["header.0"] += 1
    while True:
        if not x < 100:
            c["after.0"] += 1
            break
        c["body.0"] += 1
        if x + yv > 50:
            c["then.0"] += 1
            x = x + np.float32(1)
            c["latch.0"] += 1
            c["header.2"] += 1
        else:
            c["else.0"] += 1
            if x * yv < 30:
                c["after.1"] += 1
                break
            c["header.1"] += 1
    c["exit.0"] += 1
    return float(x * yv), c


def _blocks_from_edges(edges: Counter[str]) -> Counter[str]:
    """A block is entered once per edge into it, and the entry block once by the call."""
    out: Counter[str] = Counter({"entry": 1})
    for key, k in edges.items():
        out[key.rsplit(".", 1)[0]] += k
    return out


def test_skip5_path() -> None:
    want, edges = skip5_counts()
    p = run_path(seeds.skip5_loop())
    assert p.error is None and int(p.result) == want
    blocks, got = _named(p.blocks, p.edges)
    assert got == dict(edges)
    assert blocks == dict(_blocks_from_edges(edges))


@pytest.mark.parametrize("y", [50.0, 1.0, 45.5])
def test_first_example_paths(y: float) -> None:
    want, edges = first_example_counts(y)
    p = run_path(seeds.first_example(y))
    assert p.error is None and float(p.result) == want
    blocks, got = _named(p.blocks, p.edges)
    assert got == dict(edges)
    assert blocks == dict(_blocks_from_edges(edges))


def test_endless_run_is_cut_and_keeps_its_path() -> None:
    # y = 10: x + y <= 50 and x * y >= 30, so the loop continues forever.
    p = run_path(seeds.first_example(10.0), max_lines=1000)
    assert p.error is not None and "1000" in p.error
    _, got = _named(p.blocks, p.edges)
    assert got["header.1"] > 50 and "after.0" not in got and "then.0" not in got


def test_blocks_that_run_no_line_are_found_between() -> None:
    """if p: c = a + b (no else): the false exit enters an empty block that only jumps on;
    its entry shows in no traced line, so it is inferred from the CFG."""
    g = Graph("no_else")
    e = g.start_block
    a = g.add("Constant", [], e, {"value": np.array(1.0, np.float32)}, name="a")
    b = g.add("Constant", [], e, {"value": np.array(2.0, np.float32)}, name="b")
    cond = g.add("Cond", [g.add("Greater", [a, b], e, name="p")], e)
    f = g.add("Proj", [cond], e, {"num": 0})
    t = g.add("Proj", [cond], e, {"num": 1})
    then = g.new_block("then", [t])
    s = g.add("Add", [a, b], then, name="s")
    j1 = g.add("Jmp", [], then)
    empty = g.new_block("empty", [f])
    j2 = g.add("Jmp", [], empty)
    join = g.new_block("join", [j1, j2])
    c = g.add("Phi", [s, a], join, name="c")
    g.end_block.append_input(g.add("Return", [c], join))
    nx.verify(g)
    p = run_path(g)
    assert float(p.result) == 1.0  # 1 > 2 is false: c = a
    blocks, edges = _named(p.blocks, p.edges)
    assert edges == {"empty.0": 1, "join.1": 1, "exit.0": 1}
    assert blocks == {"entry": 1, "empty": 1, "join": 1, "exit": 1}


def test_script_loop_with_an_argument() -> None:
    @nx.script
    def f(n: int) -> int:
        s = 0
        i = 0
        while i < n:
            if i % 3 == 0:
                s = s + i
            i = i + 1
        return s

    g = f.graph if hasattr(f, "graph") else f
    n = 10
    p = run_path(g, [n])
    assert p.error is None and int(p.result) == sum(i for i in range(n) if i % 3 == 0)
    counts = sorted(p.blocks.values())
    # The loop test runs n + 1 times, the body n times, the if-branch for i = 0, 3, 6, 9.
    assert max(counts) == n + 1
    assert n in counts and len([i for i in range(n) if i % 3 == 0]) in counts
