"""NumPy calls of a gradient graph's forward and reverse parts, counted on a run.

A *NumPy call* is a node that runs an operation on an array: a data op (not a Phi,
Proj, Constant or stack op, which the python backend runs as plain Python) with an input
or a result of rank 1 or more.  Scalar bookkeeping (the loop counter, block codes, edge
indices) is left out: it is the control flow, the same in any implementation.  The
reverse part is every block reachable from a block that pops the stack; the forward
part never is.  Per step: run twice with trip counts ``T`` and ``T + k``, and divide
the difference by ``k`` (see ``bench.profile``).
"""

from __future__ import annotations

from typing import Any

from nexus.backends.python.trace import node_counts
from nexus.ir.graph import Graph
from nexus.ir.node import Block, Node
from nexus.ir.opdef import DATAFLOW_KINDS
from nexus.ir.types import TensorType

_NOT_NUMPY = frozenset({"Proj", "Constant", "Identity", "StackNew", "StackPush", "StackPop"})


def is_numpy_call(n: Node) -> bool:
    """Whether running ``n`` is an operation on an array (see the module docstring)."""
    if n.op.kind not in DATAFLOW_KINDS or n.op.name in _NOT_NUMPY:
        return False
    return any(isinstance(v.type, TensorType) and v.type.shape != () for v in (n, *n.inputs))


def reverse_blocks(g: Graph) -> set[Block]:
    """The blocks of a gradient graph's reverse part."""
    work = [b for b in g.blocks if any(n.op.name == "StackPop" for n in b.nodes)]
    seen = set(work)
    while work:
        for s in work.pop().succs:
            if s not in seen:
                seen.add(s)
                work.append(s)
    return seen


def numpy_calls(g: Graph, *args: Any) -> tuple[int, int]:
    """NumPy calls of one run of the gradient graph ``g``: (forward, reverse)."""
    rev = reverse_blocks(g)
    fwd = back = 0
    for n, k in node_counts(g, *args).items():
        if is_numpy_call(n):
            if n.block in rev:
                back += k
            else:
                fwd += k
    return fwd, back
