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
    symbols, for broadcasting), and either ``ptr`` (a contiguous buffer) or ``elem``."""

    dtype: str
    shape: tuple[Any, ...]
    dims: list[ir.Value]
    ptr: ir.Value | None = None
    elem: Elem | None = None

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
    b.branch(head)
    b.position_at_end(done)


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
    if d.is_Add or d.is_Mul:
        vals = [dim_value(b, a, env) for a in d.args]
        acc = vals[0]
        for v in vals[1:]:
            acc = b.add(acc, v) if d.is_Add else b.mul(acc, v)
        return acc
    raise Unsupported(f"dim expression {d}")
