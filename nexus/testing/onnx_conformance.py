"""The official ONNX node tests against Nexus (and ONNX Runtime, in the same run).

Recent ``onnx`` wheels ship the test *generators* (``onnx.backend.test.case.node``), not
the data under ``onnx/backend/test/data/node``: :func:`node_cases` builds the cases in
memory, and each is run as ``onnx.backend.test`` runs it: ``backend.prepare(model)``, then
``rep.run(inputs)`` per data set, compared by the runner's ``assert_similar_outputs``
with the case's tolerances.

``python -m nexus.testing.onnx_conformance [--core] [--no-ort] [-v]`` prints the pass
rates (overall and on the cases whose ops are all in the issue-13 core set).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import sys
import time
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Case:
    name: str
    model: Any
    data_sets: list[tuple[list[Any], list[Any]]]
    rtol: float
    atol: float
    ops: frozenset[str] = field(default_factory=frozenset)


def _ops(graph: Any) -> set[str]:
    out: set[str] = set()
    for n in graph.node:
        out.add(n.op_type if n.domain in ("", "ai.onnx") else f"{n.domain}.{n.op_type}")
        for a in n.attribute:
            if a.type == 5:  # GRAPH
                out |= _ops(a.g)
            for g in a.graphs:
                out |= _ops(g)
    return out


def node_cases() -> list[Case]:
    """The node test cases of the installed onnx package, built in memory."""
    from onnx.backend.test.case import node

    with warnings.catch_warnings(), contextlib.redirect_stderr(io.StringIO()):
        warnings.simplefilter("ignore")
        cases = node.collect_testcases(None)
    out = []
    for c in cases:
        if c.model is None or not c.data_sets:
            continue
        ops = frozenset(_ops(c.model.graph))
        out.append(Case(c.name, c.model, [(list(i), list(o)) for i, o in c.data_sets], c.rtol, c.atol, ops))
    return out


def is_core(case: Case) -> bool:
    from nexus.frontend.onnx.ops import CORE_OPS

    return case.ops <= CORE_OPS


def run_case(backend: Any, case: Case) -> str | None:
    """None when the backend passes the case, else the first line of why not."""
    from onnx.backend.test.runner import Runner, _normalize_tensor

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            rep = backend.prepare(case.model, "CPU")
            for inputs, refs in case.data_sets:
                outs = rep.run([_normalize_tensor(x) for x in inputs])
                Runner.assert_similar_outputs([_normalize_tensor(x) for x in refs], list(outs), rtol=case.rtol,
                                              atol=case.atol)
    except BaseException as e:  # noqa: BLE001  (a failing case is data, whatever it raised)
        if isinstance(e, KeyboardInterrupt):
            raise
        text = str(e).strip().splitlines()
        return f"{type(e).__name__}: {text[0] if text else ''}"[:300]
    return None


def nexus_backend() -> Any:
    from nexus.backends.onnx import backend

    return backend.NexusBackend


def ort_backend() -> Any:
    import onnxruntime.backend as ortb

    return ortb


@dataclass
class Report:
    results: dict[str, dict[str, str | None]]  # backend -> case -> failure
    core: set[str]

    def rate(self, backend: str, names: Iterable[str]) -> tuple[int, int]:
        names = list(names)
        return sum(self.results[backend][n] is None for n in names), len(names)

    def table(self) -> str:
        names = list(next(iter(self.results.values())))
        core = [n for n in names if n in self.core]
        lines = ["| backend | all node tests | core-set tests |", "|---|---|---|"]
        for b in self.results:
            pa, na = self.rate(b, names)
            pc, nc = self.rate(b, core)
            pct_a, pct_c = 100 * pa / max(na, 1), 100 * pc / max(nc, 1)
            lines.append(f"| {b} | {pa}/{na} ({pct_a:.1f}%) | {pc}/{nc} ({pct_c:.1f}%) |")
        return "\n".join(lines)


def run(backends: dict[str, Callable[[], Any]], only_core: bool = False,
        select: Callable[[Case], bool] | None = None, verbose: bool = False) -> Report:
    cases = node_cases()
    core = {c.name for c in cases if is_core(c)}
    if only_core:
        cases = [c for c in cases if c.name in core]
    if select is not None:
        cases = [c for c in cases if select(c)]
    results: dict[str, dict[str, str | None]] = {}
    for label, make in backends.items():
        b = make()
        res = results[label] = {}
        t0 = time.perf_counter()
        for c in cases:
            res[c.name] = run_case(b, c)
            if verbose and res[c.name] is not None:
                print(f"{label} FAIL {c.name} [{' '.join(sorted(c.ops))}]: {res[c.name]}", file=sys.stderr)
        if verbose:
            print(f"{label}: {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    return Report(results, core)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--core", action="store_true", help="only the cases whose ops are all in the core set")
    p.add_argument("--no-ort", action="store_true", help="skip ONNX Runtime")
    p.add_argument("-k", default=None, help="only cases whose name contains this")
    p.add_argument("-v", action="store_true", help="print each failure (stderr)")
    a = p.parse_args(argv)
    backends: dict[str, Callable[[], Any]] = {"nexus": nexus_backend}
    if not a.no_ort:
        backends["onnxruntime"] = ort_backend
    os.environ.setdefault("ORT_LOGGING_LEVEL", "3")
    rep = run(backends, a.core, (lambda c: a.k in c.name) if a.k else None, a.v)
    print(rep.table())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
