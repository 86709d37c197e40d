"""The control structure of a graph, read from the op facts: one home for the Proj
conventions and the control edges.

Every node has one :func:`role`:

- ``"phi"``: a Phi;
- ``"constant"``: a Constant (bound once per call, never scheduled);
- ``"argument"``: a Proj of Start, an argument of the graph;
- ``"exit"``: a Proj of a forking terminator (a Cond), a control value that enters a block;
- ``"terminator"``: an op with ``OpDef.terminator`` (Jmp, Cond, Return), which ends its block;
- ``"control"``: the other control ops (Start, End, Block);
- ``"data"``: everything else, which runs with the data flow of its block (a Proj of a
  data tuple, a Call and the communication ops included).

A *control value* is a non-forking terminator (Jmp, Return) or an exit: it enters exactly
one block, as input :func:`edge_of` of it.  Backends, passes and the verifier ask here
instead of matching op names, so a new control op is a new flag on its :class:`OpDef`.
"""

from __future__ import annotations

from collections.abc import Sequence

from nexus.ir.node import Block, Node

ROLES = ("phi", "constant", "argument", "exit", "terminator", "control", "data")


def role(n: Node) -> str:
    """The role of ``n`` (see the module docstring)."""
    op = n.op
    if op.terminator:
        return "terminator"
    kind = op.kind
    if kind == "phi":
        return "phi"
    if kind == "control":
        return "control"
    if op.name == "Proj" and n.num_inputs == 1:
        src = n.input(0).op
        if src.forking:
            return "exit"
        if src.name == "Start":
            return "argument"
    elif op.name == "Constant":
        return "constant"
    return "data"


def is_exit(n: Node) -> bool:
    """Whether ``n`` is a Proj of a forking terminator (a Cond's exit)."""
    return n.op.name == "Proj" and n.num_inputs == 1 and n.input(0).op.forking


def is_argument(n: Node) -> bool:
    """Whether ``n`` is a Proj of Start (an argument of the graph)."""
    return n.op.name == "Proj" and n.num_inputs == 1 and n.input(0).op.name == "Start"


def is_control_value(n: Node) -> bool:
    """Whether ``n`` enters a block: a non-forking terminator or an exit."""
    return (n.op.terminator and not n.op.forking) or is_exit(n)


def exits(term: Node) -> list[Node]:
    """The control values leaving terminator ``term``: itself for Jmp and Return, the
    exits of a forking one in Proj order (a Cond: false, then true)."""
    if not term.op.forking:
        return [term]
    return sorted((u for u in term.users if u.op.name == "Proj"), key=lambda p: p.attrs["num"])


def entries(x: Node) -> list[tuple[Block, int]]:
    """``(block, input index)`` for each block control value ``x`` enters (one in a
    well-formed graph)."""
    return [(u, i) for u, i in x.uses if isinstance(u, Block) and i >= 0]


def edge_of(x: Node) -> tuple[Block, int] | None:
    """The block control value ``x`` enters and its position among that block's inputs;
    None when it enters no block or several (the verifier says which)."""
    found = entries(x)
    return found[0] if len(found) == 1 else None


class CycleError(ValueError):
    """Nodes of one block that depend on one another in a cycle; ``stuck`` names some."""

    def __init__(self, message: str, stuck: list[Node]):
        super().__init__(message)
        self.stuck = stuck


def kahn_groups(nodes: Sequence[Node], block: Block) -> list[list[Node]]:
    """Kahn's algorithm over the data and ``deps`` edges among ``nodes``: repeatedly take
    every node whose predecessors among them are done.  The nodes of a group are
    independent of one another and keep their order in ``nodes``.  Raises CycleError."""
    local = set(nodes)
    indeg = {n: 0 for n in nodes}
    succs: dict[Node, list[Node]] = {n: [] for n in nodes}
    for n in nodes:
        for d in dict.fromkeys((*n.inputs, *n.deps)):
            if d in local:
                indeg[n] += 1
                succs[d].append(n)
    order = {n: i for i, n in enumerate(nodes)}
    groups: list[list[Node]] = []
    ready = [n for n in nodes if indeg[n] == 0]
    done = 0
    while ready:
        groups.append(ready)
        done += len(ready)
        nxt = []
        for n in ready:
            for s in succs[n]:
                indeg[s] -= 1
                if indeg[s] == 0:
                    nxt.append(s)
        ready = sorted(nxt, key=order.__getitem__)
    if done != len(nodes):
        stuck = [n for n in nodes if indeg[n] > 0]
        raise CycleError(f"block ^{block.name}: dependency cycle among {', '.join(map(repr, stuck[:3]))}", stuck)
    return groups
