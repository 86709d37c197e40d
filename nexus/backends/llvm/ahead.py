"""Loop-invariant elements of arguments, read ahead at the top of the loop's header.

``boxes[i, 0]`` inside ``for m in range(n)``, with ``i`` from outside the loop, is the same
element on every iteration, but LLVM does not hoist its load: the load stands after the
loop's other bounds checks (each a conditional exit), and a load that might not run is
hoisted only from memory LLVM knows to be dereferenceable, which an argument indexed by a
run-time value never is.  Reloading it (and redoing what depends on it only, such as its
NaN test in ``max``) costs the loop a good part of its time.

So the emitter reads such an element at the top of the loop's header, before any exit,
from an address that is always safe: the element's where its indices are in bounds, a
dummy slot of the function's where they are not.  That load runs whenever the header
does, so LLVM hoists it out of the loop.  The Gather still checks its index where it
stands and fails there as before; once its check (and those of the Gathers it indexes
into) has passed, the indices were in bounds, so the value read ahead is the element.

Only elements of arguments and constant arrays (directly or through a chain of scalar
Gathers, ``boxes[i][0]``) defined outside the loop, with indices defined outside it: the
function never writes those buffers (a Phi copies one in, a SetItem copies one first), so
the element read at the header is the one the Gather would load.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from llvmlite import ir

from nexus.backends.llvm.dtypes import I64, kind, mem_type, to_reg
from nexus.backends.llvm.tensors import Tensor, linear
from nexus.ir.graph import Graph
from nexus.ir.node import Block, Node
from nexus.ir.types import TensorType
from nexus.passes.loops import loop_forest

if TYPE_CHECKING:
    from nexus.backends.llvm.emit import FunctionEmitter


@dataclass(frozen=True)
class Ahead:
    """A scalar Gather ``node`` whose element of ``root`` (an argument or constant) is read ahead;
    ``index`` holds the index node for each axis of ``root``."""

    node: Node
    root: Node
    index: tuple[Node, ...]


def _scalar_index(v: Node) -> bool:
    t = v.type
    return isinstance(t, TensorType) and t.shape == () and kind(t.dtype) in "iu"


def _read_only(v: Node, args: set[Node]) -> bool:
    """Whether ``v``'s buffer is never written: an argument's or a constant array's."""
    return v in args or v.op.name == "Constant"


def _chain(n: Node, args: set[Node]) -> Ahead | None:
    """``n`` as an element of an argument or constant, or None where it is not one."""
    gathers = []
    v = n
    while v.op.name == "Gather":
        if not _scalar_index(v.input(1)):
            return None
        gathers.append(v)
        v = v.input(0)
    t = v.type
    if not _read_only(v, args) or not isinstance(t, TensorType) or t.shape is None or len(t.shape) != len(gathers):
        return None
    remaining = list(range(len(t.shape)))  # axes of the root not indexed yet
    index: list[Node | None] = [None] * len(t.shape)
    for gth in reversed(gathers):  # the root's Gather first
        axis = int(gth.attrs.get("axis", 0))
        axis = axis + len(remaining) if axis < 0 else axis
        if not 0 <= axis < len(remaining):
            return None
        index[remaining.pop(axis)] = gth.input(1)
    return Ahead(n, v, tuple(i for i in index if i is not None))


def plan(g: Graph) -> dict[Block, list[Ahead]]:
    """Loop header -> the elements read ahead at its top: each scalar Gather of an argument
    or constant inside a loop goes to the outermost loop that its indices (and the array)
    are defined outside of."""
    forest = loop_forest(g)
    if not forest.loops:
        return {}
    args = set(g.args)
    out: dict[Block, list[Ahead]] = {}
    for n in g.nodes():
        if n.op.name != "Gather" or n.block is None or (n.input(0).op.name != "Gather"
                                                         and not _read_only(n.input(0), args)):
            continue
        lp = forest.loop_of(n.block)
        if lp is None:
            continue
        a = _chain(n, args)
        if a is None:
            continue
        best = None
        while lp is not None:
            if all(v.block is not None and v.block not in lp.blocks for v in (*a.index, a.root)):
                best = lp
            lp = lp.parent
        if best is not None:
            out.setdefault(best.header, []).append(a)
    return out


def read(fe: FunctionEmitter, a: Ahead, dummy: ir.Value) -> ir.Value:
    """Emit the read of ``a`` where the builder stands (the top of the loop's header)."""
    b = fe.b
    root = fe.vals[a.root]
    assert isinstance(root, Tensor) and root.ptr is not None
    ok: ir.Value = ir.Constant(ir.IntType(1), 1)
    idx = []
    for v, dim in zip(a.index, root.dims):
        i, t = fe.vals[v], v.type
        assert isinstance(t, TensorType)  # _scalar_index made sure
        signed = kind(t.dtype) == "i"
        if i.type.width < 64:
            i = b.sext(i, I64) if signed else b.zext(i, I64)
        if signed:  # a select is fine here: this runs once per entry into the loop
            i = b.select(b.icmp_signed("<", i, I64(0)), b.add(i, dim), i)
        ok = b.and_(ok, b.icmp_unsigned("<", i, dim))
        idx.append(i)
    et = mem_type(root.dtype)
    at = b.gep(root.ptr, [linear(b, idx, root.dims)], source_etype=et)
    if dummy.type != at.type:  # llvmlite types a global's address (IR text: both are ``ptr``)
        dummy = b.bitcast(dummy, at.type)
    return to_reg(b, b.load(b.select(ok, at, dummy), typ=et), root.dtype)
