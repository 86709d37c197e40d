"""Reductions as loop nests: ReduceSum/Mean/Max/Min/Prod over ``axes`` (with ``keepdims``)
and ArgMax/ArgMin over one axis.

For each element of the result, an accumulator (an ``alloca`` that LLVM keeps in a
register) runs over the reduced axes in row-major order, reading the input through its
``load``, so an elementwise chain feeding a reduction is fused into it.  A scalar result
stays in registers; a tensor result is written into a buffer of its own.

Semantics are NumPy's: integer sums and products wrap in the input dtype, Max/Min and
Arg* propagate NaN (the first NaN wins, or the last with ``select_last_index``), Max/Min
and Arg* of an empty axis fail with NumPy's ValueError, a mean of integers is f64.
Float sums run sequentially, where NumPy sums pairwise: the results agree to rounding,
not bit for bit.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from llvmlite import ir

from nexus.backends.base import register_lowering
from nexus.backends.llvm.dtypes import I1, I64, Unsupported, constant, itemsize, kind, mem_type, reg_type, to_mem
from nexus.backends.llvm.rules import BACKEND, convert, out_dtype
from nexus.backends.llvm.tensors import Tensor, linear, loop_nest
from nexus.ir.node import Node
from nexus.ir.types import TensorType
from nexus.ops.reduce import reduced_axes

if TYPE_CHECKING:
    from nexus.backends.llvm.emit import FunctionEmitter

# step(builder, acc, aux, element, position along the reduced axes) -> (acc, aux)
Step = Callable[[ir.IRBuilder, ir.Value, ir.Value, ir.Value, ir.Value], tuple[ir.Value, ir.Value]]


def _nan(b: ir.IRBuilder, v: ir.Value) -> ir.Value:
    return b.fcmp_unordered("uno", v, v)


def _run(fe: FunctionEmitter, n: Node, x: Tensor, axes: tuple[int, ...], keep: bool, acc_dtype: str,
         init: tuple[ir.Value, ir.Value], step: Step, finish: Callable[[ir.Value, ir.Value], ir.Value]) -> Any:
    """The reduction loop nest: ``(acc, aux) = init``, then ``step`` per element of the
    reduced axes, ``finish(acc, aux)`` per element of the result."""
    b = fe.b
    out_axes = [a for a in range(x.rank) if a not in axes]
    red_dims = [x.dims[a] for a in axes]
    acc = fe.eb.alloca(reg_type(acc_dtype))
    aux = fe.eb.alloca(I64)

    def one(out_idx: list[ir.Value]) -> ir.Value:
        b.store(init[0], acc)
        b.store(init[1], aux)

        def inner(red_idx: list[ir.Value]) -> None:
            full: list[ir.Value] = [I64(0)] * x.rank
            for a, i in zip(out_axes, out_idx):
                full[a] = i
            for a, i in zip(axes, red_idx):
                full[a] = i
            pos = linear(b, red_idx, red_dims) if red_idx else I64(0)
            na, nx = step(b, b.load(acc), b.load(aux), x.load(b, full), pos)
            b.store(na, acc)
            b.store(nx, aux)

        loop_nest(b, red_dims, inner, name="red")
        return finish(b.load(acc), b.load(aux))

    return _per_result(fe, n, axes, keep, one)


def _per_result(fe: FunctionEmitter, n: Node, axes: tuple[int, ...], keep: bool,
                one: Callable[[list[ir.Value]], ir.Value]) -> Any:
    """``one(index over the kept axes)`` for each element of ``n``'s result: a scalar, or
    a buffer of its own filled in a loop nest."""
    b = fe.b
    t = n.type
    assert isinstance(t, TensorType) and t.shape is not None
    if not t.shape:
        return one([])
    dt = out_dtype(n)
    out_dims = fe.dims(t.shape)
    buf = fe.alloc(t.shape, dt)
    fe.owner[id(buf)] = {n}

    def body(idx: list[ir.Value]) -> None:
        src = [i for a, i in enumerate(idx) if a not in axes] if keep else idx
        v = one(src)
        b.store(to_mem(b, v, dt), b.gep(buf, [linear(b, idx, out_dims)], inbounds=True, source_etype=mem_type(dt)))

    loop_nest(b, out_dims, body, name="out")
    return Tensor(dt, t.shape, out_dims, ptr=buf)


def _size(b: ir.IRBuilder, dims: list[ir.Value]) -> ir.Value:
    n = I64(1)
    for d in dims:
        n = b.mul(n, d)
    return n


@register_lowering(BACKEND, "ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd")
def _reduce(fe: FunctionEmitter, n: Node, ins: list[Any]) -> Any:
    (x,) = ins
    if not isinstance(x, Tensor):
        raise Unsupported(f"{n.op.name} of a scalar")
    op, src = n.op.name, x.dtype
    k = kind(src)
    if k == "b":
        raise Unsupported(f"{op} on bools")
    axes = reduced_axes(op, x.rank, n.attrs.get("axes"))
    keep = bool(n.attrs.get("keepdims", False))
    acc_dt = out_dtype(n) if op == "ReduceMean" else src
    b = fe.b
    count = _size(b, [x.dims[a] for a in axes])
    if op in ("ReduceMax", "ReduceMin"):
        fe.fail(b.icmp_unsigned("==", count, I64(0)), n, "ValueError",
                f"zero-size array to reduction operation {op[6:].lower()}imum which has no identity")
    t = reg_type(acc_dt)
    zero = constant(acc_dt, 0)

    def step(b: ir.IRBuilder, acc: ir.Value, aux: ir.Value, v: ir.Value, pos: ir.Value) -> tuple[ir.Value, ir.Value]:
        v = convert(b, v, src, acc_dt)
        if op in ("ReduceSum", "ReduceMean"):
            return (b.fadd(acc, v) if kind(acc_dt) == "f" else b.add(acc, v)), aux
        if op == "ReduceProd":
            return (b.fmul(acc, v) if k == "f" else b.mul(acc, v)), aux
        first = b.icmp_unsigned("==", pos, I64(0))
        if k == "f":  # NaN propagates: once acc is NaN it stays
            better = b.fcmp_ordered(">" if op == "ReduceMax" else "<", v, acc)
            take = b.or_(b.or_(first, better), b.and_(_nan(b, v), b.not_(_nan(b, acc))))
        else:
            cmp = b.icmp_signed if k == "i" else b.icmp_unsigned
            take = b.or_(first, cmp(">" if op == "ReduceMax" else "<", v, acc))
        return b.select(take, v, acc), aux

    def finish(acc: ir.Value, aux: ir.Value) -> ir.Value:
        if op == "ReduceMean":
            return b.fdiv(acc, b.uitofp(count, t))
        return acc

    init = constant(acc_dt, 1) if op == "ReduceProd" else zero
    return _run(fe, n, x, axes, keep, acc_dt, (init, I64(0)), step, finish)


@register_lowering(BACKEND, "ArgMax", "ArgMin")
def _arg(fe: FunctionEmitter, n: Node, ins: list[Any]) -> Any:
    (x,) = ins
    if not isinstance(x, Tensor):
        raise Unsupported(f"{n.op.name} of a scalar")
    op, dt = n.op.name, x.dtype
    k = kind(dt)
    axis = int(n.attrs.get("axis", 0))
    axis = axis + x.rank if axis < 0 else axis
    last = bool(n.attrs.get("select_last_index", False))
    b = fe.b
    fe.fail(b.icmp_unsigned("==", x.dims[axis], I64(0)), n, "ValueError",
            f"attempt to get {op.lower()} of an empty sequence")
    gt = ">" if op == "ArgMax" else "<"
    if k == "f" and not last:
        if dt in _LANES and axis == x.rank - 1:
            from nexus.backends.llvm.matmul import materialise

            try:  # a fused producer (a Gemm's bias) is stored once, then read as vectors
                return _arg_rows(fe, n, materialise(fe, x), op == "ArgMax")
            except Unsupported:  # no buffer for it: a size known only from the data
                pass
        return _arg_two_pass(fe, n, x, axis, op == "ArgMax")

    def step(b: ir.IRBuilder, acc: ir.Value, aux: ir.Value, v: ir.Value, pos: ir.Value) -> tuple[ir.Value, ir.Value]:
        first = b.icmp_unsigned("==", pos, I64(0))
        if k == "f":
            if last:  # the last extremum; any NaN beats numbers, the last NaN wins
                better = b.and_(b.fcmp_ordered(gt + "=", v, acc), b.not_(_nan(b, acc)))
                take = b.or_(b.or_(first, better), _nan(b, v))
            else:  # the first extremum; the first NaN wins
                better = b.fcmp_ordered(gt, v, acc)
                take = b.or_(b.or_(first, better), b.and_(_nan(b, v), b.not_(_nan(b, acc))))
        else:
            cmp = b.icmp_signed if k == "i" else b.icmp_unsigned
            take = b.or_(first, cmp(gt + ("=" if last else ""), v, acc))
        return b.select(take, v, acc), b.select(take, pos, aux)

    zero = constant(dt, 0) if k != "b" else I1(0)
    if k == "b":
        raise Unsupported(f"{op} on bools")
    return _run(fe, n, x, (axis,), bool(n.attrs.get("keepdims", False)), dt, (zero, I64(0)), step,
                lambda acc, aux: aux)


# ArgMax/ArgMin of f32/f64 rows (over the last axis): vectors of 32 bytes.
_LANES = {"f32": 8, "f64": 4}


def _arg_rows(fe: FunctionEmitter, n: Node, x: Tensor, is_max: bool) -> Any:
    """:func:`_arg_two_pass` over the contiguous rows of the buffer ``x``, both passes on vectors written out here
    (LLVM vectorises neither: ``maxnum`` is no reduction it knows without fast-math, and
    the search stops early): the extremum and whether a NaN occurs, then the first vector
    with a hit and its first lane (``cttz`` of the compare's mask), the remainder in
    scalars.  ArgMax of [8, 1000] f32 (a decoder's logits) in a loop: 12 us a call
    scalar, 1 us so."""
    b = fe.b
    ft = reg_type(x.dtype)
    lanes = _LANES[x.dtype]
    vt, mt, it = ir.VectorType(ft, lanes), ir.VectorType(I1, lanes), ir.IntType(lanes)
    name = "llvm.maxnum" if is_max else "llvm.minnum"
    ext = b.module.declare_intrinsic(name, [ft], ir.FunctionType(ft, [ft, ft]))
    vname = f"{name}.v{lanes}{ext.name.rsplit('.', 1)[1]}"  # llvmlite names no vector intrinsic
    vext = b.module.globals.get(vname) or ir.Function(b.module, ir.FunctionType(vt, [vt, vt]), vname)
    cttz = b.module.declare_intrinsic("llvm.cttz", [it], ir.FunctionType(it, [it, I1]))
    start = float("-inf") if is_max else float("inf")
    size = x.dims[-1]
    nvec = b.udiv(size, I64(lanes))
    full = b.mul(nvec, I64(lanes))
    vacc, vnan = fe.eb.alloca(vt), fe.eb.alloca(mt)
    vpt = ir.PointerType(vt)

    def vload(row: ir.Value, i: ir.Value) -> ir.Value:
        p = b.bitcast(b.gep(row, [i], inbounds=True, source_etype=ft), vpt)
        return b.load(p, typ=vt, align=itemsize(x.dtype))

    def splat(v: ir.Value) -> ir.Value:
        out: ir.Value = ir.Constant(vt, ir.Undefined)
        for j in range(lanes):
            out = b.insert_element(out, v, I64(j))
        return out

    def one(out_idx: list[ir.Value]) -> ir.Value:
        row = b.gep(x.ptr, [linear(b, [*out_idx, I64(0)], x.dims)], inbounds=True, source_etype=ft)
        b.store(ir.Constant(vt, [start] * lanes), vacc)
        b.store(ir.Constant(mt, [0] * lanes), vnan)

        def scan(i: list[ir.Value]) -> None:
            v = vload(row, b.mul(i[0], I64(lanes)))
            b.store(b.call(vext, [b.load(vacc), v]), vacc)  # maxnum skips NaN
            b.store(b.or_(b.load(vnan), b.fcmp_unordered("uno", v, v)), vnan)

        loop_nest(b, [nvec], scan, name="vext")
        acc, nans = b.load(vacc), b.load(vnan)
        m: ir.Value = ir.Constant(ft, start)
        any_nan: ir.Value = b.icmp_unsigned("!=", b.bitcast(nans, it), ir.Constant(it, 0))
        for j in range(lanes):
            m = b.call(ext, [m, b.extract_element(acc, I64(j))])
        m_slot, nan_slot = fe.eb.alloca(ft), fe.eb.alloca(I1)
        b.store(m, m_slot)
        b.store(any_nan, nan_slot)

        def tail(i: list[ir.Value]) -> None:
            v = b.load(b.gep(row, [b.add(full, i[0])], inbounds=True, source_etype=ft), typ=ft)
            b.store(b.call(ext, [b.load(m_slot), v]), m_slot)
            b.store(b.or_(b.load(nan_slot), _nan(b, v)), nan_slot)

        loop_nest(b, [b.sub(size, full)], tail, name="text")
        m, any_nan = b.load(m_slot), b.load(nan_slot)
        ms = splat(m)
        pre = b.block
        vhead, vbody, vnext, vfound, shead, sbody, done = (
            b.append_basic_block(f"find.{s}") for s in ("vhead", "vbody", "vnext", "vfound", "shead", "sbody", "done"))
        b.branch(vhead)
        b.position_at_end(vhead)
        i = b.phi(I64, name="findv")
        i.add_incoming(I64(0), pre)
        b.cbranch(b.icmp_unsigned("<", i, full), vbody, shead)
        b.position_at_end(vbody)
        v = vload(row, i)
        hit = b.select(any_nan, b.fcmp_unordered("uno", v, v), b.fcmp_ordered("==", v, ms))
        mask = b.bitcast(hit, it)
        b.cbranch(b.icmp_unsigned("!=", mask, ir.Constant(it, 0)), vfound, vnext)
        b.position_at_end(vnext)
        i.add_incoming(b.add(i, I64(lanes), flags=["nuw", "nsw"]), vnext)
        b.branch(vhead)
        b.position_at_end(vfound)
        at_v = b.add(i, b.zext(b.call(cttz, [mask, I1(1)]), I64))
        b.branch(done)
        # the remainder; its last position is the answer when no earlier one is (size >= 1)
        b.position_at_end(shead)
        j = b.phi(I64, name="finds")
        j.add_incoming(full, vhead)
        b.cbranch(b.icmp_unsigned("<", b.add(j, I64(1)), size), sbody, done)
        b.position_at_end(sbody)
        s = b.load(b.gep(row, [j], inbounds=True, source_etype=ft), typ=ft)
        shit = b.select(any_nan, _nan(b, s), b.fcmp_ordered("==", s, m))
        j.add_incoming(b.add(j, I64(1), flags=["nuw", "nsw"]), sbody)
        b.cbranch(shit, done, shead)
        b.position_at_end(done)
        res = b.phi(I64, name="argext")
        res.add_incoming(at_v, vfound)
        res.add_incoming(j, shead)
        res.add_incoming(j, sbody)
        return res

    return _per_result(fe, n, (x.rank - 1,), bool(n.attrs.get("keepdims", False)), one)


def _arg_two_pass(fe: FunctionEmitter, n: Node, x: Tensor, axis: int, is_max: bool) -> Any:
    """ArgMax/ArgMin of floats, the first extremum (the first NaN where there is one), in
    two passes over each row: the extremum (``maxnum``, which skips NaN) and whether a NaN
    occurs, then the first position that holds it (a loop that stops there).  One pass
    choosing (value, position) per element is a chain of dependent selects: ArgMax of
    [8, 1000] f32 took 38 us that way, 10 us in two passes (NumPy's SIMD argmax: 1 us;
    LLVM does not vectorise the first pass yet)."""
    b = fe.b
    dt = x.dtype
    w = "f32" if dt == "f16" else dt
    ft = reg_type(w)
    size = x.dims[axis]
    ext = b.module.declare_intrinsic("llvm.maxnum" if is_max else "llvm.minnum", [ft], ir.FunctionType(ft, [ft, ft]))
    start = ir.Constant(ft, float("-inf") if is_max else float("inf"))
    m_slot, nan_slot = fe.eb.alloca(ft), fe.eb.alloca(I1)

    def at(out_idx: list[ir.Value], i: ir.Value) -> ir.Value:
        full = list(out_idx)
        full.insert(axis, i)
        return convert(b, x.load(b, full), dt, w)

    def one(out_idx: list[ir.Value]) -> ir.Value:
        b.store(start, m_slot)
        b.store(I1(0), nan_slot)

        def scan(i: list[ir.Value]) -> None:
            v = at(out_idx, i[0])
            b.store(b.call(ext, [b.load(m_slot), v]), m_slot)  # maxnum skips NaN
            b.store(b.or_(b.load(nan_slot), _nan(b, v)), nan_slot)

        loop_nest(b, [size], scan, name="ext")
        m, any_nan = b.load(m_slot), b.load(nan_slot)
        pre = b.block
        head, body, found = (b.append_basic_block(f"find.{s}") for s in ("head", "body", "found"))
        b.branch(head)
        b.position_at_end(head)
        i = b.phi(I64, name="find")
        i.add_incoming(I64(0), pre)
        # the last position is the answer when no earlier one is (size >= 1 was checked)
        b.cbranch(b.icmp_unsigned("<", b.add(i, I64(1)), size), body, found)
        b.position_at_end(body)
        v = at(out_idx, i)
        hit = b.select(any_nan, _nan(b, v), b.fcmp_ordered("==", v, m))
        nxt = b.add(i, I64(1), flags=["nuw", "nsw"])
        i.add_incoming(nxt, b.block)
        b.cbranch(hit, found, head)
        b.position_at_end(found)
        res = b.phi(I64, name="argext")
        res.add_incoming(i, head)
        res.add_incoming(i, body)
        return res

    return _per_result(fe, n, (axis,), bool(n.attrs.get("keepdims", False)), one)
