"""ONNX import rules: ``RNN``, ``GRU`` and ``LSTM``, each a ``Call`` of its loop over the
time steps, annotated with the op (:mod:`nexus.frontend.recurrent`, which the PyTorch
importer shares)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from nexus.frontend.importing import ident
from nexus.frontend.onnx.ops import Ins, converts
from nexus.frontend.recurrent import recurrent
from nexus.ir.node import Node

if TYPE_CHECKING:
    from nexus.frontend.onnx.importer import Importer


@converts("RNN", "GRU", "LSTM")
def _recurrent(imp: Importer, ins: Ins, attrs: dict[str, Any]) -> list[Node | None]:
    nd = imp.node
    wanted = [k < len(nd.output) and bool(nd.output[k]) for k in range(3)]
    name = next((ident(o) for o in nd.output if o), nd.op_type.lower())
    return recurrent(imp, nd.op_type, ins, attrs, wanted, name=name)
