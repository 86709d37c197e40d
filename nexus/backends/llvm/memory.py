"""Rules that write memory: ``SetItem`` (``x[i] = v``, ``x[i, j] = v``) as a store.

A SetItem's value is a copy of ``data`` with some elements replaced.  The copy is skipped
(the store goes into ``data``'s own buffer) only when that is provably invisible:

- the buffer belongs to the function (a Phi's, a computed value's or an earlier SetItem's,
  never an argument's or a constant's) and ``data`` is the node that owns it (not an
  alias such as an ``Identity`` of it);
- ``data`` is dead after this node: not live out of the block (a Phi input on a leaving
  edge counts as live out), no later node of this block reads it, and no user emitted
  before holds a view of its buffer or a lazy elementwise tensor over it that is still to
  be evaluated (a user of it not emitted yet, or a Phi);
- the value written is not a lazy expression (which might read ``data`` while it changes).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from llvmlite import ir

from nexus.backends.base import register_lowering
from nexus.backends.llvm.dtypes import I1, I64, PTR, Unsupported, itemsize, kind, mem_type, to_mem
from nexus.backends.llvm.rules import BACKEND
from nexus.backends.llvm.tensors import Tensor, broadcast_index, linear, loop_nest, store_all
from nexus.ir.analysis import liveness
from nexus.ir.node import Node
from nexus.ir.types import TensorType

if TYPE_CHECKING:
    from nexus.backends.llvm.emit import FunctionEmitter


def _may_write_in_place(fe: FunctionEmitter, n: Node, data: Tensor, value: Any) -> bool:
    d = n.input(0)
    if data.ptr is None or d not in fe.owner.get(id(data.ptr), ()):
        return False
    if isinstance(value, Tensor) and (value.elem is not None or value.ptr is data.ptr):
        return False
    if n.block is None or liveness(fe.g).is_live_out(d, n.block):
        return False
    for u in d.users:
        if u is n or u.op.kind == "phi":  # a Phi reads on an edge: liveness covers it
            continue
        if u not in fe.vals:  # not emitted yet: a later node of this block reads the old value
            if u.block is n.block:
                return False
            continue  # elsewhere: it runs after this node only where d is live out (checked above)
        val = fe.vals[u]
        if isinstance(val, tuple) or (isinstance(val, Tensor) and (val.ptr is data.ptr or val.view)):
            return False  # an aliasing value (a row of it, say)
        if isinstance(val, Tensor) and val.elem is not None and _read_later(fe, u, set()):
            return False  # a lazy value that is still to be evaluated would read the new contents
    return sum(1 for v in n.inputs if v is d) == 1


def _read_later(fe: FunctionEmitter, u: Node, seen: set[Node]) -> bool:
    """Whether the lazy value of ``u`` may still be evaluated: some user of it is not
    emitted yet, is a Phi (which stores it on an edge), or is lazy itself and may be."""
    seen.add(u)
    for w in u.users:
        if w in seen:
            continue
        if w.op.kind == "phi" or w not in fe.vals:
            return True
        val = fe.vals[w]
        if isinstance(val, tuple) or (isinstance(val, Tensor) and val.elem is not None and _read_later(fe, w, seen)):
            return True
    return False


def copy_into(fe: FunctionEmitter, t: Tensor, dst: ir.Value) -> None:
    """``dst[...] = t``: one memcpy from a buffer, else the fused loop nest."""
    b = fe.b
    if t.ptr is None:
        store_all(b, t, dst)
        return
    size = I64(itemsize(t.dtype))
    for dim in t.dims:
        size = b.mul(size, dim)
    memcpy = fe.mod.module.declare_intrinsic("llvm.memcpy", [PTR, PTR, I64])
    b.call(memcpy, [dst, t.ptr, size, I1(0)])


@register_lowering(BACKEND, "SetItem")
def _setitem(fe: FunctionEmitter, n: Node, ins: list[Any]) -> Tensor:
    data, value, *idx = ins
    kinds = str(n.attrs["kinds"])
    if not isinstance(data, Tensor):
        raise Unsupported("SetItem on a scalar")
    if set(kinds) - {"i"} or any(isinstance(i, Tensor) for i in idx):
        raise Unsupported(f"SetItem with kinds {kinds!r} or tensor indices (only int scalars)")
    if any(isinstance(v.type, TensorType) and kind(v.type.dtype) == "b" for v in n.inputs[2:]):
        raise Unsupported("SetItem with a bool index")
    if isinstance(value, Tensor) and value.rank > data.rank - len(kinds):
        raise Unsupported("SetItem with a value of higher rank than the part it replaces")
    b = fe.b
    k = len(kinds)
    offs = []
    for axis, (i, node) in enumerate(zip(idx, n.inputs[2:])):
        dim = data.dims[axis]
        ik = kind(node.type.dtype) if isinstance(node.type, TensorType) else "i"
        offs.append(fe.index(i, dim, ik == "i", n, f"index out of bounds for axis {axis} of SetItem's data"))
    if _may_write_in_place(fe, n, data, value):
        buf = data.ptr
    else:
        buf = fe.alloc(data.shape, data.dtype)
        copy_into(fe, data, buf)
    assert buf is not None
    fe.owner.setdefault(id(buf), set()).add(n)
    out = Tensor(data.dtype, data.shape, data.dims, ptr=buf)
    rest_dims, rest_shape = data.dims[k:], data.shape[k:]
    et = mem_type(data.dtype)
    base = linear(b, offs, data.dims[:k]) if offs else I64(0)

    def body(tail: list[ir.Value]) -> None:
        if isinstance(value, Tensor):
            v = value.load(b, broadcast_index(b, tail, rest_shape, value))
        else:
            v = value
        off = base
        for i, d in zip(tail, rest_dims):
            off = b.add(b.mul(off, d, flags=["nuw", "nsw"]), i, flags=["nuw", "nsw"])
        b.store(to_mem(b, v, data.dtype), b.gep(buf, [off], inbounds=True, source_etype=et))

    loop_nest(b, rest_dims, body, name="set")
    return out
