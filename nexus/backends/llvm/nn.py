"""The ops real models are made of: activations, Softmax / LogSoftmax, LayerNormalization,
Concat and Gather with a tensor of indices (an embedding lookup).

The activations (Gelu, HardSigmoid, HardSwish, LeakyRelu, Softplus, PRelu) are elementwise
rules of one element in registers, as :mod:`nexus.backends.llvm.rules`' are, so the emitter
fuses them into the chain around them (:data:`ELEMENTWISE` names them).  The others are
loop nests that write a buffer of their own: Softmax and LayerNorm make two or three
passes over each row of the normalised axes (reading the input through its ``load``, so
an elementwise chain before them is fused into every pass), Concat copies each input into
its slice of the result, and Gather checks each index once and copies its row.

Semantics are the kernels' (:mod:`nexus.ops.activation`, :mod:`nexus.ops.nn`): f16 is
computed in f32 and rounded back; the passes run in NumPy's order (max, the sum of the
shifted exponentials, the quotient; the mean, the mean of squares, the scaled quotient),
with sums the vectoriser may reassociate where NumPy sums pairwise, so floats agree to
rounding.  An index out of range fails with IndexError naming the node, as the scalar
Gather does.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from llvmlite import ir

from nexus.backends.base import register_lowering
from nexus.backends.llvm.dtypes import I64, Unsupported, constant, kind, mem_type, reg_type, to_mem, to_reg
from nexus.backends.llvm.rules import BACKEND, Ctx, convert, erf_f32, exp_f32
from nexus.backends.llvm.tensors import Tensor, broadcast_index, linear, loop_nest
from nexus.ir.node import Node
from nexus.ir.types import TensorType, numpy_dtype, simplify_dim

if TYPE_CHECKING:
    from nexus.backends.llvm.emit import FunctionEmitter

# The elementwise rules of this module (the emitter fuses them as it fuses rules.py's).
ELEMENTWISE = frozenset({"Gelu", "HardSigmoid", "HardSwish", "LeakyRelu", "Softplus", "PRelu"})


def _wide(dt: str) -> str:
    """The dtype the kernels compute ``dt`` in: f16 in f32, as PyTorch does on CPU."""
    if kind(dt) != "f":
        raise Unsupported(f"a float op on {dt}")
    return "f32" if dt == "f16" else dt


def _nan_max(b: ir.IRBuilder, x: ir.Value, y: ir.Value) -> ir.Value:
    """``np.maximum(x, y)``: x where x > y or x is NaN."""
    return b.select(b.or_(b.fcmp_ordered(">", x, y), b.fcmp_unordered("uno", x, x)), x, y)


def _nan_min(b: ir.IRBuilder, x: ir.Value, y: ir.Value) -> ir.Value:
    return b.select(b.or_(b.fcmp_ordered("<", x, y), b.fcmp_unordered("uno", x, x)), x, y)


def _sum(b: ir.IRBuilder, acc: ir.Value, v: ir.Value) -> ir.Value:
    """``acc + v`` in a sum over a row that may be reassociated: the loop vectorises, with
    one partial sum per lane (NumPy's pairwise sums are not sequential either)."""
    return b.fadd(acc, v, flags=("reassoc",))


def _exp(fe: FunctionEmitter, w: str, x: ir.Value) -> ir.Value:
    return exp_f32(fe.b, x) if w == "f32" else fe.math("exp", w, [x])


# --- activations: one element in registers ----------------------------------------------------
def _activation(cx: Ctx, n: Node, x: ir.Value, slope: ir.Value | None, dt: str, w: str) -> ir.Value:
    b, name = cx.b, n.op.name
    t = x.type

    def c(v: float) -> ir.Constant:
        return ir.Constant(t, v)

    zero = c(0.0)
    if name == "Gelu":
        if n.attrs.get("approximate", "none") == "tanh":
            inner = b.fmul(c(math.sqrt(2 / math.pi)), b.fadd(x, b.fmul(b.fmul(b.fmul(c(0.044715), x), x), x)))
            return b.fmul(b.fmul(c(0.5), x), b.fadd(c(1.0), cx.math("tanh", w, [inner])))
        scaled = b.fdiv(x, c(math.sqrt(2)))
        e = erf_f32(b, scaled) if w == "f32" else cx.math("erf", w, [scaled])
        return b.fmul(b.fmul(b.fadd(e, c(1.0)), x), c(0.5))
    if name == "HardSigmoid":
        v = b.fadd(b.fmul(x, c(float(n.attrs.get("alpha", 0.2)))), c(float(n.attrs.get("beta", 0.5))))
        return _nan_min(b, _nan_max(b, v, zero), c(1.0))
    if name == "HardSwish":
        r6 = _nan_min(b, _nan_max(b, b.fadd(x, c(3.0)), zero), c(6.0))
        return b.fdiv(b.fmul(r6, x), c(6.0))
    if name == "LeakyRelu":  # alpha in the input's dtype, as the kernel multiplies (f16 too)
        slope = c(float(numpy_dtype(dt).type(n.attrs.get("alpha", 0.01))))
    if name in ("LeakyRelu", "PRelu"):
        assert slope is not None
        return b.select(b.fcmp_ordered(">=", x, zero), x, b.fmul(x, slope))
    if name == "Softplus":  # max(x, 0) + log1p(exp(-|x|)): no overflow for large |x|
        e = cx.math("exp", w, [b.fneg(cx.math("fabs", w, [x]))])
        return b.fadd(_nan_max(b, x, zero), cx.math("log1p", w, [e]))
    raise Unsupported(name)


@register_lowering(BACKEND, *ELEMENTWISE)
def _activations(cx: Ctx, n: Node, args: list[ir.Value], dts: list[str]) -> ir.Value:
    dt = dts[0]
    if len(set(dts)) != 1:
        raise Unsupported(f"{n.op.name} on mixed dtypes {dts}")
    w = _wide(dt)
    wide = [convert(cx.b, a, dt, w) for a in args]
    out = _activation(cx, n, wide[0], wide[1] if len(wide) > 1 else None, dt, w)
    return convert(cx.b, out, w, dt)


# --- rows along axes: Softmax, LogSoftmax, LayerNormalization --------------------------------
Index = list[ir.Value]
Full = Callable[[Index], Index]  # a row's index -> the element's whole index
Over = Callable[[Callable[[Index], None]], None]  # loop a body over the row
Store = Callable[[Index, ir.Value], None]  # write the result at a row's index
Read = Callable[[Index], ir.Value]  # read back what was written there


def _float_input(n: Node, x: Any) -> Tensor:
    if not isinstance(x, Tensor):
        raise Unsupported(f"{n.op.name} of a scalar")
    _wide(x.dtype)
    return x


def _rows(fe: FunctionEmitter, n: Node, x: Tensor, axes: list[int],
          row: Callable[[Full, Over, Store, Read], None]) -> Tensor:
    """A buffer shaped as ``x``, filled one row at a time: ``row(full, over, store, result)``
    runs per index of the axes not in ``axes``, where ``over(body)`` loops over the row
    (``body`` gets the row's index), ``full(row_idx)`` is the whole index of an element,
    ``store(row_idx, value)`` writes the result there (``value`` in the wide dtype) and
    ``result(row_idx)`` reads back what was stored (in the wide dtype)."""
    b = fe.b
    dt = x.dtype
    outer = [a for a in range(x.rank) if a not in axes]
    buf = fe.alloc(x.shape, dt)
    fe.owner[id(buf)] = {n}
    et = mem_type(dt)

    def per_row(out_idx: list[ir.Value]) -> None:
        def full(row_idx: list[ir.Value]) -> list[ir.Value]:
            idx: list[ir.Value] = [I64(0)] * x.rank
            for a, i in zip(outer, out_idx):
                idx[a] = i
            for a, i in zip(axes, row_idx):
                idx[a] = i
            return idx

        def over(body: Callable[[Index], None]) -> None:
            loop_nest(b, [x.dims[a] for a in axes], body, name="row")

        def at(row_idx: list[ir.Value]) -> ir.Value:
            return b.gep(buf, [linear(b, full(row_idx), x.dims)], inbounds=True, source_etype=et)

        def store(row_idx: list[ir.Value], v: ir.Value) -> None:
            b.store(to_mem(b, convert(b, v, _wide(dt), dt), dt), at(row_idx))

        def result(row_idx: list[ir.Value]) -> ir.Value:
            return convert(b, to_reg(b, b.load(at(row_idx), typ=et), dt), dt, _wide(dt))

        row(full, over, store, result)

    loop_nest(b, [x.dims[a] for a in outer], per_row, name="rows")
    return Tensor(dt, x.shape, x.dims, ptr=buf)


@register_lowering(BACKEND, "Softmax", "LogSoftmax")
def _softmax(fe: FunctionEmitter, n: Node, ins: list[Any]) -> Tensor:
    x = _float_input(n, ins[0])
    axis = int(n.attrs.get("axis", -1)) % x.rank
    b, dt = fe.b, x.dtype
    w = _wide(dt)
    acc, total = fe.eb.alloca(reg_type(w)), fe.eb.alloca(reg_type(w))
    log = n.op.name == "LogSoftmax"

    def row(full: Full, over: Over, store: Store, result: Read) -> None:
        def load(i: list[ir.Value]) -> ir.Value:
            return convert(b, x.load(b, full(i)), dt, w)

        b.store(constant(w, -math.inf), acc)
        t = reg_type(w)
        maximum = b.module.declare_intrinsic("llvm.maximum", [t], ir.FunctionType(t, [t, t]))  # NaN if either is
        over(lambda i: b.store(b.call(maximum, [b.load(acc), load(i)]), acc))
        m = b.load(acc)
        b.store(constant(w, 0.0), total)
        keep = not log and w == dt  # Softmax keeps exp(x - m) in its result for the quotient

        def add_exp(i: list[ir.Value]) -> None:
            e = _exp(fe, w, b.fsub(load(i), m))
            if keep:
                store(i, e)
            b.store(_sum(b, b.load(total), e), total)

        over(add_exp)
        s = b.load(total)
        if log:
            ls = fe.math("log", w, [s])
            over(lambda i: store(i, b.fsub(b.fsub(load(i), m), ls)))
        elif keep:
            over(lambda i: store(i, b.fdiv(result(i), s)))
        else:  # f16: the exponentials are not rounded to f16 before the quotient
            over(lambda i: store(i, b.fdiv(_exp(fe, w, b.fsub(load(i), m)), s)))

    return _rows(fe, n, x, [axis], row)


@register_lowering(BACKEND, "LayerNormalization")
def _layer_norm(fe: FunctionEmitter, n: Node, ins: list[Any]) -> Tensor:
    x = _float_input(n, ins[0])
    params = ins[1:]
    if any(not isinstance(p, Tensor) for p in params):
        raise Unsupported("LayerNormalization with a scalar scale or bias")
    axis = int(n.attrs.get("axis", -1)) % x.rank
    axes = list(range(axis, x.rank))
    b, dt = fe.b, x.dtype
    w = _wide(dt)
    eps = constant(w, float(n.attrs.get("epsilon", 1e-5)))
    count = I64(1)
    for a in axes:
        count = b.mul(count, x.dims[a])
    cnt = b.uitofp(count, reg_type(w))
    acc = fe.eb.alloca(reg_type(w))

    def row(full: Full, over: Over, store: Store, _: Read) -> None:
        def load(i: list[ir.Value]) -> ir.Value:
            return convert(b, x.load(b, full(i)), dt, w)

        def param(p: Tensor, i: list[ir.Value]) -> ir.Value:
            idx = full(i)
            return convert(b, p.load(b, broadcast_index(b, idx, x.shape, p)), p.dtype, w)

        b.store(constant(w, 0.0), acc)
        over(lambda i: b.store(_sum(b, b.load(acc), load(i)), acc))
        mean = b.fdiv(b.load(acc), cnt)
        b.store(constant(w, 0.0), acc)

        def square(i: list[ir.Value]) -> None:
            d = b.fsub(load(i), mean)
            b.store(_sum(b, b.load(acc), b.fmul(d, d)), acc)

        over(square)
        sd = fe.math("sqrt", w, [b.fadd(b.fdiv(b.load(acc), cnt), eps)])

        def out(i: list[ir.Value]) -> None:
            v = b.fmul(b.fdiv(b.fsub(load(i), mean), sd), param(params[0], i))
            if len(params) > 1:
                v = b.fadd(v, param(params[1], i))
            store(i, v)

        over(out)

    return _rows(fe, n, x, axes, row)


# --- Concat and Gather: copies into a buffer of the result's shape ----------------------------
def _result(fe: FunctionEmitter, n: Node) -> tuple[str, tuple[Any, ...], list[ir.Value], ir.Value]:
    t = n.type
    if not isinstance(t, TensorType) or t.shape is None or not t.shape:
        raise Unsupported(f"{n.op.name}: result type {t}")
    dims = fe.dims(t.shape)
    buf = fe.alloc(t.shape, t.dtype)
    fe.owner[id(buf)] = {n}
    return t.dtype, t.shape, dims, buf


def _concat_sums(shapes: list[tuple[Any, ...]], shape: tuple[Any, ...], axis: int) -> bool:
    """Whether the type proves the inputs' sizes along ``axis`` add up to the result's."""
    return bool(simplify_dim(sum((s[axis] for s in shapes), start=0) - shape[axis]) == 0)


def concat_may_fail(n: Node) -> bool:
    """Whether Concat ``n``'s rule checks dims at run time: where its types do not prove
    that the inputs fit (dims the type rule assumed equal, a result dim of its own)."""
    t = n.type
    ts = [v.type for v in n.inputs]
    if not isinstance(t, TensorType) or t.shape is None or not t.shape:
        return False  # no rule: the graph is not compiled whole
    if any(not isinstance(u, TensorType) or u.shape is None or len(u.shape) != len(t.shape) for u in ts):
        return True
    axis = int(n.attrs["axis"]) % len(t.shape)
    shapes = [u.shape for u in ts if isinstance(u, TensorType) and u.shape is not None]
    return not _concat_sums(shapes, t.shape, axis) or any(
        s[k] != t.shape[k] for s in shapes for k in range(len(t.shape)) if k != axis)


@register_lowering(BACKEND, "Concat")
def _concat(fe: FunctionEmitter, n: Node, ins: list[Any]) -> Tensor:
    if any(not isinstance(v, Tensor) for v in ins):
        raise Unsupported("Concat of scalars")
    dt, shape, dims, buf = _result(fe, n)
    axis = int(n.attrs["axis"]) % len(shape)
    if any(v.rank != len(shape) for v in ins):
        raise Unsupported("Concat of inputs whose rank is not the result's")
    b = fe.b
    et = mem_type(dt)
    off: ir.Value = I64(0)
    for v in ins:
        for k in range(len(shape)):  # the type rule assumed the other dims agree: check it
            if k != axis and v.dims[k] is not dims[k] and v.shape[k] != shape[k]:
                fe.fail(b.icmp_unsigned("!=", v.dims[k], dims[k]), n, "ValueError",
                        f"all the input array dimensions except for the concatenation axis must match exactly "
                        f"(axis {k})")

        def copy(idx: list[ir.Value], v: Tensor = v, off: ir.Value = off) -> None:
            at = list(idx)
            at[axis] = b.add(idx[axis], off)
            b.store(to_mem(b, v.load(b, idx), dt), b.gep(buf, [linear(b, at, dims)], inbounds=True, source_etype=et))

        loop_nest(b, v.dims, copy, name="cat")
        off = b.add(off, v.dims[axis])
    if not _concat_sums([v.shape for v in ins], shape, axis):
        fe.fail(b.icmp_unsigned("!=", off, dims[axis]), n, "ValueError",
                "the inputs' sizes along the concatenation axis do not add up to the result's")
    return Tensor(dt, shape, dims, ptr=buf)


def gather_rows(fe: FunctionEmitter, n: Node, data: Tensor, ind: Tensor, axis: int) -> Tensor:
    """``np.take(data, ind, axis)`` with a tensor of integer indices (negative ones count
    from the end), each index checked once, its slice copied."""
    ik = kind(ind.dtype)
    if ik not in "iu":
        raise Unsupported(f"Gather with {ind.dtype} indices")
    dt, shape, dims, buf = _result(fe, n)
    b = fe.b
    et = mem_type(dt)
    r = ind.rank
    dim = data.dims[axis]

    def outer(idx: list[ir.Value]) -> None:
        i = fe.index(ind.load(b, idx[axis:]), dim, ik == "i", n, f"index out of bounds for axis {axis}", reuse=False)

        def inner(rest: list[ir.Value]) -> None:
            v = data.load(b, [*idx[:axis], i, *rest])
            b.store(to_mem(b, v, dt), b.gep(buf, [linear(b, [*idx, *rest], dims)], inbounds=True, source_etype=et))

        loop_nest(b, dims[axis + r:], inner, name="take")

    loop_nest(b, dims[:axis + r], outer, name="gather")
    return Tensor(dt, shape, dims, ptr=buf)


@register_lowering(BACKEND, "GatherElements")
def _gather_elements(fe: FunctionEmitter, n: Node, ins: list[Any]) -> Tensor:
    """``np.take_along_axis(data, ind, axis)``: each index checked where it is read (negative
    ones count from the end), the result shaped like ``ind``; along the other axes ``data``
    is read as NumPy broadcasts it (an axis of size 1 reads its one entry)."""
    data, ind = ins
    if not isinstance(data, Tensor) or not isinstance(ind, Tensor):
        raise Unsupported("GatherElements of a scalar")
    ik = kind(ind.dtype)
    if ik not in "iu":
        raise Unsupported(f"GatherElements with {ind.dtype} indices")
    axis = int(n.attrs.get("axis", 0))
    axis = axis if axis >= 0 else axis + data.rank
    dt, shape, dims, buf = _result(fe, n)
    b = fe.b
    for j, (d, o) in enumerate(zip(data.shape, shape)):
        if j == axis or d == o or d == 1:
            continue
        if isinstance(d, int) and isinstance(o, int):  # take_along_axis would broadcast ind instead
            raise Unsupported(f"GatherElements: data's axis {j} ({d}) is neither the indices' ({o}) nor 1")
        dv = data.dims[j]  # sizes known at run time only: NumPy's broadcast or its error
        fe.fail(b.and_(b.icmp_unsigned("!=", dv, dims[j]), b.icmp_unsigned("!=", dv, I64(1))), n, "IndexError",
                f"shape mismatch: data's axis {j} is neither the indices' size nor 1")
    et = mem_type(dt)
    dim = data.dims[axis]

    def body(idx: list[ir.Value]) -> None:
        i = fe.index(ind.load(b, idx), dim, ik == "i", n, f"index out of bounds for axis {axis}", reuse=False)
        at = broadcast_index(b, idx, shape, data)
        at[axis] = i
        b.store(to_mem(b, data.load(b, at), dt), b.gep(buf, [linear(b, idx, dims)], inbounds=True, source_etype=et))

    loop_nest(b, dims, body, name="gather_el")
    return Tensor(dt, shape, dims, ptr=buf)
