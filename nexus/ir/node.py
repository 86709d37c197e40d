"""Nodes and Blocks, with use-def lists that keep themselves right.

A node's data inputs and ordering-only ``deps`` are stored on the node; every edge is
also recorded on its definition as a *use* ``(user, index)``.  Index ``i >= 0`` is data
input ``i``; index ``-1 - k`` is dep ``k``.  Setting an input updates both ends in O(1),
so ``replace_all_uses_with`` and dead-node checks cost O(uses).

A :class:`Block` is a node too: its inputs are its control predecessors (``Jmp`` nodes or
``Proj`` exits of a ``Cond``), and it keeps its members in insertion order.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from nexus.ir.types import Type

if TYPE_CHECKING:
    from nexus.ir.graph import Graph
    from nexus.ir.opdef import OpDef


@dataclass(frozen=True, slots=True)
class SourceLoc:
    """Where a node came from: a file, a 1-based line and a 0-based column."""

    file: str
    line: int
    col: int = 0

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.col}"


class Node:
    """One operation.  Identity equality; ``attrs`` are treated as immutable."""

    __slots__ = ("op", "_inputs", "_deps", "block", "attrs", "type", "name", "loc", "_uses", "graph")

    def __init__(
        self,
        op: OpDef,
        inputs: list[Node],
        attrs: Mapping[str, Any],
        type: Type,
        name: str | None = None,
        loc: SourceLoc | None = None,
    ):
        self.op = op
        self._inputs: list[Node] = []
        self._deps: list[Node] = []
        self.block: Block | None = None
        self.attrs: Mapping[str, Any] = attrs
        self.type = type
        self.name = name
        self.loc = loc
        self._uses: dict[tuple[Node, int], None] = {}
        self.graph: Graph | None = None
        for value in inputs:
            self.append_input(value)

    def __repr__(self) -> str:
        label = f"%{self.name}" if self.name else f"#{id(self) & 0xFFFF:x}"
        return f"<{self.op.name} {label}>"

    # --- data inputs -------------------------------------------------------------------
    @property
    def inputs(self) -> tuple[Node, ...]:
        return tuple(self._inputs)

    def input(self, i: int) -> Node:
        return self._inputs[i]

    @property
    def num_inputs(self) -> int:
        return len(self._inputs)

    def set_input(self, i: int, value: Node) -> None:
        old = self._inputs[i]
        del old._uses[(self, i)]
        self._inputs[i] = value
        value._uses[(self, i)] = None

    def append_input(self, value: Node) -> None:
        i = len(self._inputs)
        self._inputs.append(value)
        value._uses[(self, i)] = None

    def remove_input(self, i: int) -> None:
        """Drop input ``i``; later inputs shift down (used for block preds and Phis)."""
        for j in range(i, len(self._inputs)):
            del self._inputs[j]._uses[(self, j)]
        del self._inputs[i]
        for j in range(i, len(self._inputs)):
            self._inputs[j]._uses[(self, j)] = None

    def set_inputs(self, values: list[Node]) -> None:
        self.drop_inputs()
        for value in values:
            self.append_input(value)

    def drop_inputs(self) -> None:
        for i, old in enumerate(self._inputs):
            del old._uses[(self, i)]
        self._inputs = []

    # --- ordering-only edges -----------------------------------------------------------
    @property
    def deps(self) -> tuple[Node, ...]:
        return tuple(self._deps)

    def add_dep(self, value: Node) -> None:
        k = len(self._deps)
        self._deps.append(value)
        value._uses[(self, -1 - k)] = None

    def set_deps(self, values: list[Node]) -> None:
        for k, old in enumerate(self._deps):
            del old._uses[(self, -1 - k)]
        self._deps = []
        for value in values:
            self.add_dep(value)

    # --- uses --------------------------------------------------------------------------
    @property
    def uses(self) -> list[tuple[Node, int]]:
        """``(user, index)`` pairs: index >= 0 is a data input, negative is a dep."""
        return list(self._uses)

    @property
    def users(self) -> list[Node]:
        """Distinct users through data inputs and deps, in first-use order."""
        return list(dict.fromkeys(user for user, _ in self._uses))

    @property
    def num_uses(self) -> int:
        return len(self._uses)

    def has_uses(self) -> bool:
        return bool(self._uses)

    def replace_all_uses_with(self, other: Node) -> None:
        """Point every data and dep use of ``self`` at ``other``."""
        if other is self:
            return
        for user, i in list(self._uses):
            if i >= 0:
                user.set_input(i, other)
            else:
                k = -1 - i
                del self._uses[(user, i)]
                user._deps[k] = other
                other._uses[(user, i)] = None

    # --- convenience -------------------------------------------------------------------
    def attr(self, name: str, default: Any = None) -> Any:
        return self.attrs.get(name, default)

    @property
    def is_control(self) -> bool:
        return self.op.kind == "control"

    def iter_inputs(self) -> Iterator[Node]:
        return iter(self._inputs)


class Block(Node):
    """A basic block.  Inputs are control predecessors; members are kept in order."""

    __slots__ = ("members",)

    def __init__(self, op: OpDef, type: Type, name: str | None = None):
        super().__init__(op, [], {}, type, name)
        self.members: dict[Node, None] = {}

    def __repr__(self) -> str:
        return f"<Block ^{self.name}>"

    @property
    def preds(self) -> tuple[Node, ...]:
        """The control values entering this block, in Phi-input order."""
        return self.inputs

    @property
    def pred_blocks(self) -> list[Block]:
        return [c.block for c in self._inputs if c.block is not None]

    @property
    def nodes(self) -> list[Node]:
        return list(self.members)

    @property
    def phis(self) -> list[Node]:
        return [n for n in self.members if n.op.kind == "phi"]

    @property
    def terminator(self) -> Node | None:
        """The Jmp, Cond or Return that ends the block (None while under construction)."""
        for n in self.members:
            if n.op.terminator:
                return n
        return None

    @property
    def succ_edges(self) -> list[tuple[Node, Block, int]]:
        """``(control value, successor block, input index there)`` for each exit."""
        from nexus.ir.cfg import entries, exits  # cfg builds on this module

        term = self.terminator
        if term is None:
            return []
        return [(x, b, i) for x in exits(term) for b, i in entries(x)]

    @property
    def succs(self) -> list[Block]:
        return [b for _, b, _ in self.succ_edges]



def node_where(n: Node) -> str:
    """``Add %y in ^body (created at f.py:3:4)``: a node as errors name it."""
    where = f"{n.op.name} %{n.name or '?'} in ^{n.block.name if n.block else '?'}"
    if n.loc is not None:
        where += f" (created at {n.loc})"
    return where
