"""The main job of the README's quick start: ``python -m nexus.demo [--out DIR]``.

For each seed-000 example, hand-built through the IR API: print its text form, verify
it, check that the text parses back to an equal graph, run it with the interpreter and
compare with the same program in plain Python, save it (text + safetensors) and draw it
(SVG; without Graphviz the .dot file and a note).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable, Sequence

from nexus import seeds
from nexus.backends.python import run
from nexus.io import save
from nexus.ir.graph import Graph
from nexus.ir.parser import parse
from nexus.ir.printer import print_graph, structurally_equal
from nexus.ir.verify import verify
from nexus.viz import GraphvizMissing, render


# The same programs in plain Python: the answers the graphs must give.
def _ifelse_py() -> float:
    a, b = 1.0, 2.0
    c = a + b if a < b else a - b
    return c * 2


def _skip5_py() -> int:
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


def _first_example_py(y: float = 50.0) -> float:
    x = 5.0
    while x < 100:
        s, p = x + y, x * y
        if s > 50:
            x = x + 1
        elif p < 30:
            break
        else:
            continue
    return x * y


EXAMPLES: list[tuple[str, str, Callable[[], Graph], Callable[[], object]]] = [
    ("ifelse", "a=1, b=2; c = a+b if a<b else a-b; d = c*2", seeds.ifelse, _ifelse_py),
    ("skip5_loop", "sum 1..10, skip 5 (continue), break once sum > 25", seeds.skip5_loop, _skip5_py),
    ("first_example", "x from 5 while x < 100, nested if/break/continue, y = 50",
     seeds.first_example, _first_example_py),
]


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m nexus.demo", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="nexus-demo", help="directory for the pictures and saved graphs "
                                                         "(default: ./nexus-demo)")
    ap.add_argument("--quiet", action="store_true", help="do not print the graphs' text")
    args = ap.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    failures = 0
    notes: set[str] = set()
    for name, what, build, python in EXAMPLES:
        t0 = time.perf_counter()
        g = build()
        print(f"=== {name}: {what}")
        text = print_graph(g)
        if not args.quiet:
            print(text)
        verify(g)
        round_trip = structurally_equal(parse(text), g)
        got, want = run(g, max_iterations=100_000), python()
        ok = round_trip and float(got) == float(want)  # type: ignore[arg-type]
        failures += not ok
        save(g, os.path.join(args.out, f"{name}.nx"))
        picture = os.path.join(args.out, f"{name}.svg")
        try:
            drawn = render(g, picture)
        except GraphvizMissing as e:
            drawn = e.dot_path
            notes.add("Graphviz's dot program is not installed, so the pictures are .dot files "
                      "(Debian package 'graphviz': apt-get install graphviz).")
        ms = (time.perf_counter() - t0) * 1e3
        print(f"verify: ok   text round trip: {'equal' if round_trip else 'DIFFERENT'}   "
              f"run: {got} (plain Python: {want}) {'ok' if ok else 'MISMATCH'}")
        print(f"saved: {os.path.join(args.out, name + '.nx')}   picture: {drawn}   ({ms:.0f} ms)\n")
    for note in sorted(notes):
        print(f"note: {note}")
    print(f"{len(EXAMPLES) - failures} of {len(EXAMPLES)} examples agree with plain Python; "
          f"look at the pictures in {args.out}/ (try: nexus show {args.out}/skip5_loop.nx)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
