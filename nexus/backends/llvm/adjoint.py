"""The helper ops of gradient graphs (``nexus.ops.adjoint``): ``ZerosLike``, ``OnesLike``,
``BroadcastLike``, ``ReshapeLike`` and ``UnreduceLike`` as lazy tensors read where they
are used; ``SumToLike`` as a reduction into a buffer of its own (an identity where the
shapes agree).  The shapes that follow another value's are checked at run time as the
python backend's NumPy calls check them."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from llvmlite import ir

from nexus.backends.base import register_lowering
from nexus.backends.llvm.dtypes import I64, Unsupported, constant, kind, mem_type, reg_type, to_mem
from nexus.backends.llvm.rules import BACKEND, out_dtype
from nexus.backends.llvm.tensors import Tensor, broadcast_index, linear, loop_nest
from nexus.ir.node import Node
from nexus.ir.types import TensorType

if TYPE_CHECKING:
    from nexus.backends.llvm.emit import FunctionEmitter


def _shape(n: Node) -> tuple[Any, ...]:
    t = n.type
    if not isinstance(t, TensorType) or t.shape is None:
        raise Unsupported(f"{n.op.name}: type {t} (unknown rank)")
    return t.shape


def _dims(x: Any) -> list[ir.Value]:
    return list(x.dims) if isinstance(x, Tensor) else []


@register_lowering(BACKEND, "ZerosLike", "OnesLike")
def _filled_like(fe: FunctionEmitter, n: Node, ins: list[Any]) -> Any:
    value = constant(out_dtype(n), 0 if n.op.name == "ZerosLike" else 1)
    x = ins[0]
    if not isinstance(x, Tensor):
        return value
    return Tensor(out_dtype(n), _shape(n), list(x.dims), elem=lambda idx: value)


def _check_broadcast(fe: FunctionEmitter, n: Node, small: list[ir.Value], big: list[ir.Value]) -> None:
    """Fail as NumPy's broadcasting does unless each dim of ``small`` (aligned on the
    right) is 1 or that of ``big``."""
    b = fe.b
    if len(small) > len(big):
        raise Unsupported(f"{n.op.name}: rank {len(small)} to rank {len(big)}")
    for d, e in zip(small, big[len(big) - len(small):]):
        bad = b.and_(b.icmp_unsigned("!=", d, I64(1)), b.icmp_unsigned("!=", d, e))
        fe.fail(bad, n, "ValueError", "operands could not be broadcast together")


@register_lowering(BACKEND, "BroadcastLike")
def _broadcast_like(fe: FunctionEmitter, n: Node, ins: list[Any]) -> Any:
    x, like = ins
    if not isinstance(like, Tensor):
        if isinstance(x, Tensor):  # to a scalar: only a one-element x
            fe.fail(fe.b.icmp_unsigned("!=", _count(fe, x.dims), I64(1)), n, "ValueError",
                    "operands could not be broadcast together")
            return x.load(fe.b, [I64(0)] * x.rank)
        return x
    shape = _shape(n)
    if not isinstance(x, Tensor):
        return Tensor(out_dtype(n), shape, list(like.dims), elem=lambda idx: x)
    _check_broadcast(fe, n, x.dims, like.dims)
    return Tensor(out_dtype(n), shape, list(like.dims),
                  elem=lambda idx: x.load(fe.b, broadcast_index(fe.b, idx, shape, x)))


def _count(fe: FunctionEmitter, dims: list[ir.Value]) -> ir.Value:
    c = I64(1)
    for d in dims:
        c = fe.b.mul(c, d)
    return c


@register_lowering(BACKEND, "ReshapeLike")
def _reshape_like(fe: FunctionEmitter, n: Node, ins: list[Any]) -> Any:
    x, like = ins
    b = fe.b
    src, dims = _dims(x), _dims(like)
    fe.fail(b.icmp_unsigned("!=", _count(fe, src), _count(fe, dims)), n, "ValueError",
            "cannot reshape: the element counts differ")
    if not dims:
        return x.load(b, [I64(0)] * x.rank) if isinstance(x, Tensor) else x
    if not isinstance(x, Tensor):
        return Tensor(out_dtype(n), _shape(n), dims, elem=lambda idx: x)

    def elem(idx: list[ir.Value]) -> ir.Value:
        off = linear(fe.b, idx, dims)
        at = []
        for d in reversed(src):
            at.append(fe.b.urem(off, d))
            off = fe.b.udiv(off, d)
        return x.load(fe.b, at[::-1])

    return Tensor(out_dtype(n), _shape(n), dims, elem=elem)


@register_lowering(BACKEND, "UnreduceLike")
def _unreduce_like(fe: FunctionEmitter, n: Node, ins: list[Any]) -> Any:
    g, x = ins
    dt = out_dtype(n)
    rank = x.rank if isinstance(x, Tensor) else 0
    axes = n.attrs.get("axes")
    red = sorted({int(a) % rank for a in axes}) if axes is not None and rank else list(range(rank))
    keep = bool(n.attrs.get("keepdims", False))
    b = fe.b
    scale = None
    if n.attrs.get("mean", False):
        if kind(dt) != "f":
            raise Unsupported(f"UnreduceLike with mean on {dt}")
        count = _count(fe, [x.dims[a] for a in red]) if isinstance(x, Tensor) else I64(1)
        count = b.select(b.icmp_unsigned("==", count, I64(0)), I64(1), count)
        scale = b.uitofp(count, reg_type(dt))

    def value(v: ir.Value) -> ir.Value:
        return v if scale is None else fe.b.fdiv(v, scale)

    if not isinstance(x, Tensor):
        return value(g.load(b, [I64(0)] * g.rank) if isinstance(g, Tensor) else g)
    kept = [i for i in range(rank) if i not in red]
    if isinstance(g, Tensor):
        want = [I64(1) if i in red else x.dims[i] for i in range(rank)] if keep else [x.dims[i] for i in kept]
        if len(want) != g.rank:
            raise Unsupported(f"UnreduceLike of a rank-{g.rank} adjoint onto rank {rank}")
        for d, w in zip(g.dims, want):
            fe.fail(b.icmp_unsigned("!=", d, w), n, "ValueError", "the adjoint's shape does not fit the reduction")

    def elem(idx: list[ir.Value]) -> ir.Value:
        if not isinstance(g, Tensor):
            return value(g)
        at = [I64(0) if i in red else idx[i] for i in range(rank)] if keep else [idx[i] for i in kept]
        return value(g.load(fe.b, at))

    return Tensor(dt, _shape(n), list(x.dims), elem=elem)


@register_lowering(BACKEND, "SumToLike")
def _sum_to_like(fe: FunctionEmitter, n: Node, ins: list[Any]) -> Any:
    """Sums the leading axes and the axes where ``like`` has size 1 and ``x`` not.  Where
    the types do not tell (two different symbols), the sizes decide at run time: that
    axis is summed over ``x``'s size where ``like``'s is 1, else over one element."""
    x, like = ins
    dt = out_dtype(n)
    out_shape = _shape(n)
    b = fe.b
    if not isinstance(x, Tensor):
        return x
    xt = n.input(0).type
    assert isinstance(xt, TensorType) and xt.shape is not None
    lead = x.rank - len(out_shape)
    if lead < 0:
        raise Unsupported(f"SumToLike from rank {x.rank} to rank {len(out_shape)}")
    like_dims = _dims(like)
    # per axis of the result: False (kept), True (summed) or an i1 decided at run time
    summed: list[Any] = []
    for i, d in enumerate(out_shape):
        xd = xt.shape[lead + i]
        if d == xd:
            summed.append(False)
        elif d == 1:
            summed.append(True)
        else:
            ld, xv = like_dims[i], x.dims[lead + i]
            stretch = b.and_(b.icmp_unsigned("==", ld, I64(1)), b.icmp_unsigned("!=", xv, I64(1)))
            fe.fail(b.and_(b.not_(stretch), b.icmp_unsigned("!=", ld, xv)), n, "ValueError",
                    "cannot sum to the shape of the value it was broadcast from")
            summed.append(stretch)
    if not lead and not any(v is not False for v in summed):
        return x
    if not out_shape:  # a sum of everything
        acc = fe.eb.alloca(reg_type(dt))
        b.store(constant(dt, 0), acc)
        loop_nest(b, x.dims, lambda idx: b.store(_add(b, dt, b.load(acc), x.load(b, idx)), acc), name="sum")
        return b.load(acc)

    def pick(v: Any, yes: ir.Value, no: ir.Value) -> ir.Value:
        return no if v is False else yes if v is True else b.select(v, yes, no)

    out_dims = [pick(v, I64(1), x.dims[lead + i]) for i, v in enumerate(summed)]
    red_dims = x.dims[:lead] + [pick(v, x.dims[lead + i], I64(1)) for i, v in enumerate(summed) if v is not False]
    buf = fe.alloc(out_shape, dt)
    fe.owner[id(buf)] = {n}
    acc = fe.eb.alloca(reg_type(dt))

    def one(out_idx: list[ir.Value]) -> None:
        b.store(constant(dt, 0), acc)

        def inner(red_idx: list[ir.Value]) -> None:
            full = list(red_idx[:lead])
            rest = iter(red_idx[lead:])
            full += [out_idx[i] if v is False else pick(v, next(rest), out_idx[i]) for i, v in enumerate(summed)]
            b.store(_add(b, dt, b.load(acc), x.load(b, full)), acc)

        loop_nest(b, red_dims, inner, name="red")
        p = b.gep(buf, [linear(b, out_idx, out_dims)], inbounds=True, source_etype=mem_type(dt))
        b.store(to_mem(b, b.load(acc), dt), p)

    loop_nest(b, out_dims, one, name="out")
    return Tensor(dt, out_shape, out_dims, ptr=buf)


def _add(b: ir.IRBuilder, dt: str, a: ir.Value, v: ir.Value) -> ir.Value:
    if kind(dt) == "b":
        raise Unsupported("SumToLike on bools")
    return b.fadd(a, v) if kind(dt) == "f" else b.add(a, v)
