"""ONNX import rules: sequences and optionals (:mod:`nexus.ops.sequence`).

SequenceConstruct, Insert, At, Erase and Length map one to one (``ONE_TO_ONE`` in
:mod:`nexus.frontend.onnx.data`); the rest are here.

``SequenceMap`` becomes a loop of blocks, as ``Loop`` does (:func:`build_loop`): the
header counts ``i`` up to the first sequence's length, the body reads element ``i`` of
each sequence input (``SequenceAt``), imports the body subgraph on them and the tensor
inputs, and appends each output to its sequence (``SequenceInsert``), so a mapped body
differentiates, optimises and exports like any loop.  ONNX also lets the optional ops
take a plain tensor or sequence (always present) or no input at all (never present):
those fold here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from nexus.frontend.onnx.control import build_loop
from nexus.frontend.onnx.data import OnnxImportError, nexus_dtype
from nexus.frontend.onnx.ops import Ins, _req, converts
from nexus.ir.node import Node
from nexus.ir.types import OptionalType, SequenceType, TensorType, Type

if TYPE_CHECKING:
    from nexus.frontend.onnx.importer import Importer


def _present(ins: Ins) -> list[Node]:
    """The inputs up to the first omitted one (the sequence ops' optional inputs are last)."""
    out = []
    for v in ins:
        if v is None:
            break
        out.append(v)
    return out


@converts("SequenceEmpty")
def _empty(imp: Importer, ins: Ins, attrs: dict[str, Any]) -> list[Node | None]:
    return [imp.emit("SequenceEmpty", [], {"dtype": nexus_dtype(int(attrs.get("dtype", 1)), "dtype")})]


@converts("SplitToSequence")
def _split(imp: Importer, ins: Ins, attrs: dict[str, Any]) -> list[Node | None]:
    _req(ins[0] if ins else None, "input")
    return [imp.emit("SplitToSequence", _present(ins), {"axis": int(attrs.get("axis", 0)),
                                                         "keepdims": bool(attrs.get("keepdims", 1))})]


@converts("ConcatFromSequence")
def _concat(imp: Importer, ins: Ins, attrs: dict[str, Any]) -> list[Node | None]:
    if "axis" not in attrs:
        raise OnnxImportError("ConcatFromSequence needs the attribute 'axis'")
    return [imp.emit("ConcatFromSequence", [_req(ins[0] if ins else None, "input_sequence")],
                     {"axis": int(attrs["axis"]), "new_axis": bool(attrs.get("new_axis", 0))})]


@converts("Optional")
def _optional(imp: Importer, ins: Ins, attrs: dict[str, Any]) -> list[Node | None]:
    x = ins[0] if ins else None
    if x is not None:
        return [imp.emit("Optional", [x])]
    tp = attrs.get("type")
    if tp is None:
        raise OnnxImportError("an empty Optional needs the attribute 'type'")
    inner = imp.type_proto(tp, "Optional's type")
    return [empty_optional(imp, inner)]


def empty_optional(imp: Importer, inner: Type) -> Node:
    """An empty optional of ``inner`` (a tensor or sequence type), typed as precisely."""
    if not isinstance(inner, (TensorType, SequenceType)):
        raise OnnxImportError(f"an optional holds a tensor or a sequence, not {inner}")
    dtype = inner.dtype
    return imp.emit("OptionalEmpty", [], {"dtype": dtype, "sequence": isinstance(inner, SequenceType)},
                    type=OptionalType(inner))


@converts("OptionalHasElement")
def _has(imp: Importer, ins: Ins, attrs: dict[str, Any]) -> list[Node | None]:
    x = ins[0] if ins else None
    if x is None or not isinstance(x.type, OptionalType):  # no input: empty; a plain value: present
        return [imp.const(np.array(x is not None))]
    return [imp.emit("OptionalHasElement", [x])]


@converts("OptionalGetElement")
def _get(imp: Importer, ins: Ins, attrs: dict[str, Any]) -> list[Node | None]:
    x = _req(ins[0] if ins else None, "input")
    if not isinstance(x.type, OptionalType):  # a plain tensor or sequence is its own element
        return [x]
    return [imp.emit("OptionalGetElement", [x])]


@converts("SequenceMap")
def _map(imp: Importer, ins: Ins, attrs: dict[str, Any]) -> list[Node | None]:
    gp = attrs.get("body")
    if gp is None:
        raise OnnxImportError("SequenceMap needs the graph attribute 'body'")
    args = [_req(v, f"input {k}") for k, v in enumerate(ins)]
    if not args or not isinstance(args[0].type, SequenceType):
        raise OnnxImportError("SequenceMap's first input must be a sequence")
    outs = []
    for k, vi in enumerate(gp.output):
        t = imp.type_proto(vi.type, f"SequenceMap body output {k}")
        if not isinstance(t, TensorType):
            raise OnnxImportError(f"SequenceMap body output {k} must be a tensor, is {t}")
        outs.append(imp.emit("SequenceEmpty", [], {"dtype": t.dtype}, name=""))
    count = imp.emit("SequenceLength", [args[0]], name="")

    def body(i: Node, c: Node, acc: list[Node]) -> tuple[Node | None, list[Node], list[Node]]:
        formals = [imp.emit("SequenceAt", [v, i], name="") if isinstance(v.type, SequenceType) else v for v in args]
        results = imp.subgraph(gp, "SequenceMap body", formals)
        return None, [imp.emit("SequenceInsert", [s, r], name="") for s, r in zip(acc, results)], []

    finals, _ = build_loop(imp, count, None, outs, 0, body)
    return list(finals)
