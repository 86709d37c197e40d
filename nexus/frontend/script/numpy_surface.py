"""The NumPy functions and array methods of ``@nx.script`` composed from registry ops:
reductions, shapes, math and linear algebra, with NumPy's defaults (``axis=None``
reduces everything, ``keepdims=False``, ``argsort`` along the last axis...).  Each
``npx_<name>(low, node, args, kw)`` gets the lowering, the positional values unflattened
and the keywords as values known at build time."""

from __future__ import annotations

import ast
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from nexus.frontend.script import calls, expr, lists, numpy_creation, numpy_math
from nexus.frontend.script.annotations import I64_MAX
from nexus.frontend.script.numpy_creation import (
    _dtype_name,
    _flat,
    _hashable,
    _static,
    _t,
    shape_node,
)
from nexus.frontend.script.values import TENSOR_METHODS, Static, TensorMethod, TupleVal, Val, _dtype
from nexus.ir.node import Node
from nexus.ir.types import TensorType

if TYPE_CHECKING:
    from nexus.frontend.script.visitor import Lowering


def numpy_surface(low: Lowering, fn: Any, node: ast.Call) -> Val | None:
    """The value of ``np.<fn>(...)`` or ``x.<method>(...)`` when it is one of these, else None."""
    if isinstance(fn, TensorMethod):
        name = _METHODS.get(fn.name)
        if name is None:
            raise low.error(node, f"the array method `.{fn.name}()` is not supported in a script",
                             f"supported methods: {', '.join(sorted(_METHODS))}")
        return _npx(low, name, node, [fn.x])
    name = _SURFACE.get(fn) if _hashable(fn) else None
    if name is None:
        return None
    return _npx(low, name, node, [])


def nx_as_numpy(low: Lowering, name: str, node: ast.Call) -> Val | None:
    """``nx.<name>(...)`` called with NumPy's signature (``nx.roll(a, shift, axis)``) when
    ``np.<name>`` is on the surface, else None: every nx function mirroring NumPy takes it."""
    if name not in set(_SURFACE.values()):
        return None
    return _npx(low, name, node, [])


def _npx(low: Lowering, name: str, node: ast.Call, first: list[Val]) -> Val:
    args = first + [low.expr(a) for a in node.args]
    if name not in ("stack", "concatenate"):  # NumPy reads a list as an array
        args = [lists.as_array(low, a) for a in args]
    kw = calls.static_kwargs(low, node)
    return _NPX[name](low, node, args, kw)


# --- helpers ---------------------------------------------------------------------------


def _rank(low: Lowering, v: Val, node: ast.AST) -> tuple[Node, int]:
    x, t = _t(low, v)
    if t.shape is None:
        raise low.error(node, "this NumPy function needs a tensor of known rank",
                         "annotate the argument with its dims, e.g. Tensor['T', 'D']")
    return x, len(t.shape)


def _axis(low: Lowering, kw: dict[str, Any], args: list[Val], pos: int, node: ast.AST, default: Any = None) -> Any:
    if len(args) > pos:
        return _static(low, args[pos], node, "the axis")
    return kw.pop("axis", default)


def _reduce(low: Lowering, op: str, node: ast.Call, args: list[Val], kw: dict[str, Any]) -> Node:
    x, _ = _t(low, args[0])
    axis = _axis(low, kw, args, 1, node)
    keep = bool(kw.pop("keepdims", False))
    _no_more(low, node, kw, args, 2)
    attrs: dict[str, Any] = {"keepdims": keep}
    if axis is not None:
        attrs["axes"] = tuple(axis) if isinstance(axis, (tuple, list)) else (axis,)
    if op in ("ReduceSum", "ReduceProd"):
        x = _accumulator(low, x)
    if op == "ReduceMean" and not _dtype(x).startswith("f"):
        x = low.cast(x, "f64")
    return low.emit(op, [x], attrs)


def _accumulator(low: Lowering, x: Node) -> Node:
    """NumPy sums and multiplies bools and integers narrower than its default integer in
    that integer (int64; uint64 for unsigned ones)."""
    dt = _dtype(x)
    if dt in ("bool", "i8", "i16", "i32"):
        return low.cast(x, "i64")
    if dt in ("u8", "u16", "u32"):
        return low.cast(x, "u64")
    return x


def _no_more(low: Lowering, node: ast.Call, kw: dict[str, Any], args: list[Val], n: int) -> None:
    if kw:
        raise low.error(node, f"keyword `{sorted(kw)[0]}` is not supported here")
    if len(args) > n:
        raise low.error(node, f"too many arguments ({len(args)}; at most {n} here)")


# --- reductions --------------------------------------------------------------------------


def npx_sum(low: Lowering, node: ast.Call, args: list[Val], kw: dict[str, Any]) -> Val:
    return _reduce(low, "ReduceSum", node, args, kw)


def npx_mean(low: Lowering, node: ast.Call, args: list[Val], kw: dict[str, Any]) -> Val:
    return _reduce(low, "ReduceMean", node, args, kw)


def npx_max(low: Lowering, node: ast.Call, args: list[Val], kw: dict[str, Any]) -> Val:
    return _reduce(low, "ReduceMax", node, args, kw)


def npx_min(low: Lowering, node: ast.Call, args: list[Val], kw: dict[str, Any]) -> Val:
    return _reduce(low, "ReduceMin", node, args, kw)


def npx_prod(low: Lowering, node: ast.Call, args: list[Val], kw: dict[str, Any]) -> Val:
    return _reduce(low, "ReduceProd", node, args, kw)


def npx_any(low: Lowering, node: ast.Call, args: list[Val], kw: dict[str, Any]) -> Val:
    x, _ = _t(low, args[0])
    b = low.emit("NotEqual", [x, low.static_const(0, _dtype(x))]) if _dtype(x) != "bool" else x
    return low.emit("Greater", [_reduce(low, "ReduceMax", node, [low.cast(b, "i64"), *args[1:]], kw),
                                 low.static_const(0, "i64")])


def npx_all(low: Lowering, node: ast.Call, args: list[Val], kw: dict[str, Any]) -> Val:
    x, _ = _t(low, args[0])
    b = low.emit("NotEqual", [x, low.static_const(0, _dtype(x))]) if _dtype(x) != "bool" else x
    return low.emit("Greater", [_reduce(low, "ReduceMin", node, [low.cast(b, "i64"), *args[1:]], kw),
                                 low.static_const(0, "i64")])


def npx_var(low: Lowering, node: ast.Call, args: list[Val], kw: dict[str, Any]) -> Val:
    ddof = kw.pop("ddof", 0)
    x, _ = _t(low, args[0])
    if not _dtype(x).startswith("f"):
        x = low.cast(x, "f64")
    axis = _axis(low, kw, args, 1, node)
    keep = bool(kw.pop("keepdims", False))
    _no_more(low, node, kw, args, 2)
    m = _reduce(low, "ReduceMean", node, [x], {"axis": axis, "keepdims": True})
    d = low.emit("Sub", [x, m])
    sq = low.emit("Mul", [d, d])
    if ddof == 0:
        return _reduce(low, "ReduceMean", node, [sq], {"axis": axis, "keepdims": keep})
    s = _reduce(low, "ReduceSum", node, [sq], {"axis": axis, "keepdims": keep})
    n = low.cast(low.emit("Div", [low.cast(_reduce(low, "ReduceSum", node, [low.emit("OnesLike", [x])],
                                                            {"axis": axis, "keepdims": keep}), _dtype(x)),
                                    low.emit("OnesLike", [s])]), _dtype(x))
    return low.emit("Div", [s, low.emit("Sub", [n, low.static_const(float(ddof), _dtype(x))])])


def npx_std(low: Lowering, node: ast.Call, args: list[Val], kw: dict[str, Any]) -> Val:
    return low.emit("Sqrt", [low.as_node(npx_var(low, node, args, kw))])


def _arg(low: Lowering, op: str, node: ast.Call, args: list[Val], kw: dict[str, Any]) -> Val:
    x, _ = _t(low, args[0])
    axis = _axis(low, kw, args, 1, node)
    keep = bool(kw.pop("keepdims", False))
    _no_more(low, node, kw, args, 2)
    if axis is None:
        flat = x if isinstance(x.type, TensorType) and x.type.shape is not None and len(x.type.shape) == 1 \
            else _flat(low, x)
        return low.emit(op, [flat], {"axis": 0, "keepdims": False})
    return low.emit(op, [x], {"axis": int(axis), "keepdims": keep})


def npx_argmax(low: Lowering, node: ast.Call, args: list[Val], kw: dict[str, Any]) -> Val:
    return _arg(low, "ArgMax", node, args, kw)


def npx_argmin(low: Lowering, node: ast.Call, args: list[Val], kw: dict[str, Any]) -> Val:
    return _arg(low, "ArgMin", node, args, kw)


def _running(low: Lowering, op: str, node: ast.Call, args: list[Val], kw: dict[str, Any]) -> Val:
    """``np.cumsum`` / ``np.cumprod``: along ``axis``, or over the flattened array."""
    x, _ = _t(low, args[0])
    axis = _axis(low, kw, args, 1, node)
    _no_more(low, node, kw, args, 2)
    x = _accumulator(low, x)
    if axis is None:
        return low.emit(op, [_flat(low, x)], {"axis": 0})
    return low.emit(op, [x], {"axis": int(axis)})


def npx_cumsum(low: Lowering, node: ast.Call, args: list[Val], kw: dict[str, Any]) -> Val:
    return _running(low, "CumSum", node, args, kw)


def _sorted(low: Lowering, node: ast.Call, args: list[Val], kw: dict[str, Any]) -> tuple[Node, Node]:
    x, r = _rank(low, args[0], node)
    axis = _axis(low, kw, args, 1, node, -1)
    kw.pop("kind", None)
    _no_more(low, node, kw, args, 2)
    if axis is None:
        x, axis = _flat(low, x), 0
    a = int(axis) % max(r, 1)
    k = low.as_node(expr.dim_value(low, x, a), "i64")
    out = low.emit("TopK", [x, k], {"axis": a, "largest": False, "sorted": True})
    return low.emit("Proj", [out], {"num": 0}), low.emit("Proj", [out], {"num": 1})


def npx_sort(low: Lowering, node: ast.Call, args: list[Val], kw: dict[str, Any]) -> Val:
    return _sorted(low, node, args, kw)[0]


def npx_argsort(low: Lowering, node: ast.Call, args: list[Val], kw: dict[str, Any]) -> Val:
    return _sorted(low, node, args, kw)[1]


# --- shapes ------------------------------------------------------------------------------


def npx_reshape(low: Lowering, node: ast.Call, args: list[Val], kw: dict[str, Any]) -> Val:
    x, _ = _t(low, args[0])
    shape: Val = args[1] if len(args) == 2 else TupleVal(tuple(args[1:]))
    if "newshape" in kw or "shape" in kw:
        shape = Static(kw.pop("shape", kw.pop("newshape", None)))
    kw.pop("order", None)
    _no_more(low, node, kw, [], 0)
    return low.emit("Reshape", [x, shape_node(low, shape, node)])


def npx_astype(low: Lowering, node: ast.Call, args: list[Val], kw: dict[str, Any]) -> Val:
    x, _ = _t(low, args[0])
    dtype = kw.pop("dtype", None) or _dtype_name(_static(low, args[1], node, "the dtype"))
    return low.cast(x, dtype)


def npx_copy(low: Lowering, node: ast.Call, args: list[Val], kw: dict[str, Any]) -> Val:
    return low.emit("Identity", [low.as_node(args[0])])


def npx_ravel(low: Lowering, node: ast.Call, args: list[Val], kw: dict[str, Any]) -> Val:
    return _flat(low, low.as_node(args[0]))


def npx_swapaxes(low: Lowering, node: ast.Call, args: list[Val], kw: dict[str, Any]) -> Val:
    x, r = _rank(low, args[0], node)
    a, b = (int(_static(low, v, node, "an axis")) % r for v in args[1:3])
    perm = list(range(r))
    perm[a], perm[b] = perm[b], perm[a]
    return low.emit("Transpose", [x], {"perm": tuple(perm)})


def npx_moveaxis(low: Lowering, node: ast.Call, args: list[Val], kw: dict[str, Any]) -> Val:
    x, r = _rank(low, args[0], node)
    a, b = (int(_static(low, v, node, "an axis")) % r for v in args[1:3])
    perm = [i for i in range(r) if i != a]
    perm.insert(b, a)
    return low.emit("Transpose", [x], {"perm": tuple(perm)})


def npx_transpose(low: Lowering, node: ast.Call, args: list[Val], kw: dict[str, Any]) -> Val:
    x, _ = _t(low, args[0])
    axes = kw.pop("axes", None)
    if len(args) > 1:
        rest = [_static(low, v, node, "the axes") for v in args[1:]]
        axes = tuple(rest[0]) if len(rest) == 1 and isinstance(rest[0], (tuple, list)) else tuple(rest)
    return low.emit("Transpose", [x], {"perm": tuple(axes)} if axes is not None else {})


def npx_expand_dims(low: Lowering, node: ast.Call, args: list[Val], kw: dict[str, Any]) -> Val:
    x, _ = _t(low, args[0])
    axis = _axis(low, kw, args, 1, node)
    axes = tuple(axis) if isinstance(axis, (tuple, list)) else (axis,)
    return low.emit("Unsqueeze", [x], {"axes": axes})


def npx_squeeze(low: Lowering, node: ast.Call, args: list[Val], kw: dict[str, Any]) -> Val:
    x, _ = _t(low, args[0])
    axis = _axis(low, kw, args, 1, node)
    if axis is None:
        return low.emit("Squeeze", [x])
    return low.emit("Squeeze", [x], {"axes": tuple(axis) if isinstance(axis, (tuple, list)) else (axis,)})


def _items(low: Lowering, v: Val, node: ast.AST) -> list[Val]:
    if isinstance(v, TupleVal):
        return list(v.items)
    x, t = _t(low, v)
    if t.shape and isinstance(t.shape[0], int):
        return [low.emit("Gather", [x, low.static_const(i, "i64")], {"axis": 0}) for i in range(t.shape[0])]
    raise low.error(node, "expected a list or tuple of arrays", "write [a, b, ...]")


def npx_stack(low: Lowering, node: ast.Call, args: list[Val], kw: dict[str, Any]) -> Val:
    axis = _axis(low, kw, args, 1, node, 0)
    if lists.is_seq(args[0]):
        return lists.concatenate(low, args[0], axis, True, node)
    if not isinstance(args[0], TupleVal):  # an array (or a list variable) is the list of its rows
        rows, rank = _rank(low, args[0], node)
        to = int(axis) % rank
        if to == 0:
            return low.emit("Identity", [rows])
        return npx_moveaxis(low, node, [rows, Static(0), Static(to)], {})
    nodes = expr.unify(low, _items(low, args[0], node), arith=False)
    r = len(nodes[0].type.shape) if isinstance(nodes[0].type, TensorType) and nodes[0].type.shape is not None \
        else None
    a = int(axis) if axis >= 0 or r is None else int(axis) + r + 1
    return low.emit("Concat", [low.emit("Unsqueeze", [n], {"axes": (a,)}) for n in nodes], {"axis": a})


def npx_concatenate(low: Lowering, node: ast.Call, args: list[Val], kw: dict[str, Any]) -> Val:
    axis = _axis(low, kw, args, 1, node, 0)
    if lists.is_seq(args[0]):
        return lists.concatenate(low, args[0], axis, False, node)
    if not isinstance(args[0], TupleVal):  # rows of an array (or a list variable) joined along `axis`
        x, r = _rank(low, args[0], node)
        if axis is None:
            return _flat(low, x)
        if r < 2:
            raise low.error(node, "zero-dimensional arrays cannot be concatenated")
        a = int(axis) % (r - 1)
        moved = low.as_node(npx_moveaxis(low, node, [x, Static(0), Static(a)], {}))
        shape = low.emit("ShapeOf", [moved])
        parts = [low.emit("Slice", [shape, *(low.const(np.array([v], np.int64), "i64") for v in (0, a, 0))]),
                 low.const(np.array([-1], np.int64), "i64"),
                 low.emit("Slice", [shape, *(low.const(np.array([v], np.int64), "i64")
                                              for v in (a + 2, I64_MAX, 0))])]
        return low.emit("Reshape", [moved, low.emit("Concat", parts, {"axis": 0})])
    nodes = expr.unify(low, _items(low, args[0], node), arith=False)
    if axis is None:
        return low.emit("Concat", [_flat(low, n) for n in nodes], {"axis": 0})
    return low.emit("Concat", nodes, {"axis": int(axis)})


def npx_split(low: Lowering, node: ast.Call, args: list[Val], kw: dict[str, Any]) -> Val:
    x, r = _rank(low, args[0], node)
    parts = _static(low, args[1], node, "the number of sections or the split points")
    axis = int(_axis(low, kw, args, 2, node, 0)) % r
    t = x.type
    assert isinstance(t, TensorType) and t.shape is not None
    d = t.shape[axis]
    if isinstance(parts, int) and not isinstance(d, int):
        size = low.as_node(expr.dim_value(low, x, axis), "i64")
        out = []
        for i in range(parts):  # equal sections; a size not divisible fails in np.split only
            lo, hi = (low.emit("Reshape", [low.emit("FloorDiv", [low.emit("Mul", [
                size, low.static_const(j, "i64")]), low.static_const(parts, "i64")]),
                low.const(np.array([1], np.int64), "i64")]) for j in (i, i + 1))
            out.append(low.emit("Slice", [x, lo, hi, low.const(np.array([axis], np.int64), "i64")]))
        return TupleVal(tuple(out))
    if isinstance(parts, int):
        if d % parts:
            raise low.error(node, f"array split does not result in an equal division ({d} by {parts})")
        bounds = [d // parts * i for i in range(parts + 1)]
    else:
        bounds = [0, *parts, I64_MAX]
    pieces: list[Val] = []
    for b0, b1 in zip(bounds, bounds[1:]):
        ins = [low.const(np.array([v], np.int64), "i64") for v in (b0, b1, axis)]
        pieces.append(low.emit("Slice", [x, *ins]))
    return TupleVal(tuple(pieces))


def npx_broadcast_to(low: Lowering, node: ast.Call, args: list[Val], kw: dict[str, Any]) -> Val:
    x, _ = _t(low, args[0])
    return low.emit("Expand", [x, shape_node(low, args[1], node)])


def npx_flip(low: Lowering, node: ast.Call, args: list[Val], kw: dict[str, Any]) -> Val:
    x, r = _rank(low, args[0], node)
    axis = _axis(low, kw, args, 1, node)
    axes = range(r) if axis is None else axis if isinstance(axis, (tuple, list)) else (axis,)
    for a in axes:
        ins = [low.const(np.array([v], np.int64), "i64") for v in (-1, -I64_MAX - 1, int(a) % r, -1)]
        x = low.emit("Slice", [x, *ins])
    return x


def npx_tile(low: Lowering, node: ast.Call, args: list[Val], kw: dict[str, Any]) -> Val:
    x, r = _rank(low, args[0], node)
    reps = _static(low, args[1], node, "the repetitions")
    reps = tuple(reps) if isinstance(reps, (tuple, list)) else (reps,)
    if len(reps) < r:
        reps = (1,) * (r - len(reps)) + reps
    while r < len(reps):
        x = low.emit("Unsqueeze", [x], {"axes": (0,)})
        r += 1
    return low.emit("Tile", [x, low.const(np.array(reps, np.int64), "i64")])


def npx_roll(low: Lowering, node: ast.Call, args: list[Val], kw: dict[str, Any]) -> Val:
    x, r = _rank(low, args[0], node)
    shift = args[1] if len(args) > 1 else Static(kw.pop("shift", None))
    axis = _axis(low, kw, args, 2, node)
    _no_more(low, node, kw, args, 3)
    if axis is None:  # NumPy rolls the flattened array and restores the shape
        flat = low.emit("Roll", [_flat(low, x), low.as_node(shift, "i64")], {"axes": (0,)})
        return low.emit("Reshape", [flat, low.emit("ShapeOf", [x])])
    axes = tuple(axis) if isinstance(axis, (tuple, list)) else (axis,)
    if isinstance(shift, TupleVal) or (isinstance(shift, Static) and isinstance(shift.value, (tuple, list))):
        items = list(shift.items) if isinstance(shift, TupleVal) else [Static(v) for v in shift.value]  # type: ignore[union-attr]
        one = low.const(np.array([1], np.int64), "i64")
        s = low.emit("Concat", [low.emit("Reshape", [low.as_node(i, "i64"), one]) for i in items], {"axis": 0})
        if len(items) != len(axes):  # NumPy broadcasts one shift to many axes and the converse
            raise low.error(node, f"`np.roll`: {len(items)} shifts for {len(axes)} axes")
    else:
        s = low.as_node(shift, "i64")
        if len(axes) > 1:
            s = low.emit("Expand", [low.emit("Reshape", [s, low.const(np.array([1], np.int64), "i64")]),
                                     low.const(np.array([len(axes)], np.int64), "i64")])
    return low.emit("Roll", [x, s], {"axes": tuple(int(a) % r for a in axes)})


def npx_repeat(low: Lowering, node: ast.Call, args: list[Val], kw: dict[str, Any]) -> Val:
    x, r = _rank(low, args[0], node)
    reps = _static(low, args[1] if len(args) > 1 else Static(kw.pop("repeats", None)), node, "the repeats")
    axis = _axis(low, kw, args, 2, node)
    _no_more(low, node, kw, args, 3)
    if axis is None:
        x, r, axis = _flat(low, x), 1, 0
    a = int(axis) % max(r, 1)
    if not isinstance(reps, int):  # one count per element: a gather with the indices known now
        counts = np.asarray(reps, np.int64)
        if counts.ndim != 1 or (counts < 0).any():
            raise low.error(node, "`np.repeat`: repeats must be a non-negative int or a list of them")
        idx = np.repeat(np.arange(len(counts), dtype=np.int64), counts)
        return low.emit("Gather", [x, low.const(idx, "i64")], {"axis": a})
    if reps < 0:
        raise low.error(node, "`np.repeat`: repeats must be non-negative")
    # x[..., i, ...] -> [..., i, k, ...] (k < reps) -> merged: each entry `reps` times in a row
    t = low.emit("Unsqueeze", [x], {"axes": (a + 1,)})
    tiles = [1] * (r + 1)
    tiles[a + 1] = reps
    t = low.emit("Tile", [t, low.const(np.array(tiles, np.int64), "i64")])
    shape = low.emit("ShapeOf", [x])
    dims = [low.emit("Slice", [shape, *(low.const(np.array([v], np.int64), "i64") for v in (lo, hi, 0))])
            for lo, hi in ((0, a), (a, a + 1), (a + 1, I64_MAX))]
    dims[1] = low.emit("Mul", [dims[1], low.const(np.array([reps], np.int64), "i64")])
    return low.emit("Reshape", [t, low.emit("Concat", dims, {"axis": 0})])


def npx_pad(low: Lowering, node: ast.Call, args: list[Val], kw: dict[str, Any]) -> Val:
    x, r = _rank(low, args[0], node)
    width = _static(low, args[1] if len(args) > 1 else Static(kw.pop("pad_width", None)), node, "the pad width")
    mode = str(_static(low, args[2], node, "the mode")) if len(args) > 2 else kw.pop("mode", "constant")
    value = kw.pop("constant_values", 0)
    _no_more(low, node, kw, args, 3)
    modes = {"constant": "constant", "edge": "edge", "reflect": "reflect"}
    if mode not in modes:
        raise low.error(node, f"`np.pad` mode {mode!r} is not supported", "use constant, edge or reflect")
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise low.error(node, "`np.pad`: constant_values must be one number here")
    try:
        w = np.broadcast_to(np.asarray(width, np.int64), (r, 2))
    except ValueError:
        raise low.error(node, f"`np.pad`: pad width {width!r} does not fit an array of rank {r}") from None
    pads = np.concatenate([w[:, 0], w[:, 1]])
    return low.emit("Pad", [x, low.const(pads, "i64")], {"mode": modes[mode], "value": float(value)})


def npx_cumprod(low: Lowering, node: ast.Call, args: list[Val], kw: dict[str, Any]) -> Val:
    return _running(low, "CumProd", node, args, kw)


def npx_norm(low: Lowering, node: ast.Call, args: list[Val], kw: dict[str, Any]) -> Val:
    x, r = _rank(low, args[0], node)
    ord_ = _static(low, args[1], node, "ord") if len(args) > 1 else kw.pop("ord", None)
    axis = _axis(low, kw, args, 2, node)
    keep = bool(kw.pop("keepdims", False))
    _no_more(low, node, kw, args, 3)
    if not _dtype(x).startswith("f"):
        x = low.cast(x, "f64")
    n_axes = r if axis is None else len(axis) if isinstance(axis, (tuple, list)) else 1
    if ord_ in (None, "fro") or (ord_ == 2 and n_axes == 1):  # the 2-norm of the entries
        s = _reduce(low, "ReduceSum", node, [low.emit("Mul", [x, x])], {"axis": axis, "keepdims": keep})
        return low.emit("Sqrt", [s])
    if n_axes != 1:
        raise low.error(node, f"`np.linalg.norm` with ord={ord_!r} over {n_axes} axes (a matrix norm) "
                               "is not supported", "use ord=None ('fro') or give one axis")
    a = low.emit("Abs", [x])
    if ord_ in (float("inf"), -float("inf")):
        return _reduce(low, "ReduceMax" if ord_ > 0 else "ReduceMin", node, [a], {"axis": axis, "keepdims": keep})
    if ord_ == 1:
        return _reduce(low, "ReduceSum", node, [a], {"axis": axis, "keepdims": keep})
    if isinstance(ord_, (int, float)) and ord_ > 0:
        p = low.static_const(float(ord_), _dtype(x))
        s = _reduce(low, "ReduceSum", node, [low.emit("Pow", [a, p])], {"axis": axis, "keepdims": keep})
        return low.emit("Pow", [s, low.static_const(1.0 / float(ord_), _dtype(x))])
    raise low.error(node, f"`np.linalg.norm` with ord={ord_!r} is not supported",
                     "use ord None, 1, 2, p > 0 or inf")


def npx_take(low: Lowering, node: ast.Call, args: list[Val], kw: dict[str, Any]) -> Val:
    x, _ = _t(low, args[0])
    idx = low.as_node(args[1])
    axis = _axis(low, kw, args, 2, node)
    if axis is None:
        return low.emit("Gather", [_flat(low, x), idx], {"axis": 0})
    return low.emit("Gather", [x, idx], {"axis": int(axis)})


def npx_take_along_axis(low: Lowering, node: ast.Call, args: list[Val], kw: dict[str, Any]) -> Val:
    x, _ = _t(low, args[0])
    idx = low.as_node(args[1])
    axis = _axis(low, kw, args, 2, node)
    return low.emit("GatherElements", [x, idx], {"axis": int(axis)})


def npx_size(low: Lowering, node: ast.Call, args: list[Val], kw: dict[str, Any]) -> Val:
    return size_of(low, low.as_node(args[0]))


def size_of(low: Lowering, x: Node) -> Val:
    t = x.type
    assert isinstance(t, TensorType) and t.shape is not None
    out: Val = Static(1)
    for i in range(len(t.shape)):
        d = expr.dim_value(low, x, i)
        if isinstance(out, Static) and isinstance(d, Static):
            out = Static(out.value * d.value)
        else:
            out = low.emit("Mul", [low.as_node(out, "i64"), low.as_node(d, "i64")])
    return out


_SURFACE: dict[Any, str] = {
    np.sum: "sum", np.mean: "mean", np.max: "max", np.amax: "max", np.min: "min", np.amin: "min",
    np.prod: "prod", np.any: "any", np.all: "all", np.var: "var", np.std: "std", np.argmax: "argmax",
    np.argmin: "argmin", np.cumsum: "cumsum", np.sort: "sort", np.argsort: "argsort", np.reshape: "reshape",
    np.swapaxes: "swapaxes", np.moveaxis: "moveaxis", np.transpose: "transpose", np.expand_dims: "expand_dims",
    np.squeeze: "squeeze", np.stack: "stack", np.concatenate: "concatenate", np.split: "split",
    np.broadcast_to: "broadcast_to", np.flip: "flip", np.tile: "tile", np.take: "take",
    np.take_along_axis: "take_along_axis", np.size: "size", np.clip: "clip", np.isnan: "isnan",
    np.isinf: "isinf", np.isfinite: "isfinite", np.log1p: "log1p", np.expm1: "expm1", np.power: "power",
    np.square: "square", np.logical_and: "logical_and", np.logical_or: "logical_or",
    np.logical_xor: "logical_xor", np.logical_not: "logical_not", np.einsum: "einsum", np.outer: "outer",
    np.linspace: "linspace", np.eye: "eye", np.identity: "identity", np.ravel: "ravel", np.copy: "copy",
    np.roll: "roll", np.repeat: "repeat", np.pad: "pad", np.cumprod: "cumprod", np.linalg.norm: "norm",
}
# Array methods -> the function they call with the array first.
_METHODS: dict[str, str] = {
    "sum": "sum", "mean": "mean", "max": "max", "min": "min", "prod": "prod", "any": "any", "all": "all",
    "var": "var", "std": "std", "argmax": "argmax", "argmin": "argmin", "cumsum": "cumsum",
    "argsort": "argsort", "reshape": "reshape", "astype": "astype", "copy": "copy", "ravel": "ravel",
    "flatten": "ravel", "swapaxes": "swapaxes", "transpose": "transpose", "squeeze": "squeeze",
    "clip": "clip", "take": "take", "repeat": "repeat", "cumprod": "cumprod",
}
assert set(_METHODS) == TENSOR_METHODS, "values.TENSOR_METHODS names the methods handled here"
# name -> the function of np.<name> and of the array method (each takes the lowering
# first): npx_<name> of this module, numpy_creation or numpy_math.
_NPX: dict[str, Callable[..., Val]] = {
    k[len("npx_"):]: v for space in (vars(numpy_creation), vars(numpy_math), globals()) for k, v in space.items()
    if k.startswith("npx_")}
assert {*_SURFACE.values(), *_METHODS.values()} <= set(_NPX), "an np.<name> without its npx_<name>"
