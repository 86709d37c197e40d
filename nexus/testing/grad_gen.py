"""Random differentiable ``@nx.script`` programs, and a differential fuzzer of their gradients.

``Gen`` writes ``f(x: float, y: float, v: Tensor) -> float`` with branches on float
conditions, for/while loops with data-dependent break and continue, early returns and
scalar-array broadcasting (tests/test_autodiff_fuzz.py checks its gradients against
PyTorch autograd).  ``python -m nexus.testing.grad_gen --count 1000 --backend xla`` compiles
``nx.value_and_grad`` of each program on the python backend and on another backend and
compares the two on random inputs; it prints the disagreements, the refusals by kind
and the time.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time
import traceback
from collections import Counter
from typing import Any

import numpy as np

FLOATS, ARR = ["x", "y"], "v"


class Gen:
    """Writes one program ``f(x: float, y: float, v: Tensor) -> float``."""

    def __init__(self, rng: random.Random):
        self.rng = rng
        self.lines: list[str] = []
        self.n = 0

    def fexpr(self, d: int = 2) -> str:
        r = self.rng
        if d <= 0 or r.random() < 0.3:
            return r.choice(FLOATS + ["0.5", "-1.25", "1.5"])
        a = lambda: self.fexpr(d - 1)  # noqa: E731
        k = r.randrange(9)
        return [f"({a()} + {a()})", f"({a()} - {a()})", f"({a()} * {a()})", f"np.tanh({a()})",
                f"np.sin({a()})", f"({a()} * {r.choice(['0.5', '-0.75', '1.1'])})", f"np.exp(np.tanh({a()}))",
                f"({a()} / {r.choice(['2.0', '-3.0'])})", f"np.sum({self.aexpr(d - 1)}) * 0.25"][k]

    def aexpr(self, d: int = 1) -> str:
        r = self.rng
        if d <= 0 or r.random() < 0.4:
            return ARR
        a = lambda: self.aexpr(d - 1)  # noqa: E731
        return r.choice([f"({a()} * {self.fexpr(0)})", f"np.tanh({a()})", f"({a()} + {self.fexpr(0)})",
                         f"({a()} - {a()})"])

    def cond(self) -> str:
        return f"{self.fexpr(1)} {self.rng.choice(['<', '>'])} {self.fexpr(1)}"

    def assign(self, ind: str) -> None:
        if self.rng.random() < 0.25:
            self.lines.append(f"{ind}{ARR} = np.tanh({self.aexpr(1)})")
        else:
            self.lines.append(f"{ind}{self.rng.choice(FLOATS)} = np.tanh({self.fexpr()})")

    def block(self, ind: str, depth: int, in_loop: bool) -> None:
        for _ in range(self.rng.randint(1, 3)):
            k = self.rng.randrange(7 if depth < 2 else 2)
            if k <= 1:
                self.assign(ind)
            elif k == 2:
                self.lines.append(f"{ind}if {self.cond()}:")
                self.block(ind + "    ", depth + 1, in_loop)
                self.lines.append(f"{ind}else:")
                self.block(ind + "    ", depth + 1, in_loop)
            elif k == 3:
                self.n += 1
                self.lines.append(f"{ind}for i{self.n} in range({self.rng.randint(1, 4)}):")
                self.loop_body(ind + "    ", depth + 1)
            elif k == 4:
                self.n += 1
                c = f"c{self.n}"
                self.lines += [f"{ind}{c} = 0", f"{ind}while {c} < {self.rng.randint(1, 5)} and {self.cond()}:",
                               f"{ind}    {c} += 1"]
                self.loop_body(ind + "    ", depth + 1)
            elif k == 5 and in_loop:
                self.lines += [f"{ind}if {self.cond()}:", f"{ind}    {self.rng.choice(['break', 'continue'])}"]
            else:
                self.lines += [f"{ind}if {self.cond()}:", f"{ind}    return {self.fexpr()}"]

    def loop_body(self, ind: str, depth: int) -> None:
        self.assign(ind)
        if self.rng.random() < 0.5:  # a data-dependent exit or skip before the rest of the body
            self.lines += [f"{ind}if {self.cond()}:", f"{ind}    {self.rng.choice(['break', 'continue'])}"]
        self.block(ind, depth, True)

    def program(self) -> str:
        self.lines = ["def f(x: float, y: float, v: Tensor):"]
        self.block("    ", 0, False)
        self.lines.append(f"    return {self.fexpr()} + np.sum({ARR}) * y")
        return "\n".join(self.lines) + "\n"


def program_rng(seed: int, k: int) -> random.Random:
    """The generator of program ``k`` of a run with ``seed`` (each program can be rerun alone)."""
    return random.Random(seed * 1_000_003 + k)


def random_inputs(rng: random.Random) -> tuple[float, float, np.ndarray]:
    return rng.uniform(-2, 2), rng.uniform(-2, 2), np.array([rng.uniform(-1, 1) for _ in range(3)])


def flat(x: Any) -> list[Any]:
    return [y for v in x for y in flat(v)] if isinstance(x, (tuple, list)) else [x]


def check_program(src: str, rng: random.Random, backend: str, runs: int = 2) -> tuple[str, str]:
    """``(outcome, detail)``: outcome is ``"ok"``, ``"wrong"`` (the backend's value or a
    gradient differs from the python backend's), ``"refused <ErrorClass>"`` (a Nexus error
    naming what the backend cannot do), ``"internal <ErrorClass>"`` (any other exception
    from the backend) or ``"python <ErrorClass>"`` (the reference itself failed)."""
    import nexus as nx
    from nexus.backends.base import BackendError, MissingLoweringError, NexusRuntimeError
    from nexus.frontend.script import Tensor, script_source

    try:
        g = nx.value_and_grad(script_source(src, "f", {"np": np, "Tensor": Tensor}), argnums=(0, 1, 2))
        ref = nx.compile(g, backend="python")
        inputs = [random_inputs(rng) for _ in range(runs)]
        wants = [ref(*a) for a in inputs]
    except Exception as e:  # noqa: BLE001
        return f"python {type(e).__name__}", traceback.format_exc(limit=3)
    try:
        exe = nx.compile(g, backend=backend)
        gots = [exe(*a) for a in inputs]
    except (NexusRuntimeError, MissingLoweringError, BackendError) as e:
        return f"refused {type(e).__name__}", str(e).splitlines()[0] if str(e) else ""
    except Exception as e:  # noqa: BLE001
        return f"internal {type(e).__name__}", traceback.format_exc(limit=4)
    for args, want, got in zip(inputs, wants, gots):
        for a, b in zip(flat(want), flat(got)):
            if not np.allclose(np.asarray(b, dtype=float), np.asarray(a, dtype=float), rtol=1e-9, atol=1e-12):
                return "wrong", f"inputs {args}: python {want!r}, {backend} {got!r}"
    return "ok", ""


def fuzz(count: int, seed: int = 0, backend: str = "xla", verbose: bool = False, progress: int = 0,
         start: int = 0) -> tuple[Counter[str], list[tuple[int, str, str, str]]]:
    """Check programs ``start .. start + count - 1``; returns the outcomes counted and the
    failures (``(k, outcome, detail, source)`` for every outcome that is not ``ok``)."""
    outcomes: Counter[str] = Counter()
    failures: list[tuple[int, str, str, str]] = []
    try:
        _run(range(start, start + count), seed, backend, verbose, progress, outcomes, failures)
    except KeyboardInterrupt:  # a long run stopped: the programs checked so far still count
        print(f"interrupted after {sum(outcomes.values())} programs", file=sys.stderr)
    return outcomes, failures


def _run(ks: range, seed: int, backend: str, verbose: bool, progress: int, outcomes: Counter[str],
         failures: list[tuple[int, str, str, str]]) -> None:
    t0, start = time.perf_counter(), ks.start
    for k in ks:
        if progress and k > start and (k - start) % progress == 0:
            print(f"... {k - start} programs, {dict(outcomes)}, {time.perf_counter() - t0:.0f} s",
                  file=sys.stderr, flush=True)
        rng = program_rng(seed, k)
        src = Gen(rng).program()
        outcome, detail = check_program(src, rng, backend)
        outcomes[outcome] += 1
        if outcome != "ok":
            failures.append((k, outcome, detail, src))
            if verbose:
                print(f"=== program {k}: {outcome} ===\n{detail}\n{src}", flush=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="Differential fuzzer: gradients of random scripts, "
                                            "a backend against the python backend")
    p.add_argument("--count", type=int, default=1000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--start", type=int, default=0, help="index of the first program (to rerun one)")
    p.add_argument("--backend", default="xla")
    args = p.parse_args(argv)
    load0 = os.getloadavg()
    t0 = time.perf_counter()
    outcomes, failures = fuzz(args.count, args.seed, args.backend, verbose=True, progress=10, start=args.start)
    dt = time.perf_counter() - t0
    load1 = os.getloadavg()
    print(f"{sum(outcomes.values())} programs (seed {args.seed}, from {args.start}), backend {args.backend}: "
          f"{outcomes['ok']} agree, {len(failures)} do not, {dt:.1f} s; "
          f"load {load0[0]:.1f} at start, {load1[0]:.1f} at end")
    for key, n in sorted(outcomes.items()):
        print(f"  {key}: {n}")
    return 1 if any(not o.startswith("refused") for _, o, _, _ in failures) else 0


if __name__ == "__main__":
    sys.exit(main())
