"""SSA construction for the DSL: Braun et al., "Simple and Efficient Construction of
Static Single Assignment Form" (CC 2013), the algorithm of libFIRM's ``ircons.c``.

Variables are tracked per block (``write``/``read``); a block is *sealed* once all its
predecessors are known; reading a variable in an unsealed block (a loop header while its
body is being built) makes an *incomplete* Phi that gets its remaining operands when the
block is sealed; Phis whose operands are all one value (or the Phi itself) are removed,
so the graph stays minimal.  Removed Phis are forwarded to their replacement, because
the user's Python objects may still point at them.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass

from nexus.ir.graph import Graph, infer_type, known_value
from nexus.ir.node import Block, Node, SourceLoc
from nexus.ir.opdef import OpTypeError
from nexus.ir.types import Type, join_types

Var = Hashable


@dataclass(frozen=True)
class Stale:
    """A variable bound to a value that is invalid here (created in a closed region)."""

    reason: str


@dataclass(frozen=True)
class PyScalar:
    """A variable holding a Python number: a Constant is made only if a read needs it."""

    value: object


@dataclass(frozen=True)
class Undefined:
    """Why a variable has no value in a block: the merge block where some path lacks it."""

    merge: Block | None
    stale: Stale | None = None


class PhiTypeError(TypeError):
    """A variable whose values on different paths have incompatible types."""

    def __init__(self, var: Var, phi: Node, types: list[Type]):
        self.var, self.phi, self.types = var, phi, types
        super().__init__(f"values of types {', '.join(map(str, types))} meet in one Phi")


class SSABuilder:
    """Per-block variable maps over a Graph under construction."""

    def __init__(self, g: Graph, materialize: Callable[[object], Node],
                 phi_loc: Callable[[Block], SourceLoc | None] = lambda b: None):
        self.g = g
        self.materialize = materialize
        self.phi_loc = phi_loc  # where a Phi of a block comes from in the user's source
        self.defs: dict[Block, dict[Var, Node | Stale | PyScalar]] = {}
        self.sealed: set[Block] = set()
        self.incomplete: dict[Block, dict[Var, Node]] = {}
        self.forward: dict[Node, Node] = {}
        self.phi_var: dict[Node, Var] = {}
        self._pending: set[Node] = set()

    # --- variables -----------------------------------------------------------------
    def write(self, var: Var, block: Block, value: Node | Stale | PyScalar) -> None:
        self.defs.setdefault(block, {})[var] = value

    def resolve(self, node: Node) -> Node:
        """``node`` or, if it was a Phi removed as trivial, what replaced it."""
        while node in self.forward:
            node = self.forward[node]
        return node

    def read(self, var: Var, block: Block) -> Node:
        """The value of ``var`` at the end of ``block`` (call ``undefined`` first)."""
        d = self.defs.get(block, {}).get(var)
        if isinstance(d, Node):
            return self.resolve(d)
        if isinstance(d, PyScalar):
            node = self.materialize(d.value)
            self.write(var, block, node)
            return node
        if isinstance(d, Stale):
            raise AssertionError(f"read of a stale variable: {d.reason}")
        return self._read_recursive(var, block)

    def _read_recursive(self, var: Var, block: Block) -> Node:
        preds = block.inputs
        if not preds:
            raise AssertionError(f"variable {var!r} has no definition (check undefined() first)")
        if block not in self.sealed:
            phi = self._new_phi(var, block)
            self.incomplete.setdefault(block, {})[var] = phi
            first = self.read(var, _pred_block(preds[0]))
            phi.append_input(first)
            phi.type = first.type
            self._pending.discard(phi)
            return phi
        if len(preds) == 1:
            value = self.read(var, _pred_block(preds[0]))
            self.write(var, block, value)
            return value
        phi = self._new_phi(var, block)
        self._add_operands(var, phi)
        return self._try_remove_trivial(phi)

    def _new_phi(self, var: Var, block: Block) -> Node:
        # The type is a placeholder until the operands are known (they may cycle back).
        name = var[1] if isinstance(var, tuple) and len(var) == 2 and isinstance(var[1], str) else None
        phi = self.g.add("Phi", [], block, type=_PLACEHOLDER, name=name, loc=self.phi_loc(block))
        self._pending.add(phi)
        self.phi_var[phi] = var
        self.write(var, block, phi)
        return phi

    def _add_operands(self, var: Var, phi: Node) -> None:
        block = phi.block
        assert isinstance(block, Block)
        for i in range(phi.num_inputs, block.num_inputs):
            phi.append_input(self.read(var, _pred_block(block.input(i))))
        self._set_phi_type(var, phi)

    def _set_phi_type(self, var: Var, phi: Node) -> None:
        types = [v.type for v in phi.inputs if v is not phi and v not in self._pending]
        if not types:
            return
        joined = types[0]
        try:
            for t in types[1:]:
                joined = join_types(joined, t)
        except TypeError:
            raise PhiTypeError(var, phi, list(dict.fromkeys(types))) from None
        self._pending.discard(phi)
        if phi.type is not _PLACEHOLDER and joined != phi.type:
            phi.type = joined
            self._retype_users(phi)
        else:
            phi.type = joined

    def _retype_users(self, node: Node) -> None:
        """Re-infer the types downstream of a Phi whose type was widened at sealing."""
        work = [u for u in node.users if not isinstance(u, Block)]
        while work:
            n = work.pop()
            if n.op.kind == "phi":
                continue  # its type is joined when its own block is sealed
            if n.op.type_rule is None:
                continue
            try:
                new = infer_type(n.op, [v.type for v in n.inputs], n.attrs, [known_value(v) for v in n.inputs])
            except OpTypeError:
                continue  # the verifier reports it with the graph around it
            if new != n.type:
                n.type = new
                work.extend(u for u in n.users if not isinstance(u, Block))

    def _try_remove_trivial(self, phi: Node) -> Node:
        same: Node | None = None
        for op in phi.inputs:
            op = self.resolve(op)
            if op is same or op is phi:
                continue
            if same is not None:
                return phi
            same = op
        if same is None:
            raise AssertionError("a Phi with only itself as operand: unreachable code")
        users = [u for u in phi.users if u is not phi]
        phi.replace_all_uses_with(same)
        self.g.erase(phi)
        self.forward[phi] = same
        self._pending.discard(phi)
        for u in users:
            if u.op.kind == "phi" and u.graph is self.g and u.block in self.sealed:
                self._try_remove_trivial(u)
        return same

    # --- sealing -------------------------------------------------------------------
    def seal(self, block: Block) -> None:
        """All predecessors of ``block`` are known: complete its incomplete Phis."""
        phis = self.incomplete.pop(block, {})
        for var, phi in phis.items():
            self._add_operands(var, phi)
        # Sealed only now, so that a trivial-Phi cascade cannot reach a Phi of this
        # block that still lacks operands.
        self.sealed.add(block)
        for phi in phis.values():
            phi = self.resolve(phi)
            if phi.graph is self.g and phi.op.kind == "phi" and phi.block is block:
                self._try_remove_trivial(phi)

    # --- definedness ---------------------------------------------------------------
    def undefined(self, var: Var, block: Block) -> Undefined | None:
        """None if ``var`` has a value on every path to the end of ``block``; else the
        merge block where a path without it joins (or the stale binding found)."""
        state: dict[Block, Undefined | None] = {}
        return self._undefined(var, block, state)

    def _undefined(self, var: Var, block: Block, state: dict[Block, Undefined | None]) -> Undefined | None:
        if block in state:
            return state[block]  # a cycle: the loop itself adds no undefined path
        d = self.defs.get(block, {}).get(var)
        if isinstance(d, (Node, PyScalar)):
            return None
        if isinstance(d, Stale):
            return Undefined(None, d)
        preds = block.inputs
        if not preds:
            return Undefined(None)
        state[block] = None
        results = [self._undefined(var, _pred_block(p), state) for p in preds]
        bad = [r for r in results if r is not None]
        out: Undefined | None = None
        if bad:
            stale = next((r for r in bad if r.stale is not None), None)
            if stale is not None:
                out = stale
            elif len(bad) < len(results):
                out = Undefined(block)  # defined on some paths only: this block merges them
            else:
                out = bad[0]
        state[block] = out
        return out


def _pred_block(control: Node) -> Block:
    block = control.block
    assert block is not None, "a control predecessor outside any block"
    return block


class _Placeholder(Type):
    __slots__ = ()

    def __str__(self) -> str:
        return "?"


_PLACEHOLDER = _Placeholder()
