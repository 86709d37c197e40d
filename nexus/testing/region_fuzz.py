"""Round trip of the region tree on the fuzz corpora: every graph the script fuzzer
(:mod:`nexus.testing.py_gen`) and the DSL generator (:mod:`nexus.testing.dsl_gen`) make
is structurized (:mod:`nexus.passes.structurize`), lowered back to a CFG
(:mod:`nexus.passes.lower_regions`), verified, and run beside the original on the same
inputs: results must be bitwise equal (NaN equal to NaN, same dtypes), and a run that
fails must fail at the same node.

CLI (the long run): ``python -m nexus.testing.region_fuzz --script 2000 --dsl 1000``
prints each disagreement and a summary line per corpus.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from nexus.backends.python import NexusRuntimeError, run
from nexus.ir.graph import Graph
from nexus.ir.verify import verify
from nexus.passes.lower_regions import lower_regions
from nexus.passes.regions import Loop, Var, walk
from nexus.passes.structurize import structurize
from nexus.testing.dsl_gen import same_results

MAX_ITERATIONS = 1_000_000  # the corpora's loops are bounded; this only turns a bug into a failure


@dataclass
class Disagreement:
    corpus: str
    program: str
    inputs: tuple[Any, ...]
    problem: str

    def __str__(self) -> str:
        return f"--- {self.corpus} program ---\n{self.program}\n--- inputs: {self.inputs!r}\n--- {self.problem}\n"


@dataclass
class Report:
    """What a corpus run found: programs and graphs checked, loops by form, disagreements."""

    corpus: str
    programs: int = 0
    graphs: int = 0
    runs: int = 0
    skipped: int = 0
    while_loops: int = 0
    flag_loops: int = 0
    seconds: float = 0.0
    failures: list[Disagreement] = field(default_factory=list)

    def summary(self) -> str:
        return (f"{self.corpus}: {self.programs} programs, {self.graphs} graphs, {self.runs} runs, "
                f"loops {self.while_loops} while-form + {self.flag_loops} flag-form, {self.skipped} skipped, "
                f"{len(self.failures)} disagreements, {self.seconds:.1f} s")


def roundtrip(g: Graph) -> tuple[Graph, list[Loop]]:
    """``g`` through the region tree and back, verified; also the tree's loops."""
    tree = structurize(g)
    loops = [item for item in walk(tree.body) if isinstance(item, Loop)]
    return verify(lower_regions(tree)), loops


def outcome(g: Graph, args: tuple[Any, ...]) -> tuple[bool, Any]:
    """``(True, results)`` or ``(False, where it failed)``: the failing node and the cause."""
    try:
        return True, run(g, *args, max_iterations=MAX_ITERATIONS)
    except NexusRuntimeError as e:
        cause = e.__cause__ or e
        node = f"{e.node.op.name} %{e.node.name}" if e.node is not None else "?"
        return False, f"{type(cause).__name__} at {node}"


def compare(g: Graph, back: Graph, args: tuple[Any, ...]) -> str | None:
    """None when both graphs agree on ``args``, else what differs."""
    ok_a, a = outcome(g, args)
    ok_b, b = outcome(back, args)
    if ok_a and ok_b:
        return None if same_results(b, a if isinstance(a, tuple) else (a,)) else f"original {a!r}, rebuilt {b!r}"
    if ok_a != ok_b or a != b:
        return f"original {'gave' if ok_a else 'failed:'} {a!r}, rebuilt {'gave' if ok_b else 'failed:'} {b!r}"
    return None


class _Checker:
    """Round-trips each distinct graph once and compares it on every input."""

    def __init__(self, report: Report):
        self.report = report
        self.done: dict[int, Graph | str] = {}

    def check(self, program: str, g: Graph, args: tuple[Any, ...]) -> None:
        r = self.report
        back = self.done.get(id(g))
        if back is None:
            r.graphs += 1
            try:
                back, loops = roundtrip(g)
                flagged = sum(1 for lp in loops if isinstance(lp.test, Var))  # flag form: test is `again`
                r.flag_loops += flagged
                r.while_loops += len(loops) - flagged
            except Exception:  # noqa: BLE001  (a failure to structurize or verify is a finding)
                back = traceback.format_exc(limit=6)
            self.done[id(g)] = back
        r.runs += 1
        problem = back if isinstance(back, str) else compare(g, back, args)
        if problem is not None:
            r.failures.append(Disagreement(r.corpus, program, args, problem))


def script_corpus(count: int, seed: int = 0, runs: int = 2, max_depth: int = 3, optimize: bool = False,
                  progress: Callable[[Report], None] | None = None) -> Report:
    """Round-trip the graphs of ``count`` programs of the script fuzzer, drawn as
    ``py_gen.fuzz`` draws them, each run on ``runs`` random inputs.  With ``optimize``
    the graphs are first optimized (``nx.optimize``: other CFG shapes)."""
    from nexus.frontend.script import script, script_source
    from nexus.passes import optimize as optimize_graph
    from nexus.testing.py_gen import Gen, random_inputs

    report = Report("script, optimized" if optimize else "script")
    t0 = time.perf_counter()
    for k in range(count):
        rng = random.Random(seed * 1_000_003 + k)
        arrays = k % 2 == 0
        f32 = arrays and k % 4 == 2
        src = Gen(rng, arrays=arrays, f32=f32, max_depth=max_depth).program()
        report.programs += 1
        try:
            sf = script_source(src, "f", {"script": script})
        except Exception:  # noqa: BLE001  (the script fuzzer's own business)
            report.skipped += 1
            continue
        checker = _Checker(report)
        optimized: dict[int, Graph] = {}  # per program: the script keeps its graphs (and their ids) alive
        for _ in range(runs):
            args = random_inputs(rng, arrays, f32)
            try:
                g = sf.graph_for(*args)
                if optimize:
                    g = optimized.get(id(g)) or optimized.setdefault(id(g), optimize_graph(g.clone()[0]))
            except Exception:  # noqa: BLE001
                report.skipped += 1
                continue
            checker.check(src, g, args)
        if progress is not None and (k + 1) % 500 == 0:
            report.seconds = time.perf_counter() - t0
            progress(report)
    report.seconds = time.perf_counter() - t0
    return report


def dsl_corpus(count: int, seed: int = 0) -> Report:
    """Round-trip the graphs of ``count`` programs drawn from ``dsl_gen.programs()``."""
    from hypothesis import HealthCheck, Phase, given, reject, settings
    from hypothesis import seed as hypothesis_seed

    from nexus.frontend.dsl import DSLError
    from nexus.testing.dsl_gen import AMBIGUOUS, Program, programs

    report = Report("dsl")

    @hypothesis_seed(seed)
    @settings(max_examples=count, database=None, deadline=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(programs())
    def check(p: Program) -> None:
        try:
            g = p.build()
        except DSLError as e:
            if AMBIGUOUS in str(e):
                reject()
            report.skipped += 1
            return
        report.programs += 1
        _Checker(report).check(p.dsl_source(), g, ())

    t0 = time.perf_counter()
    check()
    report.seconds = time.perf_counter() - t0
    return report


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="Region tree round trip on the script and DSL fuzz corpora")
    p.add_argument("--script", type=int, default=2000, help="script fuzzer programs")
    p.add_argument("--dsl", type=int, default=1000, help="DSL generator programs")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--optimized", type=int, default=0, help="script fuzzer programs, optimized first")
    p.add_argument("--show", type=int, default=3, help="disagreements to print per corpus")
    args = p.parse_args(argv)
    progress = lambda r: print(f"... {r.summary()}", file=sys.stderr, flush=True)  # noqa: E731
    reports = []
    if args.script:
        reports.append(script_corpus(args.script, args.seed, progress=progress))
    if args.dsl:
        reports.append(dsl_corpus(args.dsl, args.seed))
    if args.optimized:
        reports.append(script_corpus(args.optimized, args.seed + 1, optimize=True, progress=progress))
    for r in reports:
        for failure in r.failures[: args.show]:
            print(failure)
        print(r.summary(), flush=True)
    return 1 if any(r.failures for r in reports) else 0


if __name__ == "__main__":
    sys.exit(main())
