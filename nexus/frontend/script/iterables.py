"""The iterables of a ``for`` loop beyond a plain ``range`` or a tensor:
``enumerate``, ``zip`` and ``reversed`` over ranges and tensors' first axes, nested as
Python allows.  Each is a length and an item at position ``k``, so the loop runs a
hidden counter ``k`` over ``0 .. length`` (a CFG loop as any other) and builds the
target's value from it; ranges keep Python's length, ``max(0, ceil((stop-start)/step))``,
for negative and run-time steps."""

from __future__ import annotations

import ast
import builtins
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from nexus.frontend.script import expr, lists
from nexus.frontend.script.annotations import is_int
from nexus.frontend.script.values import Static, TupleVal, Val
from nexus.ir.node import Node
from nexus.ir.types import TensorType

if TYPE_CHECKING:
    from nexus.frontend.script.visitor import Lowering

WRAPPERS = (builtins.enumerate, builtins.zip, builtins.reversed)


@dataclass
class Seq:
    """A sequence the loop walks: its length and its item at a position."""

    def length(self, low: Lowering) -> Val:
        raise NotImplementedError

    def item(self, low: Lowering, k: Node) -> Val:
        raise NotImplementedError


@dataclass
class RangeSeq(Seq):
    start: Val
    stop: Val
    step: Val
    n: Val | None = None  # the length when known already (a reversed range has no stop)

    def length(self, low: Lowering) -> Val:
        if self.n is not None:
            return self.n
        if all(isinstance(v, Static) for v in (self.start, self.stop, self.step)):
            return Static(len(range(self.start.value, self.stop.value, self.step.value)))  # type: ignore[union-attr]
        # len(range(a, b, c)) == max(0, -((a - b) // c)), for either sign of c
        span = expr.binop(low, ast.Sub(), self.start, self.stop, _NOWHERE)
        n = low.emit("Neg", [low.as_node(expr.binop(low, ast.FloorDiv(), span, self.step, _NOWHERE), "i64")])
        return low.emit("Maximum", [n, low.const(0, "i64")])

    def item(self, low: Lowering, k: Node) -> Val:
        return expr.binop(low, ast.Add(), self.start, expr.binop(low, ast.Mult(), k, self.step, _NOWHERE), _NOWHERE)


@dataclass
class RowsSeq(Seq):
    rows: Node
    reverse: bool = False

    def length(self, low: Lowering) -> Val:
        return expr.dim_value(low, self.rows, 0)

    def item(self, low: Lowering, k: Node) -> Val:
        if self.reverse:
            last = expr.binop(low, ast.Sub(), self.length(low), Static(1), _NOWHERE)
            k = low.as_node(expr.binop(low, ast.Sub(), last, k, _NOWHERE), "i64")
        return low.emit("Gather", [self.rows, k], {"axis": 0})


@dataclass
class ListSeq(Seq):
    """The items of a list held as a sequence (see nexus.frontend.script.lists)."""

    seq: Node
    reverse: bool = False

    def length(self, low: Lowering) -> Val:
        return lists.length(low, self.seq)

    def item(self, low: Lowering, k: Node) -> Val:
        if self.reverse:
            k = low.emit("Sub", [low.emit("Neg", [k]), low.const(1, "i64")])  # -1 - k: from the back
        return low.emit("SequenceAt", [self.seq, k])


@dataclass
class EnumerateSeq(Seq):
    inner: Seq
    start: Val

    def length(self, low: Lowering) -> Val:
        return self.inner.length(low)

    def item(self, low: Lowering, k: Node) -> Val:
        return TupleVal((expr.binop(low, ast.Add(), self.start, k, _NOWHERE), self.inner.item(low, k)))


@dataclass
class ZipSeq(Seq):
    parts: list[Seq]

    def length(self, low: Lowering) -> Val:
        n = self.parts[0].length(low)
        for p in self.parts[1:]:
            m = p.length(low)
            if isinstance(n, Static) and isinstance(m, Static):
                n = Static(min(n.value, m.value))
            else:
                n = low.emit("Minimum", [low.as_node(n, "i64"), low.as_node(m, "i64")])
        return n

    def item(self, low: Lowering, k: Node) -> Val:
        return TupleVal(tuple(p.item(low, k) for p in self.parts))


_NOWHERE = ast.Constant(value=None)  # binop only points at its node when it refuses


def is_wrapped(low: Lowering, it: ast.expr) -> bool:
    """Whether ``it`` is ``enumerate(...)``, ``zip(...)`` or ``reversed(...)``."""
    if not isinstance(it, ast.Call):
        return False
    fn = low.expr(it.func)
    return isinstance(fn, Static) and any(fn.value is w for w in WRAPPERS)


def sequence(low: Lowering, it: ast.expr) -> Seq:
    """The sequence of a ``for`` loop's iterable (or of an argument of a wrapper)."""
    fn = low.expr(it.func) if isinstance(it, ast.Call) else None
    f = fn.value if isinstance(fn, Static) else None
    if isinstance(it, ast.Call) and f is builtins.range:
        if it.keywords or not 1 <= len(it.args) <= 3:
            raise low.error(it, "range() takes 1 to 3 positional arguments")
        vals = [range_arg(low, low.expr(a), a) for a in it.args]
        start, stop, step = (Static(0), vals[0], Static(1)) if len(vals) == 1 else \
            (vals[0], vals[1], vals[2] if len(vals) == 3 else Static(1))
        check_step(low, step, it)
        return RangeSeq(start, stop, step)
    if isinstance(it, ast.Call) and f is builtins.enumerate:
        kw = {k.arg: k.value for k in it.keywords}
        if not 1 <= len(it.args) + len(kw) <= 2 or set(kw) - {"start"} or len(it.args) == 2 and kw:
            raise low.error(it, "enumerate() takes an iterable and an optional start")
        start_node = it.args[1] if len(it.args) == 2 else kw.get("start")
        inner = sequence(low, it.args[0])  # Python's order: the iterable, then the start
        start = range_arg(low, low.expr(start_node), start_node) if start_node is not None else Static(0)
        return EnumerateSeq(inner, start)
    if isinstance(it, ast.Call) and f is builtins.zip:
        if it.keywords or not it.args:
            raise low.error(it, "zip() in a script takes one or more iterables (and no keywords)")
        return ZipSeq([sequence(low, a) for a in it.args])
    if isinstance(it, ast.Call) and f is builtins.reversed:
        if it.keywords or len(it.args) != 1:
            raise low.error(it, "reversed() takes one argument")
        inner = sequence(low, it.args[0])
        if isinstance(inner, RangeSeq):  # range(a, b, c) reversed: its last item, stepping by -c
            n = inner.length(low)
            last = expr.binop(low, ast.Sub(), n, Static(1), it)
            first = expr.binop(low, ast.Add(), inner.start, expr.binop(low, ast.Mult(), last, inner.step, it), it)
            return RangeSeq(first, Static(None), expr.binop(low, ast.Sub(), Static(0), inner.step, it), n)
        if isinstance(inner, RowsSeq):
            return RowsSeq(inner.rows, not inner.reverse)
        if isinstance(inner, ListSeq):
            return ListSeq(inner.seq, not inner.reverse)
        raise low.error(it, "reversed() needs a sequence: a range or a tensor, not an enumerate or zip object",
                         "reverse the range or tensor inside it")
    v = low.expr(it)
    if isinstance(v, TupleVal):
        return RowsSeq(literal_items(low, v, it))
    if lists.is_seq(v):
        return ListSeq(v)
    if not isinstance(v, Node):
        raise low.error(it, "`for` loops run over range(...), enumerate/zip/reversed of ranges and tensors, "
                            "or a tensor's first axis",
                         "for other iterables write `for i in range(len(x))` and index")
    t = v.type
    if not isinstance(t, TensorType) or not t.shape:
        raise low.error(it, f"cannot iterate over a value of type {t}",
                         "iterate over range(n) or over a tensor of rank >= 1")
    return RowsSeq(v)


def literal_items(low: Lowering, v: TupleVal, node: ast.AST) -> Node:
    """The items of a list or tuple a loop walks (``for s in [a, b]``, a closure's tuple),
    stacked: Python gives the loop variable each item's own type, so they must have one
    (as numba asks of a tuple it iterates)."""
    if not v.items:
        raise low.error(node, "a `for` loop over an empty list or tuple never runs", "remove the loop")
    if any(isinstance(i, TupleVal) for i in v.items):
        raise low.error(node, "a `for` loop over a list of tuples is not supported",
                         "loop over range(n) and index the tuples, or over np.array(...) of them")
    nodes = [low.as_node(i) for i in v.items]
    types = {str(n.type) for n in nodes}
    if len(types) > 1:
        raise low.error(node, f"the items this `for` loop walks have different types ({', '.join(sorted(types))}); "
                              "Python would give the loop variable each one's own type",
                         "make the items one type, e.g. all floats")
    return expr.stack(low, TupleVal(tuple(nodes)))


def check_step(low: Lowering, step: Val, node: ast.AST) -> None:
    """range()'s step must not be zero: refused now when known, checked at run time else."""
    if isinstance(step, Static):
        if step.value == 0:
            raise low.error(node, "range() arg 3 must not be zero")
        return
    ok = low.emit("NotEqual", [low.as_node(step, "i64"), low.const(0, "i64")])
    low.emit("Assert", [ok], {"message": "range() arg 3 must not be zero"})


def range_arg(low: Lowering, v: Val, node: ast.AST) -> Val:
    if isinstance(v, Static):
        if isinstance(v.value, np.integer):  # np.uint32(7): Python's range takes its __index__
            return Static(int(v.value))
        if isinstance(v.value, bool) or not isinstance(v.value, int):
            raise low.error(node, f"range() needs ints, got {type(v.value).__name__}", "convert with int(...)")
        return v
    n = low.as_node(v)
    t = n.type
    if not (isinstance(t, TensorType) and t.shape == () and (is_int(t.dtype) or t.dtype == "bool")):
        raise low.error(node, f"range() needs int scalars, got {t}", "convert with int(...)")
    return n
