"""TopK (and so ``np.argsort`` / ``np.sort``, which scripts spell as TopK) through libc's
``qsort_r`` with a comparator emitted here.

The reference kernel sorts stably on the key (``-x`` for the largest, ``x`` for the
smallest; unsigned and bool keys as f64), NaN last: the comparator orders positions by
(key, position), a total order, so the unstable ``qsort_r`` gives the stable sort's
answer.  Integer keys are negated with wrap-around, as NumPy's ``-x`` is.  With
``sorted=False`` the k positions are sorted again by position.

The outputs' buffers are allocated where TopK runs (k is known only then): the previous
buffer of the same node is freed first, so a TopK in a loop does not leak, and the last
ones are freed on exit.  A fresh symbol for k is bound to k's value there; a later buffer
allocated on entry with that dim cannot be emitted (Unsupported).
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

import sympy
from llvmlite import ir

from nexus.backends.base import register_lowering
from nexus.backends.llvm.dtypes import I32, I64, PTR, Unsupported, itemsize, kind, mem_type, to_mem
from nexus.backends.llvm.rules import BACKEND, convert
from nexus.backends.llvm.tensors import Tensor, linear, loop_nest
from nexus.ir.node import Node
from nexus.ir.types import TensorType, TupleType

if TYPE_CHECKING:
    from nexus.backends.llvm.emit import FunctionEmitter, ModuleEmitter



def _key_dtype(dtype: str, largest: bool) -> str:
    return "f64" if kind(dtype) in "ub" and largest else dtype


def _new_comparator(mod: ModuleEmitter, name: str) -> tuple[ir.Function, ir.IRBuilder | None]:
    """The module's ``int name(i64 *a, i64 *b, ctx *c)``, and a builder at its entry when
    it is new (None when the module has it already)."""
    fn = mod.module.globals.get(name)
    if fn is not None:
        return fn, None
    fn = ir.Function(mod.module, ir.FunctionType(I32, [PTR, PTR, PTR]), name)
    fn.linkage = "internal"
    return fn, ir.IRBuilder(fn.append_basic_block("entry"))


def _by_pos(b: ir.IRBuilder, ia: ir.Value, ib: ir.Value) -> ir.Value:
    """-1, 0 or 1 as position ``ia`` is before, at or after ``ib``."""
    return b.sub(b.zext(b.icmp_signed(">", ia, ib), I32), b.zext(b.icmp_signed("<", ia, ib), I32))


def _comparator(mod: ModuleEmitter, dtype: str, largest: bool) -> ir.Function:
    """``int cmp(i64 *a, i64 *b, ctx *c)`` over positions, by (key, position)."""
    fn, b = _new_comparator(mod, f"nexus.topk.cmp.{dtype}.{'max' if largest else 'min'}")
    if b is None:
        return fn
    pa, pb, ctx = fn.args
    ia, ib = b.load(pa, typ=I64), b.load(pb, typ=I64)
    # ctx: two i64, the key row's base address and the stride along the axis
    base = b.inttoptr(b.load(b.gep(ctx, [I64(0)], source_etype=I64), typ=I64), PTR)
    stride = b.load(b.gep(ctx, [I64(1)], source_etype=I64), typ=I64)
    et = mem_type(dtype)
    kd = _key_dtype(dtype, largest)

    def key(i: ir.Value) -> ir.Value:
        v = b.load(b.gep(base, [b.mul(i, stride)], source_etype=et), typ=et)
        v = convert(b, b.icmp_unsigned("!=", v, ir.Constant(et, 0)) if kind(dtype) == "b" else v, dtype, kd)
        if largest:
            v = b.fneg(v) if kind(kd) == "f" else b.sub(ir.Constant(v.type, 0), v)
        return v

    ka, kb = key(ia), key(ib)
    k = kind(kd)
    if k == "f":
        nan_a, nan_b = b.fcmp_unordered("uno", ka, ka), b.fcmp_unordered("uno", kb, kb)
        less = b.or_(b.fcmp_ordered("<", ka, kb), b.and_(b.not_(nan_a), nan_b))
        more = b.or_(b.fcmp_ordered(">", ka, kb), b.and_(nan_a, b.not_(nan_b)))
    else:
        cmp = b.icmp_signed if k == "i" else b.icmp_unsigned
        less, more = cmp("<", ka, kb), cmp(">", ka, kb)
    b.ret(b.select(less, I32(-1), b.select(more, I32(1), _by_pos(b, ia, ib))))
    return fn


def _by_position(mod: ModuleEmitter) -> ir.Function:
    fn, b = _new_comparator(mod, "nexus.topk.cmp.position")
    if b is not None:
        b.ret(_by_pos(b, b.load(fn.args[0], typ=I64), b.load(fn.args[1], typ=I64)))
    return fn


def _buffer(fe: FunctionEmitter, nbytes: ir.Value) -> ir.Value:
    """A buffer allocated here, the slot's previous one freed (see the module docstring)."""
    slot = fe.eb.alloca(PTR)
    fe.eb.store(ir.Constant(PTR, None), slot)
    fe.slots.append(slot)
    b = fe.b
    free = fe.mod.declare("free", ir.VoidType(), [PTR])
    b.call(free, [b.load(slot, typ=PTR)])
    p = b.call(fe.mod.declare("malloc", PTR, [I64]), [nbytes])
    b.store(p, slot)
    return p


@register_lowering(BACKEND, "TopK")
def _topk(fe: FunctionEmitter, n: Node, ins: list[Any]) -> tuple[Any, ...]:
    x, k = ins
    if not isinstance(x, Tensor) or isinstance(k, Tensor):
        raise Unsupported("TopK of a scalar or with a tensor k")
    if not sys.platform.startswith("linux"):  # BSD and macOS qsort_r take their arguments in another order
        raise Unsupported("TopK needs glibc's qsort_r")
    axis = int(n.attrs.get("axis", -1))
    axis = axis + x.rank if axis < 0 else axis
    largest, is_sorted = bool(n.attrs.get("largest", True)), bool(n.attrs.get("sorted", True))
    b, mod = fe.b, fe.mod
    k = b.sext(k, I64) if k.type.width < 64 else k
    dim = x.dims[axis]
    fe.fail(b.or_(b.icmp_signed("<", k, I64(0)), b.icmp_signed(">", k, dim)), n, "ValueError",
            "TopK: k is out of range for the axis")
    t = n.type
    assert isinstance(t, TupleType)
    vt, it = t.elems[0], t.elems[1]
    assert isinstance(vt, TensorType) and isinstance(it, TensorType) and vt.shape is not None
    kdim = vt.shape[axis]
    if isinstance(kdim, sympy.Symbol) and kdim not in fe.env:
        fe.env[kdim] = k
        fe.late.add(kdim)
    out_dims = [*x.dims[:axis], k, *x.dims[axis + 1:]]
    count = I64(1)
    for d in out_dims:
        count = b.mul(count, d)
    if x.ptr is None:  # a lazy input: the comparator reads memory
        src = _buffer(fe, b.mul(I64(itemsize(x.dtype)), _count(b, x.dims)))
        from nexus.backends.llvm.tensors import store_all

        store_all(b, x, src)
        x = Tensor(x.dtype, x.shape, x.dims, ptr=src)
    vals = _buffer(fe, b.mul(count, I64(itemsize(x.dtype))))
    idxs = _buffer(fe, b.mul(count, I64(8)))
    work = _buffer(fe, b.mul(dim, I64(8)))
    ctx = fe.eb.bitcast(fe.eb.alloca(I64, size=2), PTR)
    qsort_r = mod.declare("qsort_r", ir.VoidType(), [PTR, I64, I64, PTR, PTR])
    cmp, by_pos = _comparator(mod, x.dtype, largest), _by_position(mod)
    outer = [d for a, d in enumerate(x.dims) if a != axis]
    stride = _count(b, x.dims[axis + 1:])
    et = mem_type(x.dtype)

    def row(o: list[ir.Value]) -> None:
        at = [*o[:axis], I64(0), *o[axis:]]
        base = b.gep(x.ptr, [linear(b, at, x.dims)], inbounds=True, source_etype=et)
        b.store(b.ptrtoint(base, I64), b.gep(ctx, [I64(0)], source_etype=I64))
        b.store(stride, b.gep(ctx, [I64(1)], source_etype=I64))
        loop_nest(b, [dim], lambda i: b.store(i[0], b.gep(work, [i[0]], source_etype=I64)), name="pos")
        b.call(qsort_r, [work, dim, I64(8), cmp, ctx])
        if not is_sorted:
            b.call(qsort_r, [work, k, I64(8), by_pos, ctx])

        def put(j: list[ir.Value]) -> None:
            p = b.load(b.gep(work, [j[0]], source_etype=I64), typ=I64)
            v = x.load(b, [*o[:axis], p, *o[axis:]])
            off = linear(b, [*o[:axis], j[0], *o[axis:]], out_dims)
            b.store(to_mem(b, v, x.dtype), b.gep(vals, [off], source_etype=et))
            b.store(p, b.gep(idxs, [off], source_etype=I64))

        loop_nest(b, [k], put, name="take")

    loop_nest(b, outer, row, name="row")
    return (Tensor(x.dtype, vt.shape, out_dims, ptr=vals), Tensor("i64", vt.shape, out_dims, ptr=idxs), k)


def _count(b: ir.IRBuilder, dims: list[ir.Value]) -> ir.Value:
    n = I64(1)
    for d in dims:
        n = b.mul(n, d)
    return n
