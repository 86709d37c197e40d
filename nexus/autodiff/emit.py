"""Emitters: where the VJP rules put the nodes they make.

A rule is written once against :class:`Emitter`; :class:`GraphEmitter` adds IR nodes to a
block.  Graph mode emits into the gradient graph; tape mode emits each active node's rule
into a small graph of its own, compiled once (:mod:`nexus.autodiff.tape`).
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np

from nexus.ir.graph import Graph
from nexus.ir.node import Block, Node
from nexus.ir.types import TensorType, numpy_dtype


class Emitter(Protocol):
    """What a VJP rule may do: apply an op, make a constant, ask a value's type."""

    def op(self, name: str, *inputs: Any, **attrs: Any) -> Any: ...

    def const(self, value: Any, dtype: str) -> Any: ...

    def type_of(self, value: Any) -> TensorType: ...


class GraphEmitter:
    """Emits nodes into ``block``; constants go to ``const_block`` (the entry block), so
    they are made once and dominate every block."""

    def __init__(self, g: Graph, block: Block, const_block: Block | None = None):
        self.g = g
        self.block = block
        self.const_block = const_block or block
        self._consts: dict[tuple[str, bytes, tuple[int, ...]], Node] = {}

    def op(self, name: str, *inputs: Node, **attrs: Any) -> Node:
        return self.g.add(name, list(inputs), self.block, attrs)

    def const(self, value: Any, dtype: str) -> Node:
        arr = np.asarray(value, dtype=numpy_dtype(dtype))
        key = (dtype, arr.tobytes(), arr.shape)
        node = self._consts.get(key)
        if node is None:
            node = self.g.add("Constant", [], self.const_block, {"value": arr})
            self._consts[key] = node
        return node

    def type_of(self, value: Node) -> TensorType:
        t = value.type
        if not isinstance(t, TensorType):
            raise TypeError(f"{value!r} is not a tensor (type {t})")
        return t
