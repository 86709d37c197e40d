"""SSA construction on the fly, after Braun et al., "Simple and Efficient Construction of
Static Single Assignment Form" (CC 2013), the algorithm of libFIRM's ``ircons.c``.

Variables are tracked per block (``write``/``read``).  A block whose predecessors may
still grow (a loop header) is *unsealed*: reading a variable there makes an incomplete
Phi that gets its operands when the block is sealed.  Phis whose operands are all one
value (or the Phi itself) are trivial and removed at once, recursively.

Two additions for typed graphs:

- a Phi needs a type before its operands are known (loop headers).  It takes the type
  of the value entering the loop, or a *hint* from an earlier attempt; if an iteration
  changes the shape, sealing raises :class:`LoopTypeRetry` with the generalised type and
  the frontend builds again with that hint (a loop whose dims grow gets symbolic dims);
- a variable undefined on some path gets a placeholder operand; :meth:`finish` reports
  every placeholder that a live value still uses (Python would raise NameError there).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass, field

import numpy as np

from nexus.ir.graph import Graph
from nexus.ir.node import Block, Node, SourceLoc
from nexus.ir.types import TensorType, Type, fresh_dim


class _Undef:
    def __repr__(self) -> str:
        return "UNDEF"


UNDEF = _Undef()
Value = Node | _Undef

# Stands for "not known yet" on Phis created while their operands are being read.
PENDING = TensorType("bool", None)


class LoopTypeRetry(Exception):
    """A loop-carried variable changes its type across an iteration; build again with
    ``hint`` as the type of its Phi at the loop header ``key``."""

    def __init__(self, key: Hashable, hint: Type):
        super().__init__(f"retry loop variable {key} with type {hint}")
        self.key = key
        self.hint = hint


class MergeTypeError(Exception):
    """Two paths give a variable different dtypes (or kinds); the frontend words it."""

    def __init__(self, var: str, phi: Node, types: list[tuple[Type, str]], where: Node | None = None):
        super().__init__(var)
        self.where = where
        self.var = var
        self.phi = phi
        self.types = types


@dataclass
class UndefUse:
    """A Phi operand for which the variable is unassigned on the edge ``edge_desc``."""

    var: str
    phi: Node
    edge_desc: str


@dataclass
class SSABuilder:
    g: Graph
    hints: dict[Hashable, Type] = field(default_factory=dict)
    defs: dict[str, dict[Block, Value]] = field(default_factory=dict)
    sealed: set[Block] = field(default_factory=set)
    incomplete: dict[Block, dict[str, Node]] = field(default_factory=dict)
    forward: dict[Node, Node] = field(default_factory=dict)
    # The hint key of each loop header, and a description of each control edge (for errors).
    loop_keys: dict[Block, Hashable] = field(default_factory=dict)
    edge_desc: dict[Node, str] = field(default_factory=dict)
    placeholders: dict[Node, tuple[str, Node]] = field(default_factory=dict)
    pending: set[Node] = field(default_factory=set)
    incomplete_phis: set[Node] = field(default_factory=set)
    touched: set[Block] = field(default_factory=set)  # blocks holding a variable's def
    # Per loop header: the variables its loop may assign (None: unknown, any may).  Others
    # get no Phi there (Braun et al. would make one and remove it as trivial at sealing);
    # ``invariant`` records them so that sealing can check every back edge agrees.
    loop_assigned: dict[Block, frozenset[str]] = field(default_factory=dict)
    invariant: dict[Block, dict[str, Node]] = field(default_factory=dict)
    display_name: Callable[[str], str] = staticmethod(lambda v: v)  # type: ignore[assignment]
    # The source position Phis are attributed to (the statement being lowered).
    current_loc: Callable[[], SourceLoc | None] = staticmethod(lambda: None)  # type: ignore[assignment]

    # --- variables ----------------------------------------------------------------------
    def write(self, var: str, block: Block, value: Value) -> None:
        self.defs.setdefault(var, {})[block] = value
        self.touched.add(block)

    def read(self, var: str, block: Block) -> Value:
        value = self._read(var, block)
        if self.pending:
            self._settle_pending()
        return value

    def _read(self, var: str, block: Block) -> Value:
        per_block = self.defs.get(var)
        if per_block is not None and block in per_block:
            return self.resolve(per_block[block])
        return self._read_recursive(var, block)

    def resolve(self, value: Value) -> Value:
        while isinstance(value, Node) and value in self.forward:
            value = self.forward[value]
        return value

    def _read_recursive(self, var: str, block: Block) -> Value:
        value: Value
        if block not in self.sealed:
            hint = self.hints.get((self.loop_keys.get(block), var))
            if hint is None:
                # The entry edge is known when a loop header is made: its type is the Phi's.
                entry = block.input(0).block if block.num_inputs else None
                first = self._read(var, entry) if entry is not None else UNDEF
                if isinstance(first, _Undef):
                    self.write(var, block, UNDEF)
                    return UNDEF
                assigned = self.loop_assigned.get(block)
                if assigned is not None and var not in assigned and not var.startswith("$"):
                    self.invariant.setdefault(block, {})[var] = first
                    self.write(var, block, first)
                    return first
                hint = first.type
            phi = self._new_phi(var, block, hint)
            self.incomplete.setdefault(block, {})[var] = phi
            self.incomplete_phis.add(phi)
            value = phi
        elif block.num_inputs == 1:
            pred = block.input(0).block
            assert pred is not None
            value = self._read(var, pred)
        elif block.num_inputs == 0:
            value = UNDEF
        else:
            phi = self._new_phi(var, block, PENDING)
            self.pending.add(phi)
            self.write(var, block, phi)
            value = self._add_operands(var, phi)
        value = self.resolve(value)
        self.write(var, block, value)
        return value

    # --- Phis -----------------------------------------------------------------------------
    def _new_phi(self, var: str, block: Block, t: Type) -> Node:
        return self.g.add("Phi", [], block, type=t, name=self.display_name(var), loc=self.current_loc())

    def _add_operands(self, var: str, phi: Node) -> Value:
        block = phi.block
        assert block is not None
        for ctrl in block.inputs:
            pred = ctrl.block
            assert pred is not None
            v = self._read(var, pred)
            if isinstance(v, _Undef):
                v = self._placeholder(var, phi, ctrl)
            phi.append_input(v)
        if phi in self.pending:
            self._type_pending(phi)
        return self.try_remove_trivial(phi)

    def _placeholder(self, var: str, phi: Node, ctrl: Node) -> Node:
        value = self.g.add("Constant", [], self.g.start_block, {"value": np.zeros((), np.bool_)},
                           name=f"undef_{self.display_name(var)}", loc=self.current_loc())
        self.placeholders[value] = (var, ctrl)
        return value

    def _known_types(self, phi: Node) -> list[tuple[Type, Node]]:
        return [(v.type, v) for v in phi.inputs
                if v is not phi and v not in self.placeholders and v not in self.pending]

    def _type_pending(self, phi: Node) -> None:
        known = self._known_types(phi)
        if not known:
            return
        phi.type = self._join(phi, known)
        self.pending.discard(phi)

    def _join(self, phi: Node, known: list[tuple[Type, Node]]) -> Type:
        out: Type | None = known[0][0]
        for t, _ in known[1:]:
            out = generalize(out, t) if out is not None else None
            if out is None:
                var = phi.name or "?"
                raise MergeTypeError(var, phi, [(t, self._edge_of(phi, v)) for t, v in known])
        assert out is not None
        return out

    def _edge_of(self, phi: Node, value: Node) -> str:
        block = phi.block
        assert block is not None
        for i, v in enumerate(phi.inputs):
            if v is value:
                return self.edge_desc.get(block.input(i), f"edge {i}")
        return "?"

    def _settle_pending(self) -> None:
        changed = True
        while self.pending and changed:
            changed = False
            for phi in list(self.pending):
                if phi.graph is None:
                    self.pending.discard(phi)
                    continue
                before = len(self.pending)
                self._type_pending(phi)
                changed = changed or len(self.pending) < before

    def try_remove_trivial(self, phi: Node) -> Value:
        same: Node | None = None
        for op in phi.inputs:
            if op is same or op is phi:
                continue
            if same is not None:
                return phi
            same = op
        if same is None:
            return phi  # only reachable from itself: leave it, dead-Phi removal takes it
        users = [u for u in phi.users if u is not phi]
        phi.replace_all_uses_with(same)
        self.forward[phi] = same
        self.pending.discard(phi)
        self.g.erase(phi)
        for u in users:
            if u.op.name == "Phi" and u.graph is self.g and u not in self.incomplete_phis:
                self.try_remove_trivial(u)
        # A cascade may have removed `same` too (Braun et al. note this).
        return self.resolve(same)

    # --- sealing --------------------------------------------------------------------------
    def seal(self, block: Block) -> None:
        """All predecessors of ``block`` are known: complete its incomplete Phis."""
        for var, value in self.invariant.pop(block, {}).items():
            for ctrl in block.inputs[1:]:
                pred = ctrl.block
                assert pred is not None
                if self.resolve(self._read(var, pred)) is not self.resolve(value):
                    # The loop assigns it after all (a case the name analysis missed):
                    # build again with a Phi for it.
                    raise LoopTypeRetry((self.loop_keys.get(block), var), value.type)
        todo = self.incomplete.get(block, {})
        while todo:
            var, phi = next(iter(todo.items()))
            for ctrl in block.inputs:
                pred = ctrl.block
                assert pred is not None
                v = self._read(var, pred)
                if isinstance(v, _Undef):
                    v = self._placeholder(var, phi, ctrl)
                phi.append_input(v)
            self._check_loop_type(var, phi, block)
            del todo[var]
            self.incomplete_phis.discard(phi)
            self.try_remove_trivial(phi)
        self.incomplete.pop(block, None)
        self.sealed.add(block)
        if self.pending:
            self._settle_pending()

    def _check_loop_type(self, var: str, phi: Node, block: Block) -> None:
        known = self._known_types(phi)
        for t, _ in known:
            if covers(phi.type, t):
                continue
            general = generalize(phi.type, t)
            if general is None:
                where = next((v for t2, v in known if t2 == t), None)
                raise MergeTypeError(var, phi, [(phi.type, self.edge_desc.get(block.input(0), "entry"))]
                                     + [(t2, self._edge_of(phi, v)) for t2, v in known if t2 != phi.type], where)
            raise LoopTypeRetry((self.loop_keys.get(block), var), general)

    # --- the end ----------------------------------------------------------------------------
    def finish(self) -> list[UndefUse]:
        """Remove dead Phis; return the uses of unassigned variables still live."""
        self._remove_dead_phis()
        problems: list[UndefUse] = []
        for ph, (var, ctrl) in list(self.placeholders.items()):
            if ph.has_uses():
                for user, _ in ph.uses:
                    problems.append(UndefUse(var, user, self.edge_desc.get(ctrl, "some path")))
            else:
                self.g.erase(ph)
        return problems

    def _remove_dead_phis(self) -> None:
        phis = [n for b in self.g.blocks for n in b.members if n.op.name == "Phi"]
        live: set[Node] = set()
        work = [p for p in phis if any(u.op.name != "Phi" for u in p.users)]
        while work:
            p = work.pop()
            if p in live:
                continue
            live.add(p)
            work.extend(v for v in p.inputs if v.op.name == "Phi" and v not in live)
        dead = [p for p in phis if p not in live]
        if dead:
            self.g.erase_dead(dead)


def covers(general: Type, t: Type) -> bool:
    """Whether ``general`` describes every value of ``t`` (a symbolic dim covers any)."""
    if general == t:
        return True
    if not (isinstance(general, TensorType) and isinstance(t, TensorType)) or general.dtype != t.dtype:
        return False
    if general.shape is None:
        return True
    if t.shape is None or len(general.shape) != len(t.shape):
        return False
    return all(g == d or not isinstance(g, int) for g, d in zip(general.shape, t.shape))


def generalize(a: Type, b: Type) -> Type | None:
    """The least type covering both, or None when the dtypes (or kinds) differ."""
    if a == b:
        return a
    if not (isinstance(a, TensorType) and isinstance(b, TensorType)) or a.dtype != b.dtype:
        return None
    if covers(a, b):
        return a
    if a.shape is None or b.shape is None or len(a.shape) != len(b.shape):
        return TensorType(a.dtype, None)
    return TensorType(a.dtype, tuple(x if x == y else fresh_dim("d") for x, y in zip(a.shape, b.shape)))
