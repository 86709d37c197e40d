"""What every importer (ONNX, TensorFlow, PyTorch) builds graphs with: value names, the
op-converter registry, and the blocks and branches of structured control flow over the
shared SSA builder (:mod:`nexus.ir.cons`)."""

from __future__ import annotations

import importlib
import os
import re
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from typing import Any, Generic, TypeVar

import numpy as np

from nexus.ir.cons import SSABuilder
from nexus.ir.graph import Graph
from nexus.ir.graph import tensor_type as graph_tensor_type
from nexus.ir.node import Block, Node
from nexus.ir.types import TensorType, numpy_dtype

F = TypeVar("F", bound=Callable[..., Any])


def ident(name: str) -> str:
    """A foreign name as a Nexus value name (the text form's identifiers)."""
    s = re.sub(r"[^A-Za-z0-9_.]", "_", name)
    return s if s and not s[0].isdigit() else "v" + s


def tensor_type(v: Node) -> TensorType:
    """The type of ``v``, a tensor (importers build no other values)."""
    return graph_tensor_type(v.type, f"{v!r}")


def known_rank(v: Node, error: Callable[[str], Exception]) -> int:
    """The rank of ``v``; the importer's ``error`` when it is not known."""
    shape = tensor_type(v).shape
    if shape is None:
        raise error("the input's rank must be known")
    return len(shape)


class Registry(Generic[F]):
    """Op type -> its converter, the one way every importer keeps its rules.

    The rule modules named at construction register with ``@registry.converts("Add",
    "Sub")`` or ``registry.add(op, fn)``; they are imported on the first read of
    ``table``, so they may import the module that holds the registry.  ``required``: op
    types that must have a converter once the modules are loaded."""

    def __init__(self, *modules: str, required: Iterable[str] = ()) -> None:
        self._table: dict[str, F] = {}
        self._modules = modules
        self._required = frozenset(required)
        self._loaded = not modules

    def converts(self, *ops: str) -> Callable[[F], F]:
        def add(fn: F) -> F:
            for op in ops:
                self.add(op, fn)
            return fn

        return add

    def add(self, op: str, fn: F) -> None:
        assert op not in self._table, op
        self._table[op] = fn

    @property
    def table(self) -> Mapping[str, F]:
        if not self._loaded:
            self._loaded = True
            for module in self._modules:
                importlib.import_module(module)
            missing = self._required - set(self._table)
            assert not missing, f"no converter for {sorted(missing)}"
        return self._table


class BlockBuilder:
    """Blocks and branches for an importer that has a graph ``g``, a current ``block``, an
    SSA builder ``ssa`` and an ``emit``/``const`` of its own (which name the nodes)."""

    g: Graph
    ssa: SSABuilder[Any]
    block: Block
    emit: Callable[..., Node]
    const: Callable[..., Node]

    def new_block(self, label: str, preds: Sequence[Node], seal: bool = True) -> Block:
        b = self.g.new_block(label, preds)
        if seal:
            self.ssa.seal(b)
        return b

    def branch(self, cond: Node) -> tuple[Node, Node]:
        """End the current block in a Cond on ``cond``: (false exit, true exit)."""
        c = self.emit("Cond", [self.scalar_bool(cond)], name="")
        return self.emit("Proj", [c], {"num": 0}, name=""), self.emit("Proj", [c], {"num": 1}, name="")

    def jump(self) -> Node:
        return self.emit("Jmp", [], name="")

    def scalar_bool(self, v: Node) -> Node:
        """``v`` as the bool scalar a Cond takes (a cast and a reshape where needed)."""
        t = v.type
        assert isinstance(t, TensorType)
        if t.dtype != "bool":
            v = self.emit("Cast", [v], {"to": "bool"}, name="")
        if t.shape != ():
            v = self.emit("Reshape", [v, self.const(np.array([], np.int64))], name="")
        return v

    # --- structured regions: what If/cond and While/while_loop become in every importer ------------
    def if_else(self, cond: Node, arm: Callable[[str], Sequence[Node]], scope: tuple[Hashable, ...],
                mismatch: Callable[[int, int], Exception]) -> list[Node | None]:
        """End the current block in a Cond on ``cond``; ``arm("then")`` / ``arm("else")`` import
        each side in a block of its own; both jump to a join whose values (Phis where the sides
        differ) are returned.  ``scope`` prefixes the SSA keys of the results (unique per
        region); ``mismatch(n_then, n_else)`` is the error when the sides' arities differ."""
        on_false, on_true = self.branch(cond)
        arms = []
        for label, edge in (("then", on_true), ("else", on_false)):
            self.block = self.new_block(label, [edge])
            outs = list(arm(label))
            arms.append((self.block, outs, self.jump()))
        (then_end, then_outs, j1), (else_end, else_outs, j2) = arms
        if len(then_outs) != len(else_outs):
            raise mismatch(len(then_outs), len(else_outs))
        join = self.new_block("join", [j1, j2])
        keys = [(*scope, k) for k in range(len(then_outs))]
        for key, a, b in zip(keys, then_outs, else_outs):
            self.ssa.set_value(key, then_end, a)
            self.ssa.set_value(key, else_end, b)
        self.block = join
        return [self.ssa.get_value(key, join) for key in keys]

    def while_loop(self, init: Sequence[Node], test: Callable[[list[Node]], Node],
                   body: Callable[[list[Node]], Sequence[Node]], scope: tuple[Hashable, ...],
                   mismatch: Callable[[int, int], Exception]) -> list[Node | None]:
        """A loop carrying ``init``: the header's Phis are the carried values, ``test(values)``
        (imported in the header, which it may extend) decides whether ``body(values)`` runs
        and gives the next values; returns the values at the exit.  ``mismatch(n_body,
        n_init)`` is the error when the body returns another number of values."""
        keys = [(*scope, k) for k in range(len(init))]
        for key, v in zip(keys, init):
            self.ssa.set_value(key, self.block, v)
        header = self.new_block("loop", [self.jump()], seal=False)
        self.ssa.declare_assigned(header, keys)
        self.block = header
        on_false, on_true = self.branch(test([self.ssa.get_value(k, header) for k in keys]))  # type: ignore[misc]
        exit_block = self.new_block("loop_exit", [on_false])
        self.block = self.new_block("loop_body", [on_true])
        outs = list(body([self.ssa.get_value(k, self.block) for k in keys]))  # type: ignore[misc]
        if len(outs) != len(keys):
            raise mismatch(len(outs), len(keys))
        for key, v in zip(keys, outs):
            self.ssa.set_value(key, self.block, v)
        header.append_input(self.jump())
        self.ssa.seal(header)
        self.block = exit_block
        return [self.ssa.get_value(k, exit_block) for k in keys]


BodyFn = Callable[[Node, Node, list[Node]], tuple["Node | None", list[Node], list[Node]]]


def build_loop(imp: BlockBuilder, uid: Hashable, trip: Node | None, cond0: Node | None, carried: Sequence[Node],
               n_scans: int, body: BodyFn, error: type[Exception] = ValueError) -> tuple[list[Node], list[Node]]:
    """A loop of ``trip`` iterations (None: until the condition is false), as ONNX's
    ``Loop`` and ``Scan`` and the recurrent ops import (see :mod:`nexus.frontend.onnx.control`)::

        pre:    i := 0; cond := cond0; v := v_init; acc := empty     (acc: one per scan output)
        header: test := i < M and cond                               (Phis of i, cond, v, acc)
        body:   cond_out, v_out, s := body(i, cond, v); acc := Concat(acc, s[None]); i := i + 1

    ``body(i, cond, v)`` imports one iteration and returns ``(cond_out or None, v_out, scan
    elements)``; ``uid`` makes the SSA keys unique; ``error`` is the class of the errors.
    Returns the final carried values and the stacked scan outputs."""
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
        m = imp.emit("Cast", [trip], {"to": "i64"}, name="") if tensor_type(trip).dtype != "i64" else trip
        if tensor_type(m).shape != ():
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
        raise error(f"the loop body returns {len(v_out)} carried values, the loop has {len(carried)}")
    if len(scans) != n_scans:
        raise error(f"the loop body returns {len(scans)} scan outputs, expected {n_scans}")
    end = imp.block
    inits = [_empty_stack(imp, s, error) for s in scans]
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


def _empty_stack(imp: BlockBuilder, s: Node, error: type[Exception]) -> tuple[list[Node], bool]:
    """Nodes making an empty stack for scan element ``s`` ([0, *shape] when the shape is
    static, else [0, 1, ..., 1], expanded in the body) and whether it is static."""
    t = tensor_type(s)
    if t.shape is None:
        raise error("a scan output needs a known rank")
    static = all(isinstance(d, int) for d in t.shape)
    shape = (0, *t.shape) if static else (0,) + (1,) * len(t.shape)
    return [imp.const(np.zeros(shape, numpy_dtype(t.dtype)))], static




def read_source(source: Any, what: str, error: type[Exception]) -> tuple[bytes, str | None]:
    """The bytes of a model given in memory or as a path, and the path (None in memory);
    a file that cannot be read raises ``error`` naming ``what`` and the path."""
    if isinstance(source, (bytes, bytearray)):
        return bytes(source), None
    path = os.fspath(source)
    try:
        with open(path, "rb") as f:
            return f.read(), path
    except OSError as e:
        raise error(f"cannot read {what} {path!r}: {e.strerror}") from None
