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

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from nexus.frontend.importing import known_rank, tensor_type
from nexus.frontend.onnx.data import OnnxImportError
from nexus.ir.node import Node
from nexus.ir.types import OptionalType, numpy_dtype

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


BodyFn = Callable[[Node, Node, list[Node]], tuple["Node | None", list[Node], list[Node]]]


def build_loop(imp: Importer, trip: Node | None, cond0: Node | None, carried: Sequence[Node],
               n_scans: int, body: BodyFn) -> tuple[list[Node], list[Node]]:
    """The loop of the module docstring: ``body(i, cond, v)`` imports one iteration and
    returns ``(cond_out or None, v_out, scan elements)``.  Returns the final carried
    values and the stacked scan outputs."""
    uid = next(imp._ids)
    key_i, key_c = (uid, "i"), (uid, "cond")
    key_v = [(uid, f"v{k}") for k in range(len(carried))]
    key_s = [(uid, f"scan{k}") for k in range(n_scans)]
    pre = imp.block
    imp.ssa.set_value(key_i, pre, imp.const(np.array(0, np.int64)))
    imp.ssa.set_value(key_c, pre, imp.scalar_bool(cond0) if cond0 is not None else imp.const(np.array(True)))
    for k, v in zip(key_v, carried):
        imp.ssa.set_value(k, pre, v)
    m = None
    if trip is not None:
        m = imp.emit("Cast", [trip], {"to": "i64"}, name="") if _t(trip).dtype != "i64" else trip
        if _t(m).shape != ():
            m = imp.emit("Reshape", [m, imp.const(np.array([], np.int64))], name="")
    jmp = imp.jump()
    header = imp.new_block("loop", [jmp], seal=False)
    imp.ssa.declare_assigned(header, [key_i, key_c, *key_v, *key_s])
    imp.block = header
    i = imp.ssa.get_value(key_i, header)
    c = imp.ssa.get_value(key_c, header)
    assert i is not None and c is not None
    test = c
    if m is not None:
        below = imp.emit("Less", [i, m], name="")
        test = below if cond0 is None else imp.emit("And", [below, c], name="")
    on_false, on_true = imp.branch(test)
    exit_block = imp.new_block("loop_exit", [on_false])
    imp.block = imp.new_block("loop_body", [on_true])
    vin = [imp.ssa.get_value(k, imp.block) for k in key_v]
    cond_out, v_out, scans = body(i, c, vin)  # type: ignore[arg-type]
    if len(v_out) != len(carried):
        raise OnnxImportError(f"the loop body returns {len(v_out)} carried values, the loop has {len(carried)}")
    if len(scans) != n_scans:
        raise OnnxImportError(f"the loop body returns {len(scans)} scan outputs, expected {n_scans}")
    end = imp.block
    inits = [_empty_stack(imp, s) for s in scans]
    # The stacks' initial values go in the block before the loop, ahead of its Jmp.
    for k, (init, _) in zip(key_s, inits):
        for n in init:
            imp.g.move(n, pre)
        imp.ssa.set_value(k, pre, init[-1])
    imp.g.move(jmp, pre)
    imp.block = end
    i_end = imp.ssa.get_value(key_i, end)
    assert i_end is not None
    imp.ssa.set_value(key_i, end, imp.emit("Add", [i_end, imp.const(np.array(1, np.int64))], name=""))
    if cond_out is not None:
        imp.ssa.set_value(key_c, end, imp.scalar_bool(cond_out))
    for k, v in zip(key_v, v_out):
        imp.ssa.set_value(k, end, v)
    for k, s, (_, static) in zip(key_s, scans, inits):
        acc = imp.ssa.get_value(k, end)
        assert acc is not None
        if not static:  # give the rank-only empty stack the element's shape
            target = imp.emit("Concat", [imp.emit("Slice", [imp.emit("ShapeOf", [acc], name=""),
                                                             imp.const(np.array([0], np.int64)),
                                                             imp.const(np.array([1], np.int64))], name=""),
                                         imp.emit("ShapeOf", [s], name="")], {"axis": 0}, name="")
            acc = imp.emit("Expand", [acc, target], name="")
        row = imp.emit("Unsqueeze", [s], {"axes": (0,)}, name="")
        imp.ssa.set_value(k, end, imp.emit("Concat", [acc, row], {"axis": 0}, name=""))
    header.append_input(imp.jump())
    imp.ssa.seal(header)
    imp.block = exit_block
    finals = [imp.ssa.get_value(k, exit_block) for k in key_v]
    stacks = [imp.ssa.get_value(k, exit_block) for k in key_s]
    return finals, stacks  # type: ignore[return-value]


def _empty_stack(imp: Importer, s: Node) -> tuple[list[Node], bool]:
    """Nodes making an empty stack for scan element ``s`` ([0, *shape] when the shape is
    static, else [0, 1, ..., 1], expanded in the body) and whether it is static."""
    t = _t(s)
    if t.shape is None:
        raise OnnxImportError("a scan output needs a known rank")
    static = all(isinstance(d, int) for d in t.shape)
    shape = (0, *t.shape) if static else (0,) + (1,) * len(t.shape)
    return [imp.const(np.zeros(shape, numpy_dtype(t.dtype)))], static


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
        raise OnnxImportError("Scan before opset 9 (batched, with sequence_lens) is not supported")
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

    def body(i: Node, c: Node, vin: list[Node]) -> tuple[Node | None, list[Node], list[Node]]:
        last = imp.emit("Sub", [imp.emit("Sub", [count, i], name=""), imp.const(np.array(1, np.int64))], name="")
        elems = [imp.emit("Gather", [x, last if d else i], {"axis": a}, name="")
                 for x, d, a in zip(xs, dirs_in, axes_in)]
        outs = imp.subgraph(gp, "Scan body", [*vin, *elems])
        return None, outs[:n], outs[n:]

    finals, stacks = build_loop(imp, count, None, state, k_out, body)
    outs: list[Node | None] = list(finals)
    for s, d, a in zip(stacks, dirs_out, axes_out):
        if d:
            s = imp.emit("Slice", [s, imp.const(np.array([-1], np.int64)), imp.const(np.array([INT64_MIN], np.int64)),
                                   imp.const(np.array([0], np.int64)), imp.const(np.array([-1], np.int64))], name="")
        r = _rank(s)
        a %= r
        if a:
            perm = (*range(1, a + 1), 0, *range(a + 1, r))
            s = imp.emit("Transpose", [s], {"perm": perm})
        outs.append(s)
    return outs


_t = tensor_type


def _rank(v: Node) -> int:
    return known_rank(v, OnnxImportError)


def _need(v: Node | None, what: str) -> Node:
    if v is None:
        raise OnnxImportError(f"{what} is required")
    return v
