"""ONNX export: ``to_onnx(graph)`` -> an ``onnx.ModelProto``.

The CFG is structurized first (:func:`nexus.passes.structurize.structurize`): the region
tree's ``If`` becomes an ONNX ``If`` (each arm a subgraph yielding the merged values) and
its ``Loop`` an ONNX ``Loop`` without trip count: the loop's ``cond`` nodes (pure) run once
before the loop on the initial values and again at the end of the body on the next ones,
giving the Loop's condition input and the body's condition output.  Data nodes are lowered
by the ``onnx`` lowering table (``register_lowering("onnx", ...)``, in
:mod:`nexus.backends.onnx.lowering`); a node without a rule is a
:class:`MissingLoweringError` naming it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx
from onnx import helper

from nexus.backends.base import lowering_table
from nexus.backends.onnx import lowering  # noqa: F401  (registers the rules)
from nexus.backends.onnx.sequence import empty, first_opset, type_proto
from nexus.backends.onnx.stacks import StackSplitError, split_stacks
from nexus.frontend.onnx.data import NEXUS_TO_ONNX
from nexus.ir.graph import Graph
from nexus.ir.node import Node
from nexus.ir.types import StackType, TensorType, Type, is_container, numpy_dtype
from nexus.passes.regions import Bind, Const, Default, If, Loop, Name, Seq, Value, Var, walk
from nexus.passes.structurize import structurize

RULES = lowering_table("onnx")
OPSET = 18


class ExportError(ValueError):
    """A graph that cannot be written as ONNX; the message names the node or value."""


def _live(nodes: list[Any], outputs: list[str]) -> list[Any]:
    """``nodes`` less those whose outputs nothing reads: ONNX Runtime keeps and runs them
    (an export rule that reads past the importer's spelled-out shape arithmetic leaves it
    dead).  A name that a subgraph reads counts as read."""
    used = set(outputs)
    keep = []
    for node in reversed(nodes):
        if any(o in used for o in node.output):
            keep.append(node)
            used.update(node.input)
            used.update(_read_in_subgraphs(node))
    return keep[::-1]


def _read_in_subgraphs(node: Any) -> set[str]:
    names: set[str] = set()
    for a in node.attribute:
        for sub in ([a.g] if a.HasField("g") else []) + list(a.graphs):
            for m in sub.node:
                names.update(m.input)
                names.update(_read_in_subgraphs(m))
    return names


def to_onnx(graph: Graph, *, opset: int | None = None, check: bool = True) -> onnx.ModelProto:
    """The graph as an ONNX model (checked with ``onnx.checker`` unless ``check=False``),
    for ``opset`` (default: 18, or the first that has the dtypes and attributes the graph
    uses: float8 and Cast's saturate 19, int4 21, float4 23, E8M0 and round_mode 24, int2 25)."""
    from nexus.passes.structurize import StructurizeError

    needed, why = _needed_opset(graph)
    if opset is None:
        opset = max(OPSET, needed)
    elif opset < needed:
        raise ExportError(f"graph @{graph.name} needs ONNX opset {needed} or later ({why}), not {opset}")

    graph = _without_dead_tapes(_inlined(graph))
    try:
        graph, stack_dtypes = split_stacks(graph)
    except StackSplitError as e:
        raise ExportError(str(e)) from None
    if stack_dtypes:  # a copy: one dtype's stack may now be pushed but never read
        graph = _drop_dead_tapes(graph)
    try:
        tree = structurize(graph)
    except StructurizeError as e:
        raise ExportError(f"graph @{graph.name} cannot be exported: {e}") from None
    ex = Exporter()
    ex.stack_dtypes = _tree_stack_dtypes(tree.body, stack_dtypes)
    inputs = []
    for a in graph.args:
        name = ex.bind(a, a.name or "arg")
        inputs.append(value_info(name, a.type, f"argument %{a.name}"))
    ex.seq(tree.body)
    outputs = []
    for k, v in enumerate(tree.results):
        name = ex.fresh(f"result{k}")
        ex.add("Identity", [ex.value(v)], [name])
        outputs.append(value_info(name, _type(v), f"result {k}"))
    g = helper.make_graph(_live(ex.nodes, [o.name for o in outputs]), graph.name, inputs, outputs, ex.initializers)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], producer_name="nexus")
    model.ir_version = min(model.ir_version, 10 if opset <= 21 else 11)  # what ONNX Runtime reads
    if check:
        onnx.checker.check_model(model, full_check=False)
    return model


# The first opset with each narrow dtype (ONNX's TensorProto types by version).
_DTYPE_OPSET = {"f8e4m3fn": 19, "f8e4m3fnuz": 19, "f8e5m2": 19, "f8e5m2fnuz": 19, "i4": 21, "u4": 21,
                "f4e2m1fn": 23, "f8e8m0fnu": 24, "i2": 25, "u2": 25}


# The first opset with each op the exporter writes as the ONNX op of that name.
_OP_OPSET = {"CumProd": 26, "GridSample": 20, "DeformConv": 19, "BitCast": 26}


def _needed_opset(graph: Graph) -> tuple[int, str]:
    """The first opset that can express ``graph``, and what needs it."""
    best, why = 0, ""
    for n in graph.nodes():
        for t in (n.type.elems if hasattr(n.type, "elems") else (n.type,)):
            v = _DTYPE_OPSET.get(getattr(t, "dtype", ""), 0)
            if v > best:
                best, why = v, f"dtype {t.dtype}"  # type: ignore[union-attr]
            if first_opset(t) > best:
                best, why = first_opset(t), f"{type(t).__name__} {t}"
        if _OP_OPSET.get(n.op.name, 0) > best:
            best, why = _OP_OPSET[n.op.name], n.op.name
        if n.op.name == "Cast":
            for attr, v in (("saturate", 19), ("round_mode", 24)):
                if n.attrs.get(attr) is not None and v > best:
                    best, why = v, f"Cast's {attr}"
        if n.op.name == "Resize" and n.attrs.get("coordinate_transformation_mode") == "half_pixel_symmetric" \
                and best < 19:
            best, why = 19, "Resize's half_pixel_symmetric"
    return best, why


def _inlined(graph: Graph) -> Graph:
    """``graph``, or a copy of it with its Calls inlined but those of a recurrent op's loop
    still as the importer built it, which the ``Call`` rule writes as the ONNX op."""
    from nexus.frontend.recurrent import spec_of
    from nexus.passes.inline import can_inline, inline_call

    def other(g: Graph) -> Node | None:
        return next((n for n in g.nodes() if n.op.name == "Call" and spec_of(n) is None and can_inline(g, n)), None)

    if other(graph) is None:
        return graph
    graph = graph.clone()[0]
    while (call := other(graph)) is not None:
        inline_call(graph, call)
    return graph


_TAPE_OPS = frozenset({"StackNew", "StackPush", "StackPop"})


def _without_dead_tapes(graph: Graph) -> Graph:
    """A copy of ``graph`` without the autodiff tape traffic nothing reads (a gradient graph
    without loops pushes and pops block codes it never uses).  Stack ops are impure, so
    DCE keeps them; they have no effect besides the stack, so unused ones may go.  ONNX has
    no stack of mixed dtypes: a tape that is read (loops) stays, and :mod:`stacks
    <nexus.backends.onnx.stacks>` splits it into one ONNX sequence per dtype."""
    if not any(n.op.name in _TAPE_OPS for n in graph.nodes()):
        return graph
    return _drop_dead_tapes(graph.clone()[0])


def _drop_dead_tapes(g: Graph) -> Graph:
    """``g`` (changed in place) without stack values nothing reads, Phis included."""
    changed = True
    while changed:
        changed = False
        for n in list(g.nodes()):
            if n.graph is None:
                continue
            if n.op.kind == "phi" and isinstance(n.type, StackType) and not n.has_uses():
                g.erase(n)
                changed = True
                continue
            if n.op.name not in _TAPE_OPS:
                continue
            projs = [u for u in n.users if isinstance(u, Node) and u.op.name == "Proj"]
            if all(not p.has_uses() for p in projs) and len(projs) == len(n.users):
                for p in projs:
                    g.erase(p)
                g.erase(n)
                changed = True
    return g


def _tree_stack_dtypes(body: Seq, seeds: dict[Node, str]) -> dict[Any, str]:
    """The element dtype of every stack-typed name and placeholder of the region tree:
    the split's map for graph nodes, spread to the structurizer's Vars and Defaults
    through the Binds, Merges and loop slots that join them."""
    known: dict[Any, str] = dict(seeds)
    links: list[tuple[Any, ...]] = []
    for item in walk(body):
        if isinstance(item, Bind):
            links.append((item.target, item.value))
        elif isinstance(item, If):
            links.extend((m.name, m.then_value, m.else_value) for m in item.outputs)
        elif isinstance(item, Loop):
            links.extend((c.var, c.init, c.next) for c in item.carried)
            links.extend((r.name, r.var) for r in item.results)
    links = [group for group in links if isinstance(group[0].type, StackType)]
    changed = True
    while changed:
        changed = False
        for group in links:
            d = next((known[v] for v in group if v in known), None)
            if d is None:
                continue
            for v in group:
                if v not in known and not isinstance(v, Const):
                    known[v] = d
                    changed = True
    return known


def value_info(name: str, t: Type, what: str, elem: str | None = None) -> Any:
    """ONNX value info for a tensor, a sequence or an optional, or for a stack (a sequence
    of ``elem`` tensors)."""
    if isinstance(t, StackType) and elem is not None:
        return helper.make_tensor_sequence_value_info(name, NEXUS_TO_ONNX[elem], None)
    proto = type_proto(t)
    if proto is None:
        raise ExportError(f"{what} has type {t}; ONNX export handles tensors, sequences and optionals only")
    return helper.make_value_info(name, proto)


def _type(v: Value) -> Type:
    return v.type


class Exporter:
    """Names and nodes of one ONNX graph (subgraphs push a fresh node list)."""

    def __init__(self) -> None:
        self.names: dict[Any, str] = {}  # Name -> ONNX value name
        self.taken: set[str] = set()
        self.nodes: list[Any] = []
        self.initializers: list[Any] = []
        self.outputs: dict[Node, list[str]] = {}  # tuple-valued nodes -> their outputs
        self.stack_dtypes: dict[Any, str] = {}  # stack-typed names and Defaults -> element dtype

    # --- names --------------------------------------------------------------------------
    def fresh(self, hint: str) -> str:
        base = "".join(c if c.isalnum() or c in "_." else "_" for c in hint) or "v"
        name, k = base, 0
        while name in self.taken:
            k += 1
            name = f"{base}_{k}"
        self.taken.add(name)
        return name

    def bind(self, v: Name, hint: str | None = None) -> str:
        name = self.fresh(hint or (v.hint if isinstance(v, Var) else (v.name or v.op.name.lower())))
        self.names[v] = name
        return name

    def value(self, v: Value) -> str:
        """The ONNX name holding operand ``v`` (immediates become constants)."""
        if isinstance(v, Const):
            return self.const(v.value)
        if isinstance(v, Default) and isinstance(v.type, StackType) and v in self.stack_dtypes:
            return self.add("SequenceEmpty", [], 1, dtype=NEXUS_TO_ONNX[self.stack_dtypes[v]])[0]
        if isinstance(v, Default) and is_container(v.type):
            return empty(self, v.type)
        if isinstance(v, Default):
            t = v.type
            if not isinstance(t, TensorType) or t.shape is None:
                raise ExportError(f"a placeholder of type {t} has no ONNX value")
            shape = tuple(d if isinstance(d, int) else 0 for d in t.shape)
            return self.const(np.zeros(shape, numpy_dtype(t.dtype)))
        name = self.names.get(v)
        if name is None:
            raise ExportError(f"value {v!r} is read before it is defined")
        return name

    # --- emitting -----------------------------------------------------------------------
    def add(self, op_type: str, inputs: Sequence[str], outputs: Sequence[str] | int = 1, **attrs: Any) -> list[str]:
        outs = [self.fresh(op_type.lower()) for _ in range(outputs)] if isinstance(outputs, int) else list(outputs)
        self.nodes.append(helper.make_node(op_type, list(inputs), outs, **attrs))
        return outs

    def const(self, value: Any, dtype: Any = None) -> str:
        arr = np.asarray(value, dtype=dtype)
        name = self.fresh("const")
        self.nodes.append(helper.make_node("Constant", [], [name], value=onnx.numpy_helper.from_array(arr, name)))
        return name

    def seq(self, seq: Seq) -> None:
        for item in seq.items:
            if isinstance(item, If):
                self.if_(item)
            elif isinstance(item, Loop):
                self.loop(item)
            elif isinstance(item, Bind):
                src = self.value(item.value)
                self.add("Identity", [src], [self.bind(item.target)])
            else:
                self.node(item)

    def node(self, n: Node) -> None:
        rule = RULES.rule(n)
        if n.op.name == "Proj":  # a component of a tuple-valued node: one of its outputs
            self.names[n] = self.proj(n)
            return
        ins = [self.value(v) for v in n.inputs]
        out = rule(self, n, *ins)
        if isinstance(out, list):
            self.outputs[n] = out
        elif out is not None:
            self.names[n] = out

    def proj(self, n: Node) -> str:
        outs = self.outputs.get(n.inputs[0]) if n.inputs else None
        if outs is None:
            raise ExportError(f"Proj %{n.name or '?'} reads a value that is not a tuple the export knows")
        return str(outs[n.attrs["num"]])

    def subgraph(self, label: str, body: Any, inputs: list[Any], results: Sequence[Value]) -> Any:
        """Build a subgraph: ``body()`` emits its nodes; ``results`` are its outputs."""
        saved = self.nodes
        self.nodes = []
        try:
            body()
            outs = []
            for k, v in enumerate(results):
                name = self.fresh(f"{label}_out{k}")
                self.add("Identity", [self.value(v)], [name])
                outs.append(value_info(name, _type(v), f"{label} output {k}", self.stack_dtypes.get(v)))
            return helper.make_graph(self.nodes, label, inputs, outs)
        finally:
            self.nodes = saved

    def if_(self, r: If) -> None:
        cond = self.value(r.cond)
        then = self.subgraph("then", lambda: self.seq(r.then), [], [m.then_value for m in r.outputs])
        orelse = self.subgraph("else", lambda: self.seq(r.orelse), [], [m.else_value for m in r.outputs])
        outs = [self.bind(m.name) for m in r.outputs]
        if not outs:  # ONNX If needs an output: a dummy one
            outs = [self.fresh("if_unused")]
            then = self.subgraph("then", lambda: self.seq(r.then), [], [Const(np.array(False))])
            orelse = self.subgraph("else", lambda: self.seq(r.orelse), [], [Const(np.array(False))])
        self.add("If", [cond], outs, then_branch=then, else_branch=orelse)

    def loop(self, r: Loop) -> None:
        inits = [self.value(c.init) for c in r.carried]
        # The test on the initial values, before the loop.
        for c, name in zip(r.carried, inits):
            self.names[c.var] = name
        for n in r.cond:
            self.node(n)
        first = self.value(r.test)
        iter_name = self.fresh("iter")
        cond_in = self.fresh("cond_in")
        formals = [helper.make_tensor_value_info(iter_name, onnx.TensorProto.INT64, []),
                   helper.make_tensor_value_info(cond_in, onnx.TensorProto.BOOL, [])]
        for c in r.carried:
            formals.append(_loose_info(self.bind(c.var), c.var.type, "a loop-carried value",
                                       self.stack_dtypes.get(c.var)))
        nexts: list[str] = []

        def body() -> None:
            self.seq(r.body)
            nexts.extend(self.value(c.next) for c in r.carried)
            for c, name in zip(r.carried, nexts):  # the test again, on the next values
                self.names[c.var] = name
            for n in r.cond:
                self.node(n)

        outs: list[Value] = []
        loop_body = self.subgraph("body", body, formals, outs)
        # The body's outputs: the condition, then the next carried values.
        saved = self.nodes
        self.nodes = list(loop_body.node)
        cond_out = self.fresh("cond_out")
        self.add("Identity", [self.value(r.test)], [cond_out])
        out_infos = [helper.make_tensor_value_info(cond_out, onnx.TensorProto.BOOL, [])]
        for c, name in zip(r.carried, nexts):
            o = self.fresh("next")
            self.add("Identity", [name], [o])
            out_infos.append(_loose_info(o, c.var.type, "a loop-carried value", self.stack_dtypes.get(c.var)))
        loop_body = helper.make_graph(self.nodes, "body", formals, out_infos)
        self.nodes = saved
        finals = [self.fresh(getattr(c.var, "hint", None) or "final") for c in r.carried]
        self.add("Loop", ["", first, *inits], finals, body=loop_body)
        by_var = dict(zip([c.var for c in r.carried], finals))
        for res in r.results:
            self.names[res.name] = by_var[res.var]


def _loose_info(name: str, t: Type, what: str, elem: str | None = None) -> Any:
    """Value info with the dtype and rank only: a carried value's dims may change (a
    stack: a sequence of ``elem`` tensors of any shapes; a sequence or an optional: its
    elements' dtype and rank)."""
    if isinstance(t, StackType) and elem is not None:
        return helper.make_tensor_sequence_value_info(name, NEXUS_TO_ONNX[elem], None)
    proto = type_proto(t, loose=True)
    if proto is None:
        raise ExportError(f"{what} has type {t}; ONNX export handles tensors, sequences, optionals and autodiff "
                          f"tapes only")
    return helper.make_value_info(name, proto)
