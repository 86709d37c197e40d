"""Shape ops as lazy tensors: ``ShapeOf``, ``ConstantOfShape``, ``Reshape``, ``Flatten``,
``Transpose``, ``Unsqueeze``, ``Squeeze``, ``Expand`` and ``Slice``.

None of them computes where it stands.  ``ShapeOf`` is a one-dim tensor whose element ``k``
is the input's ``k``-th dim (constant indices fold to the dim itself);
``ConstantOfShape`` is its value at every index, over dims read from its shape input;
``Reshape`` reads the input's element at the same row-major offset (a contiguous buffer is
read at the offset directly, a lazy tensor through the unravelled index), after checking
that the element counts agree.  Its dims are the shape input's values, one ``-1`` solved
as NumPy solves it (the element count over the other dims).  ``Transpose``, ``Unsqueeze``
and ``Squeeze`` read the input at the permuted index, or at the index without the new axes
(with 0 at the dropped ones); a dropped axis whose size is not known to be 1 is checked.
``Expand`` reads the input at the broadcast index, its dims those of NumPy's broadcasting
of the input's shape with the shape input's values (checked as NumPy checks them).
``Slice`` with constant bounds reads the input at ``start + i * step``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
from llvmlite import ir

from nexus.backends.base import register_lowering
from nexus.backends.llvm.dtypes import I64, Unsupported, constant, mem_type, to_reg
from nexus.backends.llvm.rules import BACKEND, convert
from nexus.backends.llvm.tensors import Tensor, broadcast_index, linear
from nexus.ir.node import Node
from nexus.ir.types import TensorType, TupleType

if TYPE_CHECKING:
    from nexus.backends.llvm.emit import FunctionEmitter


def _out_type(n: Node) -> tuple[str, tuple[Any, ...]]:
    """The dtype and shape of ``n``'s result."""
    t = n.type
    if not isinstance(t, TensorType) or t.shape is None:
        raise Unsupported(f"{n.op.name}: type {t} (unknown rank)")
    return t.dtype, t.shape


@register_lowering(BACKEND, "ShapeOf")
def _shape_of(fe: FunctionEmitter, n: Node, ins: list[Any]) -> Any:
    x = ins[0]
    if not isinstance(x, Tensor):
        raise Unsupported("ShapeOf of a scalar (an empty shape)")
    dims = list(x.dims)

    def elem(idx: list[ir.Value]) -> ir.Value:
        b, v = fe.b, dims[-1]
        for k in range(len(dims) - 2, -1, -1):
            v = b.select(b.icmp_unsigned("==", idx[0], I64(k)), dims[k], v)
        return v

    return Tensor("i64", (x.rank,), [I64(x.rank)], elem=elem)


def _shape_values(fe: FunctionEmitter, shape: Any, node: Node) -> list[ir.Value]:
    """The elements of a one-dim integer tensor of static length, as i64 values."""
    t = node.type
    if not isinstance(shape, Tensor) or shape.rank != 1 or not isinstance(shape.shape[0], int):
        raise Unsupported("a shape input whose length is not known")
    assert isinstance(t, TensorType)
    return [convert(fe.b, shape.load(fe.b, [I64(k)]), t.dtype, "i64") for k in range(shape.shape[0])]


@register_lowering(BACKEND, "ConstantOfShape")
def _constant_of_shape(fe: FunctionEmitter, n: Node, ins: list[Any]) -> Any:
    dtype, shape = _out_type(n)
    value = constant(dtype, n.attrs["value"].reshape(())[()])
    dims = _shape_values(fe, ins[0], n.input(0))
    if not dims:
        return value
    b = fe.b
    for d in dims:
        fe.fail(b.icmp_signed("<", d, I64(0)), n, "ValueError", "negative dimensions are not allowed")
    return Tensor(dtype, shape, dims, elem=lambda idx: value)


@register_lowering(BACKEND, "Reshape")
def _reshape(fe: FunctionEmitter, n: Node, ins: list[Any]) -> Any:
    x = ins[0]
    dtype, shape = _out_type(n)
    b = fe.b
    src = x.dims if isinstance(x, Tensor) else []
    have = I64(1)
    for d in src:
        have = b.mul(have, d)
    # the dims held in the shape input, one -1 solved as NumPy does: the count over the rest
    vals = _shape_values(fe, ins[1], n.input(1))
    if len(vals) != len(shape):
        raise Unsupported("Reshape whose shape input's length differs from its type's rank")
    minus = [b.icmp_signed("==", v, I64(-1)) for v in vals]
    rest = I64(1)
    for v, m in zip(vals, minus):
        rest = b.mul(rest, b.select(m, I64(1), v))
    if len(vals) > 0:  # NumPy: a -1 beside a 0 could be anything
        anyminus = minus[0]
        for m in minus[1:]:
            anyminus = b.or_(anyminus, m)
        fe.fail(b.and_(anyminus, b.icmp_signed("==", rest, I64(0))), n, "ValueError",
                "cannot reshape: a -1 beside a dim of 0 is ambiguous")
    solved = b.udiv(have, b.select(b.icmp_signed("==", rest, I64(0)), I64(1), rest))
    dims = [b.select(m, solved, v) for v, m in zip(vals, minus)]
    count = I64(1)
    for d in dims:
        fe.fail(b.icmp_signed("<", d, I64(0)), n, "ValueError", "cannot reshape: a negative dim other than one -1")
        count = b.mul(count, d)
    fe.fail(b.icmp_unsigned("!=", count, have), n, "ValueError",
            "cannot reshape: the element counts differ (the shape input disagrees with the graph's type)")
    if not dims:  # one element
        return x.load(b, [I64(0)] * x.rank) if isinstance(x, Tensor) else x
    if not isinstance(x, Tensor):
        return Tensor(dtype, shape, dims, elem=lambda idx: x)

    # a lazy input is read at its own index: the leading and trailing axes the reshape keeps
    # (equal in both types, checked once here) pass through, only the axes between are
    # flattened and split again ([64*b, 256] -> [b, 64, 256] needs no division per element)
    lead = trail = 0
    if x.ptr is None:
        while lead < min(x.rank, len(shape)) and x.shape[lead] == shape[lead]:
            lead += 1
        while trail < min(x.rank, len(shape)) - lead and x.shape[-1 - trail] == shape[-1 - trail]:
            trail += 1
        kept = [*range(lead), *range(-trail, 0)]
        for j in kept:
            fe.fail(b.icmp_unsigned("!=", dims[j], src[j]), n, "ValueError",
                    "cannot reshape: the shape input disagrees with the graph's type")

    def elem(idx: list[ir.Value]) -> ir.Value:
        if x.ptr is not None:
            off = linear(fe.b, idx, dims)
            p = fe.b.gep(x.ptr, [off], inbounds=True, source_etype=mem_type(x.dtype))
            return to_reg(fe.b, fe.b.load(p, typ=mem_type(x.dtype)), x.dtype)
        mid = idx[lead:len(idx) - trail]
        off = linear(fe.b, mid, dims[lead:len(dims) - trail]) if mid else I64(0)
        at = _unravel(fe.b, off, src[lead:len(src) - trail])
        return x.load(fe.b, [*idx[:lead], *at, *idx[len(idx) - trail:]])

    return Tensor(dtype, shape, dims, elem=elem)


def _unravel(b: ir.IRBuilder, off: ir.Value, dims: list[ir.Value]) -> list[ir.Value]:
    """The row-major index of offset ``off`` in ``dims`` (the outermost takes the rest)."""
    at = []
    for k, d in enumerate(reversed(dims)):
        if k == len(dims) - 1:
            at.append(off)
        else:
            at.append(b.urem(off, d))
            off = b.udiv(off, d)
    return at[::-1]


@register_lowering(BACKEND, "Flatten")
def _flatten(fe: FunctionEmitter, n: Node, ins: list[Any]) -> Any:
    """``x`` as the matrix [prod(d[:axis]), prod(d[axis:])]: a contiguous buffer read at
    the same offset, a lazy tensor at the index unravelled on each side of ``axis``."""
    x = ins[0]
    dtype, shape = _out_type(n)
    if not isinstance(x, Tensor):
        return Tensor(dtype, shape, [I64(1), I64(1)], elem=lambda idx: x)
    axis = int(n.attrs.get("axis", 1))
    axis = axis + x.rank if axis < 0 else axis
    b = fe.b
    sides = (x.dims[:axis], x.dims[axis:])
    dims = []
    for side in sides:
        count = I64(1)
        for d in side:
            count = b.mul(count, d)
        dims.append(count)

    def elem(idx: list[ir.Value]) -> ir.Value:
        if x.ptr is not None:
            off = linear(fe.b, idx, dims)
            p = fe.b.gep(x.ptr, [off], inbounds=True, source_etype=mem_type(x.dtype))
            return to_reg(fe.b, fe.b.load(p, typ=mem_type(x.dtype)), x.dtype)
        return x.load(fe.b, [a for i, side in zip(idx, sides) for a in _unravel(fe.b, i, side)])

    return Tensor(dtype, shape, dims, elem=elem)


def _axes(n: Node, rank: int) -> list[int]:
    axes = n.attrs.get("axes")
    return sorted(int(a) + rank if int(a) < 0 else int(a) for a in axes) if axes is not None else []


def _view(fe: FunctionEmitter, x: Tensor, shape: tuple[Any, ...], dims: list[ir.Value],
          source: list[int | None]) -> Tensor:
    """``x`` read at another index: its axis ``j`` at the result's axis ``source[j]`` (0
    where that is None, an axis of size 1 dropped)."""
    def elem(idx: list[ir.Value]) -> ir.Value:
        return x.load(fe.b, [I64(0) if k is None else idx[k] for k in source])

    return Tensor(x.dtype, shape, dims, elem=elem)


@register_lowering(BACKEND, "Transpose")
def _transpose(fe: FunctionEmitter, n: Node, ins: list[Any]) -> Any:
    x = ins[0]
    if not isinstance(x, Tensor):
        return x
    perm = n.attrs.get("perm")
    order = [int(p) % x.rank for p in perm] if perm is not None else list(range(x.rank))[::-1]
    dtype, shape = _out_type(n)
    src = n.input(0)
    if src.op.name == "Constant" and x.ptr is not None:
        # a layer's weights, transposed once here: BLAS reads row-major [K, N] operands
        # faster than transposed ones at small batch (a [8, 128] x [128, 1000] gemm: 2x)
        value = np.transpose(np.asarray(src.attrs["value"]), order)
        return Tensor(dtype, shape, [x.dims[p] for p in order], ptr=fe.const_array(value, dtype))
    t = _view(fe, x, shape, [x.dims[p] for p in order], [order.index(j) for j in range(x.rank)])
    if x.rank == 2 and order == [1, 0] and x.ptr is not None:
        t.transpose_of = x
    return t


@register_lowering(BACKEND, "Unsqueeze")
def _unsqueeze(fe: FunctionEmitter, n: Node, ins: list[Any]) -> Any:
    x = ins[0]
    dtype, shape = _out_type(n)
    new = set(_axes(n, len(shape)))
    if not isinstance(x, Tensor):
        return Tensor(dtype, shape, [I64(1)] * len(shape), elem=lambda idx: x)
    it = iter(x.dims)
    dims = [I64(1) if k in new else next(it) for k in range(len(shape))]
    return _view(fe, x, shape, dims, [k for k in range(len(shape)) if k not in new])


@register_lowering(BACKEND, "Squeeze")
def _squeeze(fe: FunctionEmitter, n: Node, ins: list[Any]) -> Any:
    x = ins[0]
    if not isinstance(x, Tensor):
        return x
    if n.attrs.get("axes") is None:
        if not all(isinstance(d, int) for d in x.shape):
            raise Unsupported("Squeeze of every size-1 axis where a dim is symbolic")
        gone = [k for k, d in enumerate(x.shape) if d == 1]
    else:
        gone = _axes(n, x.rank)
    for k in gone:
        if x.shape[k] != 1:
            fe.fail(fe.b.icmp_unsigned("!=", x.dims[k], I64(1)), n, "ValueError",
                    "cannot select an axis to squeeze out which has size not equal to one")
    _, shape = _out_type(n)
    kept = [k for k in range(x.rank) if k not in gone]
    if not kept:
        return x.load(fe.b, [I64(0)] * x.rank)
    return _view(fe, x, shape, [x.dims[k] for k in kept], [kept.index(k) if k in kept else None for k in range(x.rank)])


@register_lowering(BACKEND, "Expand")
def _expand(fe: FunctionEmitter, n: Node, ins: list[Any]) -> Any:
    x = ins[0]
    dtype, shape = _out_type(n)
    vals = _shape_values(fe, ins[1], n.input(1))
    if not shape:
        return x
    b = fe.b
    xt = x if isinstance(x, Tensor) else Tensor(dtype, (), [], elem=lambda idx: x)
    dims = []
    for j in range(len(shape)):
        k, i = j - (len(shape) - xt.rank), j - (len(shape) - len(vals))
        xd = xt.dims[k] if k >= 0 else I64(1)
        if i < 0:
            dims.append(xd)
            continue
        sd = vals[i]
        x1, s1 = b.icmp_unsigned("==", xd, I64(1)), b.icmp_signed("==", sd, I64(1))
        fe.fail(b.or_(b.icmp_signed("<", sd, I64(0)),
                      b.and_(b.not_(b.or_(x1, s1)), b.icmp_unsigned("!=", xd, sd))), n, "ValueError",
                "operands could not be broadcast together with the shape input")
        dims.append(b.select(s1, xd, sd))
    if not isinstance(x, Tensor):
        return Tensor(dtype, shape, dims, elem=lambda idx: x)
    return Tensor(dtype, shape, dims, elem=lambda idx: x.load(fe.b, broadcast_index(fe.b, idx, shape, x)))


def _ints(n: Node, k: int) -> list[int] | None:
    """The values of ``n``'s input ``k`` where it is a Constant, else None."""
    v = n.input(k)
    if v.op.name != "Constant":
        return None
    return [int(i) for i in np.asarray(v.attrs["value"]).reshape(-1)]


@register_lowering(BACKEND, "Slice")
def _slice(fe: FunctionEmitter, n: Node, ins: list[Any]) -> Any:
    """``x[start:end:step]`` along the axes named, with constant axes and steps: the input
    read at ``start + i * step`` (Python's clamping of the bounds, in registers where a dim
    or a bound is known only at run time).  Where a bound is a run-time value and the type
    gives the sliced axis a fixed size, the size is checked against it once."""
    x = ins[0]
    if not isinstance(x, Tensor):
        raise Unsupported("Slice of a scalar")
    dtype, shape = _out_type(n)
    b = fe.b
    consts = _ints(n, 1), _ints(n, 2)
    axes = _ints(n, 3) if len(ins) > 3 else list(range(len(_bounds(fe, n, ins, 1))))
    steps = _ints(n, 4) if len(ins) > 4 else [1] * len(axes or ())
    if axes is None or steps is None:
        raise Unsupported("Slice with axes or steps known only at run time")
    starts, ends = _bounds(fe, n, ins, 1), _bounds(fe, n, ins, 2)
    first: list[ir.Value] = [I64(0)] * x.rank
    stride = [1] * x.rank
    dims = list(x.dims)
    for a, start, end, step in zip(axes, starts, ends, steps):
        a %= x.rank
        d = x.dims[a]
        lo, hi = (I64(0), d) if step > 0 else (I64(-1), b.sub(d, I64(1)))

        def clamp(i: int | ir.Value, lo: ir.Value = lo, hi: ir.Value = hi, d: ir.Value = d) -> ir.Value:
            if isinstance(i, int):
                i = max(min(i, 2**62), -2**62)  # beyond any dim: no overflow when the dim is added
                v = b.add(I64(i), d) if i < 0 else I64(i)
            else:  # a run-time bound: INT64_MIN + d does not overflow, INT64_MAX is clamped
                v = b.select(b.icmp_signed("<", i, I64(0)), b.add(i, d), i)
            v = b.select(b.icmp_signed("<", v, lo), lo, v)
            return b.select(b.icmp_signed(">", v, hi), hi, v)

        s, e = clamp(start), clamp(end)
        span = b.sub(e, s) if step > 0 else b.sub(s, e)
        size = b.sdiv(b.add(span, I64(abs(step) - 1)), I64(abs(step)))
        first[a], stride[a] = s, step
        dims[a] = b.select(b.icmp_signed("<", size, I64(0)), I64(0), size)
        if None in consts and isinstance(shape[a], int):
            fe.fail(b.icmp_unsigned("!=", dims[a], I64(shape[a])), n, "ValueError",
                    f"the slice's size along axis {a} is not the {shape[a]} its type says")
    dims = [I64(d) if isinstance(d, int) else v for d, v in zip(shape, dims)]

    sliced = {a % x.rank for a in axes}

    def elem(idx: list[ir.Value]) -> ir.Value:
        at = [fe.b.add(first[a], fe.b.mul(i, I64(stride[a]))) if a in sliced else i for a, i in enumerate(idx)]
        return x.load(fe.b, at)

    return Tensor(dtype, shape, dims, elem=elem)


def _bounds(fe: FunctionEmitter, n: Node, ins: list[Any], k: int) -> list[int] | list[ir.Value]:
    """Slice ``n``'s starts (``k`` 1) or ends (2): ints where a Constant gives them, else
    the run-time values of a tensor of static length."""
    const = _ints(n, k)
    return const if const is not None else _shape_values(fe, ins[k], n.input(k))


@register_lowering(BACKEND, "Split")
def _split(fe: FunctionEmitter, n: Node, ins: list[Any]) -> tuple[Tensor, ...]:
    """The parts of ``x`` along ``axis``, each a view at its offset (ONNX's sizes: the
    ``split`` attribute, or ``ceil(dim / num_outputs)`` but a smaller last part)."""
    x = ins[0]
    if not isinstance(x, Tensor) or not isinstance(n.type, TupleType):
        raise Unsupported("Split of a scalar")
    axis = int(n.attrs.get("axis", 0)) % x.rank
    b, d = fe.b, x.dims[axis]
    split = n.attrs.get("split")
    if split is not None:
        starts = [I64(int(sum(split[:i]))) for i in range(len(split))]
        sizes = [I64(int(s)) for s in split]
    else:
        count = int(n.attrs["num_outputs"])
        size = b.sdiv(b.add(d, I64(count - 1)), I64(count))
        starts = [b.select(b.icmp_signed("<", v, d), v, d) for v in (b.mul(I64(i), size) for i in range(count))]
        sizes = [b.select(b.icmp_signed("<", size, r), size, r) for r in (b.sub(d, s) for s in starts)]
    parts = []
    for t, start, size in zip(n.type.elems, starts, sizes):
        if not isinstance(t, TensorType) or t.shape is None:
            raise Unsupported(f"Split: part type {t}")
        dims = list(x.dims)
        dims[axis] = I64(t.shape[axis]) if isinstance(t.shape[axis], int) else size

        def elem(idx: list[ir.Value], start: ir.Value = start) -> ir.Value:
            return x.load(fe.b, [fe.b.add(i, start) if a == axis else i for a, i in enumerate(idx)])

        parts.append(Tensor(t.dtype, t.shape, dims, elem=elem))
    return tuple(parts)
