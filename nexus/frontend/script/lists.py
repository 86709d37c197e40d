"""Lists in ``@nx.script`` (``xs = []``, ``xs = [a, b]``, ``xs.append(v)``), and what a
script reads from one.

A list is held one of two ways, chosen by type when the script is built:

- **stacked**: the tensor ``[len, *shape]`` of its items (an ``Append`` per append), when
  every item has one shape: in this build, every append's item has the type of the first
  one (the same ints and symbols), and an append inside a loop that started after the list
  was made appends items whose symbolic dims were all known before that loop (an
  argument's dims, a mask taken before the loop).  The backends compile it as any tensor,
  and reading it (``xs[i]``, ``len(xs)``, ``np.stack(xs)``) is reading an array.
- **a sequence** (``seq<...>``, ``SequenceEmpty``/``SequenceInsert``), when an item's shape
  may differ from the others': a dim computed in such a loop (a slice to a bound computed
  in the loop, a boolean mask taken there) or two different symbols.  ``len`` is
  ``SequenceLength``, ``xs[i]`` ``SequenceAt``, ``np.concatenate``/``np.stack``
  ``ConcatFromSequence``, NumPy functions read it as ``np.stack(xs)``, and the script
  returns a Python list of arrays, as Python does.

The element type (a hint keyed by the list's site) comes from the first build that
appends; an append that does not fit the stacked form builds again with a sequence type
(``LoopTypeRetry``), as loop variables whose shape changes do.  Every value of a sequence
list has that one type, so loop Phis over it settle at once.  The stacked form still
checks each append's shape at run time (``Append``), so a case the symbols miss fails
there rather than giving a wrong answer.
"""

from __future__ import annotations

import ast
import itertools
from collections.abc import Hashable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeGuard

import numpy as np

from nexus.frontend.script.annotations import is_int
from nexus.frontend.script.ssa import LoopTypeRetry
from nexus.frontend.script.values import Static, Val
from nexus.ir.node import Block, Node
from nexus.ir.types import SequenceType, TensorType, TupleType, fresh_dim, numpy_dtype

if TYPE_CHECKING:
    from nexus.frontend.script.visitor import Lowering


@dataclass
class _Site:
    """A list made in this build: the loops open where it was made, its first item's type."""

    open_loops: frozenset[Block]
    first: TensorType | None = None


def _open_loops(low: Lowering) -> frozenset[Block]:
    """The headers of the loops being lowered (unsealed until their back edges are in)."""
    return frozenset(h for h in low.ssa.loop_keys if h not in low.ssa.sealed)


def _own_dims(low: Lowering, var: str, first: TensorType) -> dict[Any, Any]:
    """The element dims of the loop hints of list variable ``var`` -> the first item's."""
    out: dict[Any, Any] = {}
    assert first.shape is not None
    for k, h in low.ssa.hints.items():
        if isinstance(k, tuple) and len(k) == 2 and k[1] == var and isinstance(k[0], tuple) \
                and isinstance(h, TensorType) and h.shape is not None and len(h.shape) == len(first.shape) + 1:
            out.update({e: d for e, d in zip(h.shape[1:], first.shape) if not isinstance(e, int)})
    return out


def _own_phis(lst: Node) -> list[Node]:
    """The Phis of the list value ``lst`` comes from (through its appends)."""
    out = []
    v = lst
    while v.op.name == "Append":
        v = v.inputs[0]
    if v.op.name == "Phi":
        out.append(v)
    return out


def _one_shape(low: Lowering, site: _Site, lst: Node, x: Node, t: TensorType, key: Hashable, var: str) -> bool:
    """Whether an item ``x`` of type ``t`` has the shape of every item appended so far: the
    first item's type, and, inside a loop that began after the list was made, symbolic
    dims known before that loop (else the item's shape may change between iterations).
    A loop Phi's symbolic dims say only "some size" (its back edge is not in yet), so an
    item computed from one is checked again when its loop is closed."""
    if t.shape is None:
        return False
    shape = t.shape
    if site.first is not None:
        # An item read from the list itself (``xs[-1]``) has the element dims of the list's
        # loop Phi, whose hint an earlier build made: they are the first item's dims.
        own = _own_dims(low, var, site.first)
        shape = tuple(own.get(d, d) for d in shape)
        if shape != site.first.shape:
            return False
    between = _open_loops(low) - site.open_loops
    if not between or all(isinstance(d, int) for d in shape):
        return True
    outermost = next(b for b in low.g.blocks if b in between)  # blocks are kept in the order made
    before = _symbols_before(low, outermost)
    inside = set(itertools.dropwhile(lambda b: b is not outermost, low.g.blocks))
    if not all(_free(d) <= before for d in shape):
        return False
    seen: set[Node] = set(_own_phis(lst))
    work = [x]
    while work:  # the loops' Phis the item comes from
        v = work.pop()
        if v in seen or v.block not in inside:
            continue
        seen.add(v)
        if v.op.name == "Phi" and v.block in between:
            if isinstance(v.type, TensorType) and any(not isinstance(d, int) for d in v.type.shape or (None,)):
                low.list_pending.append((v, key, var, t))  # (loop header Phi, list site, variable, item type)
            continue
        work.extend(v.inputs)
    return True


def check_loop(low: Lowering, header: Block) -> None:
    """After the loop of ``header`` is sealed: a stacked list's item computed from one of
    its Phis whose operands differ in shape (``w = w[1:]`` around the loop) may change
    shape between iterations, so the list builds again as a sequence."""
    pending = [p for p in low.list_pending if p[0].block is header and p[0].graph is not None]
    if not pending:  # (a trivial Phi is removed when sealed: its value does not change)
        return
    before = _symbols_before(low, header)
    for phi, key, var, t in pending:
        if not all(_same_size(phi.type, v.type, before) for v in phi.inputs):
            _drop_loop_hints(low, var)
            raise LoopTypeRetry(key, SequenceType(_per_item(t, t), None))


def _same_size(phi: Any, t: Any, before: set[Any]) -> bool:
    """Whether a value of type ``t`` that enters a Phi of type ``phi`` has its size: equal
    dims, or a symbol known before the loop (two such symbols are taken to be equal: the
    stacked list checks it at run time); not a dim computed from them (``n - 1``)."""
    if not (isinstance(phi, TensorType) and isinstance(t, TensorType)) or phi.shape is None or t.shape is None \
            or len(phi.shape) != len(t.shape):
        return False
    return all(p == q or not isinstance(q, int) and getattr(q, "is_Symbol", False) and q in before
               and not isinstance(p, int) for p, q in zip(phi.shape, t.shape))


def _symbols_before(low: Lowering, header: Block) -> set[Any]:
    """The symbols in the types of the nodes made before the loop of ``header``."""
    out: set[Any] = set()
    for block in low.g.blocks:  # in the order made
        if block is header:
            break
        for n in block.members:
            out |= _symbols(n.type)
    return out


def _drop_loop_hints(low: Lowering, var: str) -> None:
    """The loop hints of a list variable describe its stacked tensor: they go when it
    becomes a sequence."""
    for k in [k for k in low.ssa.hints if isinstance(k, tuple) and len(k) == 2 and k[1] == var
              and isinstance(k[0], tuple)]:
        del low.ssa.hints[k]


def _symbols(t: Any) -> set[Any]:
    out: set[Any] = set()
    shapes = [t.shape] if isinstance(t, TensorType) else [e.shape for e in t.elems if isinstance(e, TensorType)] \
        if isinstance(t, TupleType) else []
    for shape in shapes:
        for d in shape or ():
            out |= _free(d)
    return out


def _free(d: Any) -> set[Any]:
    return set() if isinstance(d, int) else set(getattr(d, "free_symbols", ()))


def is_seq(v: Val) -> TypeGuard[Node]:
    """Whether ``v`` is a list held as a sequence."""
    return isinstance(v, Node) and isinstance(v.type, SequenceType)


def list_new(low: Lowering, target: ast.Name, literal: ast.List, site: Hashable) -> None:
    """``name = [a, b, ...]``: an empty list, then one append per item.  The element type
    comes from the first append; until a build has seen it (a retry, as for loop
    variables whose type changes) the empty list is a placeholder."""
    low.lists[target.id] = site
    low.list_sites[site] = _Site(_open_loops(low))
    hint = low.ssa.hints.get(site)
    if isinstance(hint, SequenceType):
        node = low.emit("SequenceEmpty", [], {"dtype": hint.dtype}, type=hint, name=target.id)
    else:
        if isinstance(hint, TensorType) and hint.shape is not None:
            empty = np.zeros((0, *(d if isinstance(d, int) else 0 for d in hint.shape)), numpy_dtype(hint.dtype))
        else:
            empty = np.zeros((0,), np.float64)
        node = low.g.add("Constant", [], low.cur, {"value": empty}, loc=low._loc)
    low.bind(target.id, node)
    for item in literal.elts:
        list_append(low, target, low.expr(item), item)


def list_append(low: Lowering, target: ast.Name, value: Val, node: ast.AST) -> None:
    lst = low.as_node(low.load(target.id, target))
    x = low.as_node(value)
    lt, xt = lst.type, x.type
    site = low.lists[target.id]
    hint = low.ssa.hints.get(site)
    if not isinstance(xt, TensorType):
        raise low.error(node, f"a list in a script holds arrays and numbers, not {xt}")
    if isinstance(lt, SequenceType):
        if xt.dtype != lt.dtype or (xt.shape is None) != (lt.elem.shape is None) \
                or xt.shape is not None and lt.elem.shape is not None and len(xt.shape) != len(lt.elem.shape):
            raise _mixed(low, target, lt.elem, xt, node)
        if not _fits(lt.elem, xt):
            raise LoopTypeRetry(site, SequenceType(_per_item(lt.elem, xt), None))
        new = low.emit("SequenceInsert", [lst, x], type=lt)
    else:
        assert isinstance(lt, TensorType)
        if lt.dtype != xt.dtype or lt.shape is None or xt.shape is None or len(lt.shape) != len(xt.shape) + 1:
            if hint is None:
                raise LoopTypeRetry(site, xt)  # build again with the element type known
            raise _mixed(low, target, hint, xt, node)
        state = low.list_sites.setdefault(site, _Site(frozenset()))
        if not _one_shape(low, state, lst, x, xt, site, low.var(target.id)):
            # This item's shape may differ from the others': the list is a sequence.
            _drop_loop_hints(low, low.var(target.id))
            raise LoopTypeRetry(site, SequenceType(_per_item(state.first or xt, xt), None))
        if state.first is None:
            state.first = xt
        new = low.emit("Append", [lst, x])
    new.name = target.id
    low.bind(target.id, new)


def _mixed(low: Lowering, target: ast.Name, elem: object, xt: TensorType, node: ast.AST) -> Exception:
    return low.error(node, f"`{target.id}` holds values of type {elem}; this one is {xt}",
                     "a list in a script holds values of one dtype and rank")


def _fits(elem: TensorType, t: TensorType) -> bool:
    """Whether an item of type ``t`` fits a sequence of ``elem`` items (a symbolic dim of
    ``elem`` is per item: any size fits it)."""
    assert elem.shape is not None and t.shape is not None
    return all(not isinstance(e, int) or e == d for e, d in zip(elem.shape, t.shape))


def _per_item(a: TensorType, b: TensorType) -> TensorType:
    """The element type of a sequence holding items of types ``a`` and ``b`` (one rank):
    the ints they share, a symbol (per item) elsewhere."""
    assert a.shape is not None and b.shape is not None
    return a.with_shape(tuple(x if isinstance(x, int) and x == y else fresh_dim() for x, y in zip(a.shape, b.shape)))


# --- reading a sequence list -------------------------------------------------------------------


def length(low: Lowering, seq: Node) -> Node:
    """``len(xs)``: an i64 scalar."""
    return low.emit("SequenceLength", [seq])


def item(low: Lowering, seq: Node, index: Val, node: ast.AST) -> Node:
    """``xs[i]`` for an int ``i`` (negative counts from the back; IndexError out of range)."""
    return low.emit("SequenceAt", [seq, _index(low, index, node)])


def _index(low: Lowering, index: Val, node: ast.AST) -> Node:
    if isinstance(index, Static) and not (isinstance(index.value, (int, np.integer))
                                          and not isinstance(index.value, bool)):
        raise low.error(node, f"list indices must be integers, not {type(index.value).__name__}",
                         "index with an int; a list in a script takes no tuple or mask index")
    i = low.as_node(index)
    if not (isinstance(i.type, TensorType) and i.type.shape == () and is_int(i.type.dtype)):
        raise low.error(node, f"list indices must be int scalars, got {i.type}",
                         "index with an int (`xs[i][j]` indexes the item)")
    return low.cast(i, "i64")


def subscript(low: Lowering, seq: Node, node: ast.Subscript) -> Node:
    """``xs[i]``, or ``xs[:]`` (a copy: the same value, as a list is immutable here)."""
    s = node.slice
    if isinstance(s, ast.Slice):
        if s.lower is None and s.upper is None and s.step is None:
            return seq
        raise low.error(node, "slicing a list whose items differ in shape is not supported",
                         "loop over range(a, b) and append xs[i] to a new list")
    return item(low, seq, low.expr(s), node)


def as_array(low: Lowering, v: Val) -> Val:
    """A sequence list where NumPy reads a list as an array (``np.sum(xs)``,
    ``np.array(xs)``): ``np.stack(xs)`` (ConcatFromSequence; items that differ in shape
    fail at run time, as NumPy refuses a ragged array).  Anything else is unchanged."""
    if not is_seq(v):
        return v
    return low.emit("ConcatFromSequence", [v], {"axis": 0, "new_axis": True})


def concatenate(low: Lowering, seq: Node, axis: int | None, stack: bool, node: ast.AST) -> Node:
    """``np.concatenate(xs, axis)`` / ``np.stack(xs, axis)``: ConcatFromSequence (an
    empty list, or shapes that do not line up, fail at run time as in NumPy)."""
    if axis is None:
        raise low.error(node, "np.concatenate(xs, axis=None) of a list whose items differ in shape is not "
                              "supported", "flatten each item before appending it, then concatenate on axis 0")
    return low.emit("ConcatFromSequence", [seq], {"axis": int(axis), "new_axis": stack})


def set_item(low: Lowering, target: ast.Subscript, seq: Node, value: Val) -> None:
    """``xs[i] = v``: the item at ``i`` erased and ``v`` inserted there (IndexError out of
    range, negative ``i`` from the back, as Python)."""
    assert isinstance(target.value, ast.Name) and isinstance(seq.type, SequenceType)
    name = target.value.id
    if isinstance(target.slice, ast.Slice):
        raise low.error(target, "assigning to a slice of a list whose items differ in shape is not supported",
                         "assign one item at a time")
    i = _index(low, low.expr(target.slice), target)
    x = low.as_node(value)
    t = seq.type
    if not isinstance(x.type, TensorType) or x.type.dtype != t.dtype or x.type.shape is None \
            or t.elem.shape is None or len(x.type.shape) != len(t.elem.shape):
        raise _mixed(low, target.value, t.elem, x.type, target)  # type: ignore[arg-type]
    if not _fits(t.elem, x.type):
        raise LoopTypeRetry(low.lists[name], SequenceType(_per_item(t.elem, x.type), None))
    erased = low.emit("SequenceErase", [seq, i], type=t)  # checks the range
    n = low.emit("SequenceLength", [seq])
    at = low.emit("Where", [low.emit("Less", [i, low.const(0, "i64")]), low.emit("Add", [i, n]), i])
    new = low.emit("SequenceInsert", [erased, x, at], type=t)
    new.name = name
    low.bind(name, new)
