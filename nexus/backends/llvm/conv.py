"""The layers of convolutional networks: ``Conv`` through BLAS, ``BatchNormalization``,
``MaxPool``, ``AveragePool`` and ``GlobalAveragePool``.

``Conv`` is the python backend's algorithm (:func:`nexus.ops.nn._conv`) in native code:
per image, the im2col matrix (rows: input channel major, then kernel position; columns:
output positions; zero where a window reaches into the padding), then one ``gemm`` per
group, ``W_g [M/G, C/G*K] @ cols_g [C/G*K, P]``, straight into the NCHW result.  A 1x1
convolution with unit strides and no padding reads the input as its own im2col.  The
im2col and the gemm calls are an internal function per *kind* of convolution (dtype,
kernel, strides, pads, dilations, groups), with the sizes as arguments: a network's
convolutions share a handful of them (ResNet-18's 20 are 4), so LLVM compiles each kind
once.  The bias, as the python backend adds it after the product, is a lazy elementwise
tensor that fuses with what follows (batch norm, an activation).

``BatchNormalization`` is lazy and elementwise: ``(x - mean[c]) * factor[c] + bias[c]``,
``factor = scale / sqrt(var + eps)`` computed in NumPy once where scale and var are
constants (the python backend's order of operations, so the results are the same bits).
The pools are lazy too: each element folds its window (``np.maximum``'s NaN rule for
max; for the average, the divisor counts the window's positions inside the input, or
inside the explicit padding too with ``count_include_pad``, never the ceil-mode overhang).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np
import sympy
from llvmlite import ir

from nexus.backends.base import register_lowering
from nexus.backends.llvm.dtypes import I1, I64, PTR, Unsupported, mem_type, reg_type
from nexus.backends.llvm.matmul import blas_routine, gemm_call, materialise
from nexus.backends.llvm.rules import BACKEND, out_dtype
from nexus.backends.llvm.tensors import Tensor, linear, loop_nest
from nexus.ir.node import Node
from nexus.ir.types import TensorType
from nexus.ops.nn import _geometry

if TYPE_CHECKING:
    from nexus.backends.llvm.emit import FunctionEmitter

_FLOATS = ("f32", "f64")


class _Builders:
    """What the gemm call needs of a function being emitted: its entry builder (for the
    by-reference arguments), its builder and the module."""

    def __init__(self, fe: FunctionEmitter, fn: ir.Function):
        self.mod = fe.mod
        self.eb = ir.IRBuilder(fn.append_basic_block("entry"))
        self.body = fn.append_basic_block("body")
        self.b = ir.IRBuilder(self.body)


def _shape(n: Node) -> tuple[Any, ...]:
    t = n.type
    if not isinstance(t, TensorType) or t.shape is None:
        raise Unsupported(f"{n.op.name}: type {t} (unknown rank)")
    return t.shape


def _conv_function(fe: FunctionEmitter, dt: str, sym: str, ks: tuple[int, ...], strides: tuple[int, ...],
                   pads: tuple[int, ...], dil: tuple[int, ...], group: int) -> ir.Function:
    """The internal function of one kind of convolution (see the module docstring):
    ``(x, w, out, cols, N, C, M, *in_dims, *out_dims)``."""
    nsp = len(ks)
    key = (f"conv.{dt}.k{'x'.join(map(str, ks))}.s{'x'.join(map(str, strides))}.p{'x'.join(map(str, pads))}"
           f".d{'x'.join(map(str, dil))}.g{group}")
    fn = fe.mod.module.globals.get(key)
    if isinstance(fn, ir.Function):
        return fn
    fn = ir.Function(fe.mod.module, ir.FunctionType(ir.VoidType(), [PTR] * 4 + [I64] * (3 + 2 * nsp)), key)
    fn.linkage = "internal"
    x, w, out, cols, nb, c, m, *sizes = fn.args
    ins, outs = list(sizes[:nsp]), list(sizes[nsp:])
    bb = _Builders(fe, fn)
    b = bb.b
    et = mem_type(dt)
    kk = math.prod(ks)
    direct = kk == 1 and all(s == 1 for s in strides) and not any(pads)
    p = I64(1)
    for o in outs:
        p = b.mul(p, o)
    hw = I64(1)
    for d in ins:
        hw = b.mul(hw, d)
    cg, mg = b.udiv(c, I64(group)), b.udiv(m, I64(group))

    def image(bi: list[ir.Value]) -> None:
        (i,) = bi
        xb = b.gep(x, [b.mul(i, b.mul(c, hw))], inbounds=True, source_etype=et)
        src = xb if direct else cols
        if not direct:
            def row(rc: list[ir.Value]) -> None:
                (ch,) = rc
                xc = b.gep(xb, [b.mul(ch, hw)], inbounds=True, source_etype=et)

                def tap(kpos: list[ir.Value]) -> None:
                    r = b.add(b.mul(ch, I64(kk)), linear(b, kpos, [I64(k) for k in ks]))
                    crow = b.gep(cols, [b.mul(r, p)], inbounds=True, source_etype=et)
                    off = [b.sub(b.mul(kpos[d], I64(dil[d])), I64(pads[d])) for d in range(nsp)]
                    # along the last dim the window is inside the input for lo <= o < hi
                    s, last, wo = strides[-1], ins[-1], outs[-1]
                    lo = _clamp(b, _ceil_div(b, b.neg(off[-1]), s), I64(0), wo)
                    hi = _clamp(b, _ceil_div(b, b.sub(last, off[-1]), s), lo, wo)

                    def row_of(opos: list[ir.Value]) -> None:
                        inside: ir.Value = I1(1)
                        at = []
                        for d in range(nsp - 1):
                            pos = b.add(b.mul(opos[d], I64(strides[d])), off[d])
                            ok = b.icmp_unsigned("<", pos, ins[d])
                            inside = b.and_(inside, ok)
                            at.append(b.select(ok, pos, I64(0)))
                        first, end = b.select(inside, lo, I64(0)), b.select(inside, hi, I64(0))
                        dst = b.gep(crow, [linear(b, [*opos, I64(0)], outs)], inbounds=True, source_etype=et)
                        src = b.gep(xc, [linear(b, [*at, I64(0)], ins)], inbounds=True, source_etype=et)
                        _zero(fe, b, dst, first, dt)
                        if s == 1:
                            memcpy = fe.mod.module.declare_intrinsic("llvm.memcpy", [PTR, PTR, I64])
                            b.call(memcpy, [b.gep(dst, [first], source_etype=et),
                                            b.gep(src, [b.add(first, off[-1])], source_etype=et),
                                            b.mul(b.sub(end, first), I64(_size(dt))), I1(0)])
                        else:
                            def copy(j: list[ir.Value]) -> None:
                                o = b.add(first, j[0])
                                v = b.load(b.gep(src, [b.add(b.mul(o, I64(s)), off[-1])], source_etype=et), typ=et)
                                b.store(v, b.gep(dst, [o], source_etype=et))

                            loop_nest(b, [b.sub(end, first)], copy, name="w")
                        _zero(fe, b, b.gep(dst, [end], source_etype=et), b.sub(wo, end), dt)

                    loop_nest(b, outs[:-1], row_of, name="o")

                loop_nest(b, [I64(k) for k in ks], tap, name="k")

            loop_nest(b, [c], row, name="c")
        ob = b.gep(out, [b.mul(i, b.mul(m, p))], inbounds=True, source_etype=et)
        rows = b.mul(cg, I64(kk))

        def per_group(gi: list[ir.Value]) -> None:
            (gg,) = gi
            wg = b.gep(w, [b.mul(gg, b.mul(mg, rows))], inbounds=True, source_etype=et)
            sg = b.gep(src, [b.mul(gg, b.mul(rows, p))], inbounds=True, source_etype=et)
            og = b.gep(ob, [b.mul(gg, b.mul(mg, p))], inbounds=True, source_etype=et)
            gemm_call(bb, sym, dt, wg, sg, og, mg, p, rows)  # type: ignore[arg-type]

        loop_nest(b, [I64(group)], per_group, name="g")

    loop_nest(b, [nb], image, name="n")
    b.ret_void()
    bb.eb.branch(bb.body)
    return fn


def _size(dt: str) -> int:
    return 4 if dt == "f32" else 8


def _ceil_div(b: ir.IRBuilder, a: ir.Value, s: int) -> ir.Value:
    """ceil(a / s) for a positive constant ``s`` and any sign of ``a``."""
    if s == 1:
        return a
    big = 1 << 40  # a multiple of s large enough to make the numerator positive
    return b.sub(b.sdiv(b.add(a, I64(big * s + s - 1)), I64(s)), I64(big))


def _clamp(b: ir.IRBuilder, v: ir.Value, lo: ir.Value, hi: ir.Value) -> ir.Value:
    v = b.select(b.icmp_signed("<", v, lo), lo, v)
    return b.select(b.icmp_signed(">", v, hi), hi, v)


def _zero(fe: FunctionEmitter, b: ir.IRBuilder, dst: ir.Value, count: ir.Value, dt: str) -> None:
    memset = fe.mod.module.declare_intrinsic("llvm.memset", [PTR, I64])
    b.call(memset, [dst, ir.Constant(ir.IntType(8), 0), b.mul(count, I64(_size(dt))), I1(0)])


@register_lowering(BACKEND, "Conv")
def _conv(fe: FunctionEmitter, n: Node, ins: list[Any]) -> Any:
    x, w = ins[0], ins[1]
    bias = ins[2] if len(ins) > 2 else None
    dt = out_dtype(n)
    if dt not in _FLOATS:
        raise Unsupported(f"Conv on {dt}")
    if not isinstance(x, Tensor) or not isinstance(w, Tensor):
        raise Unsupported("Conv of a scalar")
    sym = blas_routine(fe, dt, "Conv")
    if sym is None:
        raise Unsupported("Conv without a BLAS stays with the python backend")
    nsp = x.rank - 2
    wt = n.input(1).type
    assert isinstance(wt, TensorType) and wt.shape is not None
    ks = tuple(int(k) for k in wt.shape[2:])
    strides, pads, dil = (tuple(int(v) for v in a) for a in _geometry("Conv", n.attrs, nsp))
    group = int(n.attrs.get("group", 1))
    shape = _shape(n)
    fn = _conv_function(fe, dt, sym, ks, strides, pads, dil, group)
    x, w = materialise(fe, x), materialise(fe, w)
    out = fe.alloc(shape, dt)
    fe.owner[id(out)] = {n}
    out_dims = fe.dims(shape)
    xt = n.input(0).type
    assert isinstance(xt, TensorType) and xt.shape is not None
    kk = math.prod(ks)
    direct = kk == 1 and all(s == 1 for s in strides) and not any(pads)
    if direct:
        cols: ir.Value = ir.Constant(PTR, None)
    else:
        cols = fe.alloc((sympy.sympify(xt.shape[1]) * kk, sympy.Mul(*shape[2:])), dt)
    b = fe.b
    b.call(fn, [x.ptr, w.ptr, out, cols, x.dims[0], x.dims[1], out_dims[1], *x.dims[2:], *out_dims[2:]])
    result = Tensor(dt, shape, out_dims, ptr=out)
    if bias is None:
        return result
    if not isinstance(bias, Tensor):
        raise Unsupported("Conv with a scalar bias")

    def elem(idx: list[ir.Value]) -> ir.Value:
        return fe.b.fadd(result.load(fe.b, idx), bias.load(fe.b, [idx[1]]))

    return Tensor(dt, shape, out_dims, elem=elem)


@register_lowering(BACKEND, "BatchNormalization")
def _batch_norm(fe: FunctionEmitter, n: Node, ins: list[Any]) -> Any:
    x, scale, beta, mean, var = ins
    dt = out_dtype(n)
    if dt not in _FLOATS:
        raise Unsupported(f"BatchNormalization on {dt}")
    if not isinstance(x, Tensor) or x.rank < 2:
        raise Unsupported("BatchNormalization of a scalar or vector")
    eps = float(n.attrs.get("epsilon", 1e-5))
    consts = [n.input(k) for k in (1, 4)]
    factor: Any
    if all(v.op.name == "Constant" for v in consts):
        npdt = np.dtype(np.float32 if dt == "f32" else np.float64)
        s, v = (np.asarray(c.attrs["value"], npdt) for c in consts)
        f = (s / np.sqrt(v + npdt.type(eps))).astype(npdt)
        factor = Tensor(dt, (f.shape[0],), [I64(f.shape[0])], ptr=fe.const_array(f, dt))
    else:
        factor = None
    t = reg_type(dt)

    def channel(v: Any, c: ir.Value) -> ir.Value:
        return v.load(fe.b, [c]) if isinstance(v, Tensor) else v

    def elem(idx: list[ir.Value]) -> ir.Value:
        bb, c = fe.b, idx[1]
        if factor is not None:
            fc = channel(factor, c)
        else:
            root = bb.call(fe.mod.module.declare_intrinsic("llvm.sqrt", [t]),
                           [bb.fadd(channel(var, c), ir.Constant(t, eps))])
            fc = bb.fdiv(channel(scale, c), root)
        y = bb.fmul(bb.fsub(x.load(bb, idx), channel(mean, c)), fc)
        return bb.fadd(y, channel(beta, c))

    return Tensor(dt, _shape(n), list(x.dims), elem=elem)


def _pool(fe: FunctionEmitter, n: Node, x: Any, kind_: str) -> Tensor:
    """MaxPool or AveragePool as a lazy tensor: each element folds its window."""
    dt = out_dtype(n)
    if dt not in _FLOATS or not isinstance(x, Tensor):
        raise Unsupported(f"{n.op.name} on {dt}")
    nsp = x.rank - 2
    ks = tuple(int(k) for k in n.attrs["kernel_shape"])
    strides, pads, dil = (tuple(int(v) for v in a) for a in _geometry(n.op.name, n.attrs, nsp))
    include_pad = bool(n.attrs.get("count_include_pad", False))
    shape = _shape(n)
    dims = fe.dims(shape)
    t = reg_type(dt)
    ins = x.dims[2:]

    def elem(idx: list[ir.Value]) -> ir.Value:
        b = fe.b
        acc: ir.Value = ir.Constant(t, -math.inf if kind_ == "max" else 0.0)
        count: ir.Value = I64(0)
        for kpos in np.ndindex(*ks):
            inside: ir.Value = I1(1)
            padded: ir.Value = I1(1)
            at = []
            for d in range(nsp):
                pos = b.sub(b.add(b.mul(idx[2 + d], I64(strides[d])), I64(kpos[d] * dil[d])), I64(pads[d]))
                ok = b.icmp_unsigned("<", pos, ins[d])
                inside = b.and_(inside, ok)
                # inside the explicit padding too: -pads <= pos < in + pads_end
                shifted = b.add(pos, I64(pads[d]))
                padded = b.and_(padded, b.icmp_unsigned("<", shifted, b.add(ins[d], I64(pads[d] + pads[d + nsp]))))
                at.append(b.select(ok, pos, I64(0)))
            v = x.load(b, [idx[0], idx[1], *at])
            if kind_ == "max":
                better = b.fcmp_unordered("ugt", v, acc)  # v > acc, or either NaN
                either_nan = b.fcmp_unordered("uno", v, acc)
                m = b.select(better, b.select(either_nan, b.fadd(v, acc), v), acc)
                acc = b.select(inside, m, acc)
            else:
                acc = b.select(inside, b.fadd(acc, v), acc)
                counted = padded if include_pad else inside
                count = b.add(count, b.zext(counted, I64))
        if kind_ == "max":
            return acc
        count = b.select(b.icmp_unsigned("==", count, I64(0)), I64(1), count)
        return b.fdiv(acc, b.uitofp(count, t))

    return Tensor(dt, shape, dims, elem=elem)


@register_lowering(BACKEND, "MaxPool")
def _max_pool(fe: FunctionEmitter, n: Node, ins: list[Any]) -> Any:
    if len(n.users) and any(u.op.name == "Proj" for u in n.users):
        raise Unsupported("MaxPool with indices")
    return _pool(fe, n, ins[0], "max")


@register_lowering(BACKEND, "AveragePool")
def _avg_pool(fe: FunctionEmitter, n: Node, ins: list[Any]) -> Any:
    return _pool(fe, n, ins[0], "avg")


@register_lowering(BACKEND, "GlobalAveragePool")
def _global_avg_pool(fe: FunctionEmitter, n: Node, ins: list[Any]) -> Any:
    """The mean over the spatial dims, into a buffer of its own ([N, C, 1, ...])."""
    x = ins[0]
    dt = out_dtype(n)
    if dt not in _FLOATS or not isinstance(x, Tensor):
        raise Unsupported(f"GlobalAveragePool on {dt}")
    shape = _shape(n)
    dims = fe.dims(shape)
    b = fe.b
    buf = fe.alloc(shape, dt)
    fe.owner[id(buf)] = {n}
    t = reg_type(dt)
    acc = fe.eb.alloca(t)
    sp = x.dims[2:]
    count = I64(1)
    for d in sp:
        count = b.mul(count, d)

    def one(idx: list[ir.Value]) -> None:
        b.store(ir.Constant(t, 0.0), acc)
        loop_nest(b, sp, lambda s: b.store(b.fadd(b.load(acc), x.load(b, [idx[0], idx[1], *s])), acc), name="sp")
        mean = b.fdiv(b.load(acc), b.uitofp(count, t))
        b.store(mean, b.gep(buf, [linear(b, idx, dims)], inbounds=True, source_etype=mem_type(dt)))

    loop_nest(b, dims[:2], one, name="nc")
    return Tensor(dt, shape, dims, ptr=buf)
