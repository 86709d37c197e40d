"""PyTorch import rules: reductions and sorting, the SymInt arithmetic ``torch.export``
leaves in graphs, and ``cond`` / ``while_loop``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from nexus.frontend.torch.control import convert_cond, convert_while
from nexus.frontend.torch.data import TorchImportError
from nexus.frontend.torch.ops import (
    IGNORED,
    Rule,
    as_tensor,
    axis,
    cast,
    i64_scalar,
    int_list,
    out_dtype,
    rank,
    rules,
    tensor_type,
)
from nexus.ir.node import Node

if TYPE_CHECKING:
    from nexus.frontend.torch.importer import Importer


# --- reductions ------------------------------------------------------------------------------
def _reduce(op: str) -> Rule:
    def fn(imp: Importer, x: Node, dim: Any = None, keepdim: bool = False, *, dtype: Any = None) -> Node:
        r = rank(x)
        axes = tuple(range(r)) if dim is None or (isinstance(dim, (list, tuple)) and not dim) else \
            tuple(axis(d, r) for d in int_list(dim))
        out = out_dtype(imp)
        if op in ("ReduceSum", "ReduceMean", "ReduceProd"):
            x = cast(imp, x, out)
        return imp.emit(op, [x], {"axes": axes, "keepdims": bool(keepdim)})

    return fn


rules("aten.sum.dim_IntList", "aten.sum.default")(_reduce("ReduceSum"))
rules("aten.mean.dim", "aten.mean.default")(_reduce("ReduceMean"))
rules("aten.amax")(_reduce("ReduceMax"))
rules("aten.amin")(_reduce("ReduceMin"))
rules("aten.prod.dim_int", "aten.prod.default")(_reduce("ReduceProd"))


@rules("aten.linalg_vector_norm")
def _vector_norm(imp: Importer, x: Node, ord: Any = 2, dim: Any = None, keepdim: bool = False, *,
                 dtype: Any = None) -> Node:
    """torch.linalg.vector_norm: (sum |x|^ord)^(1/ord) over ``dim`` (all dims when None or
    empty), max |x| for inf, min |x| for -inf, the count of nonzeros for 0; ``dtype``
    casts x first."""
    r = rank(x)
    axes = tuple(range(r)) if dim is None or (isinstance(dim, (list, tuple)) and not dim) else \
        tuple(axis(d, r) for d in int_list(dim))
    attrs = {"axes": axes, "keepdims": bool(keepdim)}
    out = out_dtype(imp)
    x = cast(imp, x, out)
    p = imp.value_of(ord)
    if p is None:
        raise TorchImportError("vector_norm needs a constant ord")
    p = float(p)
    if p == 0:
        nonzero = cast(imp, imp.emit("NotEqual", [x, as_tensor(imp, 0, out)], name=""), out)
        return imp.emit("ReduceSum", [nonzero], attrs)
    if p == 2:  # the common case (weight norm): no Abs, no Pow
        return imp.emit("Sqrt", [imp.emit("ReduceSum", [imp.emit("Mul", [x, x], name="")], attrs, name="")])
    a = imp.emit("Abs", [x], name="")
    if p in (float("inf"), float("-inf")):
        return imp.emit("ReduceMax" if p > 0 else "ReduceMin", [a], attrs)
    if p == 1:
        return imp.emit("ReduceSum", [a], attrs)
    total = imp.emit("ReduceSum", [imp.emit("Pow", [a, as_tensor(imp, p, out)], name="")], attrs, name="")
    return imp.emit("Pow", [total, as_tensor(imp, 1.0 / p, out)])


@rules("aten.any", "aten.all")
def _any(imp: Importer, x: Node, dim: Any = None, keepdim: bool = False) -> Node:
    r = rank(x)
    axes = tuple(range(r)) if dim is None else tuple(axis(d, r) for d in int_list(dim))
    as_int = cast(imp, cast(imp, x, "bool"), "i8")
    op = "ReduceMax" if "any" in str(imp.fx.target) else "ReduceMin"
    return cast(imp, imp.emit(op, [as_int], {"axes": axes, "keepdims": bool(keepdim)}, name=""), "bool")


@rules("aten.max.dim", "aten.min.dim")
def _max_dim(imp: Importer, x: Node, dim: int, keepdim: bool = False) -> list[Any]:
    a = axis(dim, rank(x))
    big = "max" in str(imp.fx.target)
    v = imp.emit("ReduceMax" if big else "ReduceMin", [x], {"axes": (a,), "keepdims": bool(keepdim)})
    i = imp.emit("ArgMax" if big else "ArgMin", [x], {"axis": a, "keepdims": bool(keepdim)}, name="")
    return [v, i]


@rules("aten.max.default", "aten.min.default")
def _max_all(imp: Importer, x: Node) -> Node:
    return imp.emit("ReduceMax" if "max" in str(imp.fx.target) else "ReduceMin", [x], {"axes": tuple(range(rank(x)))})


@rules("aten.argmax", "aten.argmin")
def _argmax(imp: Importer, x: Node, dim: int | None = None, keepdim: bool = False) -> Node:
    op = "ArgMax" if "argmax" in str(imp.fx.target) else "ArgMin"
    if dim is None:
        x = imp.emit("Reshape", [x, imp.const([-1], np.int64)], name="")
        dim = 0
    return imp.emit(op, [x], {"axis": axis(dim, rank(x)), "keepdims": bool(keepdim)})


@rules("aten.var.correction", "aten.var.dim", "aten.std.correction")
def _var(imp: Importer, x: Node, dim: Any = None, *args: Any, correction: Any = None, keepdim: bool = False) -> Node:
    if args and isinstance(args[0], bool):  # var.dim(x, dim, unbiased, keepdim)
        correction = 1 if args[0] else 0
        keepdim = bool(args[1]) if len(args) > 1 else keepdim
    r = rank(x)
    axes = tuple(range(r)) if dim is None else tuple(axis(d, r) for d in int_list(dim))
    mean = imp.emit("ReduceMean", [x], {"axes": axes, "keepdims": True}, name="")
    d = imp.emit("Sub", [x, mean], name="")
    ss = imp.emit("ReduceSum", [imp.emit("Mul", [d, d], name="")], {"axes": axes, "keepdims": bool(keepdim)}, name="")
    n = imp.const(1, np.int64)
    for a in axes:
        n = imp.emit("Mul", [n, imp.emit("DimSize", [x], {"axis": a}, name="")], name="")
    c = 1 if correction is None else correction
    denom = cast(imp, imp.emit("Sub", [n, imp.const(int(c), np.int64)], name=""), tensor_type(x).dtype)
    var = imp.emit("Div", [ss, denom], name=None if "std" not in str(imp.fx.target) else "")
    return imp.emit("Sqrt", [var]) if "std" in str(imp.fx.target) else var


@rules("aten.cumsum")
def _cumsum(imp: Importer, x: Node, dim: int, *, dtype: Any = None) -> Node:
    return imp.emit("CumSum", [cast(imp, x, out_dtype(imp))], {"axis": axis(dim, rank(x))})


@rules("aten.topk")
def _topk(imp: Importer, x: Node, k: Any, dim: int = -1, largest: bool = True, sorted: bool = True) -> list[Any]:
    t = imp.emit("TopK", [x, i64_scalar(imp, k)], {"axis": axis(dim, rank(x)), "largest": bool(largest),
                                             "sorted": True}, name="")
    return [imp.emit("Proj", [t], {"num": 0}), imp.emit("Proj", [t], {"num": 1}, name="")]


@rules("aten.sort.default", "aten.sort.stable")
def _sort(imp: Importer, x: Node, *args: Any, dim: int = -1, descending: bool = False, stable: Any = None) -> list[Any]:
    if "stable" in str(imp.fx.target):
        stable, dim, descending = (args + (stable, dim, descending))[:3] if args else (stable, dim, descending)
    else:
        dim, descending = (list(args) + [dim, descending][len(args):])[:2]
    a = axis(dim, rank(x))
    n = tensor_type(x).shape[a]  # type: ignore[index]
    k = imp.const(n, np.int64) if isinstance(n, int) else imp.emit("DimSize", [x], {"axis": a}, name="")
    t = imp.emit("TopK", [x, k], {"axis": a, "largest": bool(descending), "sorted": True}, name="")
    return [imp.emit("Proj", [t], {"num": 0}), imp.emit("Proj", [t], {"num": 1}, name="")]


# --- SymInt arithmetic and the higher-order ops -----------------------------------------------
def _sym(op: str) -> Rule:
    def fn(imp: Importer, a: Any, b: Any) -> Any:
        if not isinstance(a, Node) and not isinstance(b, Node):
            raise TorchImportError("SymInt arithmetic on two constants")
        dt = "i64" if all(_is_int(v) for v in (a, b)) else "f64"
        return imp.emit(op, [as_tensor(imp, a, dt), as_tensor(imp, b, dt)])

    return fn


def _is_int(v: Any) -> bool:
    return (isinstance(v, Node) and tensor_type(v).dtype in ("i64", "i32", "bool")) or (isinstance(v, int))


for _k, _op in (("operator.add", "Add"), ("operator.sub", "Sub"), ("operator.mul", "Mul"),
                ("operator.floordiv", "FloorDiv"), ("operator.mod", "Mod"), ("operator.eq", "Equal"),
                ("operator.ne", "NotEqual"), ("operator.lt", "Less"), ("operator.le", "LessEqual"),
                ("operator.gt", "Greater"), ("operator.ge", "GreaterEqual"), ("torch.sym_max", "Maximum"),
                ("torch.sym_min", "Minimum")):
    rules(_k)(_sym(_op))


@rules("operator.truediv")
def _truediv(imp: Importer, a: Any, b: Any) -> Node:
    return imp.emit("Div", [as_tensor(imp, a, "f64"), as_tensor(imp, b, "f64")])


@rules("operator.neg")
def _neg(imp: Importer, a: Node) -> Node:
    return imp.emit("Neg", [a])


@rules("torch.sym_not", "operator.not_")
def _sym_not(imp: Importer, a: Node) -> Node:
    return imp.emit("Not", [cast(imp, a, "bool")])


@rules("torch.sym_float")
def _sym_float(imp: Importer, a: Node) -> Node:
    return cast(imp, a, "f64")


@rules("aten._local_scalar_dense", "aten.item")
def _item(imp: Importer, x: Node) -> Node:
    return imp.emit("Reshape", [x, imp.const([], np.int64)])


@rules(*IGNORED)
def _ignored(imp: Importer, *args: Any, **kw: Any) -> None:
    return None


rules("cond")(convert_cond)
rules("while_loop")(convert_while)
