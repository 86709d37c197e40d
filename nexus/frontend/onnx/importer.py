"""ONNX import: ``from_onnx(path_or_model)`` -> a Nexus :class:`Graph`.

ONNX nests control flow as subgraph attributes of ``If``, ``Loop`` and ``Scan``; Nexus has
one graph of blocks.  The importer walks the ONNX graph in order and builds SSA on the fly
with the shared builder (:class:`nexus.ir.cons.SSABuilder`): every ONNX value name is a
variable, keyed by the scope (graph or subgraph) that defines it, so a subgraph reads an
outer name through ``get_value`` from inside its blocks, and a loop body's outer reads
need no Phi (``declare_assigned``).  ``If`` becomes a Cond and two arms joining in a block
whose Phis are the outputs; ``Loop`` and ``Scan`` become a header block testing the trip
count and condition, a body, and an exit, with the carried values as header Phis and the
scan outputs accumulated by ``Concat``.

The graph takes the model's inputs that are not initializers, positionally in graph
order, and returns its outputs in graph order.  ``dim_param`` names become Nexus symbols,
unnamed dims fresh ones; initializers become constants.  Every error is an
:class:`OnnxImportError` naming the node.  The op table is in
:mod:`nexus.frontend.onnx.ops`.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from nexus.frontend.importing import BlockBuilder, ident
from nexus.frontend.onnx.data import OnnxImportError, load_model, nexus_dtype, tensor_to_array
from nexus.ir.cons import SSABuilder
from nexus.ir.graph import Graph
from nexus.ir.node import Block, Node, SourceLoc
from nexus.ir.opdef import OpTypeError
from nexus.ir.static import static_value
from nexus.ir.types import Dim, OptionalType, SequenceType, TensorType, Type, fresh_dim, sym

Key = tuple[int, str]  # (scope id, ONNX value name)


class NeedsConstant(OnnxImportError):
    """An input that Nexus takes as an attribute (Unsqueeze's axes, say) is computed at run
    time.  ``name`` is the ONNX value; a backend may specialise on it."""

    def __init__(self, msg: str, name: str):
        super().__init__(msg)
        self.name = name


def from_onnx(source: Any, *, name: str | None = None, constants: Mapping[str, np.ndarray] | None = None) -> Graph:
    """Import an ONNX model (a path, bytes or a ModelProto) as a Nexus graph.

    ``constants`` binds some graph inputs to known values (a backend specialising on
    them); those inputs are then not arguments."""
    model, base_dir = load_model(source)
    return Importer(model, base_dir, name=name, constants=constants).run()


class _Scope:
    """The names one graph (or subgraph) has defined so far."""

    __slots__ = ("id", "names", "label")

    def __init__(self, sid: int, label: str):
        self.id, self.names, self.label = sid, set[str](), label


class Importer(BlockBuilder):
    """One import: the graph being built, the SSA builder over ONNX names, the scopes."""

    def __init__(self, model: Any, base_dir: str | None, *, name: str | None = None,
                 constants: Mapping[str, np.ndarray] | None = None):
        self.model = model
        self.base_dir = base_dir
        self.constants = dict(constants or {})
        self.opset = _opset(model)
        self.file = name or model.graph.name or "model.onnx"
        self.scopes: list[_Scope] = []
        self._ids = itertools.count()
        self.node: Any = None  # the ONNX node being imported (for errors)
        self.where = ""
        gp = model.graph
        inits = {t.name for t in gp.initializer} | {t.name for t in gp.sparse_initializer}
        self.inputs = [vi for vi in gp.input if vi.name not in inits and vi.name not in self.constants]
        types = [self.value_type(vi, f"graph input {vi.name!r}") for vi in self.inputs]
        self.g = Graph(ident(gp.name or "onnx"), types, [ident(vi.name) for vi in self.inputs])
        self.ssa: SSABuilder[Key] = SSABuilder(self.g)
        self.block: Block = self.g.start_block

    # --- the whole model ---------------------------------------------------------------------
    def run(self) -> Graph:
        gp = self.model.graph
        scope = self.push("graph")
        for vi, arg in zip(self.inputs, self.g.args):
            self.define(vi.name, arg)
        for name, value in self.constants.items():
            self.define(name, self.const(np.asarray(value)))
        self.initializers(gp)
        self.nodes(gp)
        outs = [self.read_output(vi.name, "graph output") for vi in gp.output]
        ret = self.g.add("Return", outs, self.block)
        self.g.end_block.append_input(ret)
        self.pop(scope)
        self.ssa.finish()
        return self.g

    def initializers(self, gp: Any) -> None:
        for t in gp.initializer:
            self.define(t.name, self.const(tensor_to_array(t, self.base_dir, f"initializer {t.name!r}")))
        for sp in gp.sparse_initializer:
            from onnx import numpy_helper

            dense = numpy_helper.to_array(sp.values)
            arr = np.zeros(tuple(sp.dims), dense.dtype)
            idx = numpy_helper.to_array(sp.indices)
            if idx.ndim == 1:
                arr.reshape(-1)[idx] = dense
            else:
                arr[tuple(idx.T)] = dense
            self.define(sp.values.name, self.const(arr))

    def nodes(self, gp: Any) -> None:
        from nexus.frontend.onnx.ops import convert_node

        for i, nd in enumerate(gp.node):
            outer, self.node = self.node, nd
            where = self.where
            self.where = f"{where}node {i} ({nd.op_type} {nd.name!r})" if nd.name else f"{where}node {i} ({nd.op_type})"
            try:
                convert_node(self, nd)
            except OnnxImportError as e:
                if getattr(e, "located", False):
                    raise
                err = type(e)(f"{self.where}: {e}", *([e.name] if isinstance(e, NeedsConstant) else []))
                err.located = True  # type: ignore[attr-defined]
                raise err from None
            except (OpTypeError, ValueError, TypeError, KeyError, IndexError, AssertionError) as e:
                msg = e.args[0] if isinstance(e, KeyError) and e.args else e
                err = OnnxImportError(f"{self.where}: {msg}")
                err.located = True  # type: ignore[attr-defined]
                raise err from None
            finally:
                self.node, self.where = outer, where

    # --- scopes and names ----------------------------------------------------------------
    def push(self, label: str) -> _Scope:
        s = _Scope(next(self._ids), label)
        self.scopes.append(s)
        return s

    def pop(self, scope: _Scope) -> None:
        assert self.scopes[-1] is scope
        self.scopes.pop()

    def define(self, name: str, value: Node) -> None:
        """Bind ONNX value ``name`` in the innermost scope, in the current block."""
        if not name:
            return
        scope = self.scopes[-1]
        scope.names.add(name)
        self.ssa.set_value((scope.id, name), self.block, value)

    def read(self, name: str) -> Node:
        """The value of ONNX name ``name`` here, looked up from the innermost scope out."""
        for scope in reversed(self.scopes):
            if name in scope.names:
                value = self.ssa.get_value((scope.id, name), self.block)
                if value is None:
                    raise OnnxImportError(f"{name!r} has no value here")
                return value
        raise OnnxImportError(f"input {name!r} names nothing defined before this node "
                              f"(not a graph input, an initializer or an earlier node's output: "
                              f"an unknown name, a cycle, or a name defined later)")

    def read_output(self, name: str, what: str) -> Node:
        try:
            return self.read(name)
        except OnnxImportError:
            raise OnnxImportError(f"{self.where + ': ' if self.where else ''}{what} {name!r} is not defined "
                                  f"by any node, input or initializer") from None

    # --- building ----------------------------------------------------------------------------
    def loc(self) -> SourceLoc | None:
        return SourceLoc(self.file, 0, 0) if self.node is None else None

    def emit(self, op: str, inputs: Sequence[Node], attrs: Mapping[str, Any] | None = None, *,
             type: Type | None = None, name: str | None = None) -> Node:
        nd = self.node
        nm = name if name is not None else (ident(nd.output[0]) if nd is not None and nd.output
                                             and nd.output[0] else None)
        if attrs:  # None stands for "the op's default" (an absent ONNX attribute)
            attrs = {k: v for k, v in attrs.items() if v is not None}
        return self.g.add(op, list(inputs), self.block, attrs, type=type, name=nm or None)

    def const(self, value: Any, dtype: Any = None) -> Node:
        arr = np.asarray(value, dtype=dtype)
        if arr.dtype == np.float64 and dtype is None and not isinstance(value, np.ndarray):
            arr = arr.astype(np.float32)
        return self.g.add("Constant", [], self.block, {"value": np.array(arr, order="C")})

    def value_of(self, node: Node | None) -> np.ndarray | None:
        """The value of ``node`` if it is known at import time: a constant, or a small pure
        computation over constants and static shapes (``Range(0, Size(Shape(x)))`` as the
        axes of a ReduceMean, say), evaluated with the ops' reference kernels.  The graph
        is left as it is; only the importer's decisions use the value."""
        return None if node is None else static_value(node)

    def need_value(self, node: Node | None, what: str) -> np.ndarray:
        """The build-time value of input ``node``, which Nexus needs as an attribute."""
        v = self.value_of(node)
        if v is None:
            name = _input_name(self.node, node, self)
            raise NeedsConstant(f"{what} must be known when the model is imported (a constant or initializer); "
                                f"{name!r} is computed at run time", name)
        return v

    def value_type(self, vi: Any, what: str) -> Type:
        """The Nexus type of an ONNX ValueInfo: dim_param -> a symbol, unknown -> fresh."""
        return self.type_proto(vi.type, what)

    def type_proto(self, tp: Any, what: str) -> Type:
        """The Nexus type of an ONNX TypeProto: a tensor, a sequence of tensors (its
        length unknown), or an optional of either."""
        kind = tp.WhichOneof("value")
        if kind == "sequence_type":
            elem = self.type_proto(tp.sequence_type.elem_type, f"{what}, its elements")
            if not isinstance(elem, TensorType):
                raise OnnxImportError(f"{what}: sequences of {elem} are not supported (only of tensors)")
            return SequenceType(elem)
        if kind == "optional_type":
            inner = self.type_proto(tp.optional_type.elem_type, f"{what}, its value")
            if not isinstance(inner, (TensorType, SequenceType)):
                raise OnnxImportError(f"{what}: optionals of {inner} are not supported")
            return OptionalType(inner)
        if kind != "tensor_type":
            raise OnnxImportError(f"{what}: ONNX {kind or 'untyped'} values are not supported "
                                  f"(tensors, sequences of tensors and optionals are)")
        t = tp.tensor_type
        dtype = nexus_dtype(t.elem_type, what)
        if not t.HasField("shape"):
            return TensorType(dtype, None)
        dims: list[Dim] = []
        for d in t.shape.dim:
            if d.HasField("dim_value"):
                dims.append(int(d.dim_value))
            elif d.HasField("dim_param") and d.dim_param:
                dims.append(sym(ident(d.dim_param)))
            else:
                dims.append(fresh_dim())
        return TensorType(dtype, tuple(dims))

    # --- control flow ------------------------------------------------------------------------
    def subgraph(self, gp: Any, label: str, formals: Sequence[Node | None]) -> list[Node]:
        """Import subgraph ``gp`` in the current block (which may change: nested control
        flow), its inputs bound to ``formals``; returns its outputs' values."""
        if len(formals) != len(gp.input):
            raise OnnxImportError(f"{label} takes {len(gp.input)} inputs, the op gives it {len(formals)}")
        scope = self.push(label)
        for vi, v in zip(gp.input, formals):
            if v is not None:
                self.define(vi.name, v)
        where = self.where
        self.where = f"{where} in {label}: "
        try:
            self.initializers(gp)
            self.nodes(gp)
            outs = [self.read_output(vi.name, f"{label} output") for vi in gp.output]
        finally:
            self.where = where
        self.pop(scope)
        return outs


def _opset(model: Any) -> int:
    for imp in model.opset_import:
        if imp.domain in ("", "ai.onnx"):
            return int(imp.version)
    return 1



def _input_name(nd: Any, node: Node | None, imp: Importer) -> str:
    if nd is None or node is None:
        return "?"
    for n in nd.input:
        if n:
            try:
                if imp.read(n) is node:
                    return str(n)
            except OnnxImportError:
                continue
    return node.name or "?"
