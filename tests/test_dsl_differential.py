"""Differential tests: random DSL programs (nested while/if/break/continue over i64 and
f32 variables) against the same programs in plain Python over NumPy scalars; and each
graph before and after ``nx.optimize``."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings

import nexus as nx
from nexus.ir import parse, print_graph, structurally_equal, verify
from nexus.testing.dsl_gen import Program, programs, same_results

SETTINGS = settings(max_examples=300, deadline=None, derandomize=True,
                    suppress_health_check=list(HealthCheck))


def explain(p: Program, got: object, want: object) -> str:
    return f"DSL:\n{p.dsl_source()}\nPython:\n{p.python_source()}\ngraph gave {got}, Python gave {want}"


@SETTINGS
@given(programs())
def test_generated_dsl_programs_match_python(p: Program) -> None:
    want = p.run_python()
    g = p.build()
    verify(g)
    got = g()
    assert same_results(got, want), explain(p, got, want)
    back = parse(print_graph(g))
    assert structurally_equal(g, back)


@settings(max_examples=100, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(programs())
def test_generated_graphs_survive_optimize(p: Program) -> None:
    want = p.run_python()
    g = p.build()
    before = g()
    nx.optimize(g)
    verify(g)
    after = g()
    assert same_results(before, want), explain(p, before, want)
    assert same_results(after, want), "after optimize:\n" + explain(p, after, want) + "\n" + print_graph(g)
