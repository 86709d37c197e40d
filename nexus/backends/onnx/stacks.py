"""Autodiff tapes for ONNX: one stack per dtype, so that each becomes an ONNX sequence.

Graph-mode autodiff saves forward values on a functional stack
(:mod:`nexus.ops.stack`); one stack holds tensors of several dtypes (f64 activations,
i64 block codes).  An ONNX sequence holds tensors of one element type, so before export
:func:`split_stacks` rewrites every stack into one stack per dtype it carries.

A *web* is a set of stack values connected by ``StackPush`` (result ~ stack),
``StackPop`` (rest ~ stack) and Phis; for each dtype ``d`` pushed or popped anywhere in
the web, each stack value ``S`` gets a counterpart ``S_d``.  A push of a ``d`` value
updates ``S_d`` only and a pop of a ``d`` value pops ``S_d`` only; the other dtypes' stacks
pass through unchanged.  This keeps each pop's value: the tape is LIFO, so a pop takes the
latest push not yet popped, and among the pushes of its own dtype that is also the latest
one not yet popped; it is the top of ``S_d``.
"""

from __future__ import annotations

from nexus.ir.graph import Graph
from nexus.ir.node import Node
from nexus.ir.types import STACK, StackType, TensorType
from nexus.ir.verify import problems


class StackSplitError(ValueError):
    """A stack that cannot be split by dtype; the message names the node."""


def _is_stack(n: Node) -> bool:
    return isinstance(n.type, StackType)


def _webs(g: Graph) -> list[list[Node]]:
    """The stack values of ``g``, grouped into webs (union-find over the stack edges)."""
    parent: dict[Node, Node] = {}

    def find(a: Node) -> Node:
        while parent[a] is not a:
            parent[a] = parent[parent[a]]
            a = parent[a]
        return a

    def union(a: Node, b: Node) -> None:
        parent.setdefault(a, a)
        parent.setdefault(b, b)
        ra, rb = find(a), find(b)
        if ra is not rb:
            parent[ra] = rb

    for n in g.nodes():
        if _is_stack(n):
            parent.setdefault(n, n)
            for v in n.inputs:  # Push's and Phi's stack inputs; Proj 0 of a Pop via its Pop
                if _is_stack(v):
                    union(n, v)
                elif v.op.name == "StackPop":
                    union(n, v.inputs[0])
    groups: dict[Node, list[Node]] = {}
    for n in parent:
        groups.setdefault(find(n), []).append(n)
    return list(groups.values())


def _dtype_of(n: Node) -> str | None:
    """The dtype a push writes or a pop reads (None for other stack values)."""
    if n.op.name == "StackPush":
        t = n.inputs[1].type
        assert isinstance(t, TensorType)
        return t.dtype
    return None


def split_stacks(graph: Graph) -> tuple[Graph, dict[Node, str]]:
    """A copy of ``graph`` in which every stack holds values of one dtype, and the map
    from each stack value of the copy (StackNew, push results, pops' rests, Phis) to its
    elements' dtype.  ``graph`` itself is not changed; a graph without stacks comes back
    as it is."""
    if not any(_is_stack(n) for n in graph.nodes()):
        return graph, {}
    g, _ = graph.clone()
    dtypes: dict[Node, str] = {}
    for web in _webs(g):
        _split_web(g, web, dtypes)
    errors = problems(g)
    if errors:
        raise StackSplitError(f"splitting the stacks of @{graph.name} by dtype broke the graph: {errors[0]}")
    return g, dtypes


def _split_web(g: Graph, web: list[Node], dtypes: dict[Node, str]) -> None:
    members = set(web)
    pops = {u for s in web for u in s.users if isinstance(u, Node) and u.op.name == "StackPop"}
    kinds = sorted({d for s in web if (d := _dtype_of(s)) is not None} | {str(p.attrs["dtype"]) for p in pops})
    if not kinds:
        raise StackSplitError(f"stack {web[0]!r} is never pushed or popped; it has no ONNX element type")
    new: dict[tuple[Node, str], Node] = {}
    # Phis first (with their old inputs as placeholders), since loops make them cyclic.
    for s in web:
        if s.op.kind == "phi":
            assert s.block is not None
            for d in kinds:
                new[s, d] = g.add(s.op, list(s.inputs), s.block, type=STACK, name=s.name)

    def get(s: Node, d: str) -> Node:
        got = new.get((s, d))
        if got is not None:
            return got
        if s not in members:
            raise StackSplitError(f"{s!r} is used as a stack but is not one")
        assert s.block is not None
        op = s.op.name
        if op == "StackNew":
            out = g.add("StackNew", [], s.block, name=s.name)
        elif op == "StackPush":
            below = get(s.inputs[0], d)
            out = g.add("StackPush", [below, s.inputs[1]], s.block, name=s.name) if _dtype_of(s) == d else below
        elif op == "Proj" and s.inputs[0].op.name == "StackPop":
            pop = s.inputs[0]
            below = get(pop.inputs[0], d)
            if str(pop.attrs["dtype"]) == d:
                out = _pop(g, pop, below)
            else:
                out = below
        else:
            raise StackSplitError(f"{s!r}: a stack made by {op} cannot be split by dtype")
        new[s, d] = out
        return out

    popped: dict[Node, tuple[Node, Node]] = {}

    def _pop(g: Graph, pop: Node, below: Node) -> Node:
        assert pop.block is not None
        p = g.add("StackPop", [below], pop.block, dict(pop.attrs), type=pop.type, name=pop.name, loc=pop.loc)
        rest = g.add("Proj", [p], pop.block, {"num": 0}, type=STACK)
        top = g.add("Proj", [p], pop.block, {"num": 1}, type=pop.type.elems[1])  # type: ignore[attr-defined]
        popped[pop] = (rest, top)
        return rest

    for s in web:
        for d in kinds:
            get(s, d)
    for s in web:
        if s.op.kind == "phi":
            for d in kinds:
                for i, v in enumerate(s.inputs):
                    g.set_input(new[s, d], i, get(v, d))
    for pop in pops:  # a pop whose rest nothing reads was not reached through the web
        if pop not in popped:
            _pop(g, pop, get(pop.inputs[0], str(pop.attrs["dtype"])))
    # The popped values' readers now read the new pops.
    old: list[Node] = list(web)
    for pop in pops:
        old.append(pop)
        for u in list(pop.users):
            if isinstance(u, Node) and u.op.name == "Proj":
                old.append(u)
                if u.attrs["num"] == 1:
                    u.replace_all_uses_with(popped[pop][1])
    doomed = set(old)
    outside = [u for s in old for u in s.users if u not in doomed]
    if outside:
        raise StackSplitError(f"stack {web[0]!r} is read by {outside[0]!r}, which is not a stack op")
    for (_, d), n in new.items():
        dtypes[n] = d
    g.erase_dead(old)
    g.touch()
