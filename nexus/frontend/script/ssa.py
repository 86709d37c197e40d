"""The SSA policy of ``@nx.script``: :class:`ScriptSSA` is the IR's builder
(:mod:`nexus.ir.cons`, Braun et al.) with the script's answers to its questions.

- A loop header Phi takes the type of the value entering the loop, or a *hint* from an
  earlier attempt.  If an iteration changes the shape, sealing raises
  :class:`LoopTypeRetry` with the generalised type and the frontend builds again with
  that hint (a loop whose dims grow gets symbolic dims).  So does a variable the name
  analysis took for loop-invariant that a back edge changes after all.
- Paths join types with :func:`generalize`; different dtypes are a
  :class:`MergeTypeError` naming the edges (``edge_desc``) they come from.
- A variable undefined on some path gets a placeholder operand; ``finish`` reports every
  placeholder that a live value still uses.  Python raises ``UnboundLocalError`` there
  only when that path runs, so the frontend builds again with the variable *flagged*
  (:attr:`ScriptSSA.flags`): bound at entry to a stand-in of its type (zeros, or an
  argument of that shape) and to a hidden bool "defined" variable, False at entry and
  True at each assignment, that the SSA construction tracks as any variable; a read
  checks the flag at run time unless it is True on every path (libFIRM's ``Unknown``,
  numba's ``UndefinedType``).  The type comes from the Phis that met it undefined, or
  from its assignments; a loop Phi whose entry is undefined is typed by the loop (a
  retry with the hint).  A read where no path lowered so far assigns the variable needs
  no type: it raises there and ends the path (as a ``raise`` does), unless an assignment
  lowered later in the same build reaches it after all (through a loop's back edge), which
  flags the variable for the next build.  See ``nexus.frontend.script.visitor.build_graph``.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable
from typing import NoReturn

import numpy as np

from nexus.ir.cons import PENDING, SSABuilder
from nexus.ir.graph import Graph
from nexus.ir.node import Block, Node, SourceLoc
from nexus.ir.types import TensorType, Type, fresh_dim


class LoopTypeRetry(Exception):
    """A loop-carried variable changes its type across an iteration; build again with
    ``hint`` as the type of its Phi at the loop header ``key``."""

    def __init__(self, key: Hashable, hint: Type, more: tuple[tuple[Hashable, Type], ...] = ()):
        super().__init__(f"retry loop variable {key} with type {hint}")
        self.key = key
        self.hint = hint
        self.more = more  # further (key, hint) pairs found by the same build

    def hints(self) -> list[tuple[Hashable, Type]]:
        return [(self.key, self.hint), *self.more]


class MergeTypeError(Exception):
    """Two paths give a variable different dtypes (or kinds); the frontend words it."""

    def __init__(self, var: str, phi: Node, types: list[tuple[Type, str]], where: Node | None = None):
        super().__init__(var)
        self.where = where
        self.var = var
        self.phi = phi
        self.types = types


class ScriptSSA(SSABuilder[str]):
    """Variables are names (``prefix + name`` inside inlined helpers; ``$``-names are the
    frontend's own, such as a ``for`` loop's counter)."""

    def __init__(self, g: Graph, hints: dict[Hashable, Type]):
        super().__init__(g)
        self.hints = hints  # (loop key, var) -> the type of its header Phi, from a retry
        self.loop_keys: dict[Block, Hashable] = {}
        self.edge_desc: dict[Node, str] = {}  # control edge -> how the source reaches it, for errors
        # The source position Phis are attributed to (the statement being lowered).
        self.current_loc: Callable[[], SourceLoc | None] = lambda: None
        self.flags: dict[str, str] = {}  # a variable maybe undefined where read -> its "defined" flag
        self.nones: dict[str, str] = {}  # a variable assigned None somewhere -> its "is None" flag

    def defined_flag(self, var: str) -> str | None:
        """The hidden flag variable of a flagged ``var`` (None: ``var`` is not flagged)."""
        return self.flags.get(var)

    def bound_values(self, var: str) -> list[Node]:
        """The nodes bound to ``var`` in any block so far (its assignments, and lookups)."""
        out = []
        for defs in self.defs.values():
            d = defs.get(var)
            if isinstance(d, Node) and d.graph is self.g and d not in self.placeholders:
                out.append(d)
        return out

    def loop_header(self, header: Block, key: Hashable, assigned: Iterable[str]) -> None:
        """``header`` (unsealed) heads the loop ``key``, which may assign ``assigned``;
        a variable with a hint gets its Phi whatever the name analysis says."""
        self.loop_keys[header] = key
        hinted = [k[1] for k in self.hints if isinstance(k, tuple) and k[0] == key]
        assigned = list(assigned)
        flags = [table[v] for table in (self.flags, self.nones) for v in assigned if v in table]
        self.declare_assigned(header, [*assigned, *flags, *hinted])

    # --- the policy hooks ------------------------------------------------------------------
    def new_phi(self, var: str, block: Block, t: Type) -> Node:
        return self.g.add("Phi", [], block, type=t, name=display_name(var), loc=self.current_loc())

    def loop_phi_type(self, var: str, block: Block, entry: Node) -> Type:
        hint = self.hints.get((self.loop_keys.get(block), var)) if self.hints else None
        if hint is not None:
            return hint
        if entry.type == PENDING or entry in self.placeholders:  # undefined on every path in so far:
            # typed by its assignments lowered so far, else by the loop (seal_phi)
            known = generalize_all([v.type for v in self.bound_values(var) if v.type != PENDING] or [PENDING])
            return known if known is not None else PENDING
        return entry.type

    def join_types(self, var: str, phi: Node, operands: list[Node]) -> Type:
        # A loop's Phi whose entry was undefined is PENDING until the loop is sealed.
        operands = [v for v in operands if v.type != PENDING] or operands
        out = generalize_all([v.type for v in operands])
        if out is None:
            raise MergeTypeError(phi.name or "?", phi, [(v.type, self._edge_of(phi, v)) for v in operands])
        return out

    def seal_phi(self, var: str, phi: Node, operands: list[Node]) -> None:
        """A header Phi keeps its type: an iteration that needs a more general one makes
        the frontend build again with it as the hint."""
        block = phi.block
        assert block is not None
        # A Phi typed PENDING stands for no value: no path lowered so far assigns its
        # variable (every read of it raised), so it neither types this Phi nor conflicts.
        operands = [v for v in operands if v.type != PENDING]
        if phi.type == PENDING:  # its entry was undefined on every path: the loop's values type it
            general = generalize_all([v.type for v in operands]) if operands else None
            if general is not None:
                raise LoopTypeRetry((self.loop_keys.get(block), var), general)
            return
        for v in operands:
            t = v.type
            if covers(phi.type, t):
                continue
            general = generalize(phi.type, t)
            if general is None:
                raise MergeTypeError(var, phi, [(phi.type, self.edge_desc.get(block.input(0), "entry"))]
                                     + [(v2.type, self._edge_of(phi, v2)) for v2 in operands if v2.type != phi.type],
                                     v)
            raise LoopTypeRetry((self.loop_keys.get(block), var), general)

    def undefined_operand(self, var: str, phi: Node, edge: Node) -> Node:
        return self.g.add("Constant", [], self.g.start_block, {"value": np.zeros((), np.bool_)},
                          name=f"undef_{display_name(var)}", loc=self.current_loc())

    def invariant_changed(self, var: str, block: Block, entry: Node) -> NoReturn:
        # The loop assigns it after all (a case the name analysis missed, such as an item
        # of a tuple variable): build again with a Phi for it, of the type of its entry or,
        # where it has none there, of its assignments.
        t = entry.type
        if entry in self.placeholders or t == PENDING:
            t = generalize_all([v.type for v in self.bound_values(var) if v.type != PENDING] or [PENDING]) or PENDING
        raise LoopTypeRetry((self.loop_keys.get(block), var), t)

    def _edge_of(self, phi: Node, value: Node) -> str:
        block = phi.block
        assert block is not None
        for i, v in enumerate(phi.inputs):
            if v is value:
                return self.edge_desc.get(block.input(i), f"edge {i}")
        return "?"


def display_name(var: str) -> str:
    return var.replace("$", "")


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


def generalize_all(types: list[Type]) -> Type | None:
    """The least type covering all of ``types``, or None when two dtypes (or kinds) differ."""
    out: Type | None = types[0]
    for t in types[1:]:
        out = generalize(out, t) if out is not None else None
    return out
