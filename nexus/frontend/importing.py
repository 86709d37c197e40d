"""What every importer (ONNX, TensorFlow, PyTorch) builds graphs with: value names, the
op-converter registry, and the blocks and branches of structured control flow over the
shared SSA builder (:mod:`nexus.ir.cons`)."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any, Generic, TypeVar

import numpy as np

from nexus.ir.cons import SSABuilder
from nexus.ir.graph import Graph
from nexus.ir.node import Block, Node
from nexus.ir.types import TensorType

F = TypeVar("F", bound=Callable[..., Any])


def ident(name: str) -> str:
    """A foreign name as a Nexus value name (the text form's identifiers)."""
    s = re.sub(r"[^A-Za-z0-9_.]", "_", name)
    return s if s and not s[0].isdigit() else "v" + s


class Registry(Generic[F]):
    """Op type -> its converter; ``@registry.converts("Add", "Sub")`` adds one for several."""

    def __init__(self) -> None:
        self.table: dict[str, F] = {}

    def converts(self, *ops: str) -> Callable[[F], F]:
        def add(fn: F) -> F:
            for op in ops:
                assert op not in self.table, op
                self.table[op] = fn
            return fn

        return add


class BlockBuilder:
    """Blocks and branches for an importer that has a graph ``g``, a current ``block``, an
    SSA builder ``ssa`` and an ``emit``/``const`` of its own (which name the nodes)."""

    g: Graph
    ssa: SSABuilder[Any]
    block: Block
    emit: Callable[..., Node]
    const: Callable[..., Node]

    def new_block(self, label: str, preds: Sequence[Node], seal: bool = True) -> Block:
        b = self.g.new_block(label, preds)
        if seal:
            self.ssa.seal(b)
        return b

    def branch(self, cond: Node) -> tuple[Node, Node]:
        """End the current block in a Cond on ``cond``: (false exit, true exit)."""
        c = self.emit("Cond", [self.scalar_bool(cond)], name="")
        return self.emit("Proj", [c], {"num": 0}, name=""), self.emit("Proj", [c], {"num": 1}, name="")

    def jump(self) -> Node:
        return self.emit("Jmp", [], name="")

    def scalar_bool(self, v: Node) -> Node:
        """``v`` as the bool scalar a Cond takes (a cast and a reshape where needed)."""
        t = v.type
        assert isinstance(t, TensorType)
        if t.dtype != "bool":
            v = self.emit("Cast", [v], {"to": "bool"}, name="")
        if t.shape != ():
            v = self.emit("Reshape", [v, self.const(np.array([], np.int64))], name="")
        return v
