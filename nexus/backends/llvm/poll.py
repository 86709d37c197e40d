"""The one check native code makes on its way round a loop: ``max_iterations`` and Ctrl-C.

A function that polls keeps two integers in registers: ``n``, the blocks it has entered,
and ``bound``, when to look next.  At the top of each *counted* block it does ``n += 1``
and, if ``n > bound``, takes a cold path that

1. fails with the python backend's error when ``n > max_iterations`` (naming the block it
   was about to enter),
2. asks the runtime whether a SIGINT stopped the call (:mod:`nexus.backends.llvm.interrupt`,
   whose first tick on the main thread also arms its handler), and
3. sets ``bound = min(n + CHUNK, max_iterations)``.

So the hot path is an add, a compare and a branch that is never taken, in registers
(no load: the flag is read on the cold path only, every ``CHUNK`` entries), which LLVM
schedules beside the loop's own work; W2 measured within noise of no check at all.

Counted blocks: with ``max_iterations``, every block, as the python backend counts them
(``n`` is the same number: the start block is the first entry; a callee counts its own,
from 0, with the same bound, as the python backend's ``Call`` does).  Without it, only the
targets of the depth-first walk's retreating edges: every cycle of the CFG has one, so an
endless loop still polls, and straight-line code is left alone.

A block's entries are not all alike: one that runs an elementwise op over a million
elements costs as much as a million scalar ones.  So nodes whose code loops over
elements (a tensor result, a reduction's input, a Phi's copy on an edge) lower ``bound``
by their element count / ``2**ELEMENT_SHIFT`` as they run (:meth:`Poll.spend`): the next
counted entry ticks sooner, and Ctrl-C stays prompt in loops over big arrays, without
changing ``n``.  Scalar reads and writes of an element (``Gather``, ``DimSize``, a
``SetItem`` done in place) cost nothing there.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from llvmlite import ir

from nexus.backends.llvm.dtypes import I32, I64
from nexus.backends.llvm.interrupt import ARMED, CHUNK, FIRST, LEAVE, TICK
from nexus.backends.llvm.tensors import Tensor
from nexus.ir.analysis import depth_first, reverse_postorder
from nexus.ir.graph import Graph
from nexus.ir.node import Block, Node

if TYPE_CHECKING:
    from nexus.backends.llvm.emit import FunctionEmitter

ELEMENT_SHIFT = 4  # elements of array work counted as one block entry (2**4 = 16)
_SCALAR_READS = frozenset({"Gather", "DimSize"})


def counted(g: Graph, limit: int | None) -> frozenset[Block]:
    """The blocks of ``g`` whose entries count (see the module docstring)."""
    if limit is not None:
        return frozenset(b for b in reverse_postorder(g) if b is not g.end_block)
    return frozenset(s for _, s in depth_first(g).retreating)


def polls(g: Graph, limit: int | None, seen: set[Graph] | None = None) -> bool:
    """Whether the function of ``g`` (or of a graph it calls) polls, so returns a status."""
    seen = seen if seen is not None else set()
    seen.add(g)
    if counted(g, limit):
        return True
    for n in g.nodes():
        callee = n.attrs.get("callee") if n.op.name == "Call" else None
        if isinstance(callee, Graph) and callee not in seen and polls(callee, limit, seen):
            return True
    return False


def limit_message(g: Graph, limit: int, block: Block) -> str:
    """The python backend's words (``nexus.backends.python.interpreter``), to the letter."""
    return (f"graph @{g.name}: entered more than {limit} blocks (max_iterations) and was about to enter "
            f"^{block.name}; is a loop endless?")


class Poll:
    """The counter and bound of one function (allocas in its entry: LLVM keeps them in
    registers) and the code that reads and writes them."""

    def __init__(self, fe: FunctionEmitter, limit: int | None):
        self.fe, self.limit = fe, limit
        self.blocks = counted(fe.g, limit)
        eb = fe.eb
        self.n = eb.alloca(I64, name="poll.n")
        self.bound = eb.alloca(I64, name="poll.bound")
        eb.store(I64(0), self.n)
        eb.store(I64(FIRST if limit is None else min(FIRST, limit)), self.bound)

    def check(self, blk: Block) -> None:
        """The check at the top of ``blk`` (after its Phis and reads ahead)."""
        fe, b = self.fe, self.fe.b
        mod = fe.mod
        n = b.add(b.load(self.n, typ=I64), I64(1))
        b.store(n, self.n)
        slow, cont = fe.fn.append_basic_block(f"poll.{blk.name}"), fe.fn.append_basic_block(f"polled.{blk.name}")
        b.cbranch(b.icmp_signed(">", n, b.load(self.bound, typ=I64)), slow, cont).set_weights([1, fe.COLD])
        b.position_at_end(slow)
        nxt = b.add(n, I64(CHUNK))
        if self.limit is not None:
            code = mod.limit_code(fe.g, blk, limit_message(fe.g, self.limit, blk))
            fe.fail_code(b.icmp_signed(">", n, I64(self.limit)), code)
            nxt = b.select(b.icmp_signed(">", nxt, I64(self.limit)), I64(self.limit), nxt)
        stop = b.call(mod.declare(TICK, I32, []), [])
        fe.fail_code(b.icmp_unsigned("!=", stop, I32(0)), mod.interrupt_code())
        b.store(nxt, self.bound)
        b.branch(cont)
        b.position_at_end(cont)

    def spend(self, dims: list[ir.Value]) -> None:
        """Array work of ``prod(dims)`` elements was just emitted: the next tick comes sooner."""
        if not dims:
            return
        b = self.fe.b
        elems: ir.Value = dims[0]
        for d in dims[1:]:
            elems = b.mul(elems, d)
        b.store(b.sub(b.load(self.bound, typ=I64), b.lshr(elems, I64(ELEMENT_SHIFT))), self.bound)

    def spend_node(self, node: Node, value: Any, inputs: list[Any]) -> None:
        """What running ``node`` (its value and its inputs' values) spends (see above)."""
        op = node.op.name
        if op == "Constant" or node.op.kind == "phi":
            return
        if isinstance(value, Tensor):
            data = inputs[0] if inputs else None
            if op == "SetItem" and isinstance(data, Tensor) and data.ptr is not None and value.ptr is data.ptr:
                return  # written in place: one store
            if value.elem is None:  # computed into a buffer here (a lazy one is paid where it is read)
                self.spend(value.dims)
            return
        if op in _SCALAR_READS:
            return
        for v in inputs:
            if isinstance(v, Tensor):
                self.spend(v.dims)


def leave(fe: FunctionEmitter, xb: ir.IRBuilder) -> None:
    """On the entry function's way out: restore the SIGINT action if a tick armed it."""
    mod = fe.mod.module
    armed = mod.globals.get(ARMED)
    if armed is None:
        armed = ir.GlobalVariable(mod, I32, ARMED)  # external: the runtime's
    fn = fe.mod.declare(LEAVE, ir.VoidType(), [])
    yes, done = fe.fn.append_basic_block("poll.leave"), fe.fn.append_basic_block("poll.left")
    xb.cbranch(xb.icmp_unsigned("!=", xb.load(armed, typ=I32), I32(0)), yes, done)
    xb.position_at_end(yes)
    xb.call(fn, [])
    xb.branch(done)
    xb.position_at_end(done)
