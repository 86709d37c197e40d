"""Structurize: a reducible CFG as a region tree (:mod:`nexus.passes.regions`).

``structurize(g)`` reads ``g`` (it never edits it) and returns a :class:`RegionTree` whose
data nodes are ``g``'s own; :func:`nexus.passes.lower_regions.lower_regions` rebuilds a CFG
from it.  An irreducible CFG is refused with :class:`IrreducibleCFGError`, which names the
blocks of the cycle and where it is entered.

How the CFG maps to regions
    Loops are taken from the loop forest (:mod:`nexus.passes.loops`); inside a region
    (the whole graph, or one loop's body) each inner loop is a single *unit*, so the units
    form an acyclic graph.  A unit with one entering edge is placed in the arm of the
    branch that enters it; a unit with several (a join) is placed after the branch of its
    immediate dominator, in reverse postorder.  A value is therefore in scope wherever its
    definition dominates, except across a loop (see *exports*).

Pending jumps, flags and merged values
    Structuring a unit yields its *pending* jumps: the places control may go next that
    are not placed yet (a join, the loop's header, the loop's exit, the graph's return),
    each with the values the edge carries (the target's Phi inputs; a Return's values).
    When an If's arms end with different pending jumps, the If merges them: for every
    target one bool flag ``to_<block>`` (``again`` for the loop header, ``leave`` for the
    loop exit) that is true on the arm that jumps there, and one merged value per Phi of
    the target (``Merge`` outputs).  An arm that does not jump to a target yields a
    stand-in: the loop header's Phi itself ("keep the value"), a loop exit slot itself,
    else :class:`Default`.  A flag whose arms are ``true``/``false`` is the If's condition
    and is not materialised.  A join guarded by a flag runs as ``if to_<block>:``; when
    only one target is pending it is certain and needs no guard.  So ``break``,
    ``continue`` and early ``return`` become flags and guards, never duplicated code.

Loops
    *While form*: when the header's Cond is the loop's only way out (its false exit), the
    header holds only pure data nodes and none of them is used after the loop, the
    header's nodes are the Loop's ``cond``, its condition the ``test``, and the rest the
    ``body``.  The carried values are the header's Phis (``init``: the entering edge's
    values; ``next``: the back edges' values, merged).
    *Flag form*, every other loop: ``cond`` is empty and ``test`` is a carried flag
    ``again`` (initially true); the body is the whole loop, header included, and ends
    with ``again`` true when it jumps back to the header.  Leaving the loop fills carried
    *exit slots* (initially ``default``): one flag ``to_<block>`` per exit target when
    there are several, one slot per Phi of each exit target (the values a ``return``
    inside the loop returns are the slots of the graph's return), and one slot per
    export.  On paths that continue the slots keep their values, and on paths that
    leave the header's Phis keep theirs.  After the loop, the slots are bound as
    results and the exit targets are dispatched on the flags (``if to_<first>: ...
    else: <second>``).
    *Exports*: a node of the loop used after it (by dominance, not through an exit
    edge's Phi) is rebound after the loop by a :class:`Result` under its own name; the
    header's Phis are carried anyway and keep their last value on the way out.

Effects
    Each block's nodes stay together, in an order that respects their inputs and
    ordering edges (``deps``), and every node runs exactly when the CFG runs it: nothing
    is duplicated or run speculatively (a while-form ``cond`` is the header itself, which
    the CFG also runs once per test).  So Call, Assert, random and stack ops keep their
    order; a dep on a node of another block is implied by the tree's order.

Values of tuple type (a multi-output op read by ``Proj``) must not cross a loop; such a
graph is refused with :class:`StructurizeError`, as is a graph that never returns.
``tests/test_passes_structurize.py`` shows the trees of the seed graphs and of a return
out of two nested loops.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from nexus.ir.analysis import dominators, node_order
from nexus.ir.cfg import role
from nexus.ir.graph import Graph
from nexus.ir.node import Block, Node
from nexus.ir.types import ControlType, TupleType, Type, join_types, scalar
from nexus.passes.loops import IrreducibleError, LoopForest, loop_forest
from nexus.passes.loops import Loop as NaturalLoop
from nexus.passes.region_tidy import tidy
from nexus.passes.regions import (
    FALSE,
    TRUE,
    Bind,
    Carry,
    Default,
    If,
    Loop,
    Merge,
    RegionTree,
    Result,
    Seq,
    Value,
    Var,
)

BOOL = scalar("bool")


class StructurizeError(ValueError):
    """A graph the structurizer cannot turn into regions; the message names the cause."""


class IrreducibleCFGError(StructurizeError, IrreducibleError):
    """The CFG has a cycle with several entries.  ``blocks`` are the cycle's blocks and
    ``entries`` the blocks where it is entered from outside."""

    def __init__(self, graph: str, blocks: list[str], entries: list[str]):
        self.blocks = blocks
        self.entries = entries
        names = ", ".join(f"^{b}" for b in blocks)
        where = ", ".join(f"^{b}" for b in entries)
        super().__init__(f"graph @{graph} has an irreducible CFG: the cycle through {names} is entered at "
                         f"{where}; only single-entry loops can be structured")


@dataclass(eq=False)
class _Exit:
    """A target outside the region being structured: its loop's header, its loop's exit,
    or the graph's return."""

    kind: str


Unit = Block | NaturalLoop
Target = Block | NaturalLoop | _Exit
Exit = tuple[Value | None, Block, list[Value]]
"""A way out of a unit: ``(flag, target block, values the edge carries)``; the last
exit of a unit has no flag (it is taken when the others are not)."""


@dataclass(eq=False)
class _Pend:
    """A pending jump: its flag (None when it is the only pending target) and the values
    it carries."""

    flag: Value | None
    values: list[Value]


Pending = dict[Target, _Pend]


def structurize(g: Graph) -> RegionTree:
    """The region tree of ``g``.  Raises :class:`IrreducibleCFGError` for an irreducible
    CFG and :class:`StructurizeError` for a graph that never returns or passes a tuple
    value out of a loop."""
    tree = _Structurizer(g).run()
    tidy(tree)
    return tree


def entry_block(u: Unit) -> Block:
    return u if isinstance(u, Block) else u.header


def data_nodes(b: Block) -> list[Node]:
    """The nodes of ``b`` a region runs: everything but Phis, control and arguments."""
    out = []
    for n in node_order(b):
        if role(n) in ("data", "constant"):
            out.append(n)
    return out


def edge_values(x: Node, dest: Block, i: int) -> list[Value]:
    """What the edge ``x`` (input ``i`` of ``dest``) carries: the Phi inputs at that edge,
    or a Return's values."""
    if x.op.name == "Return":
        return list(x.inputs)
    return [phi.input(i) for phi in dest.phis]


def is_pure(n: Node) -> bool:
    """May run again on the same inputs with no effect: a pure data op without ordering
    edges either way."""
    if not n.op.pure or n.op.kind not in ("data", "meta") or n.op.name == "Call" or n.deps:
        return False
    return all(i >= 0 for _, i in n.uses)


class _Region:
    """The graph (``loop`` None) or one loop's body, with its units, the number of edges
    entering each unit, and the joins each unit dominates."""

    def __init__(self, s: _Structurizer, loop: NaturalLoop | None):
        self.s = s
        self.loop = loop
        self.entry: Block = loop.header if loop is not None else s.g.start_block
        self.cont = _Exit("continue")
        self.exit = _Exit("exit" if loop is not None else "return")
        self.layout: _ExitLayout | None = None  # set for flag-form loops
        self.preds: dict[Unit, list[Unit]] = {}
        self.joins: dict[Unit, list[Unit]] = {}
        self._index()

    def _index(self) -> None:
        s = self.s
        for b in s.rpo:
            if b is s.g.end_block or (self.loop is not None and b not in self.loop.blocks):
                continue
            src = self.unit_of(b)
            for _, dest, _ in b.succ_edges:
                t = self.resolve(dest)
                if not isinstance(t, (Block, NaturalLoop)) or t is src:
                    continue
                preds = self.preds.setdefault(t, [])
                # A loop reaches each of its exit targets through one dispatch arm.
                if not (isinstance(src, NaturalLoop) and src in preds):
                    preds.append(src)
        for t, preds in self.preds.items():
            if len(preds) != 1:
                idom = self.unit_of(s.dom.idom[entry_block(t)])
                self.joins.setdefault(idom, []).append(t)
        for joins in self.joins.values():
            joins.sort(key=self.order)

    def unit_of(self, b: Block) -> Unit:
        """The unit of this region that contains block ``b``."""
        if self.loop is not None and b is self.loop.header:
            return b
        lp, outer = self.s.forest.loop_of(b), None
        while lp is not self.loop:
            assert lp is not None, f"^{b.name} is outside the region"
            lp, outer = lp.parent, lp
        return outer if outer is not None else b

    def resolve(self, dest: Block) -> Target:
        """Where an edge into ``dest`` goes, seen from this region."""
        if self.loop is None:
            if dest is self.s.g.end_block:
                return self.exit
        elif dest is self.loop.header:
            return self.cont
        elif dest not in self.loop.blocks:
            return self.exit
        return self.unit_of(dest)

    def owner(self, u: Unit) -> Unit | None:
        preds = self.preds.get(u, [])
        return preds[0] if len(preds) == 1 else None

    def order(self, t: Target) -> int:
        if isinstance(t, _Exit):
            return (1 << 30) + (t is self.exit)
        return self.s.index[entry_block(t)]

    def edge(self, src: Unit, dest: Block, raw: list[Value]) -> tuple[Target, list[Value]]:
        t = self.resolve(dest)
        assert isinstance(t, _Exit) or entry_block(t) is dest, "reducible: loops are entered at their header"
        if t is self.exit and self.layout is not None:
            return t, self.layout.values(dest, raw, src)
        return t, raw

    def stand_in(self, t: Target, j: int, other: Value) -> Value:
        """What an arm that does not jump to ``t`` yields for its slot ``j``."""
        if t is self.cont:
            assert self.loop is not None
            return self.loop.header.phis[j]
        if t is self.exit and self.layout is not None:
            return self.layout.slots[j]
        return Default(other.type)

    def flag_hint(self, t: Target) -> str:
        if t is self.cont:
            return "again"
        if isinstance(t, _Exit):
            return "leave" if self.loop is not None else "done"
        return f"to_{entry_block(t).name}"

    def slot_hint(self, t: Target, j: int) -> str:
        if t is self.cont:
            assert self.loop is not None
            return self.loop.header.phis[j].name or "v"
        if isinstance(t, _Exit):
            return self.layout.slots[j].hint if self.layout is not None else "result"
        return entry_block(t).phis[j].name or "v"


class _ExitLayout:
    """The carried exit slots of a flag-form loop: a flag per exit target (when there are
    several), a slot per Phi of each target, a slot per export."""

    def __init__(self, s: _Structurizer, loop: NaturalLoop, exports: list[Node]):
        self.s = s
        dests = {dest: None for _, dest in loop.exits()}
        self.targets = sorted(dests, key=lambda b: (b is s.g.end_block, s.index.get(b, 0)))
        many = len(self.targets) > 1
        self.flags = [Var(f"to_{t.name}", BOOL) for t in self.targets] if many else []
        self.phi_slots = {t: [Var(h, ty) for h, ty in s.slot_types(t)] for t in self.targets}
        self.exports = exports
        self.export_slots = [Var(n.name or "v", n.type) for n in exports]
        self.slots: list[Var] = self.flags + [v for t in self.targets for v in self.phi_slots[t]] + self.export_slots

    def values(self, dest: Block, raw: list[Value], src: Unit) -> list[Value]:
        """The slots' values when the loop is left for ``dest`` from unit ``src``."""
        out: list[Value] = [TRUE if t is dest else FALSE for t in self.targets] if self.flags else []
        for t in self.targets:
            out.extend(raw if t is dest else self.phi_slots[t])
        for n, slot in zip(self.exports, self.export_slots):
            out.append(n if self.s.available(n, src) else slot)
        return out


class _Structurizer:
    def __init__(self, g: Graph):
        self.g = g
        self.forest: LoopForest = loop_forest(g)
        if not self.forest.reducible:
            raise irreducible_error(g, self.forest)
        self.dom = dominators(g)
        self.rpo = sorted(self.dom.idom, key=self.dom.order.__getitem__)
        self.index = self.dom.order

    def run(self) -> RegionTree:
        top = _Region(self, None)
        body = Seq()
        pending = self.structure(top, top.entry, None, body)
        if top.exit not in pending:
            raise StructurizeError(f"graph @{self.g.name} never returns")
        assert len(pending) == 1, "every join was placed"
        return RegionTree(self.g, body, pending[top.exit].values)

    # --- units ------------------------------------------------------------------------------
    def structure(self, r: _Region, u: Unit, values: list[Value] | None, seq: Seq) -> Pending:
        """Place unit ``u`` (entered with ``values`` for its Phis), the units it owns and
        the joins it dominates; returns the jumps still pending."""
        if isinstance(u, NaturalLoop):
            assert values is not None
            exits = self.loop(u, values, seq)
        else:
            if values is not None:
                seq.items.extend(Bind(phi, v) for phi, v in zip(u.phis, values))
            seq.items.extend(data_nodes(u))
            exits = self.block_exits(u)
        pending = self.dispatch(r, u, exits, seq)
        for join in r.joins.get(u, []):
            pending = self.place_join(r, join, pending, seq)
        return pending

    def block_exits(self, b: Block) -> list[Exit]:
        """``(flag, target, values)`` per exit: a Cond's true exit first, under its
        condition."""
        term = b.terminator
        edges = {x.attrs.get("num", 0): (dest, edge_values(x, dest, i)) for x, dest, i in b.succ_edges}
        if term is not None and term.op.name == "Cond":
            (t_dest, t_vals), (f_dest, f_vals) = edges[1], edges[0]
            return [(term.input(0), t_dest, t_vals), (None, f_dest, f_vals)]
        ((dest, vals),) = edges.values()
        return [(None, dest, vals)]

    def dispatch(self, r: _Region, src: Unit, exits: list[Exit],
                 seq: Seq) -> Pending:
        """Branch to ``exits`` in turn: ``if flag0: exit0 else: (if flag1: ...)``."""
        flag, dest, raw = exits[0]
        target, values = r.edge(src, dest, raw)
        if len(exits) == 1:
            return self.arm(r, src, target, values, seq)
        assert flag is not None
        then, orelse = Seq(), Seq()
        taken = self.arm(r, src, target, values, then)
        rest = self.dispatch(r, src, exits[1:], orelse)
        return self.join(r, flag, then, taken, orelse, rest, seq)

    def arm(self, r: _Region, src: Unit, target: Target, values: list[Value], seq: Seq) -> Pending:
        """Place ``target`` here if ``src`` is its only way in, else leave the jump pending."""
        if isinstance(target, (Block, NaturalLoop)) and r.owner(target) is src:
            return self.structure(r, target, values, seq)
        return {target: _Pend(None, values)}

    def place_join(self, r: _Region, join: Unit, pending: Pending, seq: Seq) -> Pending:
        """Place a join after the branches that jump to it, guarded by its flag unless it
        is certain."""
        pend = pending.get(join)
        if pend is None:
            return pending
        if len(pending) == 1:
            return self.structure(r, join, pend.values, seq)
        assert pend.flag is not None
        then = Seq()
        taken = self.structure(r, join, pend.values, then)
        rest = {t: p for t, p in pending.items() if t is not join}
        return self.join(r, pend.flag, then, taken, Seq(), rest, seq)

    # --- merging the arms of an If ----------------------------------------------------------
    def join(self, r: _Region, cond: Value, then: Seq, a: Pending, orelse: Seq, b: Pending, seq: Seq) -> Pending:
        """Append ``If(cond, then, orelse)`` and return the pending jumps after it, with
        flags and values merged as its outputs."""
        targets = sorted({**a, **b}, key=r.order)
        outputs: list[Merge] = []
        out: Pending = {}
        for t in targets:
            flag = None
            if len(targets) > 1:
                flag = self.merge(cond, _flag(a, t), _flag(b, t), r.flag_hint(t), outputs)
            pa, pb = a.get(t), b.get(t)
            some = pa or pb
            assert some is not None
            values = []
            for j, v in enumerate(some.values):
                va = pa.values[j] if pa is not None else r.stand_in(t, j, v)
                vb = pb.values[j] if pb is not None else r.stand_in(t, j, va)
                values.append(self.merge(cond, va, vb, r.slot_hint(t, j), outputs))
            out[t] = _Pend(flag, values)
        seq.items.append(If(cond, then, orelse, outputs))
        return out

    @staticmethod
    def merge(cond: Value, a: Value, b: Value, hint: str, outputs: list[Merge]) -> Value:
        if a is b:  # defined before the If (nothing is defined in both arms)
            return a
        if a is TRUE and b is FALSE:
            return cond
        var = Var(hint, join_types(a.type, b.type))
        outputs.append(Merge(var, a, b))
        return var

    # --- loops ------------------------------------------------------------------------------
    def loop(self, lp: NaturalLoop, inits: list[Value], seq: Seq) -> list[Exit]:
        """Append the Loop region of ``lp``; returns its exits as ``(flag, target, values)``."""
        inner = _Region(self, lp)
        phi_out, exports = self.exports(lp)
        if self.while_form(lp):
            return self.while_loop(inner, lp, inits, phi_out, seq)
        return self.flag_loop(inner, lp, inits, phi_out, exports, seq)

    def while_loop(self, r: _Region, lp: NaturalLoop, inits: list[Value], phi_out: list[Node],
                   seq: Seq) -> list[Exit]:
        header = lp.header
        (test, stay, stay_vals), (_, exit_dest, exit_vals) = self.block_exits(header)
        assert test is not None
        body = Seq()
        target, values = r.edge(header, stay, stay_vals)
        pending = self.arm(r, header, target, values, body)
        for join in r.joins.get(header, []):
            pending = self.place_join(r, join, pending, body)
        assert list(pending) == [r.cont], "a while-form loop leaves only at its header"
        phis = header.phis
        carried = [Carry(p, i, n) for p, i, n in zip(phis, inits, pending[r.cont].values)]
        # After the loop the header's Phis hold their last values; the exit edge may read them.
        out = dict.fromkeys(phi_out)
        out.update(dict.fromkeys(v for v in exit_vals if isinstance(v, Node) and v in phis))
        results = [Result(p, p) for p in out]
        seq.items.append(Loop(carried, data_nodes(header), test, body, results))
        return [(None, exit_dest, exit_vals)]

    def flag_loop(self, r: _Region, lp: NaturalLoop, inits: list[Value], phi_out: list[Node],
                  exports: list[Node], seq: Seq) -> list[Exit]:
        layout = r.layout = _ExitLayout(self, lp, exports)
        body = Seq()
        pending = self.structure(r, lp.header, None, body)
        if r.exit not in pending:
            raise StructurizeError(f"graph @{self.g.name}: the loop at ^{lp.header.name} never exits")
        again = Var("again", BOOL)
        phis = lp.header.phis
        carried = [Carry(p, i, n) for p, i, n in zip(phis, inits, pending[r.cont].values)]
        carried.append(Carry(again, TRUE, _flag(pending, r.cont)))
        carried += [Carry(s, Default(s.type), v) for s, v in zip(layout.slots, pending[r.exit].values)]
        results = [Result(p, p) for p in phi_out]
        names: dict[Var, Var] = {}
        for slot in layout.flags + [v for t in layout.targets for v in layout.phi_slots[t]]:
            names[slot] = Var(slot.hint, slot.type)
            results.append(Result(names[slot], slot))
        results += [Result(n, slot) for n, slot in zip(exports, layout.export_slots)]
        seq.items.append(Loop(carried, [], again, body, results))
        exits: list[Exit] = []
        for k, t in enumerate(layout.targets):
            flag = names[layout.flags[k]] if layout.flags and k < len(layout.targets) - 1 else None
            exits.append((flag, t, [names[v] for v in layout.phi_slots[t]]))
        return exits

    def while_form(self, lp: NaturalLoop) -> bool:
        """Whether the loop leaves only through its header's false exit, and the header's
        nodes are pure and not used after the loop."""
        exits = lp.exits()
        header = lp.header
        if len(exits) != 1 or exits[0][0].block is not header:
            return False
        x = exits[0][0]
        if x.op.name != "Proj" or x.attrs["num"] != 0:
            return False
        for n in data_nodes(header):
            if not is_pure(n):
                return False
            if any(u.block not in lp.blocks for u in n.users if u.block in self.dom.idom):
                return False
        return True

    def exports(self, lp: NaturalLoop) -> tuple[list[Node], list[Node]]:
        """The header Phis and the other nodes of ``lp`` that code after the loop reads
        (not through an exit edge)."""
        phis, others = [], []
        header_phis = set(lp.header.phis)
        for b in sorted(lp.blocks, key=self.index.__getitem__):
            for n in node_order(b):
                if isinstance(n.type, ControlType) or not self.used_outside(n, lp):
                    continue
                if n in header_phis:
                    phis.append(n)
                    continue
                if isinstance(n.type, TupleType):
                    raise StructurizeError(f"graph @{self.g.name}: {n.op.name} %{n.name or '?'} in ^{b.name} has a "
                                           "tuple value used after its loop; read its parts (Proj) inside the loop")
                others.append(n)
        return phis, others

    def used_outside(self, n: Node, lp: NaturalLoop) -> bool:
        for user, i in n.uses:
            if i < 0 or isinstance(user, Block) or user.block is None:
                continue
            where = user.block.input(i).block if user.op.kind == "phi" else user.block
            if where in self.dom.idom and where not in lp.blocks:
                return True
        return False

    def available(self, n: Node, src: Unit) -> bool:
        """Whether ``n``'s name holds its latest value when control leaves unit ``src``."""
        assert n.block is not None
        if isinstance(src, NaturalLoop) and n.block in src.blocks:
            return True  # rebound after that loop
        return self.dom.dominates(n.block, entry_block(src))

    def slot_types(self, t: Block) -> list[tuple[str, Type]]:
        """Hint and type of each value an edge into ``t`` carries."""
        if t is self.g.end_block:
            rets = self.g.returns
            types = [v.type for v in rets[0].inputs]
            for ret in rets[1:]:
                types = [join_types(a, v.type) for a, v in zip(types, ret.inputs)]
            return [("result", ty) for ty in types]
        return [(phi.name or "v", phi.type) for phi in t.phis]


def _flag(p: Pending, t: Target) -> Value:
    """Whether pending set ``p`` jumps to ``t``."""
    if t not in p:
        return FALSE
    if len(p) == 1:
        return TRUE
    flag = p[t].flag
    assert flag is not None
    return flag


# --- irreducible CFGs --------------------------------------------------------------------------
def irreducible_error(g: Graph, forest: LoopForest) -> IrreducibleCFGError:
    """The error naming the first multi-entry cycle: its blocks and its entries."""
    _, head = forest.irreducible_edges[0]
    reachable = _reach(g.start_block, lambda b: b.succs)
    cycle = _reach(head, lambda b: b.succs) & _reach(head, lambda b: b.pred_blocks)
    entries = [b for b in cycle if any(p in reachable and p not in cycle for p in b.pred_blocks)]
    order = {b: i for i, b in enumerate(g.blocks)}
    names = [b.name or "?" for b in sorted(cycle, key=order.__getitem__)]
    return IrreducibleCFGError(g.name, names, [b.name or "?" for b in sorted(entries, key=order.__getitem__)])


def _reach(start: Block, step: Callable[[Block], Iterable[Block]]) -> set[Block]:
    seen = {start}
    work = [start]
    while work:
        for nxt in step(work.pop()):
            if nxt not in seen:
                seen.add(nxt)
                work.append(nxt)
    return seen
