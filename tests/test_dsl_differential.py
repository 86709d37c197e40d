"""Differential tests: random DSL programs (nested while/if/break/continue over i64 and
f32 variables) against the same programs in plain Python over NumPy scalars; and each
graph before and after ``nx.optimize``."""

from __future__ import annotations

from hypothesis import HealthCheck, given, reject, settings

import nexus as nx
from nexus.ir import parse, print_graph, structurally_equal, verify
from nexus.testing.dsl_gen import AMBIGUOUS, Program, programs, same_results

SETTINGS = settings(max_examples=300, deadline=None, derandomize=True,
                    suppress_health_check=list(HealthCheck))


def build(p: Program) -> nx.Graph:
    """The graph, or a rejected example where a condition built before its loop is
    ambiguous (the DSL then asks for a callable condition, by design)."""
    try:
        return p.build()
    except nx.DSLError as e:
        if AMBIGUOUS in str(e):
            reject()
        raise


def explain(p: Program, got: object, want: object) -> str:
    return f"DSL:\n{p.dsl_source()}\nPython:\n{p.python_source()}\ngraph gave {got}, Python gave {want}"


@SETTINGS
@given(programs())
def test_generated_dsl_programs_match_python(p: Program) -> None:
    want = p.run_python()
    g = build(p)
    verify(g)
    got = g()
    assert same_results(got, want), explain(p, got, want)
    assert same_results(g(parallel=True), want), "parallel:\n" + explain(p, g(parallel=True), want)
    back = parse(print_graph(g))
    assert structurally_equal(g, back)
    # every node the DSL made points at the user's source
    assert all(n.loc is not None for n in g.nodes() if n.op.name not in ("Start", "End"))
    # minimal SSA: no Phi whose operands are all one value (or itself)
    for n in g.nodes():
        if n.op.name == "Phi":
            assert len({v for v in n.inputs if v is not n}) > 1, f"trivial Phi {n!r}\n{print_graph(g)}"


@settings(max_examples=100, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(programs())
def test_generated_graphs_survive_optimize(p: Program) -> None:
    want = p.run_python()
    g = build(p)
    before = g()
    nx.optimize(g)
    verify(g)
    after = g()
    assert same_results(before, want), explain(p, before, want)
    assert same_results(after, want), "after optimize:\n" + explain(p, after, want) + "\n" + print_graph(g)



def long_run(examples: int) -> None:
    """The differential test above on ``examples`` programs, for the long run
    (``python tests/test_dsl_differential.py 1000``: about ten seconds).  A failure
    raises with hypothesis's shrunk example."""
    import time

    count = {"checked": 0, "calls": 0}

    def counted(p: Program) -> None:
        count["calls"] += 1
        test_generated_dsl_programs_match_python.hypothesis.inner_test(p)  # type: ignore[attr-defined]
        count["checked"] += 1

    start = time.perf_counter()
    settings(SETTINGS, max_examples=examples)(given(programs())(counted))()
    print(f"{count['checked']} DSL programs agree with Python, {count['calls'] - count['checked']} rejected "
          f"(ambiguous loop conditions), 0 failures, {time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    import sys

    long_run(int(sys.argv[1]) if len(sys.argv) > 1 else 1000)
