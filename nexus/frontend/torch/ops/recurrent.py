"""PyTorch import rules: ``torch.nn.LSTM``, ``GRU`` and ``RNN`` (``aten.lstm``, ``aten.gru``,
``aten.rnn_tanh``, ``aten.rnn_relu``), kept whole out of torch's decompositions (which
unroll them into a long static graph of per-step matrix products) and imported, one
layer at a time, as the ONNX importer imports ONNX's ``LSTM``, ``GRU`` and ``RNN``: a
``Call`` of the same loop, annotated with the ONNX op (:mod:`nexus.frontend.recurrent`), so
that ``nx.to_onnx`` writes the ONNX op and ``backend="auto"`` runs it on ONNX Runtime's
fused kernel.  torch's weights are mapped to ONNX's layout here: the gates reordered
(LSTM: torch's i, f, g, o to ONNX's i, o, f, c; GRU: r, z, n to z, r, h), both directions
stacked, ``bias_ih`` and ``bias_hh`` side by side, and torch's GRU is ONNX's with
``linear_before_reset=1``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from nexus.frontend.importing import ident
from nexus.frontend.recurrent import recurrent
from nexus.frontend.torch.data import TorchImportError
from nexus.frontend.torch.ops import shape_vec, tensor_type, whole
from nexus.ir.node import Node

if TYPE_CHECKING:
    from nexus.frontend.torch.importer import Importer

# ONNX's gate order as torch's gate blocks
_ORDER = {"LSTM": (0, 3, 1, 2), "GRU": (1, 0, 2), "RNN": (0,)}


@whole("aten.lstm.input")
def _lstm(imp: Importer, x: Node, hx: Sequence[Node], params: Sequence[Node], has_biases: bool, num_layers: int,
          dropout: float, train: bool, bidirectional: bool, batch_first: bool) -> list[Node]:
    return _rnn(imp, "LSTM", x, list(hx), params, has_biases, num_layers, dropout, train, bidirectional, batch_first)


@whole("aten.gru.input")
def _gru(imp: Importer, x: Node, hx: Node, params: Sequence[Node], has_biases: bool, num_layers: int,
         dropout: float, train: bool, bidirectional: bool, batch_first: bool) -> list[Node]:
    return _rnn(imp, "GRU", x, [hx], params, has_biases, num_layers, dropout, train, bidirectional, batch_first)


@whole("aten.rnn_tanh.input")
def _rnn_tanh(imp: Importer, x: Node, hx: Node, params: Sequence[Node], has_biases: bool, num_layers: int,
              dropout: float, train: bool, bidirectional: bool, batch_first: bool) -> list[Node]:
    return _rnn(imp, "RNN", x, [hx], params, has_biases, num_layers, dropout, train, bidirectional, batch_first)


@whole("aten.rnn_relu.input")
def _rnn_relu(imp: Importer, x: Node, hx: Node, params: Sequence[Node], has_biases: bool, num_layers: int,
              dropout: float, train: bool, bidirectional: bool, batch_first: bool) -> list[Node]:
    return _rnn(imp, "RNN", x, [hx], params, has_biases, num_layers, dropout, train, bidirectional, batch_first,
                "Relu")


def _rnn(imp: Importer, op: str, x: Node, hx: list[Node], params: Sequence[Node], has_biases: bool,
         num_layers: int, dropout: float, train: bool, bidirectional: bool, batch_first: bool,
         activation: str | None = None) -> list[Node]:
    """The output, h_n (and c_n) of torch's multi-layer recurrent op: one ONNX-style op
    per layer, each layer's Y ([T, D, B, H]) the next one's X ([T, B, D*H])."""
    if train and dropout:
        raise TorchImportError(f"{op} with dropout={dropout} in training mode is random: export the module in "
                               f"eval mode")
    d = 2 if bidirectional else 1
    per = 4 if has_biases else 2
    if len(params) != num_layers * d * per:
        raise TorchImportError(f"{op} of {num_layers} layer(s) and {d} direction(s) takes {num_layers * d * per} "
                               f"weights, got {len(params)} (projections, proj_size > 0, are not supported)")
    hidden = tensor_type(params[1]).shape[1]  # type: ignore[index]  # weight_hh: [G*H, H]
    if not isinstance(hidden, int):
        raise TorchImportError(f"{op}'s hidden size must be static, got {hidden}")
    attrs: dict[str, Any] = {"direction": "bidirectional" if bidirectional else "forward", "hidden_size": hidden}
    if op == "GRU":
        attrs["linear_before_reset"] = 1
    if activation is not None:
        attrs["activations"] = [activation] * d
    base = ident(imp.fx.name) if imp.fx is not None else op.lower()
    seq = imp.emit("Transpose", [x], {"perm": (1, 0, 2)}, name="") if batch_first else x
    finals: list[list[Node]] = [[] for _ in hx]
    for layer in range(num_layers):
        dirs = [params[(layer * d + k) * per:(layer * d + k + 1) * per] for k in range(d)]
        w = _stack(imp, [_gates(imp, op, p[0], hidden) for p in dirs])
        r = _stack(imp, [_gates(imp, op, p[1], hidden) for p in dirs])
        b = _stack(imp, [_join(imp, [_gates(imp, op, p[2], hidden), _gates(imp, op, p[3], hidden)])
                         for p in dirs]) if has_biases else None
        states = [imp.emit("Slice", [s, imp.const([layer * d], np.int64), imp.const([(layer + 1) * d], np.int64),
                                     imp.const([0], np.int64)], name="") for s in hx]
        ins = [seq, w, r, b, None, states[0], states[1] if op == "LSTM" else None]
        y, *last = recurrent(imp, op, ins, attrs, name=f"{base}_layer{layer}")
        assert y is not None
        for k, v in enumerate(last[:len(hx)]):
            assert v is not None
            finals[k].append(v)
        if d == 1:
            seq = imp.emit("Squeeze", [y], {"axes": (1,)}, name="")
        else:  # [T, D, B, H] -> [T, B, D*H]
            steps = tensor_type(y).shape[0]  # type: ignore[index]
            t = steps if isinstance(steps, int) else imp.emit("DimSize", [y], {"axis": 0}, name="")
            seq = imp.emit("Reshape", [imp.emit("Transpose", [y], {"perm": (0, 2, 1, 3)}, name=""),
                                       shape_vec(imp, [t, -1, d * hidden])], name="")
    out = imp.emit("Transpose", [seq], {"perm": (1, 0, 2)}, name="") if batch_first else seq
    return [out, *(imp.emit("Concat", f, {"axis": 0}, name="") for f in finals)]


def _gates(imp: Importer, op: str, v: Node, hidden: int) -> Node:
    """torch's weight or bias ``v`` ([G*H, ...]) with its gate blocks in ONNX's order."""
    rows = np.concatenate([np.arange(g * hidden, (g + 1) * hidden) for g in _ORDER[op]])
    known = imp.value_of(v)
    if known is not None:
        return imp.const(np.asarray(known)[rows])
    return imp.emit("Gather", [v, imp.const(rows)], {"axis": 0}, name="")


def _stack(imp: Importer, parts: list[Node]) -> Node:
    """The directions' tensors stacked on a new leading axis (a constant where they are)."""
    known = [imp.value_of(p) for p in parts]
    if all(k is not None for k in known):
        return imp.const(np.stack([np.asarray(k) for k in known]))
    return imp.emit("Concat", [imp.emit("Unsqueeze", [p], {"axes": (0,)}, name="") for p in parts], {"axis": 0},
                    name="")


def _join(imp: Importer, parts: list[Node]) -> Node:
    """``parts`` concatenated along their axis 0 (a constant where they are)."""
    known = [imp.value_of(p) for p in parts]
    if all(k is not None for k in known):
        return imp.const(np.concatenate([np.asarray(k) for k in known]))
    return imp.emit("Concat", parts, {"axis": 0}, name="")
