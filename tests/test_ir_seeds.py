"""Acceptance of the foundation on the three seed-000 graphs, hand-built through the API:
they verify, print, parse back equal, draw, and compute what plain Python computes."""

from __future__ import annotations

import subprocess

import numpy as np
import pytest

from nexus import seeds
from nexus.backends.python import NexusRuntimeError, run
from nexus.ir import parse, print_graph, structurally_equal, verify
from nexus.ir.analysis import block_order
from nexus.ir.printer import structural_diff
from nexus.testing.extras import require_program
from nexus.viz import to_dot


def ifelse_py() -> float:
    a, b = np.float32(1.0), np.float32(2.0)
    c = a + b if a < b else a - b
    return float(c * np.float32(2.0))


def skip5_py() -> int:
    total, i = 0, 1
    while i <= 10:
        if i == 5:
            i += 1
            continue
        total += i
        i += 1
        if total > 25:
            break
    return total


def first_example_py(y: float, limit: int = 10_000) -> float:
    x = np.float32(5.0)
    yv = np.float32(y)
    for _ in range(limit):
        if not x < 100:
            return float(x * yv)
        s, p = x + yv, x * yv
        if s > 50:
            x = x + np.float32(1)
        elif p < 30:
            return float(x * yv)
    raise RuntimeError("endless")


@pytest.mark.parametrize("name", sorted(seeds.ALL))
def test_seed_verifies_prints_and_parses_back_equal(name: str) -> None:
    g = verify(seeds.ALL[name]())
    text = print_graph(g)
    h = parse(text)
    assert structural_diff(g, h) == ""
    assert structurally_equal(verify(h), g)
    assert print_graph(h) == text  # the printed form is a fixed point
    assert [b.name for b in block_order(g)] == [b.name for b in block_order(h)]


@pytest.mark.parametrize("name", sorted(seeds.ALL))
def test_seed_draws(name: str) -> None:
    exe = require_program("dot", "graphviz")
    proc = subprocess.run([exe, "-Tsvg"], input=to_dot(seeds.ALL[name]()).encode(), capture_output=True,
                          timeout=60)
    assert proc.returncode == 0 and not proc.stderr and b"<svg" in proc.stdout


def test_seed_results_match_plain_python() -> None:
    assert float(run(seeds.ifelse())) == ifelse_py() == 6.0
    assert int(run(seeds.skip5_loop())) == skip5_py() == 31
    for y in (50.0, 2.0, 60.0, 1.5):
        assert float(run(seeds.first_example(y), max_iterations=100_000)) == first_example_py(y)
    # Parsed graphs compute the same.
    assert int(run(parse(print_graph(seeds.skip5_loop())))) == 31


def test_first_example_with_y_10_never_ends() -> None:
    with pytest.raises(RuntimeError):
        first_example_py(10.0)
    with pytest.raises(NexusRuntimeError, match="max_iterations"):
        run(seeds.first_example(10.0), max_iterations=5_000)
