"""Graph mode: transform a Graph into one that returns its results and the gradients.

The result is an ordinary graph made of two parts:

* **forward**: a copy of the original CFG that also threads a *stack* (a functional list
  value, see :mod:`nexus.autodiff.stack_ops`) through every block.  Each block whose
  reverse has work to do pushes, when it ends, the forward values its reverse needs, the
  index of the edge it was entered by (when it has several and Phis to reverse) and its
  block code.  The stack is thus the path the run took, with the values along it.
  Returns become jumps to the reverse part.
* **reverse**: a dispatch loop.  Its head pops a block code and jumps to that block's
  reverse, which pops its values, runs the VJP rules of its nodes in reverse order, sends
  the adjoints of its Phis back along the edge it was entered by and jumps to the head
  again.  The entry block's reverse is the last: it leaves through the single Return.

So loops with data-dependent trip counts, break, continue, early return and nested loops
need no special treatment: the reverse walks exactly the blocks the forward ran, backwards.
Adjoints live in SSA values; those that cross blocks are Phis of the dispatch head (their
shape is restored with ``BroadcastLike`` where a rule reads them, since they start as a
scalar zero).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import nexus.autodiff.stack_ops  # noqa: F401  (registers the stack ops)
from nexus.autodiff.emit import GraphEmitter
from nexus.autodiff.stack_ops import STACK
from nexus.autodiff.vjp import vjp_rule
from nexus.ir.graph import Graph
from nexus.ir.node import Block, Node
from nexus.ir.opdef import OpTypeError
from nexus.ir.printer import node_order
from nexus.ir.types import FLOAT_DTYPES, TensorType, TupleType, Type


class GradError(ValueError):
    """A graph that graph-mode autodiff cannot differentiate; names the node."""


def _float(t: Type) -> bool:
    """Whether values of type ``t`` can carry a gradient (tuples: if a part can)."""
    if isinstance(t, TupleType):
        return any(_float(e) for e in t.elems)
    return isinstance(t, TensorType) and t.dtype in FLOAT_DTYPES


def _where(n: Node) -> str:
    label = f"%{n.name}" if n.name else repr(n)
    loc = f" (created at {n.loc})" if n.loc is not None else ""
    return f"{n.op.name} {label} in ^{n.block.name if n.block else '?'}{loc}"


def vjp_graph(g: Graph, argnums: Sequence[int] = (0,), seed: str = "args") -> Graph:
    """The gradient graph of ``g``.

    It takes ``g``'s arguments and, if ``seed == "args"``, one cotangent per result; with
    ``seed == "ones"`` every result's cotangent is ones (the gradient of its sum).  It
    returns ``g``'s results followed by the cotangent of each argument in ``argnums``.
    """
    return _Builder(g, tuple(argnums), seed).build()


def _inline_calls(g: Graph) -> None:
    """Inline every Call (scripts calling scripts), so the reverse sees one CFG; a
    recursive call stays and is reported if a gradient must flow through it."""
    from nexus.passes.inline import can_inline, inline_call

    for _ in range(1000):
        calls = [n for n in g.nodes() if n.op.name == "Call" and can_inline(g, n)]
        if not calls:
            return
        inline_call(g, calls[0])


class _Builder:
    def __init__(self, g: Graph, argnums: tuple[int, ...], seed: str):
        if seed not in ("args", "ones"):
            raise ValueError(f"seed must be 'args' or 'ones', got {seed!r}")
        for i in argnums:
            if not 0 <= i < len(g.args):
                raise GradError(f"argnums: graph @{g.name} has {len(g.args)} arguments, no argument {i}")
        self.argnums = argnums
        self.seed = seed
        self.g, _ = g.clone(f"{g.name}_vjp")
        _inline_calls(self.g)
        self.entry = self.g.start_block
        self.em = GraphEmitter(self.g, self.entry, self.entry)

    # --- analysis ------------------------------------------------------------------------
    def _activity(self) -> set[Node]:
        """Float values that depend on a differentiated argument."""
        g = self.g
        active = {g.args[i] for i in self.argnums if _float(g.args[i].type)}
        nodes = [n for n in g.nodes() if not n.is_control and n.op.name != "Proj" or
                 (n.op.name == "Proj" and n.input(0).op.name not in ("Start", "Cond"))]
        changed = True
        while changed:
            changed = False
            for n in nodes:
                if n in active or not _float(n.type):
                    continue
                if any(v in active for v in n.inputs):
                    active.add(n)
                    changed = True
        for n in active:
            if n.op.kind == "phi" or n in g.args:
                continue
            if n.op.name == "Call":
                raise GradError(f"{_where(n)}: graph mode cannot differentiate through a Call yet; "
                                "inline the callee or use mode='tape'")
            if not n.op.differentiable and n.op.name not in ("Proj",):
                raise GradError(f"{_where(n)}: gradient requested through op {n.op.name}, "
                                "which is not differentiable")
        return active

    def _carried(self, active: set[Node]) -> list[Node]:
        """Active values whose adjoint crosses blocks: Phis, Phi inputs, values used in
        another block than their own."""
        out = []
        for v in active:
            if isinstance(v.type, TupleType):
                continue  # a multi-output op: its parts (Projs) carry the adjoints
            if v.op.kind == "phi" or any(u.op.kind == "phi" or u.block is not v.block for u in v.users):
                out.append(v)
        return sorted(out, key=lambda n: self._order[n])

    # --- the transformation ----------------------------------------------------------------
    def build(self) -> Graph:
        g = self.g
        self._order = {n: i for i, n in enumerate(g.nodes())}
        fwd_blocks = [b for b in g.blocks if b is not g.end_block]
        returns = [r for r in g.returns]
        if not returns:
            raise GradError(f"graph @{g.name} never returns")
        n_results = len(returns[0].inputs)
        cts: list[Node] = []
        if self.seed == "args":
            cts = self._add_cotangent_args(returns[0])
        active = self._activity()
        carried = self._carried(active)
        self._active_set = active
        self._carried_set = set(carried)
        self._seed_values: dict[Block, list[Node]] = {}
        self._pushes: dict[Block, dict[Node, Node]] = {}
        self._pairs: list[tuple[Node, Node, Node, Node]] = []
        ret_blocks = {r.block for r in returns}

        # Which blocks have a reverse, and what each must save.
        rev_blocks: list[Block] = []
        needs: dict[Block, list[Node]] = {}
        edge_needed: dict[Block, bool] = {}
        for b in fwd_blocks:
            body = [n for n in node_order(b) if n in active and n.op.kind != "phi" and n not in g.args]
            phis = [n for n in b.phis if n in active]
            if not (body or phis or b in ret_blocks or b is self.entry):
                continue
            rev_blocks.append(b)
            need: dict[Node, None] = {}
            for n in body:
                for v in n.inputs:
                    need[v] = None
                need[n] = None
            if b in ret_blocks and self.seed == "ones":
                for v in b.terminator.inputs:  # type: ignore[union-attr]
                    need[v] = None
            needs[b] = [v for v in need if v.block is not self.entry and isinstance(v.type, TensorType)]
            edge_needed[b] = len(b.preds) > 1 and bool(phis)
        # The dispatch tests codes in this order: the entry (reversed once, last) at the end.
        rev_blocks.sort(key=lambda b: (b is self.entry, b in ret_blocks))
        code = {b: i for i, b in enumerate(rev_blocks)}

        # Forward: thread the stack, push what the reverse needs.
        stack_in: dict[Block, Node] = {}
        stack_out: dict[Block, Node] = {}
        for b in fwd_blocks:
            if b is self.entry:
                stack_in[b] = g.add("StackNew", [], b)
            else:
                stack_in[b] = g.add("Phi", [], b, type=STACK)
        for b in fwd_blocks:
            s = stack_in[b]
            pushes: dict[Node, Node] = {}
            if b in code:
                for v in needs[b]:
                    s = pushes[v] = g.add("StackPush", [s, v], b)
                if edge_needed[b]:
                    consts = [self.em.const(i, "i64") for i in range(len(b.preds))]
                    edge = g.add("Phi", consts, b, name=f"edge_{b.name}")
                    s = g.add("StackPush", [s, edge], b)
                s = g.add("StackPush", [s, self.em.const(code[b], "i64")], b)
            stack_out[b] = s
            self._pushes[b] = pushes
        for b in fwd_blocks:
            if b is self.entry:
                continue
            for c in b.preds:
                assert c.block is not None
                stack_in[b].append_input(stack_out[c.block])

        # Returns become jumps to the reverse part.
        rev_entry = g.new_block("rev_entry")
        result_vals: list[list[Node]] = [[] for _ in range(n_results)]
        stacks_at_return: list[Node] = []
        for r in returns:
            rblock = r.block
            assert rblock is not None
            vals = list(r.inputs)
            for i, v in enumerate(vals):
                result_vals[i].append(v)
            g.end_block.remove_input(list(g.end_block.inputs).index(r))
            g.erase(r)
            self._seed_values[rblock] = vals
            rev_entry.append_input(g.add("Jmp", [], rblock))
            stacks_at_return.append(stack_out[rblock])
        results = [g.add("Phi", vs, rev_entry, name=f"result{i}") for i, vs in enumerate(result_vals)]
        s_entry = g.add("Phi", stacks_at_return, rev_entry, type=STACK)

        # The dispatch head: Phis for the stack and every carried adjoint.
        head = g.new_block("rev_head", [g.add("Jmp", [], rev_entry)])
        zero = {dt: self.em.const(0.0, dt) for dt in FLOAT_DTYPES}
        s_head = g.add("Phi", [s_entry], head, type=STACK, name="tape")
        adj_phi = {v: g.add("Phi", [zero[v.type.dtype]], head, type=TensorType(v.type.dtype, None))  # type: ignore[attr-defined]
                   for v in carried}
        pop = g.add("StackPop", [s_head], head, {"dtype": "i64"}, type=TupleType((STACK, TensorType("i64", ()))))
        s_popped = g.add("Proj", [pop], head, {"num": 0})
        block_code = g.add("Proj", [pop], head, {"num": 1}, name="block_code")

        # Dispatch on the code: a chain of tests.
        targets: dict[Block, Block] = {}
        cur_block = head
        for i, b in enumerate(rev_blocks):
            rb = g.new_block(f"rev_{b.name}")
            targets[b] = rb
            if i == len(rev_blocks) - 1:
                rb.append_input(g.add("Jmp", [], cur_block))
                break
            test = g.add("Equal", [block_code, self.em.const(code[b], "i64")], cur_block)
            cond = g.add("Cond", [test], cur_block)
            rb.append_input(g.add("Proj", [cond], cur_block, {"num": 1}))
            nxt = g.new_block(f"dispatch{i + 1}", [g.add("Proj", [cond], cur_block, {"num": 0})])
            cur_block = nxt

        exits: list[tuple[Node, Node, dict[Node, Node | None]]] = []
        final_adj: dict[Node, Node | None] = {}
        for b in rev_blocks:
            rb = targets[b]
            adj: dict[Node, Node | None] = dict(adj_phi)  # type: ignore[arg-type]
            s = s_popped
            em = GraphEmitter(g, rb, self.entry)
            em._consts = self.em._consts
            edge_val: Node | None = None
            if edge_needed[b]:
                s, edge_val = self._pop(rb, s, TensorType("i64", ()))
            val: dict[Node, Node] = {}
            for v in reversed(needs[b]):
                s, val[v] = self._pop(rb, s, v.type, self._pushes[b][v])

            def value(v: Node) -> Node:
                return val.get(v, v)

            if b in self._seed_values:
                for i, v in enumerate(self._seed_values[b]):
                    if v not in active:
                        continue
                    seed = cts[i] if self.seed == "args" else em.op("OnesLike", value(v))
                    self._acc(em, adj, v, seed)
            body = [n for n in node_order(b) if n in active and n.op.kind != "phi" and n not in g.args]
            parts: dict[Node, list[Node | None]] = {}
            for n in reversed(body):
                gout: Any
                if isinstance(n.type, TupleType):
                    got = parts.pop(n, None)
                    gout = got if got is not None and any(x is not None for x in got) else None
                    adj.pop(n, None)
                elif n.op.name == "Proj" and isinstance(n.input(0).type, TupleType):
                    gp = adj.get(n)
                    if n in adj_phi and gp is not None:
                        gp = em.op("BroadcastLike", gp, value(n))
                    if gp is not None:
                        src = n.input(0)
                        if src.block is not b:
                            raise GradError(f"{_where(n)}: a part of a multi-output op is read in another block")
                        lst = parts.setdefault(src, [None] * len(src.type.elems))  # type: ignore[attr-defined]
                        k = n.attrs["num"]
                        lst[k] = gp if lst[k] is None else em.op("Add", lst[k], gp)
                    adj[n] = zero[n.type.dtype] if n in adj_phi else None  # type: ignore[attr-defined]
                    continue
                else:
                    gout = adj.get(n)
                if n in adj_phi and gout is not None and not isinstance(gout, list):
                    gout = em.op("BroadcastLike", gout, value(n))
                if gout is not None:
                    wants = [v in active for v in n.inputs]
                    try:
                        grads = vjp_rule(n.op.name)(em, n, [value(v) for v in n.inputs], value(n), gout, wants)
                    except OpTypeError as e:
                        raise GradError(f"{_where(n)}: its VJP rule failed: {e}") from e
                    for v, gv, w in zip(n.inputs, grads, wants):
                        if w and gv is not None:
                            self._acc(em, adj, v, gv)
                if n in adj_phi:
                    adj[n] = zero[n.type.dtype]  # type: ignore[attr-defined]
                else:
                    adj.pop(n, None)
            if b is self.entry:
                final_adj = adj
                final_block = rb
                continue
            phis = [p for p in b.phis if p in active]
            if not edge_needed[b]:
                self._send_back(em, adj, phis, 0)
                exits.append((g.add("Jmp", [], rb), s, adj))
                continue
            # one exit block per entering edge
            cur = rb
            for e_i in range(len(b.preds)):
                eb = g.new_block(f"rev_{b.name}_edge{e_i}")
                if e_i == len(b.preds) - 1:
                    eb.append_input(g.add("Jmp", [], cur))
                else:
                    assert edge_val is not None
                    test = g.add("Equal", [edge_val, self.em.const(e_i, "i64")], cur)
                    cond = g.add("Cond", [test], cur)
                    eb.append_input(g.add("Proj", [cond], cur, {"num": 1}))
                    nxt = g.new_block(f"rev_{b.name}_edges{e_i + 1}", [g.add("Proj", [cond], cur, {"num": 0})])
                eem = GraphEmitter(g, eb, self.entry)
                eem._consts = self.em._consts
                eadj = dict(adj)
                self._send_back(eem, eadj, phis, e_i)
                exits.append((g.add("Jmp", [], eb), s, eadj))
                if e_i < len(b.preds) - 1:
                    cur = nxt

        # Close the head's Phis.
        for jmp, s, adj in exits:
            head.append_input(jmp)
            s_head.append_input(s)
            for v, phi in adj_phi.items():
                a = adj.get(v)
                phi.append_input(a if a is not None else zero[v.type.dtype])  # type: ignore[attr-defined]

        # The final block: results and the arguments' cotangents.
        fem = GraphEmitter(g, final_block, self.entry)
        fem._consts = self.em._consts
        outs = list(results)
        for i in self.argnums:
            arg = g.args[i]
            a = final_adj.get(arg)
            if a is None or not _float(arg.type):
                outs.append(fem.op("ZerosLike", arg))
            else:
                outs.append(fem.op("BroadcastLike", a, arg))
        ret = g.add("Return", outs, final_block)
        g.end_block.append_input(ret)
        self._drop_unused_saves()
        return g

    def _pop(self, block: Block, s: Node, t: Type, push: Node | None = None) -> tuple[Node, Node]:
        assert isinstance(t, TensorType)
        pop = self.g.add("StackPop", [s], block, {"dtype": t.dtype}, type=TupleType((STACK, t)))
        rest, top = self.g.add("Proj", [pop], block, {"num": 0}), self.g.add("Proj", [pop], block, {"num": 1})
        if push is not None:
            self._pairs.append((push, pop, rest, top))
        return rest, top

    def _drop_unused_saves(self) -> None:
        """Remove each push whose popped value the reverse never reads (rules that need
        only shapes, or nothing), with its pop."""
        g = self.g
        for push, pop, rest, top in self._pairs:
            if top.has_uses():
                continue
            push.replace_all_uses_with(push.input(0))
            g.erase(push)
            rest.replace_all_uses_with(pop.input(0))
            g.erase(top)
            g.erase(rest)
            g.erase(pop)

    @staticmethod
    def _acc(em: GraphEmitter, adj: dict[Node, Node | None], v: Node, c: Node) -> None:
        old = adj.get(v)
        adj[v] = c if old is None else em.op("Add", old, c)

    def _send_back(self, em: GraphEmitter, adj: dict[Node, Node | None], phis: list[Node], edge: int) -> None:
        """The adjoint of a block's Phis for the edge ``edge``: all read, then all reset
        (parallel copy), then added to the inputs."""
        grads = [(p, adj.get(p)) for p in phis]
        for p in phis:
            adj[p] = em.const(0.0, p.type.dtype) if p in self._carried_set else None  # type: ignore[attr-defined]
        for p, gp in grads:
            src = p.input(edge)
            if gp is None or src not in self._active_set:
                continue
            self._acc(em, adj, src, gp)

    def _add_cotangent_args(self, ret: Node) -> list[Node]:
        g = self.g
        types = [v.type for v in ret.inputs]
        start_t = g.start.type
        assert isinstance(start_t, TupleType)
        n0 = len(start_t.elems)
        g.start.type = TupleType(start_t.elems + tuple(types))
        cts = [g.add("Proj", [g.start], self.entry, {"num": n0 + i}, name=f"ct{i}") for i in range(len(types))]
        g.args.extend(cts)
        return cts
