"""ONNX ``If``, ``Loop`` and ``Scan`` as blocks and Phis (the importer's control flow).

``If``: the current block ends in a Cond; each branch subgraph is imported into its own
arm, and the arms jump to a join block where each output is a variable of the SSA
builder bound at the end of both arms, so a Phi appears only where they differ.

``Loop`` and ``Scan`` share one shape::

    pre:    i := 0; cond := cond0; v := v_init; acc := empty     (acc: one per scan output)
    header: test := i < M and cond                               (Phis of i, cond, v, acc)
            Cond test -> body | exit
    body:   the body subgraph on (i, cond, v); v := v_out; cond := cond_out;
            acc := Concat(acc, s[None]); i := i + 1; Jmp header
    exit:   the outputs are v and acc (the header's Phis)

The header is sealed after the back edge, and ``declare_assigned`` tells the builder
that only the loop's own variables change around it, so outer names read in the body
need no Phi.  ``Scan`` reads slice ``i`` (or ``T - 1 - i``) of each scan input with
``Gather`` and moves the stacked outputs to their axes afterwards.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from nexus.frontend.importing import BodyFn, known_rank, tensor_type
from nexus.frontend.importing import build_loop as shared_build_loop
from nexus.frontend.onnx.data import OnnxImportError
from nexus.ir.node import Node
from nexus.ir.types import OptionalType

if TYPE_CHECKING:
    from nexus.frontend.onnx.importer import Importer

Ins = list["Node | None"]
INT64_MIN = np.iinfo(np.int64).min


def convert_if(imp: Importer, ins: Ins, attrs: dict[str, Any]) -> list[Node | None]:
    cond = ins[0]
    if cond is None:
        raise OnnxImportError("If needs a condition")
    for need in ("then_branch", "else_branch"):
        if need not in attrs:
            raise OnnxImportError(f"If needs the graph attribute {need!r}")
    return imp.if_else(cond, lambda side: imp.subgraph(attrs[side + "_branch"], side + "_branch", []),
                       (next(imp._ids),),
                       lambda t, e: OnnxImportError(f"If's branches have {t} and {e} outputs"))


def build_loop(imp: Importer, trip: Node | None, cond0: Node | None, carried: Sequence[Node],
               n_scans: int, body: BodyFn) -> tuple[list[Node], list[Node]]:
    """The loop of the module docstring (:func:`nexus.frontend.importing.build_loop`)."""
    return shared_build_loop(imp, next(imp._ids), trip, cond0, carried, n_scans, body, OnnxImportError)


def convert_loop(imp: Importer, ins: Ins, attrs: dict[str, Any]) -> list[Node | None]:
    gp = attrs.get("body")
    if gp is None:
        raise OnnxImportError("Loop needs the graph attribute 'body'")
    trip = ins[0] if ins else None
    cond0 = ins[1] if len(ins) > 1 else None
    carried = [_need(v, f"loop-carried input {k}") for k, v in enumerate(ins[2:])]
    n = len(carried)
    if len(gp.output) < 1 + n:
        raise OnnxImportError(f"Loop body has {len(gp.output)} outputs, needs at least {1 + n}")

    def body(i: Node, c: Node, vin: list[Node]) -> tuple[Node | None, list[Node], list[Node]]:
        outs = imp.subgraph(gp, "Loop body", [i, c, *vin])
        # ONNX lets a body return a plain value for an optional it carries (a sequence for
        # an optional sequence): the carried value stays an optional, now present.
        nexts = [imp.emit("Optional", [v], name="") if isinstance(init.type, OptionalType)
                 and not isinstance(v.type, OptionalType) else v for init, v in zip(carried, outs[1:1 + n])]
        return outs[0], nexts, outs[1 + n:]

    finals, stacks = build_loop(imp, trip, cond0, carried, len(gp.output) - 1 - n, body)
    return [*finals, *stacks]


def convert_scan(imp: Importer, ins: Ins, attrs: dict[str, Any]) -> list[Node | None]:
    gp = attrs.get("body")
    if gp is None or "num_scan_inputs" not in attrs:
        raise OnnxImportError("Scan needs 'body' and 'num_scan_inputs'")
    if imp.opset < 9:
        return _convert_scan8(imp, ins, attrs)
    m = int(attrs["num_scan_inputs"])
    vals = [_need(v, f"input {k}") for k, v in enumerate(ins)]
    n = len(vals) - m
    if n < 0:
        raise OnnxImportError(f"Scan has {len(vals)} inputs but num_scan_inputs = {m}")
    state, xs = vals[:n], vals[n:]
    k_out = len(gp.output) - n
    dirs_in = list(attrs.get("scan_input_directions") or [0] * m)
    axes_in = [a % _rank(x) for a, x in zip(attrs.get("scan_input_axes") or [0] * m, xs)]
    dirs_out = list(attrs.get("scan_output_directions") or [0] * k_out)
    axes_out = list(attrs.get("scan_output_axes") or [0] * k_out)
    if not xs:
        raise OnnxImportError("Scan needs at least one scan input")
    count = imp.emit("DimSize", [xs[0]], {"axis": axes_in[0]}, name="")
    finals, stacks = _scan(imp, gp, state, xs, count, dirs_in, axes_in)
    outs: list[Node | None] = list(finals)
    for s, d, a in zip(stacks, dirs_out, axes_out):
        if d:
            s = _reversed(imp, s)
        r = _rank(s)
        a %= r
        if a:
            perm = (*range(1, a + 1), 0, *range(a + 1, r))
            s = imp.emit("Transpose", [s], {"perm": perm})
        outs.append(s)
    return outs


def _scan(imp: Importer, gp: Any, state: list[Node], xs: list[Node], count: Node, dirs_in: list[int],
          axes_in: list[int]) -> tuple[list[Node], list[Node]]:
    """``count`` iterations of the Scan body ``gp``: the final states and the stacked scan
    outputs (along axis 0, in iteration order)."""
    n = len(state)

    def body(i: Node, c: Node, vin: list[Node]) -> tuple[Node | None, list[Node], list[Node]]:
        last = imp.emit("Sub", [imp.emit("Sub", [count, i], name=""), imp.const(np.array(1, np.int64))], name="")
        elems = [imp.emit("Gather", [x, last if d else i], {"axis": a}, name="")
                 for x, d, a in zip(xs, dirs_in, axes_in)]
        outs = imp.subgraph(gp, "Scan body", [*vin, *elems])
        return None, outs[:n], outs[n:]

    return build_loop(imp, count, None, state, len(gp.output) - n, body)


def _reversed(imp: Importer, s: Node) -> Node:
    return imp.emit("Slice", [s, imp.const(np.array([-1], np.int64)), imp.const(np.array([INT64_MIN], np.int64)),
                              imp.const(np.array([0], np.int64)), imp.const(np.array([-1], np.int64))], name="")


def _convert_scan8(imp: Importer, ins: Ins, attrs: dict[str, Any]) -> list[Node | None]:
    """Scan before opset 9: every input has a leading batch axis and the scan inputs a
    sequence axis after it; batch entry b runs its own scan of sequence_lens[b] steps
    (all of them without sequence_lens), its scan outputs padded with zeros to the longest.
    One loop per batch entry (the batch size must be static), the results stacked."""
    gp = attrs["body"]
    m = int(attrs["num_scan_inputs"])
    lens = ins[0] if ins else None
    vals = [_need(v, f"input {k + 1}") for k, v in enumerate(ins[1:])]
    n = len(vals) - m
    if n < 0 or m < 1:
        raise OnnxImportError(f"Scan has {len(vals)} inputs but num_scan_inputs = {m}")
    state, xs = vals[:n], vals[n:]
    dirs_in = list(attrs.get("directions") or [0] * m)
    batch = (_t(xs[0]).shape or (None,))[0]
    if not isinstance(batch, int):
        raise OnnxImportError(f"Scan before opset 9 needs a static batch size, got {_t(xs[0])}")
    steps = imp.emit("DimSize", [xs[0]], {"axis": 1}, name="")
    lens64 = imp.emit("Cast", [lens], {"to": "i64"}, name="") if lens is not None and _t(lens).dtype != "i64" \
        else lens
    per_b: list[list[Node]] = []
    for b in range(batch):
        at = imp.const(np.array(b, np.int64))
        count = steps if lens64 is None else imp.emit("Gather", [lens64, at], {"axis": 0}, name="")
        finals, stacks = _scan(imp, gp, [imp.emit("Gather", [v, at], {"axis": 0}, name="") for v in state],
                               [imp.emit("Gather", [x, at], {"axis": 0}, name="") for x in xs], count, dirs_in,
                               [0] * m)
        if lens64 is not None:  # zeros after the entry's own length
            short = imp.emit("Sub", [steps, count], name="")
            for k, s in enumerate(stacks):
                r = _rank(s)
                pads = imp.emit("Concat", [imp.const(np.zeros(r, np.int64)), imp.emit(
                    "Reshape", [short, imp.const(np.array([1], np.int64))], name=""),
                    imp.const(np.zeros(r - 1, np.int64))], {"axis": 0}, name="")
                stacks[k] = imp.emit("Pad", [s, pads], {"mode": "constant", "value": 0.0}, name="")
        per_b.append([*finals, *stacks])
    return [imp.emit("Concat", [imp.emit("Unsqueeze", [row[k]], {"axes": (0,)}, name="") for row in per_b],
                     {"axis": 0}) for k in range(len(per_b[0]))]


_t = tensor_type


def _rank(v: Node) -> int:
    return known_rank(v, OnnxImportError)


def _need(v: Node | None, what: str) -> Node:
    if v is None:
        raise OnnxImportError(f"{what} is required")
    return v
