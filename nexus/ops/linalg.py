"""Linear algebra."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from nexus.ir.opdef import Attr, DimEq, Inferred, OpTypeError
from nexus.ir.types import TensorType, Type, broadcast_shapes
from nexus.ops._rules import NUMERIC, assume_equal, assuming, check_dtype, check_same_dtype, define, like, tensor

FAMILY = "linalg"


def matmul_shape(op: str, a: tuple, b: tuple, assumed: list[DimEq] | None = None) -> tuple:
    """NumPy matmul shapes: 1-D operands are promoted and the added dim dropped.
    ``assumed`` receives the batch dims taken to broadcast (two different symbols)."""
    if not a or not b:
        raise OpTypeError(f"{op}: operands must have rank >= 1, got ranks {len(a)} and {len(b)}")
    a2 = (1,) + a if len(a) == 1 else a
    b2 = b + (1,) if len(b) == 1 else b
    k1, k2 = a2[-1], b2[-2]
    if isinstance(k1, int) and isinstance(k2, int) and k1 != k2:
        raise OpTypeError(f"{op}: contraction dims differ: {a} @ {b}")
    pairs: list[tuple[int, int, bool]] = []
    try:
        batch = broadcast_shapes(a2[:-2], b2[:-2], pairs)
    except ValueError as e:
        raise OpTypeError(f"{op}: batch dims: {e}") from None
    if assumed is not None:  # batch dims lead both shapes: their axes are the inputs' axes
        assumed += [DimEq(0, i, 1, j, broadcast=True) if a_kept else DimEq(1, j, 0, i, broadcast=True)
                    for i, j, a_kept in pairs]
    out = batch + (a2[-2], b2[-1])
    if len(a) == 1:
        out = out[:-2] + out[-1:]
    if len(b) == 1:
        out = out[:-1]
    return out


def _matmul_rule(op: str, ins: Sequence[Type], attrs: Mapping[str, Any], _: Sequence[Any]) -> Type | Inferred:
    a, b = tensor(op, ins[0], 0), tensor(op, ins[1], 1)
    check_dtype(op, a, NUMERIC - {"bool"})
    if a.dtype != b.dtype:
        raise OpTypeError(f"{op}: dtype mismatch, {a.dtype} @ {b.dtype}; insert a Cast")
    if a.shape is None or b.shape is None:
        return TensorType(a.dtype, None)
    assumed = assume_equal(ins, (0, -1, 1, 0 if len(b.shape) == 1 else -2))  # the contraction
    shape = matmul_shape(op, a.shape, b.shape, assumed)
    return assuming(TensorType(a.dtype, shape), assumed)


define("MatMul", FAMILY, ("a", "b"), _matmul_rule, np.matmul, differentiable=True, operator="@", promotion="arith",
       aliases=("matmul",), multithreaded=True, doc="Matrix product with NumPy's batching and 1-D promotion.")


# --- Gemm --------------------------------------------------------------------------------
def _gemm_rule(op: str, ins: Sequence[Type], attrs: Mapping[str, Any], _: Sequence[Any]) -> Type | Inferred:
    if len(ins) > 3:
        raise OpTypeError(f"{op}: takes 2 or 3 inputs (a, b, optional c), got {len(ins)}")
    ts = [tensor(op, t, i) for i, t in enumerate(ins)]
    check_dtype(op, ts[0], NUMERIC - {"bool"})
    dtype = check_same_dtype(op, ts)
    a, b = ts[0].shape, ts[1].shape
    if a is None or b is None:
        return TensorType(dtype, None)
    if len(a) != 2 or len(b) != 2:
        raise OpTypeError(f"{op}: a and b must be matrices, got ranks {len(a)} and {len(b)}")
    m, k1 = (a[1], a[0]) if attrs["transA"] else (a[0], a[1])
    k2, n = (b[1], b[0]) if attrs["transB"] else (b[0], b[1])
    if isinstance(k1, int) and isinstance(k2, int) and k1 != k2:
        raise OpTypeError(f"{op}: contraction dims differ: {k1} and {k2}")
    am, ak = (1, 0) if attrs["transA"] else (0, 1)
    bk, bn = (1, 0) if attrs["transB"] else (0, 1)
    assumed = assume_equal(ins, (0, ak, 1, bk))
    if len(ts) == 3 and ts[2].shape is not None:
        try:
            out = broadcast_shapes(ts[2].shape, (m, n))
        except ValueError as e:
            raise OpTypeError(f"{op}: c does not broadcast to [M, N]: {e}") from None
        if len(out) != 2:
            raise OpTypeError(f"{op}: c must broadcast to [M, N], got {ts[2]}")
        # [M, N] is the result: c's dims must equal them or be 1
        assumed += assume_equal(ins, (1, bn, 2, -1), *([(0, am, 2, -2)] if len(ts[2].shape) == 2 else []),
                                broadcast=True)
    return assuming(TensorType(dtype, (m, n)), assumed)


def _gemm(a: Any, b: Any, c: Any = None, alpha: float = 1.0, beta: float = 1.0,
          transA: bool = False, transB: bool = False) -> Any:
    a = np.asarray(a)
    t = a.dtype.type
    out = (a.T if transA else a) @ (np.asarray(b).T if transB else b)
    if alpha != 1.0:
        out = out * t(alpha)
    if c is not None and beta != 0.0:
        c = np.asarray(c) * t(beta) if beta != 1.0 else c
        if type(out) is np.ndarray and type(c) is np.ndarray and c.dtype == out.dtype and c.ndim <= 2:
            out += c  # the product is this kernel's own [M, N] array and c broadcasts to it
        else:
            out = out + c
    return np.asarray(out, dtype=a.dtype)


_BLAS_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


def planned_gemm(alpha: float = 1.0, beta: float = 1.0, transA: bool = False, transB: bool = False,
                 constant_view: bool = False) -> Any:
    """The Gemm kernel of one node whose ``b`` is a constant (the attributes given):
    ``f(a, b, c=None)`` gives :func:`_gemm`'s result.  With ``transB`` (a Linear layer's
    [out, in] weight) the transposed weight is copied once into C order and kept: BLAS runs
    a product with few rows 1.5-4x faster on it than on the transposed view (the batch-8
    classifiers of MobileNetV3 and EfficientNet, 8x1280 @ 1280x1000: 3.1 ms on the view,
    0.7 ms on the copy).  Another ``b`` than the kept one is copied again.

    ``constant_view``: ``b`` is a new view of the same constant on every call (a graph
    imported from PyTorch transposes each Linear weight by a Transpose node, then runs
    Gemm without ``transB``): a ``b`` that is not C-contiguous is copied into C order once
    and the copy kept while ``b`` is a view of the same array with the same shape and
    strides (BART's [32, 128] @ [128, 128] products: 2x)."""
    cell: list[tuple[Any, ...]] = [()]

    def gemm(a: Any, b: Any, c: Any = None) -> Any:
        last = cell[0]  # one read: another thread may replace it meanwhile
        if constant_view and not transB:
            if type(b) is np.ndarray and b.ndim == 2 and b.dtype in _BLAS_FLOATS and not b.flags.c_contiguous \
                    and b.base is not None:
                if not last or b.base is not last[0] or (b.shape, b.strides) != last[1]:
                    last = cell[0] = (b.base, (b.shape, b.strides), np.ascontiguousarray(b))
                b = last[2]
            return _gemm(a, b, c, alpha, beta, transA, False)
        if not last or b is not last[0]:
            if not (transB and type(b) is np.ndarray and b.ndim == 2 and b.dtype in _BLAS_FLOATS):
                return _gemm(a, b, c, alpha, beta, transA, transB)
            last = cell[0] = (b, np.ascontiguousarray(b.T))
        return _gemm(a, last[1], c, alpha, beta, transA, False)

    return gemm


define("Gemm", FAMILY, ("a", "b", "c"), _gemm_rule, _gemm, variadic=True, differentiable=True, multithreaded=True,
       promotion="arith",
       attrs={
           "alpha": Attr("float", 1.0, "scale of a @ b"),
           "beta": Attr("float", 1.0, "scale of c"),
           "transA": Attr("bool", False, "use a transposed"),
           "transB": Attr("bool", False, "use b transposed"),
       },
       doc="alpha * a' @ b' + beta * c for matrices (c optional, broadcast to [M, N]); as ONNX Gemm.")


# --- Einsum ------------------------------------------------------------------------------
def _det_rule(op: str, ins: Sequence[Type], attrs: Mapping[str, Any], _: Sequence[Any]) -> Type:
    x = tensor(op, ins[0], 0)
    check_dtype(op, x, frozenset({"f16", "f32", "f64"}))
    if x.shape is None:
        return x.with_shape(None)
    if len(x.shape) < 2:
        raise OpTypeError(f"{op}: needs [..., n, n], got {x}")
    a, b = x.shape[-2:]
    if isinstance(a, int) and isinstance(b, int) and a != b:
        raise OpTypeError(f"{op}: the matrices must be square, got {x}")
    return x.with_shape(x.shape[:-2])


def _det(x: Any) -> Any:
    arr = np.asarray(x)
    wide = arr.astype(np.float32) if arr.dtype == np.float16 else arr
    return np.asarray(np.linalg.det(wide), dtype=arr.dtype)


define("Det", FAMILY, ("x",), _det_rule, _det,
       doc="The determinant of each square matrix in the last two axes of x (ONNX Det, np.linalg.det).")


def _parse_einsum(op: str, eq: str, n: int) -> tuple[list[str], str | None]:
    eq = eq.replace(" ", "")
    lhs, arrow, rhs = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != n:
        raise OpTypeError(f"{op}: equation {eq!r} has {len(terms)} operands, got {n} inputs")
    for term in terms + ([rhs] if arrow else []):
        letters = term.replace("...", "")
        if not all(ch.isalpha() for ch in letters):
            raise OpTypeError(f"{op}: bad subscripts {term!r} in {eq!r}")
    return terms, (rhs if arrow else None)


def _einsum_rule(op: str, ins: Sequence[Type], attrs: Mapping[str, Any], _: Sequence[Any]) -> Type | Inferred:
    if not ins:
        raise OpTypeError(f"{op}: needs at least one operand")
    ts = [tensor(op, t, i) for i, t in enumerate(ins)]
    dtype = check_same_dtype(op, ts)
    check_dtype(op, ts[0], NUMERIC - {"bool"})
    terms, out = _parse_einsum(op, attrs["equation"], len(ts))
    if any(t.shape is None for t in ts):
        return TensorType(dtype, None)
    sizes: dict[str, Any] = {}
    first: dict[str, tuple[int, int]] = {}  # subscript -> (operand, axis) its size came from
    assumed: list[DimEq] = []
    ell: tuple = ()
    for i, (term, t) in enumerate(zip(terms, ts)):
        shape = t.shape or ()
        letters = term.replace("...", "")
        n_ell = len(shape) - len(letters)
        if n_ell < 0 or (n_ell > 0 and "..." not in term):
            raise OpTypeError(f"{op}: operand {i} has rank {len(shape)}, subscripts {term!r} want {len(letters)}")
        pre = term.split("...")[0] if "..." in term else term
        axes = [*range(len(pre)), *range(len(shape) - (len(letters) - len(pre)), len(shape))]
        dims = [shape[k] for k in axes]
        if "..." in term:
            try:
                ell = broadcast_shapes(ell, tuple(shape[len(pre): len(pre) + n_ell]))
            except ValueError as e:
                raise OpTypeError(f"{op}: ellipsis dims: {e}") from None
        for ch, d, k in zip(letters, dims, axes):
            old = sizes.get(ch)
            if old is None or old == 1:
                sizes[ch], first[ch] = d, (i, k)
            elif isinstance(old, int) and isinstance(d, int) and d not in (old, 1):
                raise OpTypeError(f"{op}: subscript {ch!r} has sizes {old} and {d}")
            else:
                assumed += assume_equal(ins, (*first[ch], i, k), broadcast=True)
    if out is None:
        counts = "".join(t.replace("...", "") for t in terms)
        out = ("..." if any("..." in t for t in terms) else "") + "".join(
            sorted(ch for ch in set(counts) if counts.count(ch) == 1))
    shape_out: list[Any] = []
    for part in out.split("..."):
        shape_out.extend(sizes[ch] if ch in sizes else _missing(op, ch) for ch in part)
    if "..." in out:
        pre = out.split("...")[0]
        shape_out = shape_out[: len(pre)] + list(ell) + shape_out[len(pre):]
    return assuming(TensorType(dtype, tuple(shape_out)), assumed)


def _missing(op: str, ch: str) -> Any:
    raise OpTypeError(f"{op}: output subscript {ch!r} appears in no operand")


def _einsum(*operands: Any, equation: str) -> Any:
    out = np.einsum(equation, *operands)
    return like(out, operands[0])


define("Einsum", FAMILY, ("operand",), _einsum_rule, _einsum, variadic=True, differentiable=True,
       multithreaded=True,
       attrs={"equation": Attr("str", doc="subscripts, e.g. 'bij,bjk->bik' ('...' allowed)")},
       doc="Einstein summation (NumPy's einsum) over operands of one dtype.")
