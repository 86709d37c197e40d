"""The execution plan of a graph (seed 000, section 5), computed once per graph version.

Per reachable block: its Phis, the Kahn groups of its dataflow nodes (each group's nodes
are independent of one another), its terminator and the control edges it can leave by,
and the values live on entry and exit (``nexus.ir.analysis.liveness``: for freeing each
value after its last use).
Constants and arguments are not scheduled: they are bound once per call.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from nexus.ir.analysis import liveness
from nexus.ir.cfg import CycleError, entries, kahn_groups, role
from nexus.ir.graph import Graph
from nexus.ir.node import Block, Node


class PlanError(ValueError):
    """A graph the interpreter cannot schedule (a dependency cycle inside a block)."""


@dataclass
class Edge:
    """A control edge: the block it enters and its position among that block's inputs.
    ``problem`` explains a missing edge (e.g. a Cond exit nobody uses)."""

    target: Block | None
    index: int = -1
    problem: str | None = None


@dataclass
class BlockPlan:
    block: Block
    phis: list[Node]
    groups: list[list[Node]]
    term: Node | None
    edges: list[Edge]  # Jmp: [edge]; Cond: [false, true]; Return / none: []
    live_in: set[Node] = field(default_factory=set)
    live_out: set[Node] = field(default_factory=set)


@dataclass
class Plan:
    graph: Graph
    blocks: dict[Block, BlockPlan]  # reachable blocks, entry first
    consts: list[Node]
    args: list[Node]
    in_edges: dict[Block, int]  # number of reachable control edges entering each block


def value_inputs(node: Node) -> list[Node]:
    """Inputs that are runtime values (constants are bound once, not tracked)."""
    return [v for v in node.inputs if role(v) != "constant"]


def _edge(control: Node) -> Edge:
    found = entries(control)
    if len(found) != 1:
        what = "no block" if not found else f"{len(found)} blocks"
        return Edge(None, problem=f"control value {control!r} enters {what}")
    return Edge(*found[0])


def _edges(term: Node | None) -> list[Edge]:
    """Jmp: [edge]; a forking terminator: one per exit, in Proj order; Return (it leaves
    the graph): []."""
    if term is None or term.op.name == "Return":
        return []
    if not term.op.forking:
        return [_edge(term)]
    out = []
    for num in range(len(term.op.results)):
        projs = [u for u in term.users if u.op.name == "Proj" and u.attrs["num"] == num]
        out.append(_edge(projs[0]) if len(projs) == 1 else
                   Edge(None, problem=f"{term.op.name} exit {num} has no Proj"))
    return out


def _block_plan(block: Block) -> BlockPlan:
    phis, data = [], []
    term = None
    for n in block.members:
        kind = role(n)
        if kind == "phi":
            phis.append(n)
        elif kind == "data":
            data.append(n)
        elif kind == "terminator" and term is None:
            term = n
    try:
        groups = kahn_groups(data, block)
    except CycleError as e:
        raise PlanError(str(e)) from None
    return BlockPlan(block, phis, groups, term, _edges(term))


def make_plan(g: Graph) -> Plan:
    blocks: dict[Block, BlockPlan] = {}
    in_edges: dict[Block, int] = {}
    work = [g.start_block]
    while work:
        b = work.pop()
        if b in blocks:
            continue
        bp = blocks[b] = _block_plan(b)
        for e in bp.edges:
            if e.target is not None:
                in_edges[e.target] = in_edges.get(e.target, 0) + 1
                work.append(e.target)
    consts = [n for b in blocks for n in b.members if role(n) == "constant"]
    plan = Plan(g, blocks, consts, list(g.args), in_edges)
    live = liveness(g)
    for b, bp in blocks.items():
        bp.live_in, bp.live_out = live.live_in.get(b, set()), live.live_out.get(b, set())
    return plan
