"""Nexus dtypes as LLVM types: in registers (bool is ``i1``) and in memory (bool is a byte)."""

from __future__ import annotations

from llvmlite import ir

from nexus.ir.types import numpy_dtype

I1, I8, I32, I64 = ir.IntType(1), ir.IntType(8), ir.IntType(32), ir.IntType(64)
PTR = ir.PointerType()  # opaque pointers (LLVM 17+)
_FLOATS = {2: ir.HalfType(), 4: ir.FloatType(), 8: ir.DoubleType()}


class Unsupported(NotImplementedError):
    """Something the llvm backend cannot compile (a dtype, a shape, an op's attributes)."""


def kind(dtype: str) -> str:
    """NumPy's kind letter: 'b' bool, 'i' signed, 'u' unsigned, 'f' float."""
    return str(numpy_dtype(dtype).kind)


def reg_type(dtype: str) -> ir.Type:
    """The type of a scalar of ``dtype`` in registers."""
    dt = numpy_dtype(dtype)
    if dt.kind == "b":
        return I1
    if dt.kind in "iu":
        return ir.IntType(8 * dt.itemsize)
    if dt.kind == "f" and dt.itemsize in _FLOATS:
        return _FLOATS[dt.itemsize]
    raise Unsupported(f"dtype {dtype} has no LLVM type here")


def mem_type(dtype: str) -> ir.Type:
    """The type of an element of ``dtype`` in memory (and in function signatures)."""
    return I8 if kind(dtype) == "b" else reg_type(dtype)


def to_reg(b: ir.IRBuilder, v: ir.Value, dtype: str) -> ir.Value:
    return b.icmp_unsigned("!=", v, I8(0)) if kind(dtype) == "b" else v


def to_mem(b: ir.IRBuilder, v: ir.Value, dtype: str) -> ir.Value:
    return b.zext(v, I8) if kind(dtype) == "b" else v


def itemsize(dtype: str) -> int:
    return int(numpy_dtype(dtype).itemsize)


def constant(dtype: str, value: object) -> ir.Constant:
    """An LLVM constant of ``dtype`` in registers (ints wrap to the width, as NumPy's)."""
    t = reg_type(dtype)
    k = kind(dtype)
    if k == "b":
        return ir.Constant(t, int(bool(value)))
    if k in "iu":
        bits = t.width
        v = int(value) & ((1 << bits) - 1)  # type: ignore[call-overload]
        return ir.Constant(t, v)
    return ir.Constant(t, float(value))  # type: ignore[arg-type]
