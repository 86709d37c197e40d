"""Tensor values while a function is emitted: a buffer in memory or a lazy elementwise
expression, and the loop nests that materialise one.

An elementwise op over tensors is not computed where it stands: its value is a
:class:`Tensor` whose ``elem(index)`` emits one element (its inputs' elements, then the
op's rule).  A chain of such ops therefore becomes one expression, evaluated in the
single loop nest that stores the chain's end into memory (an output, a Phi's buffer, or
the value's own buffer when several users read it).  The innermost loop walks the last
dim with unit stride, which is what LLVM's loop vectoriser wants.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import sympy
from llvmlite import ir

from nexus.backends.llvm.dtypes import I64, Unsupported, mem_type, to_mem, to_reg

Elem = Callable[[list[ir.Value]], ir.Value]


@dataclass
class Tensor:
    """A tensor of rank >= 1: ``dims`` as i64 values, ``shape`` the type's dims (ints or
    symbols, for broadcasting), and either ``ptr`` (a contiguous buffer) or ``elem``.
    ``transpose_of``: the buffer whose 2-D transpose this lazy tensor is (BLAS reads that
    buffer with its transpose flag instead of a copy); ``view``: ``ptr`` points into
    another value's buffer (a row of it), which may change before this value is read."""

    dtype: str
    shape: tuple[Any, ...]
    dims: list[ir.Value]
    ptr: ir.Value | None = None
    elem: Elem | None = None
    transpose_of: Tensor | None = None
    view: bool = False

    @property
    def rank(self) -> int:
        return len(self.shape)

    def load(self, b: ir.IRBuilder, idx: Sequence[ir.Value]) -> ir.Value:
        """The element at ``idx`` (one i64 per dim), in registers."""
        if self.elem is not None:
            return self.elem(list(idx))
        assert self.ptr is not None
        p = b.gep(self.ptr, [linear(b, idx, self.dims)], inbounds=True, source_etype=mem_type(self.dtype))
        return to_reg(b, b.load(p, typ=mem_type(self.dtype)), self.dtype)


def linear(b: ir.IRBuilder, idx: Sequence[ir.Value], dims: Sequence[ir.Value]) -> ir.Value:
    """Row-major offset of ``idx`` in a contiguous tensor of ``dims``."""
    off = idx[0]
    for i, d in zip(idx[1:], dims[1:]):
        off = b.add(b.mul(off, d, flags=["nuw", "nsw"]), i, flags=["nuw", "nsw"])
    return off


def broadcast_index(b: ir.IRBuilder, out_idx: Sequence[ir.Value], out_shape: Sequence[Any],
                    t: Tensor) -> list[ir.Value]:
    """The index into ``t`` that NumPy broadcasting reads for ``out_idx``."""
    lead = len(out_shape) - t.rank
    idx = []
    for j, (d, dv) in enumerate(zip(t.shape, t.dims)):
        o, od = out_idx[lead + j], out_shape[lead + j]
        if isinstance(d, int) and d == 1:
            idx.append(I64(0))
        elif d == od:
            idx.append(o)
        else:  # a symbol the type rule assumed broadcastable: size 1 reads index 0
            idx.append(b.select(b.icmp_unsigned("==", dv, I64(1)), I64(0), o))
    return idx


def loop_nest(b: ir.IRBuilder, dims: Sequence[ir.Value], body: Callable[[list[ir.Value]], None],
              name: str = "i") -> None:
    """``for i0 < dims[0]: for i1 < dims[1]: ... body([i0, i1, ...])``, left at the exit."""
    if not dims:
        body([])
        return
    pre = b.block
    head = b.append_basic_block(f"{name}.head")
    inner = b.append_basic_block(f"{name}.body")
    done = b.append_basic_block(f"{name}.done")
    b.branch(head)
    b.position_at_end(head)
    i = b.phi(I64, name=name)
    i.add_incoming(I64(0), pre)
    b.cbranch(b.icmp_unsigned("<", i, dims[0]), inner, done)
    b.position_at_end(inner)
    loop_nest(b, dims[1:], lambda rest: body([i, *rest]), name + "i")
    nxt = b.add(i, I64(1), flags=["nuw", "nsw"])
    i.add_incoming(nxt, b.block)
    latch = b.branch(head)
    if len(dims) == 1 and isinstance(dims[0], ir.Constant) and int(dims[0].constant) >= ROLLED:
        latch.set_metadata("llvm.loop", _keep_rolled(b.module))
    b.position_at_end(done)


# The innermost loop of a nest over a constant dim of at least this many elements stays a
# loop: LLVM fully unrolls one of 32 before the vectoriser runs, which then vectorises the
# loop around it with a gather and a scatter per element (a Neg over [8, 64, 4, 32]: 145 us,
# kept rolled: 8 us).  A smaller one (a dim of 3) vectorises best unrolled, as interleaved
# accesses of the outer loop.
ROLLED = 8


def _keep_rolled(mod: ir.Module) -> ir.MDValue:
    """A loop's own metadata (``!n = !{!n, !"llvm.loop.unroll.disable"}``): not unrolled,
    so that the loop vectoriser takes it (it still interleaves the vector loop)."""
    flag = mod.add_metadata([ir.MetaDataString(mod, "llvm.loop.unroll.disable")])
    md = ir.values.MDValue(mod, [flag], name=str(len(mod.metadata)))  # not cached: a loop's id is its own
    md.operands = (md, flag)
    return md


def store_all(b: ir.IRBuilder, t: Tensor, dst: ir.Value) -> None:
    """Materialise ``t`` into the contiguous buffer ``dst`` (one fused loop nest)."""
    et = mem_type(t.dtype)

    def body(idx: list[ir.Value]) -> None:
        v = t.load(b, idx)
        b.store(to_mem(b, v, t.dtype), b.gep(dst, [linear(b, idx, t.dims)], inbounds=True, source_etype=et))

    loop_nest(b, t.dims, body)


def dim_value(b: ir.IRBuilder, d: Any, env: dict[Any, ir.Value]) -> ir.Value:
    """A dim (int, symbol or sympy expression over bound symbols) as an i64."""
    if isinstance(d, int):
        return I64(d)
    d = sympy.sympify(d)
    if d.is_Integer:
        return I64(int(d))
    if d.is_Symbol:
        if d not in env:
            raise Unsupported(f"dim {d} is not bound by an argument (a data-dependent size)")
        return env[d]
    if isinstance(d, (sympy.Min, sympy.Max)):  # a slice's clamped bounds
        vals = [dim_value(b, a, env) for a in d.args]
        acc = vals[0]
        for v in vals[1:]:
            less = b.icmp_signed("<", v, acc)
            acc = b.select(less, v, acc) if isinstance(d, sympy.Min) else b.select(less, acc, v)
        return acc
    if isinstance(d, (sympy.ceiling, sympy.floor)):  # a strided slice's length: (P / q) rounded
        q = sympy.ilcm(1, *(sympy.fraction(t.as_coeff_Mul()[0])[1] for t in sympy.Add.make_args(d.args[0])))
        p = dim_value(b, sympy.expand(d.args[0] * q), env)
        if isinstance(d, sympy.ceiling):  # ceil(p / q) = -floor(-p / q)
            return b.neg(_floor_div(b, b.neg(p), int(q)))
        return _floor_div(b, p, int(q))
    if d.is_Add or d.is_Mul:
        if any(a.is_Rational and not a.is_Integer for a in d.args):
            raise Unsupported(f"dim expression {d} (not an integer)")
        vals = [dim_value(b, a, env) for a in d.args]
        acc = vals[0]
        for v in vals[1:]:
            acc = b.add(acc, v) if d.is_Add else b.mul(acc, v)
        return acc
    raise Unsupported(f"dim expression {d}")


def polynomial_dim(d: Any) -> bool:
    """Whether ``d`` is an int, a symbol or a sum / product of them (what the call wrapper
    can size a result by; a slice's clamped ``Min`` / ``ceiling`` is not)."""
    d = sympy.sympify(d)
    if d.is_Integer or d.is_Symbol:
        return True
    return bool((d.is_Add or d.is_Mul) and all(polynomial_dim(a) for a in d.args))


def _floor_div(b: ir.IRBuilder, p: ir.Value, q: int) -> ir.Value:
    """``p // q`` (floor) for a positive constant ``q``."""
    if q == 1:
        return p
    neg = b.icmp_signed("<", p, I64(0))
    return b.sdiv(b.select(neg, b.sub(p, I64(q - 1)), p), I64(q))
