"""One rank's part of a placed graph.

Every rank runs the whole control skeleton (blocks, Phis of replicated values, Conds:
their conditions are replicated or broadcast by the placement pass) and the data nodes of
its own machine and the replicated ones; nodes of other machines are dropped.

Messages cannot deadlock: in each block the comm nodes of a rank (Send, Recv,
collectives) get ordering edges that make them run in one global order, the Kahn order
of the whole block, in which every Recv comes right after its Send.  Sends do not block,
so each rank waits only for messages that come earlier in that order.
"""

from __future__ import annotations

import numpy as np

from nexus.ir.cfg import kahn_groups, role
from nexus.ir.graph import Graph
from nexus.ir.node import Node
from nexus.ir.types import TensorType, numpy_dtype
from nexus.passes.placement import Place, machine_names, machines_of


def place_for_ranks(g: Graph, machines: tuple[str, ...] = ()) -> tuple[Graph, list[str]]:
    """A copy of ``g`` with Memcpy and Send/Recv/Broadcast inserted for its machines (in
    rank order: ``machines`` or the sorted names), and that order."""
    placed, _ = g.clone()
    Place(machines=True, machine_order=machines).apply(placed)
    return placed, machine_names(placed, machines)


def partition(placed: Graph, rank: int, machines: list[str]) -> Graph:
    """The part of ``placed`` (from :func:`place_for_ranks`) that rank ``rank`` runs.  With
    no machines in the graph every rank runs all of it (SPMD)."""
    g, _ = placed.clone()
    mine = machines[rank] if rank < len(machines) else None
    if machines and mine is None:
        raise ValueError(f"rank {rank} has no machine: the graph names {len(machines)} machine(s) "
                         f"({', '.join(machines)}); start as many ranks, or give every rank the same graph "
                         "with a replica per rank (nexus.distributed.replicate: data parallelism)")

    where = machines_of(g, tuple(machines))

    def here(n: Node) -> bool:
        m = where.get(n)
        return not m or m == mine

    for b in list(g.blocks):
        data = [n for n in b.members if role(n) == "data"]
        order = [n for grp in kahn_groups(data, b) for n in grp]
        comm = [n for n in order if n.op.kind == "comm" and here(n)]
        for prev, n in zip(comm, comm[1:], strict=False):
            n.add_dep(prev)
    doomed = [n for n in g.nodes() if not here(n) and role(n) in ("data", "phi")]
    gone = set(doomed)
    for n in g.nodes():
        if n in gone:
            continue
        if n.deps and any(d in gone for d in n.deps):
            n.set_deps([d for d in n.deps if d not in gone])
        if n.op.name == "Broadcast" and n.input(0) in gone:
            # a receiver: the root's signature gives the shape; the input only keeps the type
            n.set_input(0, _placeholder(g, n))
    for n in doomed:
        n.set_deps([])
    g.erase_dead(doomed)
    g.name = f"{placed.name}.rank{rank}"
    return g


def _placeholder(g: Graph, n: Node) -> Node:
    t = n.type
    dtype = t.dtype if isinstance(t, TensorType) else "f32"
    value = np.zeros((), numpy_dtype(dtype))
    return g.add("Constant", [], g.start_block, {"value": value}, type=TensorType(dtype, ()))


def groups_of(g: Graph) -> list[str]:
    """The explicit groups (``"0,2"``) of the collectives of ``g``, sorted: every rank
    creates them in this order before running (torch.distributed's new_group is itself
    collective)."""
    return sorted({str(n.attrs.get("group", "")) for n in g.nodes()
                   if n.op.kind == "comm" and n.attrs.get("group")})
