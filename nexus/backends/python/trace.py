"""How often each node runs: a run of the generated code under ``sys.settrace``.

For tests and profiles that count operations rather than time them (a count does not
depend on the load of the machine).  Every generated line that runs a node is recorded
(:attr:`Generated.line_nodes`), so line events map to nodes exactly; the run is the
ordinary sequential variant, only slower.  :func:`follow` reports the same lines one by
one, in order (the graph viewer rebuilds the path of a run from them).
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Callable, Sequence
from types import FrameType
from typing import Any

from nexus.backends.python.interpreter import prepare
from nexus.ir.binding import signature
from nexus.ir.graph import Graph
from nexus.ir.node import Node


def node_counts(g: Graph, *args: Any) -> Counter[Node]:
    """Run ``g`` on ``args`` sequentially; how many times each node ran."""
    gen = prepare(g).variant(False, "off")
    first: dict[Node, int] = {}
    for line, node in sorted(gen.line_nodes.items()):
        first.setdefault(node, line)
    at = {line: node for node, line in first.items()}
    counts: Counter[int] = Counter()

    def local(frame: FrameType, event: str, arg: Any) -> Any:
        if event == "line":
            counts[frame.f_lineno] += 1
        return local

    def trace(frame: FrameType, event: str, arg: Any) -> Any:
        return local if frame.f_code.co_filename == gen.filename else None

    values = signature(g).convert(args)
    old = sys.gettrace()
    sys.settrace(trace)
    try:
        gen.fn(None, *values)
    finally:
        sys.settrace(old)
    return Counter({at[line]: k for line, k in counts.items() if line in at})


def follow(g: Graph, args: Sequence[Any], visit: Callable[[int, Node], None]) -> Any:
    """Run ``g`` on ``args`` sequentially, calling ``visit(line, node)`` for every
    generated line that runs a node, in order; returns the result.  Each control edge's
    Phi copies have lines of their own (for the viewer's path of one run); an exception
    raised by ``visit`` stops the run."""
    gen = prepare(g).variant(False, "off")
    nodes = gen.line_nodes

    def local(frame: FrameType, event: str, arg: Any) -> Any:
        if event == "line":
            node = nodes.get(frame.f_lineno)
            if node is not None:
                visit(frame.f_lineno, node)
        return local

    def trace(frame: FrameType, event: str, arg: Any) -> Any:
        return local if frame.f_code.co_filename == gen.filename else None

    values = signature(g).convert(tuple(args))
    old = sys.gettrace()
    sys.settrace(trace)
    try:
        return gen.fn(None, *values)
    finally:
        sys.settrace(old)
