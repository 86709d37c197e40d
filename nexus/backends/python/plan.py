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
from nexus.ir.graph import Graph
from nexus.ir.node import TERMINATORS, Block, Node


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


# Kinds decided by the op's name alone (checked in classify's order of precedence).
_KIND_BY_NAME = {"Start": "control", "End": "control", **{t: "term" for t in TERMINATORS}, "Constant": "const"}


def classify(node: Node) -> str:
    """'phi', 'const', 'arg', 'control' (Start, End, Cond exits), 'term' or 'data'."""
    op = node.op
    if op.kind == "phi":
        return "phi"
    name = op.name
    kind = _KIND_BY_NAME.get(name)
    if kind is not None:
        return kind
    if name == "Proj":
        src = node.input(0).op.name
        if src == "Start":
            return "arg"
        if src == "Cond":
            return "control"
    return "data"


def value_inputs(node: Node) -> list[Node]:
    """Inputs that are runtime values (constants are bound once, not tracked)."""
    # classify(v) == "const" exactly when v is a Constant (Constant is not a phi-kind op).
    return [v for v in node.inputs if v.op.name != "Constant"]


def kahn_groups(nodes: list[Node], block: Block) -> list[list[Node]]:
    """Kahn's algorithm: repeatedly take every node whose in-block predecessors are done."""
    local = set(nodes)
    indeg = {n: 0 for n in nodes}
    succs: dict[Node, list[Node]] = {n: [] for n in nodes}
    for n in nodes:
        for d in dict.fromkeys((*n.inputs, *n.deps)):
            if d in local:
                indeg[n] += 1
                succs[d].append(n)
    order = {n: i for i, n in enumerate(nodes)}  # groups keep the members' order
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
        stuck = [n for n in nodes if indeg[n] > 0][:3]
        raise PlanError(f"block ^{block.name}: dependency cycle among {', '.join(map(repr, stuck))}")
    return groups


def _edge_of(control: Node) -> Edge:
    targets = [(u, i) for u, i in control.uses if isinstance(u, Block) and i >= 0]
    if len(targets) != 1:
        what = "no block" if not targets else f"{len(targets)} blocks"
        return Edge(None, problem=f"control value {control!r} enters {what}")
    return Edge(targets[0][0], targets[0][1])


def _edges(term: Node | None) -> list[Edge]:
    if term is None or term.op.name == "Return":
        return []
    if term.op.name == "Jmp":
        return [_edge_of(term)]
    out = []
    for num in (0, 1):
        projs = [u for u in term.users if u.op.name == "Proj" and u.attrs["num"] == num]
        out.append(_edge_of(projs[0]) if len(projs) == 1 else Edge(None, problem=f"Cond exit {num} has no Proj"))
    return out


def _block_plan(block: Block) -> BlockPlan:
    phis, data = [], []
    term = None
    for n in block.members:
        kind = classify(n)
        if kind == "phi":
            phis.append(n)
        elif kind == "data":
            data.append(n)
        elif kind == "term" and term is None:
            term = n
    return BlockPlan(block, phis, kahn_groups(data, block), term, _edges(term))


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
    consts = [n for b in blocks for n in b.members if n.op.name == "Constant"]  # classify: "const"
    plan = Plan(g, blocks, consts, list(g.args), in_edges)
    live = liveness(g)
    for b, bp in blocks.items():
        bp.live_in, bp.live_out = live.live_in.get(b, set()), live.live_out.get(b, set())
    return plan
