"""TensorFlow control flow as blocks: v1 frames and conds (from the chains of
:mod:`nexus.frontend.tf.frames`) and v2 functional ``If`` / ``While``.

``emit_level(imp, prefix, members)`` emits the nodes whose chain starts with ``prefix``.
It groups them by the next step of their chain: a node with no further step is an item
of its own; the nodes inside one while loop are one item; the nodes on either side of
the Switches on one predicate, with those Switches and the Merges joining them, are one
item per connected group (two ``tf.cond`` on one predicate stay two conds).  The items
are emitted in dependency order; a loop as

    pre:    each loop Merge's variable := its Enter's value        (then Jmp)
    header: the loop Merges read as Phis; the header's nodes; Cond LoopCond -> body | exit
    body:   the body's nodes; each loop Merge's variable := its NextIteration's value
    exit:   the nodes between the loop's Switches and its Exits

and a cond as a Cond with a true and a false arm, each the level one step deeper,
joining in a block where each Merge is a variable bound at the end of both arms (the
side each Merge input comes from is the last step of its chain).
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from nexus.frontend.tf.frames import Chain, Frames
from nexus.frontend.tf.ops import converts
from nexus.frontend.tf.proto import TfImportError, TfNode
from nexus.ir.node import Node

if TYPE_CHECKING:
    from nexus.frontend.tf.importer import Body, Importer


def emit_level(imp: Importer, prefix: Chain, members: Sequence[str]) -> None:
    """Emit ``members`` (all with chains starting with ``prefix``) in dependency order."""
    body = imp.body
    assert body is not None
    fr = body.frames
    depth = len(prefix)
    item: dict[str, Any] = {}
    parent: dict[str, str] = {}  # union-find over the nodes of conds

    def find(x: str) -> str:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    cond_of: dict[str, Any] = {}
    for name in members:
        n = body.nodes[name]
        rest = fr.chain[name][depth:]
        if rest and rest[0][0] == "loop":
            item[name] = ("loop", rest[0][1])
        elif rest and rest[0][0] == "br":
            cond_of[name] = rest[0][1]
        elif n.op == "Switch" and _loopcond(fr, n) is None:
            cond_of[name] = fr.pred_key(n.inputs[1])
        elif n.op == "Merge" and n.extra.get("sides") is not None and not fr.is_loop_merge(n):
            cond_of[name] = n.extra["pred"]
        else:
            item[name] = ("node", name)
    for name in cond_of:
        parent[name] = name
    for name, p in cond_of.items():
        n = body.nodes[name]
        if n.op == "Switch" and fr.chain[name] == prefix:
            continue  # its inputs are outside the cond (a Merge of an earlier cond on ``p``, say)
        for s in [t[0] for t in n.inputs] + n.controls:
            if cond_of.get(s) == p:
                parent[find(s)] = find(name)
    for name, p in cond_of.items():
        item[name] = ("cond", p, find(name))

    groups: dict[Any, list[str]] = {}
    for name in members:
        groups.setdefault(item[name], []).append(name)
    deps: dict[Any, set[Any]] = {k: set() for k in groups}
    for name in members:
        n = body.nodes[name]
        for s in [t[0] for t in n.inputs if t not in body.fed] + n.controls:
            other = item.get(s)
            if other is not None and other != item[name]:
                deps[item[name]].add(other)
    for k in order_items(body, groups, deps):
        if k[0] == "node":
            imp.emit_node(body.nodes[k[1]])
            continue
        # Errors of the loop or cond itself name its LoopCond, or its first Switch or Merge.
        lc = fr.loopcond.get(k[1]) if k[0] == "loop" else None
        first = min(groups[k], key=lambda m: (body.nodes[m].op not in ("Switch", "Merge"), body.nodes[m].index))
        with imp.at(body.nodes[lc or first]):
            if k[0] == "loop":
                emit_loop(imp, k[1], prefix, groups[k])
            else:
                emit_cond(imp, k[1], prefix, groups[k])


def order_items(body: Body, groups: dict[Any, list[str]], deps: dict[Any, set[Any]]) -> list[Any]:
    """The items in dependency order (Kahn's algorithm; ties in GraphDef order)."""
    first = {k: min(body.nodes[m].index for m in v) for k, v in groups.items()}
    users: dict[Any, list[Any]] = {k: [] for k in groups}
    indeg = {k: len(d) for k, d in deps.items()}
    for k, d in deps.items():
        for other in d:
            users[other].append(k)
    ready = [(first[k], i, k) for i, k in enumerate(groups) if indeg[k] == 0]
    heapq.heapify(ready)
    ids = {k: i for i, k in enumerate(groups)}
    order: list[Any] = []
    while ready:
        _, _, k = heapq.heappop(ready)
        order.append(k)
        for u in users[k]:
            indeg[u] -= 1
            if indeg[u] == 0:
                heapq.heappush(ready, (first[u], ids[u], u))
    if len(order) != len(groups):
        stuck = min((k for k in groups if indeg[k] > 0), key=lambda k: first[k])
        n = body.nodes[min(groups[stuck], key=lambda m: body.nodes[m].index)]
        raise TfImportError(f"{n.where()}: cannot order this node's cond or loop among its neighbours "
                            f"(they depend on each other through values of both)")
    return order


def _loopcond(fr: Frames, n: TfNode) -> str | None:
    p = fr.pred_key(n.inputs[1]) if len(n.inputs) > 1 else None
    if p is None or p in fr.fed or fr.nodes[p[0]].op != "LoopCond":
        return None
    return p[0]


def emit_loop(imp: Importer, frame: str, prefix: Chain, members: list[str]) -> None:
    body = imp.body
    assert body is not None
    fr = body.frames
    inner = (*prefix, ("loop", frame))
    lc = fr.loopcond.get(frame)
    if lc is None:
        raise TfImportError(f"{body.nodes[fr.enters[frame][0]].where()}: the while loop of frame {frame!r} "
                            f"has no LoopCond")
    step_body, step_exit = ("br", (lc, 0), 1), ("br", (lc, 0), 0)
    merges = [m for m in fr.loop_merges.get(frame, []) if m in body.cone]
    pre = imp.block
    keys = []
    for m in merges:
        n = body.nodes[m]
        enter = next(t for t in n.inputs if body.nodes[t[0]].op == "Enter")
        imp.define((m, 0), imp.read(enter), pre)
        keys.append(imp.key((m, 0)))
    jmp = imp.jump()
    header = imp.new_block("loop", [jmp], seal=False)
    imp.ssa.declare_assigned(header, [*keys, *resources_assigned(imp, frame, members)])
    imp.block = header
    heads = [m for m in members if fr.chain[m][len(inner):len(inner) + 1] not in ((step_body,), (step_exit,))]
    emit_level(imp, inner, heads)
    on_false, on_true = imp.branch(imp.read((lc, 0)))
    exit_block = imp.new_block("loop_exit", [on_false])
    imp.block = imp.new_block("loop_body", [on_true])
    emit_level(imp, (*inner, step_body), [m for m in members if fr.chain[m][len(inner):len(inner) + 1] == (step_body,)])
    end = imp.block
    for m in merges:
        nxt = next(t for t in body.nodes[m].inputs if body.nodes[t[0]].op == "NextIteration")
        imp.define((m, 0), imp.read(nxt, end), end)
    header.append_input(imp.jump())
    imp.ssa.seal(header)
    imp.block = exit_block
    emit_level(imp, (*inner, step_exit), [m for m in members if fr.chain[m][len(inner):len(inner) + 1] == (step_exit,)])


def resources_assigned(imp: Importer, frame: str, members: list[str]) -> list[Any]:
    """The resource variables (stacks) that pushes and pops inside the loop change."""
    body = imp.body
    assert body is not None
    out = []
    for m in members:
        n = body.nodes[m]
        if n.op in ("StackPushV2", "StackPopV2", "StackPush", "StackPop") and n.inputs:
            out.append(imp.res_key(imp.origin(n.inputs[0])))
    return out


def emit_cond(imp: Importer, pred: Any, prefix: Chain, members: list[str]) -> None:
    body = imp.body
    assert body is not None
    fr = body.frames
    depth = len(prefix)
    merges = [m for m in members if body.nodes[m].op == "Merge" and fr.chain[m] == prefix]
    arms = {k: [m for m in members if fr.chain[m][depth:depth + 1] == (("br", pred, k),)] for k in (0, 1)}
    if not merges and not arms[0] and not arms[1]:
        return  # only Switches whose outputs nothing here uses
    on_false, on_true = imp.branch(imp.read(pred))
    ends, jumps = {}, {}
    for k, edge in ((1, on_true), (0, on_false)):
        imp.block = imp.new_block("then" if k else "else", [edge])
        emit_level(imp, (*prefix, ("br", pred, k)), arms[k])
        ends[k] = imp.block
        jumps[k] = imp.jump()
    join = imp.new_block("join", [jumps[1], jumps[0]])
    for m in merges:
        n = body.nodes[m]
        used_index = any(t == (m, 1) for u in body.users.get(m, []) for t in body.nodes[u].inputs)
        for i, (t, side) in enumerate(zip(n.inputs, n.extra["sides"])):
            imp.define((m, 0), imp.read(t, ends[side]), ends[side])
            if used_index:
                c = imp.g.add("Constant", [], ends[side], {"value": np.array(i, np.int32)})
                imp.define((m, 1), c, ends[side])
    imp.block = join


# --- v2 functional control flow ---------------------------------------------------------------
def _func(n: TfNode, key: str) -> str:
    a = n.attr.get(key)
    if a is None or a.WhichOneof("value") != "func":
        raise TfImportError(f"needs the function attribute {key!r}")
    return str(a.func.name)


def convert_if(imp: Importer, n: TfNode) -> list[Node | None]:
    ins = imp.args(n)
    if not ins:
        raise TfImportError("If needs a condition")
    return imp.if_else(ins[0], lambda side: imp.call(_func(n, side + "_branch"), ins[1:]),  # type: ignore[arg-type]
                       (next(imp._ids), n.name),  # a scope of its own; the node names the Phis
                       lambda t, e: TfImportError(f"the branches return {t} and {e} values"))


def convert_while(imp: Importer, n: TfNode) -> list[Node | None]:
    init = imp.args(n)
    cond_fn, body_fn = _func(n, "cond"), _func(n, "body")

    def test(vals: list[Node]) -> Node:
        c = imp.call(cond_fn, vals)  # type: ignore[arg-type]
        if len(c) != 1:
            raise TfImportError(f"the cond function {cond_fn!r} returns {len(c)} values, not one")
        return c[0]  # type: ignore[return-value]

    return imp.while_loop(init, test, lambda vals: imp.call(body_fn, vals),  # type: ignore[arg-type, return-value]
                          (next(imp._ids), n.name),
                          lambda got, want: TfImportError(f"the body function {body_fn!r} returns {got} values, "
                                                          f"the loop has {want}"))


converts("If", "StatelessIf")(convert_if)
converts("While", "StatelessWhile")(convert_while)
