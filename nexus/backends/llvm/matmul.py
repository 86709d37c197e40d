"""MatMul (of stacks of matrices too: one call per matrix) and Gemm: a BLAS call (``dgemm`` /
``sgemm`` of the OpenBLAS NumPy's wheel bundles, else SciPy's) for f32/f64, or an i-k-j loop
nest (the inner loop over a row of the result, unit stride, which LLVM vectorises) for other
dtypes, when no BLAS is found, or when :data:`STRATEGY` says so.

The choice comes from ``python -m bench.matmul_llvm`` (numbers in docs/llvm.md): BLAS is
faster from 64 x 64 up.  The BLAS routine's address comes from NumPy's OpenBLAS (64-bit
integers, the JIT symbol ``nexus.dgemm64`` / ``nexus.sgemm64``) or from SciPy's ``cython_blas``
capsules (32-bit, ``nexus.dgemm`` / ``nexus.sgemm``); the call is Fortran's, every argument by reference, and row-major
``C = A B`` is column-major ``C^T = B^T A^T``.
"""

from __future__ import annotations

import ctypes
import importlib.util
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from llvmlite import ir

from nexus.backends.base import register_lowering
from nexus.backends.llvm.dtypes import I8, I64, PTR, Unsupported, constant, itemsize, kind, mem_type, reg_type
from nexus.backends.llvm.rules import BACKEND, out_dtype
from nexus.backends.llvm.tensors import Tensor, broadcast_index, linear, loop_nest, store_all
from nexus.ir.node import Node
from nexus.ir.types import TensorType, numpy_dtype

if TYPE_CHECKING:
    from nexus.backends.llvm.emit import FunctionEmitter

STRATEGY = "auto"  # "auto" (BLAS for f32/f64 when one is found), "blas" or "loops"
_SYMBOLS: dict[str, str | None] = {}  # "sgemm" -> its JIT symbol, None: no BLAS
_INT_BITS: dict[str, int] = {}  # JIT symbol -> the width of its integer arguments


def _blas_symbol(dtype: str) -> str | None:
    """The JIT symbol of a gemm for ``dtype``, registered on first use (None: no BLAS):
    NumPy's own OpenBLAS where its wheel has one (64-bit integers; on this machine 1.8x
    faster than SciPy's at [8, 128] x [128, 1000], the shape of a decoder's logits), else
    SciPy's ``cython_blas``."""
    name = {"f64": "dgemm", "f32": "sgemm"}.get(dtype)
    if name is None:
        return None
    if name not in _SYMBOLS:
        import llvmlite.binding as llvm

        found = _numpy_blas(name)
        bits = 64
        if found is None:
            found, bits = _scipy_blas(name), 32
        sym = None
        if found is not None:
            sym = f"nexus.{name}" if bits == 32 else f"nexus.{name}64"  # another ABI, another name
            llvm.add_symbol(sym, found)
            _INT_BITS[sym] = bits
        _SYMBOLS[name] = sym
    return _SYMBOLS[name]


def _numpy_blas(name: str) -> int | None:
    """The address of ``name`` (Fortran's interface, 64-bit integers) in the OpenBLAS that
    NumPy's wheel bundles (``numpy.libs`` / ``numpy/.dylibs``), or None."""
    import numpy as np

    root = Path(np.__file__).parent
    for lib in sorted(root.parent.glob("numpy.libs/*openblas64*")) + sorted(root.glob(".dylibs/*openblas64*")):
        try:
            handle = ctypes.CDLL(str(lib))
        except OSError:
            continue
        for sym in (f"scipy_{name}_64_", f"{name}_64_"):
            f = getattr(handle, sym, None)
            if f is not None:
                return ctypes.cast(f, ctypes.c_void_p).value
    return None


def _scipy_blas(name: str) -> int | None:
    """The address of ``name`` in SciPy's ``cython_blas`` (32-bit integers), or None."""
    cython_blas = _cython_blas()
    if cython_blas is None:
        return None
    get = ctypes.pythonapi.PyCapsule_GetPointer
    get.restype, get.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
    capsule = cython_blas.__pyx_capi__[name]
    sig = ctypes.pythonapi.PyCapsule_GetName
    sig.restype, sig.argtypes = ctypes.c_char_p, [ctypes.py_object]
    address: int | None = get(capsule, sig(capsule))
    return address


def _cython_blas() -> Any:
    """SciPy's ``scipy.linalg.cython_blas`` (None without SciPy), loaded on its own:
    ``import scipy.linalg`` takes half a second, the extension module alone milliseconds.
    It is registered under its own name, so a later ``import scipy.linalg`` uses it."""
    name = "scipy.linalg.cython_blas"
    if name in sys.modules:
        return sys.modules[name]
    try:
        import scipy
    except ImportError:
        return None
    folder = Path(scipy.__file__).parent / "linalg"
    files = sorted(folder.glob("cython_blas.*.so")) + sorted(folder.glob("cython_blas.*.pyd"))
    spec = importlib.util.spec_from_file_location(name, files[0]) if files else None
    if spec is None or spec.loader is None:
        try:
            from scipy.linalg import cython_blas
        except ImportError:
            return None
        return cython_blas
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def materialise(fe: FunctionEmitter, t: Tensor) -> Tensor:
    if t.ptr is not None:
        return t
    buf = fe.alloc(t.shape, t.dtype)
    store_all(fe.b, t, buf)
    return Tensor(t.dtype, t.shape, t.dims, ptr=buf)


@register_lowering(BACKEND, "MatMul")
def _matmul(fe: FunctionEmitter, n: Node, ins: list[Any]) -> Any:
    a, bt = ins
    if not isinstance(a, Tensor) or not isinstance(bt, Tensor):
        raise Unsupported("MatMul of a scalar")
    dt = out_dtype(n)
    if kind(dt) == "b":
        raise Unsupported("MatMul on bools")
    sym = blas_routine(fe, dt, "MatMul")
    if a.rank > 2 or bt.rank > 2:
        return _batched(fe, n, a, bt, dt, sym)
    weight = constant_weight(n.input(1), False, dt) if a.rank == 2 else None
    pa, ta = _operand(fe, a, False, sym is not None)
    pb, tb = _operand(fe, bt, False, sym is not None)
    m = a.dims[0] if a.rank == 2 else I64(1)
    kk = a.dims[-1]
    nn = bt.dims[1] if bt.rank == 2 else I64(1)
    t = n.type
    assert isinstance(t, TensorType) and t.shape is not None
    b = fe.b
    if matmul_may_fail(n):  # the type rule assumed the contraction dims agree
        fe.fail(b.icmp_unsigned("!=", kk, bt.dims[0]), n, "ValueError",
                "matmul: the contraction dims of a and b differ")
    scalar = not t.shape
    if scalar:
        out = b.bitcast(fe.eb.alloca(mem_type(dt)), PTR)
        out_dims: list[ir.Value] = []
    else:
        out = fe.alloc(t.shape, dt)
        fe.owner[id(out)] = {n}
        out_dims = fe.dims(t.shape)
    _product(fe, sym, dt, pa, pb, out, m, nn, kk, ta, tb, weight)
    if scalar:
        return b.load(out, typ=reg_type(dt))
    return Tensor(dt, t.shape, out_dims, ptr=out)


def _batched(fe: FunctionEmitter, n: Node, a: Tensor, bt: Tensor, dt: str, sym: str | None) -> Tensor:
    """``np.matmul`` of stacks of matrices: one gemm (or loop nest) per index of the result's
    batch dims, each operand's batch dims broadcast against them."""
    if a.rank < 2 or bt.rank < 2:
        raise Unsupported("MatMul of a stack of matrices and a vector")
    t = n.type
    assert isinstance(t, TensorType) and t.shape is not None
    a, bt = materialise(fe, a), materialise(fe, bt)
    b = fe.b
    m, kk, nn = a.dims[-2], a.dims[-1], bt.dims[-1]
    if bt.shape[-2] != a.shape[-1]:  # the type rule assumed the contraction dims agree
        fe.fail(b.icmp_unsigned("!=", kk, bt.dims[-2]), n, "ValueError",
                "matmul: the contraction dims of a and b differ")
    out = fe.alloc(t.shape, dt)
    fe.owner[id(out)] = {n}
    dims = fe.dims(t.shape)
    lead = t.shape[:-2]
    et = mem_type(dt)

    def at(v: Tensor, idx: list[ir.Value], size: ir.Value) -> ir.Value:
        """The first element of ``v``'s matrix at the result's batch index ``idx``."""
        if v.rank == 2:
            return v.ptr
        stack = Tensor(v.dtype, v.shape[:-2], v.dims[:-2])
        off = b.mul(linear(b, broadcast_index(b, idx, lead, stack), stack.dims), size)
        return b.gep(v.ptr, [off], inbounds=True, source_etype=et)

    def one(idx: list[ir.Value]) -> None:
        pa, pb = at(a, idx, b.mul(m, kk)), at(bt, idx, b.mul(kk, nn))
        pc = b.gep(out, [b.mul(linear(b, idx, dims[:-2]), b.mul(m, nn))], inbounds=True, source_etype=et)
        _product(fe, sym, dt, pa, pb, pc, m, nn, kk)

    loop_nest(b, dims[:-2], one, name="batch")
    return Tensor(dt, t.shape, dims, ptr=out)


def matmul_may_fail(n: Node) -> bool:
    """Whether MatMul ``n``'s rule checks at run time that the contraction dims agree:
    where the types do not prove it (``W @ h`` with ``W: f32[W_0, W_1]``, ``h: f32[h_0]``
    ran past ``h`` when W_1 > h_0; NumPy raises ValueError)."""
    a, bt = (v.type for v in n.inputs[:2])
    if not isinstance(a, TensorType) or not isinstance(bt, TensorType) or not a.shape or not bt.shape:
        return False
    return bool(a.shape[-1] != bt.shape[0 if len(bt.shape) == 1 else -2])


def blas_routine(fe: FunctionEmitter, dt: str, op: str) -> str | None:
    """The BLAS routine ``op`` on ``dt`` calls, or None for the loop nest (see STRATEGY).
    A module for this process (its constants in a table) calls the BLAS found here; one
    written out (ahead of time, ``--emit``) calls Fortran's ``sgemm_`` / ``dgemm_`` with
    32-bit integers, which the target's BLAS (reference, OpenBLAS, MKL's LP64) provides."""
    if not fe.mod.table and STRATEGY != "loops" and dt in ("f32", "f64"):
        fortran = f"{'s' if dt == 'f32' else 'd'}gemm_"
        _INT_BITS[fortran] = 32
        return fortran
    sym = _blas_symbol(dt) if STRATEGY != "loops" else None
    if STRATEGY == "blas" and sym is None and kind(dt) == "f":
        raise Unsupported(f"{op} through BLAS needs NumPy's OpenBLAS or SciPy")
    return sym


def _product(fe: FunctionEmitter, sym: str | None, dt: str, a: Any, bm: Any, c: Any, m: ir.Value, n: ir.Value,
             k: ir.Value, trans_a: bool = False, trans_b: bool = False, weight: np.ndarray | None = None) -> None:
    """C[m, n] = op(A) op(B): the BLAS routine ``sym``, or the loop nest (whose operands
    are never transposed: :func:`_operand` materialises them); with ``weight`` (B's value,
    known when compiling, and A not transposed), :func:`_panels` for a few rows of A."""
    if weight is not None and sym is not None and not trans_a:
        b = fe.b
        few = b.and_(b.icmp_unsigned(">=", m, I64(PANEL_ROWS[0])), b.icmp_unsigned("<=", m, I64(PANEL_ROWS[1])))
        with b.if_else(few) as (panels, other):
            with panels:
                _panels(fe, dt, a, weight, c, m)
            with other:
                _product(fe, sym, dt, a, bm, c, m, n, k, trans_a, trans_b)
        return
    if sym is not None:
        gemm_call(fe, sym, dt, a, bm, c, m, n, k, trans_a, trans_b)
    else:
        assert not (trans_a or trans_b)
        _loops(fe, dt, a, bm, c, m, n, k)


# A product with a constant right operand (a layer's weights) and between PANEL_ROWS rows
# (a decoder's batch) runs a kernel of its own: the weights packed once, when compiling, into
# panels of PANEL_BYTES of columns, each panel's product held in registers for a block of
# ROW_BLOCK rows, as ONNX Runtime's MLAS does with a constant B.  BLAS packs B on every call,
# which costs as much as the product itself at few rows: [8, 128] x [128, 1000] f32 took
# 32 us through NumPy's OpenBLAS (83 us with the weights read transposed), 19 us in ONNX
# Runtime's Gemm.  Below 4 rows (a matrix-vector product) BLAS's own kernel is faster.
PANEL_ROWS = (4, 256)
PANEL_BYTES = 64
ROW_BLOCK = 4


def constant_weight(v: Node, trans: bool, dt: str) -> np.ndarray | None:
    """The [K, N] value of the right operand ``v`` of a product (``trans``: read it
    transposed) where it is a Constant, or the 2-D Transpose of one, of ``dt`` f32/f64."""
    if dt not in ("f32", "f64"):
        return None
    if v.op.name == "Transpose" and v.input(0).op.name == "Constant" and list(v.attrs.get("perm") or [1, 0]) == [1, 0]:
        v, trans = v.input(0), not trans
    if v.op.name != "Constant":
        return None
    w = np.asarray(v.attrs["value"])
    if w.ndim != 2 or w.dtype != numpy_dtype(dt) or w.size == 0:
        return None
    return w.T if trans else w


def _panels(fe: FunctionEmitter, dt: str, a: Any, weight: np.ndarray, c: Any, m: ir.Value) -> None:
    """Row-major C[m, N] = A[m, K] W, W packed into panels [N / L, K, L] of L lanes (the
    last one zero-padded): for each panel, for each block of ROW_BLOCK rows (then the rows
    left one at a time), the block's L-wide rows of C accumulate in vector registers over
    K (a broadcast of A's element times the panel's row, fused multiply-add)."""
    b = fe.b
    kk, nn = weight.shape
    ft = reg_type(dt)
    lanes = PANEL_BYTES // itemsize(dt)
    blocks = -(-nn // lanes)
    packed = np.zeros((kk, blocks * lanes), weight.dtype)
    packed[:, :nn] = weight
    panels = fe.const_array(np.ascontiguousarray(packed.reshape(kk, blocks, lanes).transpose(1, 0, 2)), dt)
    vt = ir.VectorType(ft, lanes)
    vpt = ir.PointerType(vt)
    suffix = f"v{lanes}{'f32' if dt == 'f32' else 'f64'}"
    fma = b.module.globals.get(f"llvm.fmuladd.{suffix}") or ir.Function(
        b.module, ir.FunctionType(vt, [vt, vt, vt]), f"llvm.fmuladd.{suffix}")
    accs = [fe.eb.alloca(vt) for _ in range(ROW_BLOCK)]
    zeros = ir.Constant(vt, [0.0] * lanes)
    splat_mask = ir.Constant(ir.VectorType(ir.IntType(32), lanes), [0] * lanes)
    align = itemsize(dt)
    last = nn - (blocks - 1) * lanes  # columns of the last panel

    def at(p: ir.Value, i: ir.Value) -> ir.Value:
        return b.gep(p, [i], inbounds=True, source_etype=ft)

    def rows(j: ir.Value, r0: ir.Value, count: int) -> None:
        """C[r0 : r0 + count, panel j] (``count`` a constant)."""
        for r in range(count):
            b.store(zeros, accs[r])
        panel = at(panels, b.mul(j, I64(kk * lanes)))
        row_a = [b.mul(b.add(r0, I64(r)), I64(kk)) for r in range(count)]

        def over_k(ix: list[ir.Value]) -> None:
            (k,) = ix
            w = b.load(b.bitcast(at(panel, b.mul(k, I64(lanes))), vpt), typ=vt, align=align)
            for r in range(count):
                x = b.load(at(a, b.add(row_a[r], k)), typ=ft)
                xs = b.shuffle_vector(b.insert_element(ir.Constant(vt, ir.Undefined), x, I64(0)),
                                      ir.Constant(vt, ir.Undefined), splat_mask)
                b.store(b.call(fma, [xs, w, b.load(accs[r], typ=vt)]), accs[r])

        loop_nest(b, [I64(kk)], over_k, name="pk")
        col = b.mul(j, I64(lanes))
        for r in range(count):
            dst = at(c, b.add(b.mul(b.add(r0, I64(r)), I64(nn)), col))
            acc = b.load(accs[r], typ=vt)
            if last == lanes:
                b.store(acc, b.bitcast(dst, vpt), align=align)
                continue
            with b.if_else(b.icmp_unsigned("<", j, I64(blocks - 1))) as (whole, part):
                with whole:
                    b.store(acc, b.bitcast(dst, vpt), align=align)
                with part:
                    for q in range(last):
                        b.store(b.extract_element(acc, I64(q)), at(dst, I64(q)))

    full = b.udiv(m, I64(ROW_BLOCK))

    def panel(ix: list[ir.Value]) -> None:
        (j,) = ix
        loop_nest(b, [full], lambda r: rows(j, b.mul(r[0], I64(ROW_BLOCK)), ROW_BLOCK), name="pr")
        base = b.mul(full, I64(ROW_BLOCK))
        loop_nest(b, [b.sub(m, base)], lambda r: rows(j, b.add(base, r[0]), 1), name="pt")

    loop_nest(b, [I64(blocks)], panel, name="pj")


def gemm_call(fe: FunctionEmitter, sym: str, dt: str, a: Any, bm: Any, c: Any, m: ir.Value, n: ir.Value,
               k: ir.Value, trans_a: bool = False, trans_b: bool = False) -> None:
    """Row-major C[m, n] = op(A) op(B) as column-major gemm(tb, ta, n, m, k, 1, B, ldb, A, lda,
    0, C, n): a row-major matrix is its transpose in column-major order, so a transposed
    operand is read with the flag 'T' and the leading dimension of its stored rows."""
    eb, b = fe.eb, fe.b
    ft = reg_type(dt)

    def ref(v: ir.Value, ty: ir.Type) -> ir.Value:
        p = eb.bitcast(eb.alloca(ty), PTR)
        b.store(v, p)
        return p

    it = ir.IntType(_INT_BITS[sym])

    def i32(v: ir.Value) -> ir.Value:  # BLAS's integer: 32 bits (LP64) or 64 (ILP64)
        return ref(b.trunc(v, it) if it.width < 64 else v, it)

    def ld(v: ir.Value) -> ir.Value:  # gemm refuses a leading dimension of 0 (nothing is read then)
        return i32(b.select(b.icmp_unsigned("==", v, I64(0)), I64(1), v))

    ta, tb = (ref(I8(ord("T" if t else "N")), I8) for t in (trans_a, trans_b))
    fn = fe.mod.declare(sym, ir.VoidType(), [PTR] * 13)
    one, zero = ref(ir.Constant(ft, 1.0), ft), ref(ir.Constant(ft, 0.0), ft)
    b.call(fn, [tb, ta, i32(n), i32(m), i32(k), one, bm, ld(k if trans_b else n), a, ld(m if trans_a else k),
                zero, c, ld(n)])


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


def _operand(fe: FunctionEmitter, t: Tensor, trans: bool, blas: bool) -> tuple[Any, bool]:
    """A matrix operand as (contiguous buffer, read it transposed): a lazy transpose of a
    buffer is that buffer read transposed by BLAS (no copy of a layer's weights per call)."""
    if blas and t.ptr is None and t.transpose_of is not None:
        return t.transpose_of.ptr, not trans
    if trans and not blas:  # the loops read row-major operands: materialise the transpose
        src = t
        t = Tensor(t.dtype, t.shape[::-1], t.dims[::-1], elem=lambda idx: src.load(fe.b, idx[::-1]))
        trans = False
    return materialise(fe, t).ptr, trans


def gemm_may_fail(n: Node) -> bool:
    """Whether Gemm ``n``'s rule checks at run time that the contraction dims agree (where
    the types do not prove it)."""
    a, bt = (v.type for v in n.inputs[:2])
    if not isinstance(a, TensorType) or not isinstance(bt, TensorType) or a.shape is None or bt.shape is None \
            or len(a.shape) != 2 or len(bt.shape) != 2:
        return False  # no rule: the graph is not compiled whole
    ka = a.shape[0] if n.attrs.get("transA", False) else a.shape[1]
    kb = bt.shape[1] if n.attrs.get("transB", False) else bt.shape[0]
    return bool(ka != kb)


@register_lowering(BACKEND, "Gemm")
def _gemm(fe: FunctionEmitter, n: Node, ins: list[Any]) -> Any:
    """``alpha * op(a) @ op(b) + beta * c`` in NumPy's order (the kernel's): the product into
    a buffer, then the scaling and ``c`` as a lazy elementwise tensor that fuses with the
    activation after it.  ``c`` is not read when ``beta`` is 0, as the kernel does not."""
    a, bt = ins[:2]
    c = ins[2] if len(ins) > 2 else None
    if not isinstance(a, Tensor) or not isinstance(bt, Tensor) or a.rank != 2 or bt.rank != 2:
        raise Unsupported("Gemm of operands that are not matrices")
    dt = out_dtype(n)
    if kind(dt) == "b" or dt == "f16":
        raise Unsupported(f"Gemm on {dt}")
    t = n.type
    assert isinstance(t, TensorType) and t.shape is not None
    ta, tb = bool(n.attrs.get("transA", False)), bool(n.attrs.get("transB", False))
    sym = blas_routine(fe, dt, "Gemm")
    m, kk = (a.dims[1], a.dims[0]) if ta else (a.dims[0], a.dims[1])
    nn = bt.dims[0] if tb else bt.dims[1]
    kb = bt.dims[1] if tb else bt.dims[0]
    b = fe.b
    if gemm_may_fail(n):  # the type rule assumed the contraction dims agree
        fe.fail(b.icmp_unsigned("!=", kk, kb), n, "ValueError", "Gemm: the contraction dims of a and b differ")
    weight = None if ta else constant_weight(n.input(1), tb, dt)
    pa, ta = _operand(fe, a, ta, sym is not None)
    if weight is not None and tb and sym is not None:  # BLAS reads the [K, N] copy faster (see shape.py's Transpose)
        pb, tb = fe.const_array(np.ascontiguousarray(weight), dt), False
    else:
        pb, tb = _operand(fe, bt, tb, sym is not None)
    out = fe.alloc(t.shape, dt)
    fe.owner[id(out)] = {n}
    out_dims = fe.dims(t.shape)
    _product(fe, sym, dt, pa, pb, out, m, nn, kk, ta, tb, weight)
    shape = t.shape
    prod = Tensor(dt, shape, out_dims, ptr=out)
    alpha, beta = float(n.attrs.get("alpha", 1.0)), float(n.attrs.get("beta", 1.0))
    if c is not None and beta == 0.0:
        c = None
    if alpha == 1.0 and c is None:
        return prod
    f = kind(dt) == "f"
    mul, add = (b.fmul, b.fadd) if f else (b.mul, b.add)

    def elem(idx: list[ir.Value]) -> ir.Value:
        v = prod.load(fe.b, idx)
        if alpha != 1.0:
            v = mul(v, constant(dt, alpha))
        if c is not None:
            cv = c.load(fe.b, broadcast_index(fe.b, idx, shape, c)) if isinstance(c, Tensor) else c
            v = add(v, mul(cv, constant(dt, beta)) if beta != 1.0 else cv)
        return v

    return Tensor(dt, shape, out_dims, elem=elem)
