"""Emitters: where the VJP rules put the nodes they make.

A rule is written once against :class:`Emitter`.  Graph mode uses :class:`GraphEmitter`,
which adds IR nodes to a block of the gradient graph; tape mode uses
:class:`EagerEmitter`, which runs each op's reference kernel at once on NumPy values.
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np

from nexus.ir.graph import Graph
from nexus.ir.node import Block, Node
from nexus.ir.opdef import get_op
from nexus.ir.types import TensorType, dtype_of, numpy_dtype


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


class EagerEmitter:
    """Runs ops at once with their reference kernels (tape mode)."""

    def __init__(self) -> None:
        # type_of is asked for on every rule call; TensorType construction is not free
        self._types: dict[tuple[Any, tuple[int, ...]], TensorType] = {}
        # checking and completing attributes costs more than a small kernel: once per
        # op and attributes (kernels never change the dict they are given)
        self._kernels: dict[tuple[Any, ...], tuple[Any, dict[str, Any]]] = {}

    def op(self, name: str, *inputs: Any, **attrs: Any) -> Any:
        key: Any = name if not attrs else (name, *((k, tuple(v) if isinstance(v, list) else v)
                                                     for k, v in attrs.items()))
        try:
            kernel, full = self._kernels[key]
        except KeyError:
            opdef = get_op(name)
            assert opdef.kernel is not None, name
            kernel, full = opdef.kernel, opdef.complete_attrs(attrs)
            try:
                self._kernels[key] = (kernel, full)
            except TypeError:  # an attribute that cannot be a key (an array): no caching
                pass
        return kernel(*inputs, **full)

    def const(self, value: Any, dtype: str) -> Any:
        arr = np.asarray(value, dtype=numpy_dtype(dtype))
        return arr[()] if arr.ndim == 0 else arr

    def type_of(self, value: Any) -> TensorType:
        try:
            key = (value.dtype, value.shape)
        except AttributeError:  # a Python number
            arr = np.asarray(value)
            key = (arr.dtype, arr.shape)
        t = self._types.get(key)
        if t is None:
            t = self._types[key] = TensorType(dtype_of(key[0]), key[1])
        return t
