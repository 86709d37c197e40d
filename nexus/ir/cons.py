"""SSA construction while a graph is built: the one builder of the DSL, ``@nx.script``
and the importers (libFIRM's ``ircons``).

The algorithm is Braun et al., "Simple and Efficient Construction of Static Single
Assignment Form" (CC 2013), as libFIRM runs it:

- A frontend binds variables per block, ``set_value(var, block, node)``, on blocks it
  makes through the Graph API.  ``get_value(var, block)`` is the value at the end of
  ``block``: its own binding, else the value flowing in from its predecessors, looked up
  recursively and bound in ``block`` so that the next lookup is direct.
- A block is *sealed* (``seal``) once all its predecessors are known; blocks made with
  all their predecessors are sealed at once, a loop header after its back edges.  A
  lookup in an unsealed block makes an *incomplete* Phi, whose operands are read when
  the block is sealed.
- A lookup in a sealed block with several predecessors makes a Phi, binds it first (a
  loop leads the lookup back to it), then reads one operand per predecessor.
- A Phi whose operands are all one value, or the Phi itself, is *trivial*: it is replaced
  by that value and erased, and the Phis using it are tried again, since they may have
  become trivial in turn (the cascade may remove the value the first one was replaced
  by).  The frontend's own references to a removed Phi are followed with ``resolve``.
- ``finish`` removes the Phis only other Phis use, and returns the uses of undefined
  variables that are still live.

Two refinements, both from the frontends:

- An unsealed block looks up the value entering through its first predecessor at once
  (connect the edge entering the loop first).  The Phi takes its type from that value
  (``loop_phi_type``); a variable with no value there has none in the block either, and
  gets no Phi.  (Should that lookup come back to the block, through an enclosing loop
  sealed first, the Phi is made then, as in the paper.)
- ``declare_assigned(header, vars)``: only ``vars`` may change around the loop, the others
  are read from the loop's entry without a Phi; ``seal`` checks that every back edge
  brings the same value (``invariant_changed`` otherwise).

Every Phi needs a type, also while its operands are being read: a Phi of a sealed block
is typed ``PENDING`` until it has operands of known type, then ``join_types`` of them;
the ones still pending after a lookup are typed once their operands are.

Policy hooks, overridden by a frontend (the defaults suit an importer whose values are
all typed and whose variables are defined on every path):

``loop_phi_type``      the type of a Phi made before its operands are known
``join_types``         the type of a Phi from its operands' types (raise to refuse a mix)
``seal_phi``           a Phi typed early, complete at sealing: check or widen its type
``undefined_operand``  the operand for a variable that has no value on one edge
``materialize``        the node for a :class:`Lazy` binding, made on its first lookup
``new_phi``            make the Phi node (its name and source location)
``invariant_changed``  a loop changes a variable that was declared invariant
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass
from typing import Generic, NoReturn, TypeVar

from nexus.ir.graph import Graph, infer_type, known_value
from nexus.ir.node import Block, Node
from nexus.ir.opdef import OpTypeError
from nexus.ir.types import TensorType, Type, join_types

V = TypeVar("V", bound=Hashable)

# The type of a Phi whose operand types are not known yet.  A valid type, so that a Phi
# of a variable undefined on every path still type-checks until ``finish`` reports it.
PENDING: Type = TensorType("bool", None)


class Lazy:
    """A binding that has no node yet (a Python number, say): ``materialize`` makes one
    on the first lookup that needs it."""

    __slots__ = ()


class _Undefined(Lazy):
    __slots__ = ()

    def __repr__(self) -> str:
        return "UNDEFINED"


UNDEFINED = _Undefined()
"""Bound where a lookup found no value on some path (``get_value`` returns None)."""
_ENTERING = _Undefined()  # bound while an unsealed block looks up its entering value


class SSAError(ValueError):
    """A variable without a value where the default policy needs one."""


class PhiTypeError(TypeError):
    """A variable whose values on different paths have types that do not join."""

    def __init__(self, var: Hashable, phi: Node, types: list[Type]):
        self.var, self.phi, self.types = var, phi, list(dict.fromkeys(types))
        super().__init__(f"values of types {', '.join(map(str, self.types))} meet in one Phi")


@dataclass(frozen=True)
class UndefinedUse:
    """A live use of ``var`` where it has no value on the control edge ``edge``."""

    var: Hashable
    user: Node
    edge: Node


class SSABuilder(Generic[V]):
    """Per-block variable maps over ``g`` while it is built (see the module docstring)."""

    def __init__(self, g: Graph) -> None:
        self.g = g
        self.defs: dict[Block, dict[V, Node | Lazy]] = {}
        self.sealed: set[Block] = {g.start_block}
        self.incomplete: dict[Block, dict[V, Node]] = {}
        self.forward: dict[Node, Node] = {}  # removed Phi -> what replaced it
        self.pending: dict[Node, V] = {}  # Phis typed PENDING -> their variable
        self.placeholders: dict[Node, tuple[V, Node]] = {}  # undefined operand -> (var, edge)
        self.assigned: dict[Block, frozenset[V]] = {}
        self.invariant: dict[Block, dict[V, Node]] = {}
        # Phis still missing operands: trivial-Phi removal must leave them alone.
        self._open: set[Node] = set()

    # --- variables ------------------------------------------------------------------------
    def set_value(self, var: V, block: Block, value: Node | Lazy) -> None:
        """Bind ``var`` to ``value`` at the end of ``block`` (so far)."""
        defs = self.defs.get(block)
        if defs is None:
            defs = self.defs[block] = {}
        defs[var] = value

    def get_value(self, var: V, block: Block) -> Node | None:
        """The value of ``var`` at the end of ``block``; None if a path reaching it has none."""
        value = self._get(var, block)
        if self.pending:
            self._settle_pending()
        return value

    def resolve(self, node: Node) -> Node:
        """``node``, or what replaced it if it was a Phi removed as trivial."""
        forward = self.forward
        while node in forward:
            node = forward[node]
        return node

    def declare_assigned(self, header: Block, assigned: Iterable[V]) -> None:
        """Only ``assigned`` may change around the loop that unsealed ``header`` heads:
        other variables read there take the entering value, without a Phi."""
        self.assigned[header] = frozenset(assigned)

    def has_values(self, block: Block) -> bool:
        """Whether any variable is bound in ``block`` (by the frontend or a lookup)."""
        return block in self.defs

    def drop_block(self, block: Block) -> None:
        """Forget ``block``, which the frontend erased before binding anything in it."""
        self.sealed.discard(block)

    def _get(self, var: V, block: Block) -> Node | None:
        defs = self.defs.get(block)
        if defs is not None:
            d = defs.get(var)
            if d is not None:
                if isinstance(d, Node):
                    forward = self.forward
                    while d in forward:
                        d = forward[d]
                    return d
                if d is UNDEFINED:
                    return None
                if d is _ENTERING:  # a cycle back to an unsealed block reading its entry
                    return self._incomplete_phi(var, block)
                node = self.materialize(var, block, d)
                defs[var] = node
                return node
        if block not in self.sealed:
            return self._get_unsealed(var, block)
        value: Node | None
        n = block.num_inputs
        if n == 1:
            pred = block.input(0).block  # the hot path: _pred() inlined
            assert pred is not None
            value = self._get(var, pred)
        elif n == 0:
            value = None
        else:
            phi = self.new_phi(var, block, PENDING)
            self.pending[phi] = var
            self.set_value(var, block, phi)
            self._fill(var, phi)
            self._type_pending(var, phi)
            value = self.try_remove_trivial(phi)
        self.set_value(var, block, UNDEFINED if value is None else value)
        return value

    def _get_unsealed(self, var: V, block: Block) -> Node | None:
        if block.num_inputs == 0:
            return self._incomplete_phi(var, block)
        defs = self.defs.get(block)
        if defs is None:
            defs = self.defs[block] = {}
        defs[var] = _ENTERING
        entry = self._get(var, _pred(block, 0))
        phi = defs[var]
        if phi is not _ENTERING:
            # The entry led back here (an enclosing loop was sealed first), and that
            # lookup made the Phi: it gets the entry value as its first operand.
            assert isinstance(phi, Node)
            if entry is not None:
                phi.append_input(entry)
                phi.type = self.loop_phi_type(var, block, entry)
                self.pending.pop(phi, None)
            return phi
        if entry is None:
            defs[var] = UNDEFINED
            return None
        assigned = self.assigned.get(block)
        if assigned is not None and var not in assigned:
            self.invariant.setdefault(block, {})[var] = entry
            defs[var] = entry
            return entry
        return self._incomplete_phi(var, block, entry)

    def _incomplete_phi(self, var: V, block: Block, entry: Node | None = None) -> Node:
        """A Phi of unsealed ``block`` with the entering value as its only operand so far,
        or none (then typed ``PENDING``); ``seal`` reads the others."""
        if entry is None:
            phi = self.new_phi(var, block, PENDING)
            self.pending[phi] = var
        else:
            phi = self.new_phi(var, block, self.loop_phi_type(var, block, entry))
            phi.append_input(entry)
        self.incomplete.setdefault(block, {})[var] = phi
        self._open.add(phi)
        self.set_value(var, block, phi)
        return phi

    # --- Phis -------------------------------------------------------------------------------
    def _fill(self, var: V, phi: Node) -> None:
        """Read the operands ``phi`` lacks, one per predecessor of its block."""
        block = phi.block
        assert block is not None
        self._open.add(phi)
        for i in range(phi.num_inputs, block.num_inputs):
            edge = block.input(i)
            value = self._get(var, _pred(block, i))
            if value is None:
                value = self.undefined_operand(var, phi, edge)
                self.placeholders[value] = (var, edge)
            phi.append_input(value)
        self._open.discard(phi)

    def _known(self, phi: Node) -> list[Node]:
        """The operands of ``phi`` whose types count: not itself, pending or undefined."""
        return [v for v in phi.inputs if v is not phi and v not in self.pending and v not in self.placeholders]

    def _type_pending(self, var: V, phi: Node) -> bool:
        """Type the pending ``phi`` by ``join_types``, if any operand has a known type."""
        known = self._known(phi)
        if not known:
            return False
        phi.type = self.join_types(var, phi, known)
        del self.pending[phi]
        return True

    def _settle_pending(self) -> None:
        """Type the Phis left pending, now that their operands may have types."""
        progress = True
        while self.pending and progress:
            progress = False
            for phi, var in list(self.pending.items()):
                if phi.graph is None:  # removed as trivial
                    del self.pending[phi]
                elif self._type_pending(var, phi):
                    progress = True

    def try_remove_trivial(self, phi: Node) -> Node:
        """Remove ``phi`` if it is trivial (cascading); returns what it stands for now."""
        return remove_trivial_phi(phi, self.forward, self._removable)

    def _removable(self, phi: Node, value: Node) -> bool:
        return phi not in self._open

    # --- sealing ----------------------------------------------------------------------------
    def seal(self, block: Block) -> None:
        """All predecessors of ``block`` are known: complete its incomplete Phis (and
        check its declared invariants).  A block made with all its predecessors is sealed
        at once; sealing again does nothing more."""
        if block in self.incomplete or block in self.invariant:
            self._complete(block)
        self.sealed.add(block)

    def _complete(self, block: Block) -> None:
        for var, entry in self.invariant.pop(block, {}).items():
            for i in range(1, block.num_inputs):
                value = self._get(var, _pred(block, i))
                if value is None or self.resolve(value) is not self.resolve(entry):
                    self.invariant_changed(var, block, entry)
        todo = self.incomplete.get(block)
        while todo:
            var, phi = next(iter(todo.items()))
            self._fill(var, phi)
            del todo[var]
            if phi in self.pending:
                self._type_pending(var, phi)
            else:
                known = self._known(phi)
                if known:
                    self.seal_phi(var, phi, known)
            self.try_remove_trivial(phi)
        self.incomplete.pop(block, None)
        if self.pending:
            self._settle_pending()

    # --- the end ----------------------------------------------------------------------------
    def finish(self) -> list[UndefinedUse]:
        """Remove the Phis only Phis use; return the live uses of undefined operands (the
        unused ones are erased)."""
        remove_dead_phis(self.g)
        problems: list[UndefinedUse] = []
        for node, (var, edge) in self.placeholders.items():
            if node.has_uses():
                problems.extend(UndefinedUse(var, user, edge) for user, _ in node.uses)
            elif node.graph is self.g:
                self.g.erase(node)
        return problems

    # --- policy hooks -----------------------------------------------------------------------
    def new_phi(self, var: V, block: Block, t: Type) -> Node:
        """A Phi for ``var`` in ``block``, without operands yet."""
        return self.g.add("Phi", [], block, type=t, name=var if isinstance(var, str) else None)

    def loop_phi_type(self, var: V, block: Block, entry: Node) -> Type:
        """The type of a Phi of unsealed ``block`` whose only known operand is ``entry``."""
        return entry.type

    def join_types(self, var: V, phi: Node, operands: list[Node]) -> Type:
        """The type of ``phi`` from its operands of known type."""
        t = operands[0].type
        try:
            for v in operands[1:]:
                t = join_types(t, v.type)
        except TypeError:
            raise PhiTypeError(var, phi, [v.type for v in operands]) from None
        return t

    def seal_phi(self, var: V, phi: Node, operands: list[Node]) -> None:
        """``phi`` was typed by ``loop_phi_type`` and has all its operands now: widen its
        type to their join, and re-infer the types that depend on it."""
        joined = self.join_types(var, phi, operands)
        if joined != phi.type:
            phi.type = joined
            retype_users(phi)

    def undefined_operand(self, var: V, phi: Node, edge: Node) -> Node:
        """The operand of ``phi`` on ``edge``, along which ``var`` has no value."""
        raise SSAError(f"variable {var!r} has no value on an edge into block ^{_block_name(phi)}")

    def materialize(self, var: V, block: Block, value: Lazy) -> Node:
        """The node for the lazy binding ``value`` of ``var`` in ``block``."""
        raise SSAError(f"variable {var!r} is bound to {value!r}, which has no node")

    def invariant_changed(self, var: V, block: Block, entry: Node) -> NoReturn:
        """A back edge of the loop at ``block`` changes ``var``, declared not assigned."""
        raise SSAError(f"variable {var!r} changes around the loop at ^{block.name}, but was declared invariant")


def _pred(block: Block, i: int) -> Block:
    pred = block.input(i).block
    assert pred is not None, "a control predecessor outside any block"
    return pred


def _block_name(node: Node) -> str:
    return (node.block.name or "?") if node.block is not None else "?"


# --- routines on any graph -------------------------------------------------------------------
def trivial_phi_value(phi: Node) -> Node | None:
    """The one value ``phi`` selects, ignoring inputs that are ``phi`` itself; None if it
    selects several (or none: it is only reachable from itself)."""
    value: Node | None = None
    for v in phi.iter_inputs():
        if v is phi or v is value:
            continue
        if value is not None:
            return None
        value = v
    return value


def _always(phi: Node, value: Node) -> bool:
    return True


def remove_trivial_phi(phi: Node, forward: dict[Node, Node],
                       removable: Callable[[Node, Node], bool] = _always) -> Node:
    """If ``phi`` is trivial, replace it by its one value and erase it; then try the Phis
    that used it, which may have become trivial in turn (the cascade may remove that
    value too).  Each removal is recorded in ``forward``; ``removable(phi, value)`` may
    refuse one.  Returns what ``phi`` stands for now."""
    work = [phi]
    while work:
        p = work.pop()
        g = p.graph
        if g is None:
            continue
        value = trivial_phi_value(p)
        if value is None or not removable(p, value):
            continue
        users = [u for u in p.users if u is not p and u.op.kind == "phi"]
        p.replace_all_uses_with(value)
        g.erase(p)
        forward[p] = value
        work.extend(users)
    while phi in forward:
        phi = forward[phi]
    return phi


def remove_dead_phis(g: Graph) -> int:
    """Erase the Phis that no node other than a Phi needs (dead cycles included)."""
    phis = [n for b in g.blocks for n in b.members if n.op.kind == "phi"]
    live: set[Node] = set()
    work = [p for p in phis if any(u.op.kind != "phi" for u in p.users)]
    while work:
        p = work.pop()
        if p in live:
            continue
        live.add(p)
        work.extend(v for v in p.inputs if v.op.kind == "phi" and v not in live)
    dead = [p for p in phis if p not in live]
    if dead:
        g.erase_dead(dead)
    return len(dead)


def retype_users(node: Node) -> None:
    """Re-infer the types downstream of ``node``, whose type was widened (not through
    Phis: a Phi's type is joined when its block is sealed)."""
    work = [u for u in node.users if not isinstance(u, Block)]
    while work:
        n = work.pop()
        if n.op.kind == "phi" or n.op.type_rule is None:
            continue
        try:
            new = infer_type(n.op, [v.type for v in n.inputs], n.attrs, [known_value(v) for v in n.inputs])
        except OpTypeError:
            continue  # the verifier reports it with the graph around it
        if new != n.type:
            n.type = new
            work.extend(u for u in n.users if not isinstance(u, Block))
