"""TensorFlow GraphDef import: ``from_tf(path, inputs=[...], outputs=[...])`` -> a Nexus graph.

No TensorFlow at run time: the GraphDef (binary ``.pb`` or text ``.pbtxt``) is parsed with
the protos ``tensorboard`` ships (:mod:`nexus.frontend.tf.proto`).  Only the nodes the
outputs need are imported.  Every TF tensor ``node:k`` is a variable of the shared SSA
builder (:class:`nexus.ir.cons.SSABuilder`), keyed by the body it lives in (the graph,
or one inlined function call), so values flow into blocks by ``get_value``.

v1 control flow (Switch/Merge/Enter/Exit/NextIteration/LoopCond) is read by
:mod:`nexus.frontend.tf.frames`, which gives every node the chain of loops and branches
it runs under; the nodes of one level are then emitted in dependency order, a while
loop as pre-header / header (the loop Merges become Phis, LoopCond ends it in a Cond) /
body (NextIteration values flow back) / exit, and the Switches of one cond as a Cond
with two arms whose Merges become the join's Phis (``emit_level``).  Switch, Enter,
Exit, NextIteration and Identity are not emitted: reading one reads its input, the
SSA builder finds the value on the way in.  v2 functional ``If``/``While`` (and their
``Stateless`` forms) inline the function library's bodies into arms and loops
(:mod:`nexus.frontend.tf.control`).  Op converters are in :mod:`nexus.frontend.tf.ops`.

Stateful TF resources that Nexus models as values (the ``StackV2`` stacks TF's gradient
graphs push to and pop from) are SSA variables of their own, assigned by each push and
pop, so loops carry them as Phis.  TensorArrays and TensorLists are stacked tensors
``[n, *element]``; where TF leaves the element shape unknown until the first write, a
first import pass learns it from the writes and a second one builds the graph.  A
TensorList whose writes differ in shape (or have shapes known only at run time) is a
sequence (``seq<...>``) instead.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np

from nexus.frontend.importing import BlockBuilder, ident
from nexus.frontend.tf.frames import IDENTITY_OPS, Frames, Tensor
from nexus.frontend.tf.ops import RULES
from nexus.frontend.tf.proto import (
    TfImportError,
    TfNode,
    function_nodes,
    graph_nodes,
    load_graphdef,
    nexus_dtype,
    parse_input,
    shape_dims,
    tensor_type,
)
from nexus.ir.cons import PhiTypeError, SSABuilder, SSAError
from nexus.ir.graph import Graph
from nexus.ir.node import Block, Node
from nexus.ir.opdef import OpTypeError
from nexus.ir.types import TensorType, Type

# Read through, never emitted: their value is their first input's (Switch: on the live side).
ALIAS_OPS = IDENTITY_OPS | {"Switch", "Enter", "Exit", "NextIteration", "LoopCond", "RefEnter", "RefExit",
                            "RefNextIteration", "RefSwitch", "RefIdentity"}
# Control-only nodes: they order and place other nodes; nothing to emit.
NO_OUTPUT_OPS = frozenset({"NoOp", "ControlTrigger"})
Key = tuple[Any, ...]


def from_tf(source: Any, inputs: Sequence[str] | None = None, outputs: Sequence[str] | None = None, *,
            name: str | None = None) -> Graph:
    """Import a TensorFlow GraphDef (a path to ``.pb``/``.pbtxt``, bytes, or a GraphDef).

    ``inputs`` and ``outputs`` name tensors (``"x:0"``, or ``"x"`` for output 0).
    Inputs default to the Placeholders in GraphDef order, outputs to output 0 of every
    node that nothing consumes (outside while loops and conds).  The graph takes the
    inputs positionally and returns the outputs in the order given.  Errors are one
    :class:`TfImportError` naming the node."""
    try:
        return _from_tf(source, inputs, outputs, name)
    except RecursionError:
        raise TfImportError("control flow or function calls nested too deeply to import") from None


def _from_tf(source: Any, inputs: Sequence[str] | None, outputs: Sequence[str] | None, name: str | None) -> Graph:
    gd, file = load_graphdef(source)
    nodes = graph_nodes(gd.node)
    library = {f.signature.name: f for f in gd.library.function}
    ins = _inputs(nodes, inputs)
    outs = _outputs(nodes, outputs)
    learned: dict[Key, tuple[int, ...]] = {}
    varying: dict[Key, TensorType] = {}
    gname = name or _graph_name(file)
    Importer(nodes, library, ins, outs, gname, learned, varying).check_supported()
    while True:
        # A pass that meets a list of unknown element shape learns it from the writes (a
        # write may need another list's shape first: then the next pass learns it).  Writes
        # of different shapes make the list a sequence; so do writes whose shape is known
        # only at run time, once nothing else is left to learn.
        before = (len(learned), len(varying))
        imp = Importer(nodes, library, ins, outs, gname, learned, varying)
        g = imp.run()
        if not imp.relearn:
            return g
        if (len(learned), len(varying)) == before:
            run_time = {k: t for k, t in imp.run_time_shapes.items() if k not in learned and k not in varying}
            if run_time:
                varying.update(run_time)
                continue
            # nothing more to learn: the final pass says which list
            return Importer(nodes, library, ins, outs, gname, learned, varying, final=True).run()


def _graph_name(file: str) -> str:
    return ident(file.rsplit(".", 1)[0] or "tf")



def _inputs(nodes: Mapping[str, TfNode], names: Sequence[str] | None) -> list[Tensor]:
    if names is None:
        return [(n.name, 0) for n in sorted(nodes.values(), key=lambda n: n.index) if n.op == "Placeholder"]
    out = []
    for s in names:
        t = parse_input(s)
        n = nodes.get(t[0])
        if n is None:
            raise TfImportError(f"input {s!r} names no node of the graph")
        if n.op not in ("Placeholder", "PlaceholderWithDefault") or t[1] != 0:
            raise TfImportError(f"input {s!r} must be output 0 of a Placeholder, not of {n.where()}")
        out.append(t)
    return out


def _outputs(nodes: Mapping[str, TfNode], names: Sequence[str] | None) -> list[Tensor]:
    if names is None:
        used = {s for n in nodes.values() for s, _ in n.inputs} | {c for n in nodes.values() for c in n.controls}
        outs = [(n.name, 0) for n in sorted(nodes.values(), key=lambda n: n.index)
                if n.name not in used and n.op not in NO_OUTPUT_OPS]
        try:  # not the ends inside loops or on one side of a cond (a v1 cond's unused pivot)
            fed = {(n.name, 0) for n in nodes.values() if n.op == "Placeholder"}
            fr = Frames(nodes, cone(nodes, [(n, 0) for n in nodes], fed), fed)
            outs = [t for t in outs if fr.tin(t) == ()] or outs
        except TfImportError:
            pass  # a malformed graph: the import proper reports it
        if not outs:
            raise TfImportError("the graph has no node that nothing consumes: name the outputs")
        return outs
    out = []
    for s in names:
        t = parse_input(s)
        if t[0] not in nodes:
            raise TfImportError(f"output {s!r} names no node of the graph")
        out.append(t)
    return out


def cone(nodes: Mapping[str, TfNode], roots: Sequence[Tensor], fed: set[Tensor]) -> set[str]:
    """The nodes the ``roots`` need (data and control inputs), stopping at fed tensors."""
    seen: set[str] = set()
    work = [r[0] for r in roots if r not in fed]
    while work:
        name = work.pop()
        if name in seen:
            continue
        n = nodes.get(name)
        if n is None:
            raise TfImportError(f"a node input names {name!r}, which is no node of the graph")
        seen.add(name)
        for s, k in n.inputs:
            if (s, k) not in fed:
                if s not in nodes:
                    raise TfImportError(f"{n.where()}: input {s}:{k} names nothing (no node {s!r} in the graph)")
                work.append(s)
        for c in n.controls:
            if c not in nodes:
                raise TfImportError(f"{n.where()}: control input ^{c} names nothing (no node {c!r} in the graph)")
            work.append(c)
    return seen


class _Builder(SSABuilder[Key]):
    """The shared SSA builder, naming each Phi after the TF node whose value it merges."""

    def new_phi(self, var: Key, block: Block, t: Type) -> Node:
        name = ident(var[1]) if len(var) == 3 and isinstance(var[1], str) and var[1] != "resource" else None
        return self.g.add("Phi", [], block, type=t, name=name)


class Body:
    """One body being imported: the graph, or one inlined call of a library function."""

    def __init__(self, scope: int, nodes: Mapping[str, TfNode], fed: dict[Tensor, Node], roots: Sequence[Tensor],
                 label: str):
        self.scope, self.nodes, self.fed, self.label = scope, nodes, fed, label
        self.cone = cone(nodes, roots, set(fed))
        self.frames = Frames(nodes, self.cone, set(fed))
        self.users: dict[str, list[str]] = {}
        for name in self.cone:
            for s, _ in nodes[name].inputs:
                self.users.setdefault(s, []).append(name)


class Importer(BlockBuilder):
    """One import pass: the graph being built, the SSA builder over TF tensors."""

    def __init__(self, nodes: Mapping[str, TfNode], library: Mapping[str, Any], inputs: list[Tensor],
                 outputs: list[Tensor], name: str, learned: dict[Key, tuple[int, ...]],
                 varying: dict[Key, TensorType], final: bool = False):
        self.nodes, self.library, self.inputs, self.outputs = nodes, library, inputs, outputs
        self.learned, self.final = learned, final
        self.varying = varying  # lists whose items differ in shape (sequences) -> their element type
        self.run_time_shapes: dict[Key, TensorType] = {}  # lists written items of shapes known at run time
        self.relearn = False  # this pass met an element shape it had to learn
        self.markers: dict[Node, Key] = {}  # placeholder lists of unknown element shape -> key
        self.stack_types: dict[Key, Type] = {}
        self._ids = itertools.count()
        self._functions: dict[str, tuple[dict[str, TfNode], list[Tensor]]] = {}
        self.calling: list[str] = []  # the library functions being inlined, outermost first
        self.emitted: dict[tuple[int, str], int] = {}  # (body, node) -> its number of outputs
        types = [self.placeholder_type(nodes[t[0]]) for t in inputs]
        self.g = Graph(name, types, [ident(t[0]) for t in inputs])
        self.ssa: SSABuilder[Key] = _Builder(self.g)
        self.block: Block = self.g.start_block
        self.body: Body | None = None
        self.node: TfNode | None = None

    # --- the whole graph ----------------------------------------------------------------------
    def run(self) -> Graph:
        fed = dict(zip(self.inputs, self.g.args))
        body = Body(next(self._ids), self.nodes, fed, self.outputs, "graph")
        outer, self.body = self.body, body
        self.emit_all(body)
        outs = []
        for t in self.outputs:
            if t not in fed and body.frames.tin(t) != ():
                raise TfImportError(f"output {t[0]}:{t[1]} is inside a while loop or one side of a Switch; "
                                    f"name a value after the loop's Exit or the cond's Merge")
            outs.append(self.read(t))
        ret = self.g.add("Return", outs, self.block)
        self.g.end_block.append_input(ret)
        self.body = outer
        problems = self.ssa.finish()
        if problems:
            raise TfImportError(f"{problems[0].var} has no value on some path to {problems[0].user}")
        return self.g

    def emit_all(self, body: Body) -> None:
        from nexus.frontend.tf.control import emit_level

        emit_level(self, (), sorted(body.cone, key=lambda n: body.nodes[n].index))

    def check_supported(self) -> None:
        """One error listing every op type without an import rule (the graph's cone and
        the library functions it calls)."""
        converters = RULES.table

        missing: dict[str, str] = {}
        seen_fn: set[str] = set()

        def scan(nodes: Mapping[str, TfNode], names: Any, where: str) -> None:
            for name in sorted(names, key=lambda x: nodes[x].index):
                n = nodes[name]
                if n.op not in converters and n.op not in ALIAS_OPS and n.op not in NO_OUTPUT_OPS \
                        and n.op not in ("Merge", "_Arg", "Placeholder"):
                    missing.setdefault(n.op, f"{where}{n.name!r}")
                for key in ("then_branch", "else_branch", "cond", "body"):
                    a = n.attr.get(key)
                    if a is not None and a.WhichOneof("value") == "func" and a.func.name not in seen_fn:
                        seen_fn.add(a.func.name)
                        fn = self.library.get(a.func.name)
                        if fn is not None:
                            fnodes, _ = self.function(a.func.name)
                            scan(fnodes, list(fnodes), f"function {a.func.name!r}: ")

        scan(self.nodes, cone(self.nodes, self.outputs, set(self.inputs)), "")
        if missing:
            listed = "; ".join(f"{op} (e.g. {at})" for op, at in sorted(missing.items()))
            raise TfImportError(f"{len(missing)} TensorFlow op type{'s' if len(missing) > 1 else ''} "
                                f"without a Nexus import rule: {listed}")

    def function(self, fname: str) -> tuple[dict[str, TfNode], list[Tensor]]:
        got = self._functions.get(fname)
        if got is None:
            fn = self.library.get(fname)
            if fn is None:
                raise TfImportError(f"function {fname!r} is not in the GraphDef's library")
            got = self._functions[fname] = function_nodes(fn)
        return got

    def call(self, fname: str, formals: Sequence[Node]) -> list[Node]:
        """Inline library function ``fname`` at the current block (which may change)."""
        if fname in self.calling:
            raise TfImportError(f"function {fname!r} calls itself (through {' -> '.join(self.calling)})")
        nodes, outs = self.function(fname)
        args = sorted((n for n in nodes.values() if n.op == "_Arg"), key=lambda n: n.extra["arg"])
        if len(args) != len(formals):
            raise TfImportError(f"function {fname!r} takes {len(args)} arguments, the call gives {len(formals)}")
        fed = {(a.name, 0): v for a, v in zip(args, formals)}
        body = Body(next(self._ids), nodes, fed, outs, f"function {fname!r}")
        outer, self.body = self.body, body
        node = self.node
        self.calling.append(fname)
        try:
            self.emit_all(body)
            return [self.read(t) for t in outs]
        finally:
            self.body, self.node = outer, node
            self.calling.pop()

    # --- one node -----------------------------------------------------------------------------
    def emit_node(self, n: TfNode) -> None:
        """Import node ``n`` at the current block (errors name it)."""
        if n.op in ALIAS_OPS or n.op in NO_OUTPUT_OPS or n.op in ("Merge", "_Arg"):
            return
        converters = RULES.table

        with self.at(n):
            outs = converters[n.op](self, n)
            assert self.body is not None
            self.emitted[(self.body.scope, n.name)] = len(outs)
            for k, v in enumerate(outs):
                if v is not None:
                    self.define((n.name, k), v)

    @contextmanager
    def at(self, n: TfNode) -> Iterator[None]:
        """Errors raised inside name node ``n`` (and the function it is in)."""
        outer, self.node = self.node, n
        body = self.body
        where = n.where() if body is None or body.label == "graph" else f"{body.label}: {n.where()}"
        try:
            yield
        except TfImportError as e:
            if getattr(e, "located", False):
                raise
            err = TfImportError(f"{where}: {e}")
            err.located = True  # type: ignore[attr-defined]
            raise err from None
        except (OpTypeError, ValueError, TypeError, KeyError, IndexError, AssertionError) as e:
            msg = e.args[0] if isinstance(e, KeyError) and e.args else e
            if isinstance(e, PhiTypeError) and isinstance(e.var, tuple) and len(e.var) == 3:
                msg = f"{e.var[1]}:{e.var[2]} has {msg} (its values on different paths must have one type)"
            err = TfImportError(f"{where}: {msg}")
            err.located = True  # type: ignore[attr-defined]
            raise err from None
        finally:
            self.node = outer

    # --- values -------------------------------------------------------------------------------
    def key(self, t: Tensor) -> Key:
        assert self.body is not None
        return (self.body.scope, t[0], t[1])

    def define(self, t: Tensor, value: Node, block: Block | None = None) -> None:
        self.ssa.set_value(self.key(t), block or self.block, value)

    def read(self, t: Tensor, block: Block | None = None) -> Node:
        """The value of tensor ``t`` at the end of ``block`` (the current one)."""
        body = self.body
        assert body is not None
        while True:
            v = body.fed.get(t)
            if v is not None:
                return v
            n = body.nodes.get(t[0])
            if n is None:
                raise TfImportError(f"input {t[0]}:{t[1]} names nothing")
            if (n.op in ALIAS_OPS and n.inputs) or (n.op == "Merge" and len(n.inputs) == 1):
                t = n.inputs[0]
                continue
            break
        emitted = self.emitted.get((body.scope, t[0]))
        if emitted is not None and t[1] >= emitted:
            raise TfImportError(f"input {t[0]}:{t[1]}: {n.where()} has {emitted} output{'s' * (emitted != 1)}")
        try:
            value = self.ssa.get_value(self.key(t), block or self.block)
        except SSAError:
            value = None
        if value is None:
            raise TfImportError(f"tensor {t[0]}:{t[1]} ({n.op}) has no value here")
        return value

    def arg(self, n: TfNode, i: int) -> Node:
        if i >= len(n.inputs):
            raise TfImportError(f"needs at least {i + 1} inputs, has {len(n.inputs)}")
        return self.read(n.inputs[i])

    def args(self, n: TfNode) -> list[Node]:
        return [self.read(t) for t in n.inputs]

    def origin(self, t: Tensor) -> TfNode:
        """The node a resource handle comes from, through Enter, Identity and Switch."""
        body = self.body
        assert body is not None
        n = body.nodes[t[0]]
        while n.op in ALIAS_OPS and n.inputs:
            n = body.nodes[n.inputs[0][0]]
        return n

    def res_key(self, n: TfNode) -> Key:
        assert self.body is not None
        return (self.body.scope, "resource", n.name)

    def list_key(self, n: TfNode) -> Key:
        """Where a list's learned element shape is kept: the node in its graph or function."""
        assert self.body is not None
        return (self.body.label, n.name)

    # --- building -----------------------------------------------------------------------------
    def emit(self, op: str, inputs: Sequence[Node], attrs: Mapping[str, Any] | None = None, *,
             type: Type | None = None, name: str | None = None) -> Node:
        nm = name if name is not None else (ident(self.node.name) if self.node is not None else None)
        return self.g.add(op, list(inputs), self.block, attrs, type=type, name=nm or None)

    def const(self, value: Any, dtype: Any = None) -> Node:
        arr = np.asarray(value, dtype=dtype)
        return self.g.add("Constant", [], self.block, {"value": np.array(arr, order="C")})

    def placeholder_type(self, n: TfNode) -> Type:
        what = f"input {n.name!r}"
        dt = n.attr.get("dtype")
        if dt is None:
            raise TfImportError(f"{what} has no dtype")
        shape = n.attr.get("shape")
        dims = shape_dims(shape.shape) if shape is not None else None
        return tensor_type(nexus_dtype(dt.type, what), dims)
