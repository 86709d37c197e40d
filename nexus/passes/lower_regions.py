"""Lowering a region tree (:mod:`nexus.passes.regions`) back to a CFG.

``lower_regions(tree)`` builds a fresh :class:`Graph` through the IR API: a Seq's data
nodes go into the current block; an If becomes a Cond, one block per arm and a join
block whose Phis are its outputs; a Loop becomes a header block (Phis for the carried
values, then ``cond``, then a Cond on ``test``), the body's blocks ending in the back
edge, and an exit block where the results are the header's Phis.  A region's scope is
then exactly what dominates it, so the graph verifies.

Immediates become Constants where they are read (``default``: zeros of the type, with 0
for symbolic dims; for a stack, an empty stack).  An ordering edge (``deps``) is kept when
its target is in scope and dropped otherwise: the tree's order already runs the target
first (it was in a loop that has finished).
"""

from __future__ import annotations

from collections import ChainMap

import numpy as np

from nexus.ir.graph import Graph
from nexus.ir.node import Block, Node
from nexus.ir.types import StackType, TensorType, Type, numpy_dtype
from nexus.passes.regions import Bind, Const, Default, If, Loop, Name, RegionTree, Seq, Value, Var


class LoweringError(ValueError):
    """A region tree that does not describe a graph (a name read outside its scope)."""


def lower_regions(tree: RegionTree, name: str | None = None) -> Graph:
    """A new graph that computes what ``tree`` describes (named like the tree's graph
    unless ``name`` is given)."""
    return _Lowerer(tree, name).run()


def default_value(t: Type) -> np.ndarray:
    """Zeros standing for a value nobody reads; symbolic dims become 0."""
    if not isinstance(t, TensorType):
        raise LoweringError(f"no stand-in value for type {t}")
    shape = tuple(d if isinstance(d, int) else 0 for d in t.shape or ())
    return np.zeros(shape, dtype=numpy_dtype(t.dtype))


def _label(v: Name) -> str | None:
    return v.hint if isinstance(v, Var) else v.name


class _Lowerer:
    def __init__(self, tree: RegionTree, name: str | None):
        self.tree = tree
        old = tree.graph
        self.g = Graph(name or old.name, old.arg_types, [a.name for a in old.args])
        self.scope: ChainMap[Name, Node] = ChainMap(dict(zip(old.args, self.g.args)))
        self.block: Block = self.g.start_block
        self.immediates: dict[tuple[Block, object], Node] = {}

    def run(self) -> Graph:
        self.seq(self.tree.body)
        ret = self.g.add("Return", [self.value(v) for v in self.tree.results], self.block)
        self.g.end_block.append_input(ret)
        self.g.touch()
        return self.g

    # --- values -----------------------------------------------------------------------------
    def value(self, v: Value) -> Node:
        """The node holding ``v`` here (immediates are materialised in the current block)."""
        if isinstance(v, (Const, Default)):
            return self.immediate(v)
        found = self.scope.get(v)
        if found is None:
            what = f"%{_label(v)}" + (f" ({v.op.name} in ^{v.block.name})" if isinstance(v, Node) and v.block else "")
            raise LoweringError(f"graph @{self.tree.graph.name}: {what} is read where no region in scope defines it")
        return found

    def immediate(self, v: Const | Default) -> Node:
        """A Constant (or empty stack) for ``v`` in the current block, one per value and
        block (the flags' true and false are read by many yields)."""
        key = (self.block, id(v) if isinstance(v, Const) else str(v.type))
        node = self.immediates.get(key)
        if node is None:
            if isinstance(v, Const):
                node = self.g.add("Constant", [], self.block, {"value": v.value})
            elif isinstance(v.type, StackType):
                node = self.g.add("StackNew", [], self.block)
            else:
                node = self.g.add("Constant", [], self.block, {"value": default_value(v.type)})
            self.immediates[key] = node
        return node

    # --- items ------------------------------------------------------------------------------
    def seq(self, seq: Seq) -> None:
        for item in seq.items:
            if isinstance(item, If):
                self.if_(item)
            elif isinstance(item, Loop):
                self.loop(item)
            elif isinstance(item, Bind):
                self.scope[item.target] = self.value(item.value)
            else:
                self.node(item)

    def node(self, n: Node) -> None:
        inputs = [self.value(v) for v in n.inputs]
        deps = [d for d in (self.scope.get(d) for d in n.deps) if d is not None]
        self.scope[n] = self.g.add(n.op, inputs, self.block, n.attrs, type=n.type, name=n.name, loc=n.loc,
                                   deps=deps)

    def if_(self, r: If) -> None:
        cond = self.g.add("Cond", [self.value(r.cond)], self.block)
        false = self.g.add("Proj", [cond], self.block, {"num": 0})
        true = self.g.add("Proj", [cond], self.block, {"num": 1})
        then_jmp, then_values = self.arm(true, "then", r.then, [m.then_value for m in r.outputs])
        else_jmp, else_values = self.arm(false, "else", r.orelse, [m.else_value for m in r.outputs])
        self.block = self.g.new_block("join", [then_jmp, else_jmp])
        for m, a, b in zip(r.outputs, then_values, else_values):
            self.scope[m.name] = self.g.add("Phi", [a, b], self.block, type=m.name.type, name=_label(m.name))

    def arm(self, entry: Node, label: str, seq: Seq, values: list[Value]) -> tuple[Node, list[Node]]:
        """Lower one arm in a scope of its own; returns its closing Jmp and the values it
        yields (read at its end)."""
        self.block = self.g.new_block(label, [entry])
        self.scope = self.scope.new_child()
        self.seq(seq)
        out = [self.value(v) for v in values]
        jmp = self.g.add("Jmp", [], self.block)
        self.scope = self.scope.parents
        return jmp, out

    def loop(self, r: Loop) -> None:
        inits = [self.value(c.init) for c in r.carried]
        header = self.g.new_block("loop", [self.g.add("Jmp", [], self.block)])
        phis = [self.g.add("Phi", [i], header, type=c.var.type, name=_label(c.var)) for c, i in zip(r.carried, inits)]
        self.scope = self.scope.new_child({c.var: p for c, p in zip(r.carried, phis)})
        self.block = header
        for n in r.cond:
            self.node(n)
        cond = self.g.add("Cond", [self.value(r.test)], header)
        false = self.g.add("Proj", [cond], header, {"num": 0})
        true = self.g.add("Proj", [cond], header, {"num": 1})
        back, nexts = self.arm(true, "body", r.body, [c.next for c in r.carried])
        header.append_input(back)
        for phi, n in zip(phis, nexts):
            phi.append_input(n)
        self.g.touch()
        self.scope = self.scope.parents
        self.block = self.g.new_block("after", [false])
        by_var = {c.var: p for c, p in zip(r.carried, phis)}
        for res in r.results:
            self.scope[res.name] = by_var[res.var]
