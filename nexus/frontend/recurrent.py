"""The recurrent ops (ONNX's ``RNN``, ``GRU`` and ``LSTM``; torch's ``rnn_tanh``, ``rnn_relu``,
``gru`` and ``lstm``) as loops over the time steps: one home for every importer.

Each op becomes a ``Call`` of a graph of its own, its *cell graph*: one loop of
:func:`nexus.frontend.importing.build_loop` (a header whose Phis carry the hidden state,
and the cell state for LSTM, a body, an exit).  The Call's ``recurrent`` attribute names
the ONNX op it stands for (a :class:`Spec`: the op, its attributes, which role each input
and result has), so that

- it differentiates, optimises and compiles like any loop (autodiff and the ``inline``
  pass inline the call; the backends run or compile the callee);
- ``nx.to_onnx`` writes the ONNX op back, and ``backend="auto"``/``"onnxruntime"`` hand it
  to ONNX Runtime's fused kernel, while the callee is still the cell graph this module
  builds from the annotation (:func:`spec_of` rebuilds it and compares); a callee that a
  pass or a user changed is exported as the loop it is.

The shape of the cell graph::

    XW := X @ W^T + biases                  [T, D, B, G*H], once, before the loop
          (the reverse direction's slice reversed in time, within each sequence's length)
    loop i < T:  h, c := step(XW[i], h, c)   (both directions at once: batched over D)
                 where i >= sequence_lens: h, c keep their value and the output row is 0
                 (the output row written into Y's buffer of T rows, carried: SetItem)
    Y := the buffer (the reverse direction's slice reversed back)

Both directions of a bidirectional op run in the same iteration, batched over the
direction axis ``D``, so there is one loop whatever the direction.  The input projection
is one matmul over all time steps, outside the loop; the body holds only the recurrent
product and the gates.  With ``sequence_lens`` the reverse direction reads sequence ``b``
from ``len[b] - 1`` down to 0 (as ONNX Runtime does), which is a per-batch reversal within
the length before the loop and again after it.  A sequence of length 0 ends with zero
states, not the initial ones (as ONNX Runtime does; the ONNX docs do not say).  The cell
graph is time-major (``layout=0``); a batch-major op transposes around the call.

The rows go into a buffer whose size is known before the loop (T), not onto a stack that
grows by one row per step: the python backend writes each row in place (a stack's
``Concat`` copied all earlier rows at every step), and the xla backend, which pads a
stack grown in a loop to a bound and then refuses to reshape, transpose or multiply it,
takes every case (a second layer reads the first one's ``Y``).  The llvm backend compiles
every case too.

The gate equations follow the ONNX operator docs (gate orders iofc for LSTM, zrh for GRU),
with ``clip`` applied to every activation's input after the bias and peephole terms.
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from nexus.frontend.importing import BlockBuilder, build_loop, known_rank, tensor_type
from nexus.ir.cons import SSABuilder
from nexus.ir.graph import Graph
from nexus.ir.node import Node
from nexus.ir.printer import print_graph
from nexus.ir.types import TensorType, Type, numpy_dtype, sym

# op -> (number of gates, default activations per direction)
_OPS = {"RNN": (1, ("Tanh",)), "GRU": (3, ("Sigmoid", "Tanh")), "LSTM": (4, ("Sigmoid", "Tanh", "Tanh"))}
# activation (lower case) -> (takes alpha, takes beta, default alpha, default beta).  The ONNX docs
# give no defaults here; these are ONNX Runtime's (measured: 0 for Affine, ScaledTanh and
# ThresholdedRelu, unlike the standalone ThresholdedRelu op's 1.0).
_ACTIVATIONS: dict[str, tuple[bool, bool, float, float]] = {
    "relu": (False, False, 0.0, 0.0), "tanh": (False, False, 0.0, 0.0), "sigmoid": (False, False, 0.0, 0.0),
    "affine": (True, True, 0.0, 0.0), "leakyrelu": (True, False, 0.01, 0.0), "thresholdedrelu": (True, False, 0.0, 0.0),
    "scaledtanh": (True, True, 0.0, 0.0), "hardsigmoid": (True, True, 0.2, 0.5), "elu": (True, False, 1.0, 0.0),
    "softsign": (False, False, 0.0, 0.0), "softplus": (False, False, 0.0, 0.0),
}
Act = tuple[str, float, float]  # (lower-case name, alpha, beta)
INT64_MIN = int(np.iinfo(np.int64).min)
# The inputs and outputs of the ONNX ops, in their order.
INPUTS = ("X", "W", "R", "B", "sequence_lens", "initial_h", "initial_c", "P")
OUTPUTS = ("Y", "Y_h", "Y_c")
# The attributes that say what the op computes (layout is always 0 in a cell graph).
_ATTRS = ("direction", "hidden_size", "activations", "activation_alpha", "activation_beta", "clip",
          "linear_before_reset", "input_forget")


class RecurrentError(ValueError):
    """A recurrent op that cannot be imported; the importers add where it is."""


@dataclass(frozen=True)
class Spec:
    """The ONNX op a cell graph stands for: ``op``, its ``attrs`` (JSON values), and the
    roles (names of :data:`INPUTS` / :data:`OUTPUTS`) of the call's inputs and results."""

    op: str
    attrs: Mapping[str, Any]
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]

    def text(self) -> str:
        """The Call's ``recurrent`` attribute."""
        attrs = dict(sorted(self.attrs.items()))
        return json.dumps({"op": self.op, "attrs": attrs, "inputs": list(self.inputs), "outputs": list(self.outputs)},
                          separators=(",", ":"))

    @staticmethod
    def parse(text: str) -> Spec:
        d = json.loads(text)
        return Spec(str(d["op"]), dict(d["attrs"]), tuple(d["inputs"]), tuple(d["outputs"]))


def recurrent(bb: BlockBuilder, op: str, ins: Sequence[Node | None], attrs: Mapping[str, Any],
              outputs: Sequence[bool] = (True, True, True), name: str = "") -> list[Node | None]:
    """Import ONNX op ``op`` (``RNN``, ``GRU`` or ``LSTM``) on ``ins`` (in :data:`INPUTS`
    order, None where absent) with its ONNX ``attrs``, as a Call of its cell graph in
    ``bb``'s current block.  ``outputs``: which of Y, Y_h, Y_c are wanted (a cell graph
    without Y stacks no rows).  Returns Y, Y_h and (LSTM) Y_c, None where not wanted."""
    if op not in _OPS:
        raise RecurrentError(f"unknown recurrent op {op!r}")
    gates, defaults = _OPS[op]
    ins = list(ins) + [None] * (8 - len(ins))
    if ins[0] is None or ins[1] is None or ins[2] is None:
        raise RecurrentError(f"{op} needs X, W and R")
    x, w, r = ins[0], ins[1], ins[2]
    if op != "LSTM" and any(v is not None for v in ins[6:]):
        raise RecurrentError(f"{op} takes at most 6 inputs")
    direction, layout = _options(op, gates, x, w, r, attrs)
    d = 2 if direction == "bidirectional" else 1
    _activations(op, attrs, defaults, d)  # checked here, where the error can say where
    if layout:
        ins = [bb.emit("Transpose", [v], {"perm": (1, 0, 2)}, name="") if v is not None and k in (0, 5, 6) else v
               for k, v in enumerate(ins)]
    n_out = 3 if op == "LSTM" else 2
    wanted = tuple(OUTPUTS[k] for k in range(n_out) if k >= len(outputs) or outputs[k])
    spec_attrs: dict[str, Any] = {}
    for k in _ATTRS:
        v = attrs.get(k)
        if v is None:
            continue
        if isinstance(v, (list, tuple)):
            v = [x.decode() if isinstance(x, bytes) else x for x in v]
        spec_attrs[k] = v.decode() if isinstance(v, bytes) else v
    spec_attrs["direction"] = direction
    hidden = tensor_type(r).shape[2]  # type: ignore[index]
    if isinstance(hidden, int):
        spec_attrs["hidden_size"] = hidden
    if op != "GRU":
        spec_attrs.pop("linear_before_reset", None)
    if op != "LSTM":
        spec_attrs.pop("input_forget", None)
    present = [(role, v) for role, v in zip(INPUTS, ins) if v is not None]
    spec = Spec(op, spec_attrs, tuple(role for role, _ in present), wanted)
    args = [v for _, v in present]
    callee = cell_graph(spec, cell_types(spec, [v.type for v in args]), name or op.lower())
    call = bb.emit("Call", args, {"callee": callee, "recurrent": spec.text()}, name="")
    results = [call] if len(wanted) == 1 else [bb.emit("Proj", [call], {"num": k}, name="")
                                               for k in range(len(wanted))]
    by_role: dict[str, Node] = dict(zip(wanted, results))
    outs: list[Node | None] = [by_role.get(role) for role in OUTPUTS[:n_out]]
    if layout:
        outs = [None if v is None else bb.emit("Transpose", [v], {"perm": (2, 0, 1, 3) if k == 0 else (1, 0, 2)},
                                                 name="") for k, v in enumerate(outs)]
    return outs


def spec_of(call: Node) -> Spec | None:
    """The recurrent op a ``Call`` stands for, while its callee is still the cell graph of
    that op (rebuilt from the annotation and compared, once per version of the callee),
    else None."""
    text = call.attrs.get("recurrent") if call.op.name == "Call" else None
    if not text:
        return None
    callee: Graph = call.attrs["callee"]
    try:
        if cell_types(Spec.parse(text), [v.type for v in call.inputs]) != callee.arg_types:
            return None
    except (ValueError, KeyError, TypeError):
        return None

    def check(g: Graph) -> Spec | None:
        try:
            spec = Spec.parse(text)
            rebuilt = cell_graph(spec, g.arg_types, g.name)
        except (ValueError, KeyError, TypeError):
            return None
        return spec if canonical_text(rebuilt) == canonical_text(g) else None

    result: Spec | None = callee.cached(f"recurrent:{text}", check)
    return result


# The symbol of each axis of each input where its size is not static: the sizes that
# must agree share one (T: time steps, N: batch, D: directions, I: input size, H: hidden).
_DIMS = {"X": "TNI", "W": "DGI", "R": "DGH", "B": "DK", "sequence_lens": "N", "initial_h": "DNH",
         "initial_c": "DNH", "P": "DL"}


def cell_types(spec: Spec, types: Sequence[Type]) -> tuple[Type, ...]:
    """The argument types of ``spec``'s cell graph for inputs of ``types``: each size that
    is not static a symbol of the cell graph's own (the caller's may be expressions)."""
    out: list[Type] = []
    for role, t in zip(spec.inputs, types):
        if not isinstance(t, TensorType) or t.shape is None or len(t.shape) != len(_DIMS[role]):
            raise RecurrentError(f"{spec.op}'s input {role} must be a tensor of rank {len(_DIMS[role])}, not {t}")
        dims = tuple(d if isinstance(d, int) else sym(s) for d, s in zip(t.shape, _DIMS[role]))
        out.append(TensorType(t.dtype, dims))
    return tuple(out)


def canonical_text(g: Graph) -> str:
    """The text of ``g`` with its fresh symbols (``s0, s1, ...``: a Phi's or a loop's size,
    numbered by creation across the process) renamed in the order they appear."""
    names: dict[str, str] = {}
    return re.sub(r"\bs\d+\b", lambda m: names.setdefault(m.group(0), f"s{len(names)}"),
                  print_graph(g, locs=False, with_callees=False))


class _Cell(BlockBuilder):
    """The builder of one cell graph: unnamed nodes in the current block."""

    def __init__(self, g: Graph):
        self.g, self.ssa, self.block = g, SSABuilder(g), g.start_block
        self.ids = itertools.count()

    def emit(self, op: str, inputs: Sequence[Node], attrs: Mapping[str, Any] | None = None, *,
             type: Type | None = None, name: str | None = None) -> Node:
        if attrs:  # None stands for "the op's default"
            attrs = {k: v for k, v in attrs.items() if v is not None}
        return self.g.add(op, list(inputs), self.block, attrs, type=type, name=name or None)

    def const(self, value: Any, dtype: Any = None) -> Node:
        return self.g.add("Constant", [], self.block, {"value": np.array(value, dtype=dtype, order="C")})


def cell_graph(spec: Spec, types: Sequence[Type], name: str) -> Graph:
    """The loop of ``spec`` (time-major) as a graph of ``types`` (those of ``spec.inputs``),
    returning ``spec.outputs``."""
    if len(types) != len(spec.inputs) or not set(spec.inputs) <= set(INPUTS) or not set(spec.outputs) <= set(OUTPUTS):
        raise RecurrentError(f"a {spec.op} cell graph takes {len(spec.inputs)} inputs, not {len(types)}")
    g = Graph(name, list(types), list(spec.inputs))
    cell = _Cell(g)
    cell.block = g.new_block("body", [g.add("Jmp", [], g.start_block)])
    ins = dict(zip(spec.inputs, g.args))
    outs = _loop(cell, spec.op, [ins.get(role) for role in INPUTS], spec.attrs, "Y" in spec.outputs)
    results = [outs[OUTPUTS.index(role)] for role in spec.outputs]
    ret = g.add("Return", results, cell.block)
    g.end_block.append_input(ret)
    cell.ssa.finish()
    return g


def _loop(imp: _Cell, op: str, ins: list[Node | None], attrs: Mapping[str, Any], want_y: bool) -> list[Node]:
    """Y (when ``want_y``, else the state), Y_h and (LSTM) Y_c of the time-major op."""
    gates, defaults = _OPS[op]
    x, w, r = ins[0], ins[1], ins[2]
    assert x is not None and w is not None and r is not None
    bias, lens, h0 = ins[3], ins[4], ins[5]
    c0, peep = (ins[6], ins[7]) if op == "LSTM" else (None, None)
    direction, _ = _options(op, gates, x, w, r, attrs)
    d = 2 if direction == "bidirectional" else 1
    acts = _activations(op, attrs, defaults, d)
    clip = attrs.get("clip")
    lbr = bool(attrs.get("linear_before_reset", 0)) and op == "GRU"
    coupled = bool(attrs.get("input_forget", 0)) and op == "LSTM"
    b = _Build(imp, None if clip is None else float(clip))

    if lens is not None:
        lens = _cast(imp, lens, "i64")
    steps = b.dim(x, 0, scalar=True)
    zeros = b.zeros(d, x, r)  # [D, B, H]
    h0 = zeros if h0 is None else h0
    c0 = zeros if c0 is None else c0

    # the input projection of every step, with the biases that do not depend on the state
    xw = b.e("MatMul", [b.e("Unsqueeze", [x], {"axes": (1,)}), b.e("Transpose", [w], {"perm": (0, 2, 1)})])
    rbh = None
    if bias is not None:
        wb, rb = b.split(bias, 1, 2)
        if lbr:  # the recurrent bias of the h gate is multiplied by r: keep it apart
            rz, rr, rbh = b.split(rb, 1, 3)
            rb = b.e("Concat", [rz, rr, b.e("ZerosLike", [rbh])], {"axis": 1})
            rbh = b.e("Unsqueeze", [rbh], {"axes": (1,)})
        xw = b.e("Add", [xw, b.e("Unsqueeze", [b.e("Add", [wb, rb])], {"axes": (1,)})])
    xw = b.backward(xw, lens, steps, direction)
    rt = b.e("Transpose", [r], {"perm": (0, 2, 1)})  # [D, H, G*H]
    if op == "GRU" and not lbr:
        rz, rr, rht = b.split(rt, 2, 3)  # the h gate's recurrent product needs r * h first
        rt = b.e("Concat", [rz, rr], {"axis": 2})
    peeps: list[Node] = []
    if peep is not None:
        peeps = [b.e("Unsqueeze", [p], {"axes": (1,)}) for p in b.split(peep, 1, 3)]
    carried = [h0, c0] if op == "LSTM" else [h0]
    n_states = len(carried)
    if want_y:  # Y's rows written into a buffer of T rows: a size known before the loop (XLA needs one)
        carried.append(b.rows(x, d, r))

    def body(i: Node, _c: Node, state: list[Node]) -> tuple[Node | None, list[Node], list[Node]]:
        h = state[0]
        xt = b.e("Gather", [xw, i], {"axis": 0})  # [D, B, G*H]
        hr = b.e("MatMul", [h, rt])
        if op == "RNN":
            new = [b.act(b.e("Add", [xt, hr]), acts, 0)]
        elif op == "GRU":
            xz, xr, xh = b.split(xt, 2, 3)
            hparts = b.split(hr, 2, 3 if lbr else 2)
            z = b.act(b.e("Add", [xz, hparts[0]]), acts, 0)
            rg = b.act(b.e("Add", [xr, hparts[1]]), acts, 0)
            if lbr:
                hh = hparts[2]
                if rbh is not None:
                    hh = b.e("Add", [hh, rbh])
                pre = b.e("Add", [xh, b.e("Mul", [rg, hh])])
            else:
                pre = b.e("Add", [xh, b.e("MatMul", [b.e("Mul", [rg, h]), rht])])
            cand = b.act(pre, acts, 1)
            one_minus = b.e("Sub", [_like(imp, 1, z), z])
            new = [b.e("Add", [b.e("Mul", [one_minus, cand]), b.e("Mul", [z, h])])]
        else:
            c = state[1]
            gi, go, gf, gc = b.split(b.e("Add", [xt, hr]), 2, 4)
            if peeps:
                gi = b.e("Add", [gi, b.e("Mul", [peeps[0], c])])
                gf = b.e("Add", [gf, b.e("Mul", [peeps[2], c])])
            ig = b.act(gi, acts, 0)
            fg = b.e("Sub", [_like(imp, 1, ig), ig]) if coupled else b.act(gf, acts, 0)
            c_new = b.e("Add", [b.e("Mul", [fg, c]), b.e("Mul", [ig, b.act(gc, acts, 1)])])
            if peeps:
                go = b.e("Add", [go, b.e("Mul", [peeps[1], c_new])])
            og = b.act(go, acts, 0)
            new = [b.e("Mul", [og, b.act(c_new, acts, 2)]), c_new]
        row = new[0]
        if lens is not None:  # past a sequence's end: the state stays, the output row is 0
            live = b.e("Unsqueeze", [b.e("Less", [i, lens])], {"axes": (0, 2)})  # [1, B, 1]
            new = [b.e("Where", [live, v, old]) for v, old in zip(new, state)]
            row = b.e("Where", [live, row, _like(imp, 0, row)])
        if want_y:
            new.append(b.e("SetItem", [state[-1], row, i]))
        return None, new, []

    finals, _ = build_loop(imp, next(imp.ids), steps, None, carried, 0, body, RecurrentError)
    y = None
    if want_y:
        y = b.backward(finals[-1], lens, steps, direction)  # [T, D, B, H]
    finals = finals[:n_states]
    if lens is not None:  # a sequence of length 0 has zero states, not the initial ones (as ONNX Runtime)
        some = b.e("Unsqueeze", [b.e("Greater", [lens, imp.const(np.array(0, np.int64))])], {"axes": (0, 2)})
        finals = [b.e("Where", [some, v, _like(imp, 0, v)]) for v in finals]
    return [y, *finals]  # type: ignore[list-item]




def _options(op: str, gates: int, x: Node, w: Node, r: Node, attrs: Mapping[str, Any]) -> tuple[str, int]:
    """The direction and the layout, once the shapes that are known agree with them."""
    direction = attrs.get("direction", "forward")
    if direction not in ("forward", "reverse", "bidirectional"):
        raise RecurrentError(f"direction must be forward, reverse or bidirectional, got {direction!r}")
    layout = int(attrs.get("layout", 0))
    if layout not in (0, 1):
        raise RecurrentError(f"layout must be 0 or 1, got {layout}")
    for v, what in ((x, "X"), (w, "W"), (r, "R")):
        if _rank(v) != 3:
            raise RecurrentError(f"{what} must have rank 3, got {_t(v).shape}")
    d = 2 if direction == "bidirectional" else 1
    wd, rows = _t(w).shape[:2]  # type: ignore[index]
    if isinstance(wd, int) and wd != d:
        raise RecurrentError(f"direction {direction!r} needs {d} directions in W, it has {wd}")
    hidden = _t(r).shape[2]  # type: ignore[index]
    if "hidden_size" in attrs and isinstance(hidden, int) and hidden != int(attrs["hidden_size"]):
        raise RecurrentError(f"hidden_size is {attrs['hidden_size']} but R has {hidden} columns")
    if isinstance(rows, int) and isinstance(hidden, int) and rows != gates * hidden:
        raise RecurrentError(f"{op} has {gates} gate(s): W needs {gates} x {hidden} rows, it has {rows}")
    return direction, layout


def _activations(op: str, attrs: Mapping[str, Any], defaults: tuple[str, ...], d: int) -> list[list[Act]]:
    """The activations of each direction, with their alpha and beta.  The attribute lists
    are consumed in order, each value by the next activation that takes one (as ONNX
    Runtime reads them); an activation given none takes its default."""
    names = list(attrs.get("activations") or defaults * d)
    n = len(defaults)
    if len(names) != n * d:
        raise RecurrentError(f"{op} needs {n * d} activations for {d} direction(s), got {len(names)}: {names}")
    alphas, betas = list(attrs.get("activation_alpha") or []), list(attrs.get("activation_beta") or [])
    out: list[Act] = []
    for name in names:
        spec = _ACTIVATIONS.get(name.lower())
        if spec is None:
            raise RecurrentError(f"{op}: unknown activation {name!r} (known: {', '.join(sorted(_ACTIVATIONS))})")
        takes_a, takes_b, a, bt = spec
        if takes_a and alphas:
            a = float(alphas.pop(0))
        if takes_b and betas:
            bt = float(betas.pop(0))
        out.append((name.lower(), a, bt))
    return [out[k * n:(k + 1) * n] for k in range(d)]


class _Build:
    """The helpers one import uses: unnamed nodes, constants, splits, reversals, gates."""

    def __init__(self, imp: _Cell, clip: float | None):
        self.imp, self.clip = imp, clip

    def e(self, op: str, ins: Sequence[Node], attrs: dict[str, Any] | None = None) -> Node:
        return self.imp.emit(op, ins, attrs, name="")

    def i64(self, values: Sequence[int]) -> Node:
        return self.imp.const(np.array(values, np.int64))

    def dim(self, v: Node, axis: int, scalar: bool = False) -> Node:
        n = self.e("DimSize", [v], {"axis": axis})
        return n if scalar else self.e("Unsqueeze", [n], {"axes": (0,)})

    def zeros(self, d: int, x: Node, r: Node) -> Node:
        """The default initial state, [D, B, H]: a constant where B and H are known, so
        that the loop's state and stacked rows keep a static shape."""
        batch, hidden = _t(x).shape[1], _t(r).shape[2]  # type: ignore[index]
        if isinstance(batch, int) and isinstance(hidden, int):
            return self.imp.const(np.zeros((d, batch, hidden), numpy_dtype(_t(x).dtype)))
        return self.e("Expand", [_like(self.imp, 0, x), self.e("Concat", [
            self.i64([d]), self.dim(x, 1), self.dim(r, 2)], {"axis": 0})])

    def rows(self, x: Node, d: int, r: Node) -> Node:
        """Zeros for Y, [T, D, B, H]: a constant where the sizes are known."""
        steps, batch = _t(x).shape[:2]
        hidden = _t(r).shape[2]  # type: ignore[index]
        if all(isinstance(n, int) for n in (steps, batch, hidden)):
            return self.imp.const(np.zeros((steps, d, batch, hidden), numpy_dtype(_t(x).dtype)))
        return self.e("Expand", [_like(self.imp, 0, x), self.e("Concat", [
            self.dim(x, 0), self.i64([d]), self.dim(x, 1), self.dim(r, 2)], {"axis": 0})])

    def split(self, v: Node, axis: int, parts: int) -> list[Node]:
        t = self.e("Split", [v], {"axis": axis, "num_outputs": parts})
        return [self.e("Proj", [t], {"num": k}) for k in range(parts)]

    def backward(self, v: Node, lens: Node | None, steps: Node, direction: str) -> Node:
        """``v`` ([T, D, B, ...]; ``steps`` is T) with the reverse direction's slice
        reversed in time.  A Where on the direction axis, not a Split and a Concat: the xla
        backend refuses to split the loop's stacked rows, whose length it knows only at
        run time."""
        if direction == "forward":
            return v
        rev = self.reverse(v, lens, steps)
        if direction == "reverse":
            return rev
        second = self.imp.const(np.array([False, True]).reshape(1, 2, 1, 1))
        return self.e("Where", [second, rev, v])

    def reverse(self, v: Node, lens: Node | None, steps: Node) -> Node:
        """``v`` ([T, D, B, ...]; ``steps`` is T) reversed along time; with ``lens`` ([B])
        each sequence ``b`` only within its first ``lens[b]`` steps (the rest stays where
        it is)."""
        if lens is None:
            return self.e("Slice", [v, self.i64([-1]), self.i64([INT64_MIN]), self.i64([0]), self.i64([-1])])
        t = self.e("Range", [self.imp.const(np.array(0, np.int64)), steps,
                             self.imp.const(np.array(1, np.int64))])
        t = self.e("Unsqueeze", [t], {"axes": (1,)})  # [T, 1]
        back = self.e("Sub", [self.e("Sub", [lens, t]), self.imp.const(np.array(1, np.int64))])  # [T, B]
        idx = self.e("Where", [self.e("Less", [t, lens]), back, t])
        idx = self.e("Unsqueeze", [idx], {"axes": (1, 3)})  # [T, 1, B, 1]
        idx = self.e("Expand", [idx, self.e("ShapeOf", [v])])
        return self.e("GatherElements", [v, idx], {"axis": 0})

    def act(self, v: Node, acts: list[list[Act]], k: int) -> Node:
        """Activation ``k`` of each direction on ``v`` ([D, ...]); clipped first."""
        if self.clip is not None:
            v = self.e("Clip", [v, _like(self.imp, -self.clip, v), _like(self.imp, self.clip, v)])
        fns = [a[k] for a in acts]
        if all(f == fns[0] for f in fns):
            return self._apply(v, fns[0])
        parts = self.split(v, 0, len(fns))
        return self.e("Concat", [self._apply(p, f) for p, f in zip(parts, fns)], {"axis": 0})

    def _apply(self, v: Node, act: Act) -> Node:
        name, alpha, beta = act
        imp = self.imp

        def c(value: float) -> Node:
            return _like(imp, value, v)

        if name in ("relu", "tanh", "sigmoid", "softplus"):
            return self.e({"relu": "Relu", "tanh": "Tanh", "sigmoid": "Sigmoid", "softplus": "Softplus"}[name], [v])
        if name == "affine":
            return self.e("Add", [self.e("Mul", [v, c(alpha)]), c(beta)])
        if name == "leakyrelu":
            return self.e("LeakyRelu", [v], {"alpha": alpha})
        if name == "thresholdedrelu":
            return self.e("Where", [self.e("Greater", [v, c(alpha)]), v, c(0)])
        if name == "scaledtanh":
            return self.e("Mul", [c(alpha), self.e("Tanh", [self.e("Mul", [v, c(beta)])])])
        if name == "hardsigmoid":
            return self.e("HardSigmoid", [v], {"alpha": alpha, "beta": beta})
        if name == "elu":
            neg = self.e("Mul", [c(alpha), self.e("Sub", [self.e("Exp", [v]), c(1)])])
            return self.e("Where", [self.e("Less", [v, c(0)]), neg, v])
        assert name == "softsign", name
        return self.e("Div", [v, self.e("Add", [self.e("Abs", [v]), c(1)])])


def _t(v: Node) -> Any:
    return tensor_type(v)


def _rank(v: Node) -> int:
    return known_rank(v, RecurrentError)


def _like(imp: _Cell, value: Any, v: Node) -> Node:
    return imp.const(np.asarray(value, dtype=numpy_dtype(_t(v).dtype)))


def _cast(imp: _Cell, v: Node, dtype: str) -> Node:
    return v if _t(v).dtype == dtype else imp.emit("Cast", [v], {"to": dtype})
