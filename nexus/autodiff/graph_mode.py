"""Graph mode: transform a Graph into one that returns its results and the gradients.

The result is an ordinary graph made of two parts:

* **forward**: a copy of the original CFG that also threads a *stack* (a functional list
  value, see :mod:`nexus.ops.stack`) through every block.  Each block whose
  reverse has work to do pushes, when it ends, the forward values its reverse needs, the
  index of the edge it was entered by (when it has several and Phis to reverse) and its
  block code.  The stack is thus the path the run took, with the values along it.
  Returns become jumps to the reverse part.
* **reverse**: a dispatch loop.  Its head pops a block code and jumps to that block's
  reverse, which pops its values, runs the VJP rules of its nodes in reverse order, sends
  the adjoints of its Phis back along the edge it was entered by and jumps to the head
  again.  The entry block's reverse is the last: it leaves through the single Return.
  A block whose every successor is reversed and entered only from it (a loop header
  whose body and exit have work) pushes no code: the reverse of each successor goes on
  into a copy of its reverse, so the reverse of a loop iteration is one trip of the
  dispatch loop.

So loops with data-dependent trip counts, break, continue, early return and nested loops
need no special treatment: the reverse walks exactly the blocks the forward ran, backwards.
Adjoints live in SSA values; those that cross blocks are Phis of the dispatch head (their
shape is restored with ``BroadcastLike`` where a rule reads them, since they start as a
scalar zero).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from nexus.autodiff.emit import GraphEmitter
from nexus.autodiff.vjp import vjp_rule
from nexus.ir.analysis import node_order
from nexus.ir.cfg import role
from nexus.ir.graph import Graph
from nexus.ir.node import Block, Node, node_where
from nexus.ir.opdef import OpTypeError
from nexus.ir.types import (
    FLOAT_DTYPES,
    OptionalType,
    SequenceType,
    TensorType,
    TupleType,
    Type,
    is_container,
    numpy_dtype,
)
from nexus.ops.stack import STACK


class GradError(ValueError):
    """A graph that graph-mode autodiff cannot differentiate; names the node."""


def _float(t: Type) -> bool:
    """Whether values of type ``t`` can carry a gradient (tuples: if a part can; sequences
    and optionals: if their tensors can, so that a gradient through a sequence op is
    refused by name rather than dropped)."""
    if isinstance(t, TupleType):
        return any(_float(e) for e in t.elems)
    if isinstance(t, (SequenceType, OptionalType)):
        return _float(t.elem)
    return isinstance(t, TensorType) and t.dtype in FLOAT_DTYPES


def vjp_graph(g: Graph, argnums: Sequence[int] = (0,), seed: str = "args") -> Graph:
    """The gradient graph of ``g``.

    It takes ``g``'s arguments and, if ``seed == "args"``, one cotangent per result; with
    ``seed == "ones"`` every result's cotangent is ones (the gradient of its sum).  It
    returns ``g``'s results followed by the cotangent of each argument in ``argnums``.
    """
    return _Builder(g, tuple(argnums), seed).build()


def active_values(g: Graph, argnums: Sequence[int]) -> set[Node]:
    """Float values of ``g`` that depend on a differentiated argument; a GradError names
    an active node that cannot be differentiated (a Call left after inlining, an op that
    is not differentiable)."""
    active = {g.args[i] for i in argnums if _float(g.args[i].type)}
    for i in argnums:
        if g.args[i] in active and is_container(g.args[i].type):
            raise GradError(f"graph @{g.name}, argument {i} (%{g.args[i].name or i}) is a {g.args[i].type}: "
                            f"nx.grad differentiates with respect to tensors only")
    nodes = [n for n in g.nodes() if role(n) in ("phi", "constant", "data")]
    changed = True
    while changed:
        changed = False
        for n in nodes:
            if n in active or not _float(n.type):
                continue
            if any(v in active for v in n.inputs):
                active.add(n)
                changed = True
    for n in nodes:  # in graph order, so that the error names the first such node
        if n not in active or n.op.kind == "phi" or n in g.args:
            continue
        if n.op.name == "Call":
            raise GradError(f"{node_where(n)}: autodiff cannot differentiate through a Call that cannot be "
                            "inlined (a recursive call)")
        if is_container(n.type):
            raise GradError(f"{node_where(n)}: gradient requested through op {n.op.name}, whose result is a "
                            f"{n.type}: sequences and optionals are not differentiable")
        if not n.op.differentiable and n.op.name not in ("Proj",):
            raise GradError(f"{node_where(n)}: gradient requested through op {n.op.name}, "
                            "which is not differentiable")
    return active


def inline_calls(g: Graph) -> None:
    """Inline every Call (scripts calling scripts), so the reverse sees one CFG; a
    recursive call stays and is reported if a gradient must flow through it."""
    from nexus.passes.inline import can_inline, inline_call

    for _ in range(1000):
        calls = [n for n in g.nodes() if n.op.name == "Call" and can_inline(g, n)]
        if not calls:
            return
        inline_call(g, calls[0])


def _symbols(t: Type) -> set[Any]:
    """The symbols in the dims of a tensor type."""
    if not isinstance(t, TensorType) or t.shape is None:
        return set()
    return {x for d in t.shape if not isinstance(d, int) for x in d.free_symbols}


def _adjoint_zero_after(b: Block, v: Node) -> bool:
    """Whether the adjoint of ``v`` is surely zero when the reverse of block ``b`` starts.

    The reverse runs the blocks the forward ran after ``b`` before it; only uses of the
    same instance of ``v`` add to its adjoint.  So it is zero if no use of ``v`` can run
    after ``b`` before ``v``'s own block runs again (which makes a new instance): search
    the edges from ``b`` without entering ``v``'s block; a Phi's use is on its edge."""
    home = v.block
    uses: dict[Block, None] = {}
    phi_uses: set[tuple[Block, int]] = set()
    for u in v.users:
        if isinstance(u, Block):
            continue
        if u.op.kind == "phi":
            assert u.block is not None
            phi_uses.update((u.block, i) for i, x in enumerate(u.inputs) if x is v)
        elif u.block is not None:
            uses[u.block] = None
    seen: set[Block] = set()
    work = [b]
    while work:
        x = work.pop()
        for _, s, i in x.succ_edges:
            if (s, i) in phi_uses:
                return False
            if s is home or s in seen:
                continue
            if s in uses:
                return False
            seen.add(s)
            work.append(s)
    return True


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
        inline_calls(self.g)
        self.entry = self.g.start_block
        self.em = GraphEmitter(self.g, self.entry, self.entry)

    # --- analysis ------------------------------------------------------------------------
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
        returns = list(g.returns)
        if not returns:
            raise GradError(f"graph @{g.name} never returns")
        self.cts: list[Node] = self._add_cotangent_args(returns[0]) if self.seed == "args" else []
        self.active = active_values(self.g, self.argnums)
        self.carried = set(self._carried(self.active))
        self.ret_blocks = {r.block for r in returns}
        self.fresh = {b: {v for v in self.carried if _adjoint_zero_after(b, v)} for b in g.blocks}
        self.zero = {dt: self.em.const(0.0, dt) for dt in FLOAT_DTYPES}
        self._arg_symbols = {x for a in g.args for x in _symbols(a.type)}
        self._entry_like: dict[Type, Node] = {}
        for n in [*g.args, *node_order(self.entry)]:
            if isinstance(n.type, TensorType) and not n.is_control:
                self._entry_like.setdefault(n.type, n)
        self._zeros: dict[Type, Node] = {}
        self._seed_values: dict[Block, list[Node]] = {}
        self._pushes: dict[Block, dict[Node, Node]] = {}
        self._pairs: list[tuple[Node, Node, Node, Node]] = []
        self._plan([b for b in g.blocks if b is not g.end_block])
        stack_out = self._instrument_forward()
        results, s_entry, rev_entry = self._returns_to_reverse(returns, stack_out)
        self._reverse(results, s_entry, rev_entry)
        self._drop_unused_saves()
        return g

    def _body(self, b: Block) -> list[Node]:
        """The active nodes of ``b`` that the reverse differentiates, in forward order."""
        return [n for n in node_order(b) if n in self.active and n.op.kind != "phi" and n not in self.g.args]

    def _plan(self, fwd_blocks: list[Block]) -> None:
        """Which blocks have a reverse, what each must save, and their dispatch codes."""
        self.fwd_blocks = fwd_blocks
        self.rev_blocks: list[Block] = []
        self.needs: dict[Block, list[Node]] = {}
        self.edge_needed: dict[Block, bool] = {}
        for b in fwd_blocks:
            body = self._body(b)
            phis = [n for n in b.phis if n in self.active]
            if not (body or phis or b in self.ret_blocks or b is self.entry):
                continue  # nothing to reverse: the block pushes nothing and is skipped
            self.rev_blocks.append(b)
            need: dict[Node, None] = {}
            for n in body:
                need.update(dict.fromkeys(n.inputs))
                need[n] = None
            if b in self.ret_blocks and self.seed == "ones":
                need.update(dict.fromkeys(b.terminator.inputs))  # type: ignore[union-attr]
            # entry-block values dominate the reverse and constants are remade there
            self.needs[b] = [v for v in need if v.block is not self.entry and v.op.name != "Constant"
                             and isinstance(v.type, TensorType)]
            self.edge_needed[b] = len(b.preds) > 1 and bool(phis)
        self.implied = self._implied()
        # The dispatch tests codes in this order: the entry (reversed once, last) at the end.
        self.rev_blocks.sort(key=lambda b: (b is self.entry, b in self.ret_blocks))
        self.code = {b: i for i, b in enumerate(b for b in self.rev_blocks if b not in self.implied)}

    def _implied(self) -> set[Block]:
        """Reversed blocks whose reverse needs no block code: every block the forward can
        run next is reversed and entered only from them, so the reverse of that block
        goes on into theirs (a loop header whose body and exit both have work: the reverse
        of an iteration is one trip of the dispatch loop, not two).  Their reverse is
        copied into each such successor's, so a block whose successor is implied is not
        (the copies stay one per edge)."""
        rev = set(self.rev_blocks)
        implied: set[Block] = set()
        for b in reversed(self.rev_blocks):  # (forward order reversed: successors first)
            if b is self.entry or b in self.ret_blocks:
                continue
            succs = [s for _, s, _ in b.succ_edges]
            if succs and all(s in rev and s not in implied and s is not b and len(s.preds) == 1 for s in succs):
                implied.add(b)
        return implied

    def _instrument_forward(self) -> dict[Block, Node]:
        """Thread a stack through the forward blocks; each reversed block pushes what its
        reverse needs, the edge it came by (if needed) and its code.  Returns the stack at
        the end of each block."""
        g = self.g
        stack_in: dict[Block, Node] = {}
        stack_out: dict[Block, Node] = {}
        for b in self.fwd_blocks:
            stack_in[b] = g.add("StackNew", [], b) if b is self.entry else g.add("Phi", [], b, type=STACK)
        for b in self.fwd_blocks:
            s = stack_in[b]
            pushes: dict[Node, Node] = {}
            if b in self.needs:
                for v in self.needs[b]:
                    s = pushes[v] = g.add("StackPush", [s, v], b)
                if self.edge_needed[b]:
                    consts = [self.em.const(i, "i64") for i in range(len(b.preds))]
                    s = g.add("StackPush", [s, g.add("Phi", consts, b, name=f"edge_{b.name}")], b)
                if b in self.code:
                    s = g.add("StackPush", [s, self.em.const(self.code[b], "i64")], b)
            stack_out[b] = s
            self._pushes[b] = pushes
        for b in self.fwd_blocks:
            if b is not self.entry:
                for c in b.preds:
                    assert c.block is not None
                    stack_in[b].append_input(stack_out[c.block])
        return stack_out

    def _returns_to_reverse(self, returns: list[Node], stack_out: dict[Block, Node]) -> tuple[list[Node], Node, Block]:
        """Turn every Return into a jump to ``rev_entry``, whose Phis merge the results and
        the stacks."""
        g = self.g
        rev_entry = g.new_block("rev_start")
        result_vals: list[list[Node]] = [[] for _ in returns[0].inputs]
        stacks: list[Node] = []
        for r in returns:
            b = r.block
            assert b is not None
            vals = list(r.inputs)
            for i, v in enumerate(vals):
                result_vals[i].append(v)
            g.end_block.remove_input(list(g.end_block.inputs).index(r))
            g.erase(r)
            self._seed_values[b] = vals
            rev_entry.append_input(g.add("Jmp", [], b))
            stacks.append(stack_out[b])
        results = [g.add("Phi", vs, rev_entry, name=f"result{i}") for i, vs in enumerate(result_vals)]
        return results, g.add("Phi", stacks, rev_entry, type=STACK), rev_entry

    def _chain(self, block: Block, value: Node, cases: int, name: str) -> list[tuple[Block, Block]]:
        """A chain of tests ``value == i`` from ``block``: per case, the new block entered
        when it holds and the block that tested it (the last case is taken untested)."""
        g = self.g
        out = []
        cur = block
        for i in range(cases):
            target = g.new_block(f"{name}{i}" if cases > 1 else name)
            if i == cases - 1:
                target.append_input(g.add("Jmp", [], cur))
            else:
                cond = g.add("Cond", [g.add("Equal", [value, self.em.const(i, "i64")], cur)], cur)
                target.append_input(g.add("Proj", [cond], cur, {"num": 1}))
                nxt = g.new_block(f"{name}_test{i + 1}", [g.add("Proj", [cond], cur, {"num": 0})])
            out.append((target, cur))
            if i < cases - 1:
                cur = nxt
        return out

    def _reverse(self, results: list[Node], s_entry: Node, rev_entry: Block) -> None:
        """The dispatch loop, each block's reverse and the final Return."""
        g = self.g
        head = g.new_block("rev_head", [g.add("Jmp", [], rev_entry)])
        s_head = g.add("Phi", [s_entry], head, type=STACK, name="tape")
        carried = sorted(self.carried, key=lambda n: self._order[n])
        self.zero_of = {v: self._shaped_zero(v) for v in carried}
        self.adj_phi = {v: g.add("Phi", [self.zero_of[v]], head, type=self.zero_of[v].type) for v in carried}
        pop = g.add("StackPop", [s_head], head, {"dtype": "i64"}, type=TupleType((STACK, TensorType("i64", ()))))
        s_popped = g.add("Proj", [pop], head, {"num": 0})
        block_code = g.add("Proj", [pop], head, {"num": 1}, name="block_code")
        exits: list[tuple[Node, Node, dict[Node, Node | None]]] = []
        final: tuple[Block, dict[Node, Node | None]] | None = None
        dispatched = [b for b in self.rev_blocks if b in self.code]
        for (rb, _), b in zip(self._chain(head, block_code, len(dispatched), "rev"), dispatched):
            rb.name = f"rev_{b.name}"
            s, adj, edge_val = self._reverse_block(b, rb, s_popped)
            if b is self.entry:
                final = (rb, adj)
                continue
            self._leave(b, rb, s, adj, edge_val, exits)
        for jmp, s, adj in exits:  # close the head's Phis
            head.append_input(jmp)
            s_head.append_input(s)
            for v, phi in self.adj_phi.items():
                a = adj.get(v)
                phi.append_input(a if a is not None else self.zero_of[v])
        assert final is not None
        final_block, final_adj = final
        em = self._emitter(final_block)
        outs = list(results)
        for i in self.argnums:
            arg = g.args[i]
            a = final_adj.get(arg)
            if a is not None and _float(arg.type):
                outs.append(em.op("BroadcastLike", a, arg))
            else:
                outs.append(em.op("ZerosLike", arg))
        g.end_block.append_input(g.add("Return", outs, final_block))

    def _leave(self, b: Block, rb: Block, s: Node, adj: dict[Node, Node | None], edge_val: Node | None,
               exits: list[tuple[Node, Node, dict[Node, Node | None]]]) -> None:
        """The end of the reverse of ``b`` in ``rb``: send its Phis' adjoints back along the
        edge it was entered by, then go on into the reverse of an implied predecessor or
        back to the dispatch head (each exit appended to ``exits``)."""
        g = self.g
        phis = [p for p in b.phis if p in self.active]
        if not self.edge_needed[b]:
            self._send_back(self._emitter(rb), adj, phis, 0)
            pred = b.preds[0].block if len(b.preds) == 1 else None
            if pred is not None and pred in self.implied:
                s, adj, edge_val = self._reverse_block(pred, rb, s, adj)
                self._leave(pred, rb, s, adj, edge_val, exits)
                return
            exits.append((g.add("Jmp", [], rb), s, adj))
            return
        assert edge_val is not None
        for e_i, (eb, _) in enumerate(self._chain(rb, edge_val, len(b.preds), f"{rb.name}_{b.name}_edge")):
            eadj = dict(adj)
            self._send_back(self._emitter(eb), eadj, phis, e_i)
            exits.append((g.add("Jmp", [], eb), s, eadj))

    def _shaped_zero(self, v: Node) -> Node:
        """The zero a carried adjoint starts from and is reset to: zeros of ``v``'s shape
        made once in the entry block when a value there has ``v``'s type and that shape
        is fixed per call (its dims are the arguments' dims), so the adjoint keeps one
        static shape (no BroadcastLike where a rule reads it); else a scalar zero."""
        t = v.type
        assert isinstance(t, TensorType)
        scalar = self.zero[t.dtype]
        if t.shape is None or not t.shape or not self._arg_symbols.issuperset(_symbols(t)):
            return scalar
        z = self._zeros.get(t)
        if z is None:
            like = self._entry_like.get(t)
            z = self.g.add("ZerosLike", [like], self.entry) if like is not None else self._zeros_from_args(t)
            if z is None:
                return scalar
            self._zeros[t] = z
        return z

    def _zeros_from_args(self, t: TensorType) -> Node | None:
        """Zeros of type ``t`` built in the entry block from the arguments' sizes (a dim of
        ``t`` is a number or an argument's dim), or None where a dim is an expression."""
        assert t.shape is not None
        em = self.em
        parts: list[Node] = []
        for d in t.shape:
            if isinstance(d, int):
                parts.append(em.const([d], "i64"))
                continue
            at = next(((a, k) for a in self.g.args if isinstance(a.type, TensorType) and a.type.shape is not None
                       for k, ad in enumerate(a.type.shape) if ad == d), None)
            if at is None:
                return None
            shape = self.g.add("ShapeOf", [at[0]], self.entry)
            parts.append(self.g.add("Gather", [shape, em.const([at[1]], "i64")], self.entry, {"axis": 0}))
        dims = parts[0] if len(parts) == 1 else self.g.add("Concat", parts, self.entry, {"axis": 0})
        value = np.zeros((), numpy_dtype(t.dtype))
        return self.g.add("ConstantOfShape", [dims], self.entry, {"value": value}, type=t)

    def _emitter(self, block: Block) -> GraphEmitter:
        em = GraphEmitter(self.g, block, self.entry)
        em._consts = self.em._consts  # one set of constants for the whole graph
        return em

    def _reverse_block(self, b: Block, rb: Block, s: Node, after: dict[Node, Node | None] | None = None
                       ) -> tuple[Node, dict[Node, Node | None], Node | None]:
        """Fill ``rb`` with the reverse of forward block ``b``: pop its saves, seed the
        results if it returned, run the VJP rules backwards.  The adjoints start as the
        head's Phis, or as ``after`` where ``rb`` goes on from a successor's reverse.
        Returns the stack, the adjoints and the popped edge index."""
        g = self.g
        em = self._emitter(rb)
        # An adjoint that no later use can have added to yet starts as nothing, not as the
        # head's Phi: no Add of a zero, no BroadcastLike of a scalar zero.
        start = self.adj_phi if after is None else after
        adj: dict[Node, Node | None] = {v: None if v in self.fresh[b] else start.get(v) for v in self.adj_phi}
        edge_val: Node | None = None
        if self.edge_needed[b]:
            s, edge_val = self._pop(rb, s, TensorType("i64", ()))
        val: dict[Node, Node] = {}
        for v in reversed(self.needs[b]):
            s, val[v] = self._pop(rb, s, v.type, self._pushes[b][v])

        def value(v: Node) -> Node:
            if v in val:
                return val[v]
            if v.op.name == "Constant" and v.block is not self.entry:
                val[v] = g.add("Constant", [], self.entry, dict(v.attrs))
                return val[v]
            return v

        for i, v in enumerate(self._seed_values.get(b, [])):
            if v in self.active:
                self._acc(em, adj, v, self.cts[i] if self.seed == "args" else em.op("OnesLike", value(v)))
        parts: dict[Node, list[Node | None]] = {}  # cotangents of multi-output ops, per part
        for n in reversed(self._body(b)):
            gout: Any = adj.get(n)
            phi = self.adj_phi.get(n)
            if phi is not None and gout is phi and not isinstance(n.type, TupleType):
                # a carried adjoint may be a scalar 0 (constfold drops this when it is shaped)
                gout = em.op("BroadcastLike", phi, value(n))
            if isinstance(n.type, TupleType):
                got = parts.pop(n, None)
                gout = got if got is not None and any(x is not None for x in got) else None
            elif n.op.name == "Proj" and isinstance(n.input(0).type, TupleType):
                self._to_part(n, b, gout, parts, em)
                gout = None
            if gout is not None:
                self._apply_rule(n, em, [value(v) for v in n.inputs], value(n), gout, adj)
            if n in self.adj_phi:
                adj[n] = self.zero_of[n]
            else:
                adj.pop(n, None)
        return s, adj, edge_val

    def _to_part(self, n: Node, b: Block, gout: Node | None, parts: dict[Node, list[Node | None]],
                 em: GraphEmitter) -> None:
        """A Proj of a multi-output op: its cotangent becomes one part of the op's."""
        if gout is None:
            return
        src = n.input(0)
        if src.block is not b:
            raise GradError(f"{node_where(n)}: a part of a multi-output op is read in another block")
        lst = parts.setdefault(src, [None] * len(src.type.elems))  # type: ignore[attr-defined]
        k = n.attrs["num"]
        old = lst[k]
        lst[k] = gout if old is None else em.op("Add", old, gout)

    def _apply_rule(self, n: Node, em: GraphEmitter, ins: list[Node], out: Node, gout: Any,
                    adj: dict[Node, Node | None]) -> None:
        wants = [v in self.active for v in n.inputs]
        try:
            grads = vjp_rule(n.op.name)(em, n, ins, out, gout, wants)
        except OpTypeError as e:
            raise GradError(f"{node_where(n)}: its VJP rule failed: {e}") from e
        for v, gv, w in zip(n.inputs, grads, wants):
            if w and gv is not None:
                self._acc(em, adj, v, gv)

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
        pops: dict[Node, list[tuple[Node, Node, Node]]] = {}  # (an implied block's pushes have a pop per copy)
        for push, pop, rest, top in self._pairs:
            pops.setdefault(push, []).append((pop, rest, top))
        for push, copies in pops.items():
            if any(top.has_uses() for _, _, top in copies):
                continue
            push.replace_all_uses_with(push.input(0))
            g.erase(push)
            for pop, rest, top in copies:
                rest.replace_all_uses_with(pop.input(0))
                g.erase(top)
                g.erase(rest)
                g.erase(pop)

    def _acc(self, em: GraphEmitter, adj: dict[Node, Node | None], v: Node, c: Node) -> None:
        old = adj.get(v)
        zero = old is not None and (old is self.zero_of.get(v) or old is self.zero.get(getattr(old.type, "dtype", "")))
        adj[v] = c if old is None or zero else em.op("Add", old, c)

    def _send_back(self, em: GraphEmitter, adj: dict[Node, Node | None], phis: list[Node], edge: int) -> None:
        """The adjoint of a block's Phis for the edge ``edge``: all read, then all reset
        (parallel copy), then added to the inputs."""
        grads = [(p, adj.get(p)) for p in phis]
        for p in phis:
            adj[p] = self.zero_of[p] if p in self.carried else None
        for p, gp in grads:
            src = p.input(edge)
            if gp is None or src not in self.active:
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
