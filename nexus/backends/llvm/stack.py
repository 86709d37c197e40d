"""The stack ops of gradient graphs (``StackNew``, ``StackPush``, ``StackPop``) as one
growing buffer per ``StackNew``, and a stack value as the byte offset of its top.

A stack is a persistent value (``Push`` returns a new stack, the old one stays valid), so in
general two pushes onto the same stack must not see each other.  Gradient graphs never
fork a stack: along any path each stack value is consumed once (pushed onto, popped, or
carried by a Phi) before the block defining it runs again.  Such a stack behaves as one
mutable stack, so each ``StackNew`` gets one buffer (``malloc``-ed on its first push,
doubled with ``realloc`` when full, freed on the way out), a push writes the value at the
offset and returns the offset after it, a pop reads the bytes below the offset.
:func:`origins` checks that use and names the ``StackNew`` behind each stack value; a
graph that forks a stack, merges two stacks in a Phi or creates one inside a loop is
refused (it stays on the python backend).

Each entry takes a multiple of 8 bytes, so every scalar and array starts aligned.  A
popped array is copied into a buffer of its own: later pushes may move the stack's buffer.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from llvmlite import ir

from nexus.backends.base import register_lowering
from nexus.backends.llvm.dtypes import I1, I64, PTR, Unsupported, itemsize, mem_type, to_mem, to_reg
from nexus.backends.llvm.rules import BACKEND
from nexus.backends.llvm.tensors import Tensor, store_all
from nexus.ir.analysis import successors
from nexus.ir.graph import Graph
from nexus.ir.node import Block, Node
from nexus.ir.types import StackType, TensorType, TupleType

if TYPE_CHECKING:
    from nexus.backends.llvm.emit import FunctionEmitter

ALIGN = 8
FIRST_CAPACITY = 4096  # bytes of a stack's first buffer


def _is_stack(n: Node) -> bool:
    return isinstance(n.type, StackType)


def _stack_input(n: Node) -> Node | None:
    """The stack ``n`` continues: a Push's or a Pop's input, a Pop's ``rest`` Proj's Pop."""
    if n.op.name in ("StackPush", "StackPop"):
        return n.input(0)
    if n.op.name == "Proj" and n.input(0).op.name == "StackPop" and int(n.attrs["num"]) == 0:
        return n.input(0)
    return None


def origins(g: Graph) -> dict[Node, Node]:
    """The ``StackNew`` behind each stack value of ``g`` (Pops included); Unsupported where
    the stacks are not used as one mutable stack each (see the module docstring)."""
    out: dict[Node, Node] = {}
    nodes = list(g.nodes())
    changed = True
    while changed:
        changed = False
        for n in nodes:
            if n in out:
                continue
            if n.op.name == "StackNew":
                out[n] = n
            elif (s := _stack_input(n)) is not None and s in out:
                out[n] = out[s]
            elif n.op.kind == "phi" and _is_stack(n):
                known = {out[v] for v in n.inputs if v in out}
                if len(known) > 1:
                    raise Unsupported(f"Phi %{n.name or '?'} merges two stacks")
                if known:
                    out[n] = known.pop()
            else:
                continue
            changed = True
    for n in nodes:
        if (_is_stack(n) or n.op.name == "StackPop") and n not in out:
            raise Unsupported(f"{n.op.name} %{n.name or '?'}: a stack of unknown origin")
        if n.op.kind == "phi" and _is_stack(n) and any(v not in out or out[v] is not out[n] for v in n.inputs):
            raise Unsupported(f"Phi %{n.name or '?'} merges two stacks")
    for new in {o for o in out.values()}:
        assert new.block is not None
        if new.block in _reach(new.block, None):
            raise Unsupported(f"StackNew %{new.name or '?'} inside a loop")
    for v in out:
        if v.op.name != "StackPop":
            _check_linear(v)
    return out


def _reach(start: Block, stop: Block | None) -> set[Block]:
    """Blocks reachable from ``start`` by one edge or more without entering ``stop``."""
    seen: set[Block] = set()
    todo = successors(start)
    while todo:
        blk = todo.pop()
        if blk in seen or blk is stop:
            continue
        seen.add(blk)
        todo += successors(blk)
    return seen


def _check_linear(v: Node) -> None:
    """Unsupported unless every path consumes stack value ``v`` at most once before the
    block defining it runs again (entering that block defines ``v`` anew)."""
    home = v.block
    assert home is not None
    # per consumer: the block at whose end (or in which) it consumes v, the edge (for a
    # Phi: the control value it takes v along) and the blocks that may run after it
    uses: list[tuple[Block, Node | None, set[Block]]] = []
    for u, i in v.uses:
        if i < 0:
            continue
        assert u.block is not None
        if u.op.kind == "phi":
            edge = u.block.input(i)
            assert edge.block is not None
            after = set() if u.block is home else {u.block} | _reach(u.block, home)
            uses.append((edge.block, edge, after))
        elif u.op.name in ("StackPush", "StackPop"):
            uses.append((u.block, None, _reach(u.block, home)))
        else:
            raise Unsupported(f"stack %{v.name or '?'} used by {u.op.name}")
    for k, (blk1, via1, after) in enumerate(uses):
        for j, (blk2, via2, _after2) in enumerate(uses):
            if blk2 in after or (j > k and blk2 is blk1 and (via1 is None or via2 is None or via1 is via2)):
                raise Unsupported(f"stack %{v.name or '?'} used twice on one path (a stack that forks)")


def _entry_bytes(fe: FunctionEmitter, dtype: str, dims: list[ir.Value]) -> tuple[ir.Value, ir.Value]:
    """The bytes of a value and the bytes its entry takes (rounded up to ALIGN)."""
    b = fe.b
    n = I64(itemsize(dtype))
    for d in dims:
        n = b.mul(n, d)
    return n, b.and_(b.add(n, I64(ALIGN - 1)), I64(-ALIGN))


def _buffer(fe: FunctionEmitter, n: Node) -> tuple[ir.Value, ir.Value]:
    """The slots holding the buffer pointer and capacity of the stack ``n`` belongs to."""
    if fe.stack_origins is None:
        fe.stack_origins = origins(fe.g)
    new = fe.stack_origins[n]
    if new not in fe.stack_buffers:
        ptr, cap = fe.eb.alloca(PTR), fe.eb.alloca(I64)
        fe.eb.store(ir.Constant(PTR, None), ptr)
        fe.eb.store(I64(0), cap)
        fe.slots.append(ptr)  # freed on the way out
        fe.stack_buffers[new] = (ptr, cap)
    return fe.stack_buffers[new]


@register_lowering(BACKEND, "StackNew")
def _stack_new(fe: FunctionEmitter, n: Node, ins: list[Any]) -> ir.Value:
    _buffer(fe, n)
    return I64(0)


@register_lowering(BACKEND, "StackPush")
def _stack_push(fe: FunctionEmitter, n: Node, ins: list[Any]) -> ir.Value:
    top, value = ins
    b = fe.b
    ptr_slot, cap_slot = _buffer(fe, n)
    t = n.input(1).type
    assert isinstance(t, TensorType)
    dims = value.dims if isinstance(value, Tensor) else []
    size, step = _entry_bytes(fe, t.dtype, dims)
    need = b.add(top, step)
    cap = b.load(cap_slot, typ=I64)
    with b.if_then(b.icmp_unsigned(">", need, cap), likely=False):
        doubled = b.mul(cap, I64(2))
        grown = b.select(b.icmp_unsigned(">", doubled, need), doubled, need)
        grown = b.select(b.icmp_unsigned("<", grown, I64(FIRST_CAPACITY)), I64(FIRST_CAPACITY), grown)
        realloc = fe.mod.declare("realloc", PTR, [PTR, I64])
        p = b.call(realloc, [b.load(ptr_slot, typ=PTR), grown])
        fe.fail(b.icmp_unsigned("==", p, ir.Constant(PTR, None)), n, "MemoryError", "out of memory for the stack")
        b.store(p, ptr_slot)
        b.store(grown, cap_slot)
    dst = b.gep(b.load(ptr_slot, typ=PTR), [top], source_etype=mem_type("u8"))
    if not isinstance(value, Tensor):
        b.store(to_mem(b, value, t.dtype), dst)
    elif value.ptr is not None:
        memcpy = fe.mod.module.declare_intrinsic("llvm.memcpy", [PTR, PTR, I64])
        b.call(memcpy, [dst, value.ptr, size, I1(0)])
    else:
        store_all(b, value, dst)
    return need


@register_lowering(BACKEND, "StackPop")
def _stack_pop(fe: FunctionEmitter, n: Node, ins: list[Any]) -> tuple[ir.Value, Any]:
    (top,) = ins
    b = fe.b
    ptr_slot, _cap = _buffer(fe, n)
    tt = n.type
    assert isinstance(tt, TupleType)
    t = tt.elems[1]
    if not isinstance(t, TensorType) or t.shape is None:
        raise Unsupported(f"StackPop %{n.name or '?'} of type {t} (no shape)")
    dims = fe.dims(t.shape)
    size, step = _entry_bytes(fe, t.dtype, dims)
    fe.fail(b.icmp_unsigned("<", top, step), n, "IndexError", "pop from an empty stack")
    rest = b.sub(top, step)
    src = b.gep(b.load(ptr_slot, typ=PTR), [rest], source_etype=mem_type("u8"))
    if not t.shape:
        return rest, to_reg(b, b.load(src, typ=mem_type(t.dtype)), t.dtype)
    buf = fe.alloc(t.shape, t.dtype)
    fe.owner[id(buf)] = {n}
    memcpy = fe.mod.module.declare_intrinsic("llvm.memcpy", [PTR, PTR, I64])
    b.call(memcpy, [buf, src, size, I1(0)])
    return rest, Tensor(t.dtype, t.shape, fe.dims(t.shape, fe.eb), ptr=buf)
