"""The region tree: a graph's control flow as nested sequences, if/else and loops.

Backends whose control flow is structured (XLA's ``lax.cond`` / ``lax.while_loop``, ONNX's
``If`` / ``Loop``) print this tree; :mod:`nexus.passes.structurize` builds it from a
reducible CFG and :mod:`nexus.passes.lower_regions` turns it back into a CFG.

Names and scope
    Data computation is the original graph's own :class:`Node` objects: a data node in a
    :class:`Seq` runs its op on the values its ``inputs`` name.  Every name a node reads is
    in scope where the node stands, lexically: defined earlier in the same sequence or in
    an enclosing one.  Names are original nodes (data nodes, Phis, arguments) or
    :class:`Var` values the structurizer introduced (flags, merged values, loop slots).
    Values of a sub-region are visible outside it only through its outputs: an
    :class:`If`'s :class:`Merge` entries and a :class:`Loop`'s :class:`Result` entries,
    which may (re)bind an original node's name, so that later nodes read it unchanged.

Operands (:data:`Value`) are names, or immediates: :class:`Const` (a flag's ``true`` /
``false``) and :class:`Default` (zeros of its type, where no path reads the value).

Items of a :class:`Seq`, run in order:
    - a data ``Node``: run it, binding its name;
    - :class:`Bind` ``target := value``: a name for a value (a Phi with one entering edge);
    - :class:`If`: run ``then`` when ``cond`` is true, else ``orelse``; each ``Merge`` binds
      its name to the value the taken arm yields (``lax.cond``'s results, ONNX ``If``'s
      outputs);
    - :class:`Loop`: see its docstring (``lax.while_loop``, ONNX ``Loop``).

:class:`Default` fills a place that must hold a value of some type on a path that never
reads it: an arm that does not reach the code using a merged value, a loop's exit slot
before the iteration that leaves.  It is zeros of its type (symbolic dims 0; for a stack,
an empty one); since nothing reads it, a backend may use any value of the type instead
(``lax.cond`` needs both arms' shapes equal: zeros shaped like the other arm's value).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np

from nexus.ir.graph import Graph
from nexus.ir.node import Node
from nexus.ir.printer import Namer, format_attr, format_tensor, graph_ref
from nexus.ir.types import TensorType, Type, dtype_of


@dataclass(eq=False)
class Var:
    """A value the structurizer introduced: a flag, a merged value, a loop slot.
    ``hint`` is the name the printer starts from."""

    hint: str
    type: Type

    def __repr__(self) -> str:
        return f"<Var {self.hint}: {self.type}>"


@dataclass(frozen=True, eq=False)
class Const:
    """An immediate: a 0-d array (the flags' ``true`` and ``false``)."""

    value: np.ndarray

    @property
    def type(self) -> Type:
        return TensorType(dtype_of(self.value.dtype), tuple(self.value.shape))


@dataclass(frozen=True, eq=False)
class Default:
    """Zeros of ``type``, standing where no path reads the value (see the module doc)."""

    type: Type


TRUE = Const(np.array(True))
FALSE = Const(np.array(False))

Name = Node | Var
"""What a region item defines and what data nodes read."""
Value = Node | Var | Const | Default
"""An operand: a name in scope or an immediate."""


@dataclass(eq=False)
class Bind:
    """``target := value``."""

    target: Name
    value: Value


@dataclass(eq=False)
class Merge:
    """After an If, ``name`` is ``then_value`` or ``else_value`` (each read at the end of
    its arm): what a join block's Phi selects."""

    name: Name
    then_value: Value
    else_value: Value


@dataclass(eq=False)
class Seq:
    """An ordered list of data nodes and sub-regions."""

    items: list[Item] = field(default_factory=list)


@dataclass(eq=False)
class If:
    """Two-way choice on a bool scalar; ``outputs`` are the values the code after it reads."""

    cond: Value
    then: Seq
    orelse: Seq
    outputs: list[Merge] = field(default_factory=list)


@dataclass(eq=False)
class Carry:
    """A loop-carried value: ``var`` is ``init`` on entry and ``next`` (read at the end of
    the body) on each later iteration.  ``var`` is a header Phi or a :class:`Var`."""

    var: Name
    init: Value
    next: Value


@dataclass(eq=False)
class Result:
    """After the loop, ``name`` is the final value of the carried ``var``."""

    name: Name
    var: Name


@dataclass(eq=False)
class Loop:
    """A loop, as ``lax.while_loop`` and ONNX ``Loop`` see it::

        carried vars := inits
        repeat:
            run cond                      # pure data nodes only
            if not test: leave
            run body                      # sees cond's values
            carried vars := nexts         # all at once
        result names := final carried vars

    ``cond`` holds only pure data nodes without ordering edges, so a backend whose loop
    keeps the test apart from the body (``lax.while_loop``'s ``cond_fun``) may evaluate
    them again in the body; their values are not visible after the loop.  A loop that
    leaves from inside its body (``break``, ``return``, a test not at the top) has an empty
    ``cond`` and a carried flag as ``test``; see :mod:`nexus.passes.structurize`."""

    carried: list[Carry]
    cond: list[Node]
    test: Value
    body: Seq
    results: list[Result] = field(default_factory=list)


Item = Node | Bind | If | Loop


@dataclass(eq=False)
class RegionTree:
    """A graph as regions: its arguments are ``graph.args``; ``body`` runs, then the graph
    returns ``results``."""

    graph: Graph
    body: Seq
    results: list[Value]

    def __str__(self) -> str:
        return format_regions(self)


def walk(seq: Seq) -> Iterator[Item]:
    """Every item of ``seq`` and of its sub-regions, outer before inner."""
    for item in seq.items:
        yield item
        if isinstance(item, If):
            yield from walk(item.then)
            yield from walk(item.orelse)
        elif isinstance(item, Loop):
            yield from item.cond
            yield from walk(item.body)


# --- text ------------------------------------------------------------------------------------
def format_regions(tree: RegionTree) -> str:
    """The tree as indented text, one line per node or region part, for goldens and
    debugging.  Nodes print as in the graph text form (without source locations)."""
    return _Printer(tree).text()


class _Printer:
    def __init__(self, tree: RegionTree):
        self.tree = tree
        self.names = Namer()  # unique names, numbers for anonymous nodes
        self.given: dict[Name, str] = {}
        self.lines: list[str] = []
        self.vars_named = True

    def text(self) -> str:
        # Two passes: the first names the original nodes in print order, so that they keep
        # their names and the structurizer's values take the suffixes.
        self.vars_named = False
        self.render()
        self.lines = []
        self.vars_named = True
        return self.render()

    def render(self) -> str:
        g = self.tree.graph
        args = ", ".join(self.typed(a) for a in g.args)
        self.lines.append(f"regions {graph_ref(g.name)}({args}):")
        self.seq(self.tree.body, 1)
        self.lines.append("  return" + self.operands(self.tree.results, " "))
        return "\n".join(self.lines) + "\n"

    def name(self, v: Name) -> str:
        if isinstance(v, Var) and not self.vars_named:
            return "%?"
        name = self.given.get(v)
        if name is None:
            name = self.given[v] = self.names.unique(v.hint if isinstance(v, Var) else v.name)
        return "%" + name

    def typed(self, v: Name) -> str:
        return f"{self.name(v)} : {v.type}"

    def operand(self, v: Value) -> str:
        if isinstance(v, Const):
            if v.value.dtype == np.bool_ and v.value.ndim == 0:
                return "true" if v.value else "false"
            return format_tensor(v.value, None, "")
        if isinstance(v, Default):
            return "default"
        return self.name(v)

    def operands(self, vs: list[Value], lead: str = "") -> str:
        return lead + ", ".join(self.operand(v) for v in vs) if vs else ""

    def seq(self, seq: Seq, depth: int) -> None:
        for item in seq.items:
            if isinstance(item, If):
                self.if_(item, depth)
            elif isinstance(item, Loop):
                self.loop(item, depth)
            elif isinstance(item, Bind):
                self.line(depth, f"{self.typed(item.target)} = {self.operand(item.value)}")
            else:
                self.line(depth, self.node(item))

    def line(self, depth: int, text: str) -> None:
        self.lines.append("  " * depth + text)

    def node(self, n: Node) -> str:
        text = f"{self.name(n)} = {n.op.name}" + self.operands(list(n.inputs), " ")
        if n.attrs:
            items = ", ".join(f"{k} = {format_attr(v, None, '')}" for k, v in sorted(n.attrs.items()))
            text += f" {{{items}}}"
        if n.deps:
            text += " deps(" + ", ".join(self.name(d) for d in n.deps) + ")"
        return text + f" : {n.type}"

    def if_(self, r: If, depth: int) -> None:
        cond = self.operand(r.cond)
        outs = ", ".join(self.typed(m.name) for m in r.outputs)
        self.line(depth, f"if {cond}" + (f" -> ({outs})" if r.outputs else "") + ":")
        self.line(depth + 1, "then:")
        self.seq(r.then, depth + 2)
        if r.outputs:
            self.line(depth + 2, "yield" + self.operands([m.then_value for m in r.outputs], " "))
        if r.orelse.items or r.outputs:
            self.line(depth + 1, "else:")
            self.seq(r.orelse, depth + 2)
            if r.outputs:
                self.line(depth + 2, "yield" + self.operands([m.else_value for m in r.outputs], " "))

    def loop(self, r: Loop, depth: int) -> None:
        carried = ", ".join(f"{self.typed(c.var)} = {self.operand(c.init)}" for c in r.carried)
        self.line(depth, f"loop ({carried}):")
        if r.cond:
            self.line(depth + 1, "cond:")
            for n in r.cond:
                self.line(depth + 2, self.node(n))
        self.line(depth + 1, f"while {self.operand(r.test)}")
        self.line(depth + 1, "body:")
        self.seq(r.body, depth + 2)
        self.line(depth + 2, "next" + self.operands([c.next for c in r.carried], " "))
        if r.results:
            exits = ", ".join(self.result(res) for res in r.results)
            self.line(depth + 1, f"exit ({exits})")

    def result(self, r: Result) -> str:
        if r.name is r.var:
            return self.name(r.name)
        return f"{self.name(r.name)} = {self.name(r.var)}"
