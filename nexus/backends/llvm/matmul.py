"""MatMul of 1-D and 2-D operands: a BLAS call (SciPy's ``dgemm`` / ``sgemm``) for f32/f64,
or an i-k-j loop nest (the inner loop over a row of the result, unit stride, which LLVM
vectorises) for other dtypes, when SciPy is missing, or when :data:`STRATEGY` says so.

The choice comes from ``python -m bench.matmul_llvm`` (numbers in docs/llvm.md): BLAS is
faster from 64 x 64 up.  The BLAS routine's address comes from SciPy's
``cython_blas`` capsules and is given to the JIT as the symbol ``nexus.dgemm`` (or
``nexus.sgemm``); the call is Fortran's, every argument by reference, and row-major
``C = A B`` is column-major ``C^T = B^T A^T``.
"""

from __future__ import annotations

import ctypes
from typing import TYPE_CHECKING, Any

from llvmlite import ir

from nexus.backends.base import register_lowering
from nexus.backends.llvm.dtypes import I8, I32, I64, PTR, Unsupported, constant, kind, mem_type, reg_type
from nexus.backends.llvm.rules import BACKEND, out_dtype
from nexus.backends.llvm.tensors import Tensor, loop_nest, store_all
from nexus.ir.node import Node
from nexus.ir.types import TensorType

if TYPE_CHECKING:
    from nexus.backends.llvm.emit import FunctionEmitter

STRATEGY = "auto"  # "auto" (BLAS for f32/f64 when SciPy is there), "blas" or "loops"
_SYMBOLS: dict[str, bool] = {}


def _blas_symbol(dtype: str) -> str | None:
    """The JIT symbol of SciPy's gemm for ``dtype``, registered on first use (None: no SciPy)."""
    name = {"f64": "dgemm", "f32": "sgemm"}.get(dtype)
    if name is None:
        return None
    sym = f"nexus.{name}"
    if sym not in _SYMBOLS:
        try:
            from scipy.linalg import cython_blas
        except ImportError:
            _SYMBOLS[sym] = False
            return None
        import llvmlite.binding as llvm

        get = ctypes.pythonapi.PyCapsule_GetPointer
        get.restype, get.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
        capsule = cython_blas.__pyx_capi__[name]
        sig = ctypes.pythonapi.PyCapsule_GetName
        sig.restype, sig.argtypes = ctypes.c_char_p, [ctypes.py_object]
        llvm.add_symbol(sym, get(capsule, sig(capsule)))
        _SYMBOLS[sym] = True
    return sym if _SYMBOLS[sym] else None


def _materialise(fe: FunctionEmitter, t: Tensor) -> Tensor:
    if t.ptr is not None:
        return t
    buf = fe.alloc(t.shape, t.dtype)
    store_all(fe.b, t, buf)
    return Tensor(t.dtype, t.shape, t.dims, ptr=buf)


@register_lowering(BACKEND, "MatMul")
def _matmul(fe: FunctionEmitter, n: Node, ins: list[Any]) -> Any:
    a, bt = ins
    if not isinstance(a, Tensor) or not isinstance(bt, Tensor) or a.rank > 2 or bt.rank > 2:
        raise Unsupported("MatMul beyond 1-D and 2-D operands")
    dt = out_dtype(n)
    if kind(dt) == "b":
        raise Unsupported("MatMul on bools")
    a, bt = _materialise(fe, a), _materialise(fe, bt)
    m = a.dims[0] if a.rank == 2 else I64(1)
    kk = a.dims[-1]
    nn = bt.dims[1] if bt.rank == 2 else I64(1)
    t = n.type
    assert isinstance(t, TensorType) and t.shape is not None
    b = fe.b
    scalar = not t.shape
    if scalar:
        out = b.bitcast(fe.eb.alloca(mem_type(dt)), PTR)
        out_dims: list[ir.Value] = []
    else:
        out = fe.alloc(t.shape, dt)
        fe.owner[id(out)] = {n}
        out_dims = fe.dims(t.shape)
    sym = _blas_symbol(dt) if STRATEGY != "loops" else None
    if STRATEGY == "blas" and sym is None and kind(dt) == "f":
        raise Unsupported("MatMul through BLAS needs SciPy")
    if sym is not None:
        _gemm_call(fe, sym, dt, a.ptr, bt.ptr, out, m, nn, kk)
    else:
        _loops(fe, dt, a.ptr, bt.ptr, out, m, nn, kk)
    if scalar:
        return b.load(out, typ=reg_type(dt))
    return Tensor(dt, t.shape, out_dims, ptr=out)


def _gemm_call(fe: FunctionEmitter, sym: str, dt: str, a: Any, bm: Any, c: Any, m: ir.Value, n: ir.Value,
               k: ir.Value) -> None:
    """Row-major C[m, n] = A[m, k] B[k, n] as column-major gemm('N', 'N', n, m, k, 1, B, n, A, k, 0, C, n)."""
    eb, b = fe.eb, fe.b
    ft = reg_type(dt)

    def ref(v: ir.Value, ty: ir.Type) -> ir.Value:
        p = eb.bitcast(eb.alloca(ty), PTR)
        b.store(v, p)
        return p

    def i32(v: ir.Value) -> ir.Value:
        return ref(b.trunc(v, I32), I32)

    no = ref(I8(ord("N")), I8)
    fn = fe.mod.declare(sym, ir.VoidType(), [PTR] * 13)
    one, zero = ref(ir.Constant(ft, 1.0), ft), ref(ir.Constant(ft, 0.0), ft)
    # gemm refuses a leading dimension of 0: use 1 where a dim is empty (nothing is read)
    ld_n = b.select(b.icmp_unsigned("==", n, I64(0)), I64(1), n)
    ld_k = b.select(b.icmp_unsigned("==", k, I64(0)), I64(1), k)
    b.call(fn, [no, no, i32(n), i32(m), i32(k), one, bm, i32(ld_n), a, i32(ld_k), zero, c, i32(ld_n)])


def _loops(fe: FunctionEmitter, dt: str, a: Any, bm: Any, c: Any, m: ir.Value, n: ir.Value, k: ir.Value) -> None:
    """C[i, :] = 0; for p: C[i, :] += A[i, p] * B[p, :] (integers wrap, as NumPy's)."""
    b = fe.b
    et = mem_type(dt)
    f = kind(dt) == "f"
    zero = constant(dt, 0)

    def row(idx: list[ir.Value]) -> None:
        (i,) = idx
        crow = b.gep(c, [b.mul(i, n)], inbounds=True, source_etype=et)
        loop_nest(b, [n], lambda j: b.store(zero, b.gep(crow, [j[0]], inbounds=True, source_etype=et)), name="zero")

        def over_k(pk: list[ir.Value]) -> None:
            (p,) = pk
            av = b.load(b.gep(a, [b.add(b.mul(i, k), p)], inbounds=True, source_etype=et), typ=et)
            brow = b.gep(bm, [b.mul(p, n)], inbounds=True, source_etype=et)

            def over_j(jj: list[ir.Value]) -> None:
                (j,) = jj
                cp = b.gep(crow, [j], inbounds=True, source_etype=et)
                bv = b.load(b.gep(brow, [j], inbounds=True, source_etype=et), typ=et)
                cv = b.load(cp, typ=et)
                b.store(b.fadd(cv, b.fmul(av, bv)) if f else b.add(cv, b.mul(av, bv)), cp)

            loop_nest(b, [n], over_j, name="j")

        loop_nest(b, [k], over_k, name="k")

    loop_nest(b, [m], row, name="i")
