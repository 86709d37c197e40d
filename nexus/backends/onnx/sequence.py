"""ONNX export of sequences and optionals: their type protos and the ``onnx`` lowering
rules of :mod:`nexus.ops.sequence` that have attributes (the others are ONNX's ops one to
one: ``ONE_TO_ONE`` and ``_SAME`` of :mod:`nexus.backends.onnx.lowering`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from onnx import helper

from nexus.backends.base import register_lowering
from nexus.frontend.onnx.data import NEXUS_TO_ONNX
from nexus.ir.node import Node
from nexus.ir.types import OptionalType, SequenceType, TensorType, Type

if TYPE_CHECKING:
    from nexus.backends.onnx.export import Exporter


def type_proto(t: Type, loose: bool = False) -> Any:
    """The ONNX TypeProto of a tensor, sequence or optional type (``loose``: dtypes and
    ranks only, for values whose dims change around a loop); None for other types.
    Element shapes of a sequence keep only their int dims: a symbol there is per element."""
    if isinstance(t, TensorType):
        if t.shape is None:
            return helper.make_tensor_type_proto(NEXUS_TO_ONNX[t.dtype], None)
        dims = [None if loose else d if isinstance(d, int) else str(d) for d in t.shape]
        return helper.make_tensor_type_proto(NEXUS_TO_ONNX[t.dtype], dims)
    if isinstance(t, SequenceType):
        elem = t.elem
        sizes = None if elem.shape is None else [d if isinstance(d, int) and not loose else None for d in elem.shape]
        return helper.make_sequence_type_proto(helper.make_tensor_type_proto(NEXUS_TO_ONNX[elem.dtype], sizes))
    if isinstance(t, OptionalType):
        return helper.make_optional_type_proto(type_proto(t.elem, loose))
    return None


def first_opset(t: Type) -> int:
    """The first ONNX opset with values of type ``t`` and their ops: 11 for sequences
    (SequenceInsert, SplitToSequence...), 15 for optionals; 0 for the others."""
    return 15 if isinstance(t, OptionalType) else 11 if isinstance(t, SequenceType) else 0


def empty(ex: Exporter, t: Type) -> str:
    """A value of container type ``t`` for a path that never defines it: an empty
    sequence, an empty optional."""
    if isinstance(t, SequenceType):
        return ex.add("SequenceEmpty", [], 1, dtype=NEXUS_TO_ONNX[t.dtype])[0]
    assert isinstance(t, OptionalType)
    return ex.add("Optional", [], 1, type=type_proto(t.elem, loose=True))[0]


@register_lowering("onnx", "SequenceEmpty")
def _sequence_empty(ex: Exporter, n: Node) -> str:
    return ex.add("SequenceEmpty", [], 1, dtype=NEXUS_TO_ONNX[n.attrs["dtype"]])[0]


@register_lowering("onnx", "OptionalEmpty")
def _optional_empty(ex: Exporter, n: Node) -> str:
    return empty(ex, n.type)


@register_lowering("onnx", "SplitToSequence")
def _split(ex: Exporter, n: Node, *ins: str) -> str:
    return ex.add("SplitToSequence", ins, 1, axis=n.attrs["axis"], keepdims=int(n.attrs["keepdims"]))[0]


@register_lowering("onnx", "ConcatFromSequence")
def _concat(ex: Exporter, n: Node, seq: str) -> str:
    return ex.add("ConcatFromSequence", [seq], 1, axis=n.attrs["axis"], new_axis=int(n.attrs["new_axis"]))[0]
