"""The NumPy functions and array methods of ``@nx.script`` composed from registry ops:
reductions, shapes, math and linear algebra, with NumPy's defaults."""
from __future__ import annotations

import ast
from collections.abc import Callable
from typing import Any

import numpy as np

from nexus.frontend.script.annotations import I64_MAX
from nexus.frontend.script.numpy_creation import NumpyCalls, _dtype_name, _hashable
from nexus.frontend.script.values import TENSOR_METHODS, Static, TensorMethod, TupleVal, Val, _dtype
from nexus.ir.node import Node
from nexus.ir.types import TensorType


class NumpySurface(NumpyCalls):
    """The NumPy functions and array methods composed from registry ops, with NumPy's
    defaults (``axis=None`` reduces everything, ``keepdims=False``, ``argsort`` along the
    last axis...).  Each ``npx_<name>(node, args, kw)`` gets the positional values
    unflattened and the keywords as values known at build time."""

    static_const: Callable[..., Node]
    dim_value: Callable[..., Val]

    def numpy_surface(self, fn: Any, node: ast.Call) -> Val | None:
        if isinstance(fn, TensorMethod):
            name = _METHODS.get(fn.name)
            if name is None:
                raise self.error(node, f"the array method `.{fn.name}()` is not supported in a script",
                                 f"supported methods: {', '.join(sorted(_METHODS))}")
            return self._npx(name, node, [fn.x])
        name = _SURFACE.get(fn) if _hashable(fn) else None
        if name is None:
            return None
        return self._npx(name, node, [])

    def _npx(self, name: str, node: ast.Call, first: list[Val]) -> Val:
        args = first + [self.expr(a) for a in node.args]
        kw = self.static_kwargs(node)
        method: Callable[[ast.Call, list[Val], dict[str, Any]], Val] = getattr(self, "npx_" + name)
        return method(node, args, kw)

    # --- helpers ---------------------------------------------------------------------------
    def _t(self, v: Val) -> tuple[Node, TensorType]:
        x = self.as_node(v)
        t = x.type
        assert isinstance(t, TensorType)
        return x, t

    def _rank(self, v: Val, node: ast.AST) -> tuple[Node, int]:
        x, t = self._t(v)
        if t.shape is None:
            raise self.error(node, "this NumPy function needs a tensor of known rank",
                             "annotate the argument with its dims, e.g. Tensor['T', 'D']")
        return x, len(t.shape)

    def _static(self, v: Val, node: ast.AST, what: str) -> Any:
        if isinstance(v, TupleVal):  # nested tuples too: np.pad's ((1, 2), (0, 1))
            return tuple(self._static(i, node, what) for i in v.items)
        if not isinstance(v, Static):
            raise self.error(node, f"{what} must be known when the graph is built", "pass a constant")
        return v.value

    def _axis(self, kw: dict[str, Any], args: list[Val], pos: int, node: ast.AST, default: Any = None) -> Any:
        if len(args) > pos:
            return self._static(args[pos], node, "the axis")
        return kw.pop("axis", default)

    def _flat(self, x: Node) -> Node:
        return self.emit("Reshape", [x, self.const(np.array([-1], np.int64), "i64")])

    def _reduce(self, op: str, node: ast.Call, args: list[Val], kw: dict[str, Any]) -> Node:
        x, _ = self._t(args[0])
        axis = self._axis(kw, args, 1, node)
        keep = bool(kw.pop("keepdims", False))
        self._no_more(node, kw, args, 2)
        attrs: dict[str, Any] = {"keepdims": keep}
        if axis is not None:
            attrs["axes"] = tuple(axis) if isinstance(axis, (tuple, list)) else (axis,)
        if op in ("ReduceSum", "ReduceProd") and _dtype(x) == "bool":
            x = self.cast(x, "i64")
        if op == "ReduceMean" and not _dtype(x).startswith("f"):
            x = self.cast(x, "f64")
        return self.emit(op, [x], attrs)

    def _no_more(self, node: ast.Call, kw: dict[str, Any], args: list[Val], n: int) -> None:
        if kw:
            raise self.error(node, f"keyword `{sorted(kw)[0]}` is not supported here")
        if len(args) > n:
            raise self.error(node, f"too many arguments ({len(args)}; at most {n} here)")

    # --- reductions --------------------------------------------------------------------------
    def npx_sum(self, node: ast.Call, args: list[Val], kw: dict[str, Any]) -> Val:
        return self._reduce("ReduceSum", node, args, kw)

    def npx_mean(self, node: ast.Call, args: list[Val], kw: dict[str, Any]) -> Val:
        return self._reduce("ReduceMean", node, args, kw)

    def npx_max(self, node: ast.Call, args: list[Val], kw: dict[str, Any]) -> Val:
        return self._reduce("ReduceMax", node, args, kw)

    def npx_min(self, node: ast.Call, args: list[Val], kw: dict[str, Any]) -> Val:
        return self._reduce("ReduceMin", node, args, kw)

    def npx_prod(self, node: ast.Call, args: list[Val], kw: dict[str, Any]) -> Val:
        return self._reduce("ReduceProd", node, args, kw)

    def npx_any(self, node: ast.Call, args: list[Val], kw: dict[str, Any]) -> Val:
        x, _ = self._t(args[0])
        b = self.emit("NotEqual", [x, self.static_const(0, _dtype(x))]) if _dtype(x) != "bool" else x
        return self.emit("Greater", [self._reduce("ReduceMax", node, [self.cast(b, "i64"), *args[1:]], kw),
                                     self.static_const(0, "i64")])

    def npx_all(self, node: ast.Call, args: list[Val], kw: dict[str, Any]) -> Val:
        x, _ = self._t(args[0])
        b = self.emit("NotEqual", [x, self.static_const(0, _dtype(x))]) if _dtype(x) != "bool" else x
        return self.emit("Greater", [self._reduce("ReduceMin", node, [self.cast(b, "i64"), *args[1:]], kw),
                                     self.static_const(0, "i64")])

    def npx_var(self, node: ast.Call, args: list[Val], kw: dict[str, Any]) -> Val:
        ddof = kw.pop("ddof", 0)
        x, _ = self._t(args[0])
        if not _dtype(x).startswith("f"):
            x = self.cast(x, "f64")
        axis = self._axis(kw, args, 1, node)
        keep = bool(kw.pop("keepdims", False))
        self._no_more(node, kw, args, 2)
        m = self._reduce("ReduceMean", node, [x], {"axis": axis, "keepdims": True})
        d = self.emit("Sub", [x, m])
        sq = self.emit("Mul", [d, d])
        if ddof == 0:
            return self._reduce("ReduceMean", node, [sq], {"axis": axis, "keepdims": keep})
        s = self._reduce("ReduceSum", node, [sq], {"axis": axis, "keepdims": keep})
        n = self.cast(self.emit("Div", [self.cast(self._reduce("ReduceSum", node, [self.emit("OnesLike", [x])],
                                                                {"axis": axis, "keepdims": keep}), _dtype(x)),
                                        self.emit("OnesLike", [s])]), _dtype(x))
        return self.emit("Div", [s, self.emit("Sub", [n, self.static_const(float(ddof), _dtype(x))])])

    def npx_std(self, node: ast.Call, args: list[Val], kw: dict[str, Any]) -> Val:
        return self.emit("Sqrt", [self.as_node(self.npx_var(node, args, kw))])

    def _arg(self, op: str, node: ast.Call, args: list[Val], kw: dict[str, Any]) -> Val:
        x, _ = self._t(args[0])
        axis = self._axis(kw, args, 1, node)
        keep = bool(kw.pop("keepdims", False))
        self._no_more(node, kw, args, 2)
        if axis is None:
            flat = x if isinstance(x.type, TensorType) and x.type.shape is not None and len(x.type.shape) == 1 \
                else self._flat(x)
            return self.emit(op, [flat], {"axis": 0, "keepdims": False})
        return self.emit(op, [x], {"axis": int(axis), "keepdims": keep})

    def npx_argmax(self, node: ast.Call, args: list[Val], kw: dict[str, Any]) -> Val:
        return self._arg("ArgMax", node, args, kw)

    def npx_argmin(self, node: ast.Call, args: list[Val], kw: dict[str, Any]) -> Val:
        return self._arg("ArgMin", node, args, kw)

    def _running(self, op: str, node: ast.Call, args: list[Val], kw: dict[str, Any]) -> Val:
        """``np.cumsum`` / ``np.cumprod``: along ``axis``, or over the flattened array."""
        x, _ = self._t(args[0])
        axis = self._axis(kw, args, 1, node)
        self._no_more(node, kw, args, 2)
        if _dtype(x) == "bool":
            x = self.cast(x, "i64")
        if axis is None:
            return self.emit(op, [self._flat(x)], {"axis": 0})
        return self.emit(op, [x], {"axis": int(axis)})

    def npx_cumsum(self, node: ast.Call, args: list[Val], kw: dict[str, Any]) -> Val:
        return self._running("CumSum", node, args, kw)

    def _sorted(self, node: ast.Call, args: list[Val], kw: dict[str, Any]) -> tuple[Node, Node]:
        x, r = self._rank(args[0], node)
        axis = self._axis(kw, args, 1, node, -1)
        kw.pop("kind", None)
        self._no_more(node, kw, args, 2)
        if axis is None:
            x, axis = self._flat(x), 0
        a = int(axis) % max(r, 1)
        k = self.as_node(self.dim_value(x, a), "i64")
        out = self.emit("TopK", [x, k], {"axis": a, "largest": False, "sorted": True})
        return self.emit("Proj", [out], {"num": 0}), self.emit("Proj", [out], {"num": 1})

    def npx_sort(self, node: ast.Call, args: list[Val], kw: dict[str, Any]) -> Val:
        return self._sorted(node, args, kw)[0]

    def npx_argsort(self, node: ast.Call, args: list[Val], kw: dict[str, Any]) -> Val:
        return self._sorted(node, args, kw)[1]

    # --- shapes ------------------------------------------------------------------------------
    def npx_reshape(self, node: ast.Call, args: list[Val], kw: dict[str, Any]) -> Val:
        x, _ = self._t(args[0])
        shape: Val = args[1] if len(args) == 2 else TupleVal(tuple(args[1:]))
        if "newshape" in kw or "shape" in kw:
            shape = Static(kw.pop("shape", kw.pop("newshape", None)))
        kw.pop("order", None)
        self._no_more(node, kw, [], 0)
        return self.emit("Reshape", [x, self.shape_node(shape, node)])

    def npx_astype(self, node: ast.Call, args: list[Val], kw: dict[str, Any]) -> Val:
        x, _ = self._t(args[0])
        dtype = kw.pop("dtype", None) or _dtype_name(self._static(args[1], node, "the dtype"))
        return self.cast(x, dtype)

    def npx_copy(self, node: ast.Call, args: list[Val], kw: dict[str, Any]) -> Val:
        return self.emit("Identity", [self.as_node(args[0])])

    def npx_ravel(self, node: ast.Call, args: list[Val], kw: dict[str, Any]) -> Val:
        return self._flat(self.as_node(args[0]))

    def npx_swapaxes(self, node: ast.Call, args: list[Val], kw: dict[str, Any]) -> Val:
        x, r = self._rank(args[0], node)
        a, b = (int(self._static(v, node, "an axis")) % r for v in args[1:3])
        perm = list(range(r))
        perm[a], perm[b] = perm[b], perm[a]
        return self.emit("Transpose", [x], {"perm": tuple(perm)})

    def npx_moveaxis(self, node: ast.Call, args: list[Val], kw: dict[str, Any]) -> Val:
        x, r = self._rank(args[0], node)
        a, b = (int(self._static(v, node, "an axis")) % r for v in args[1:3])
        perm = [i for i in range(r) if i != a]
        perm.insert(b, a)
        return self.emit("Transpose", [x], {"perm": tuple(perm)})

    def npx_transpose(self, node: ast.Call, args: list[Val], kw: dict[str, Any]) -> Val:
        x, _ = self._t(args[0])
        axes = kw.pop("axes", None)
        if len(args) > 1:
            rest = [self._static(v, node, "the axes") for v in args[1:]]
            axes = tuple(rest[0]) if len(rest) == 1 and isinstance(rest[0], (tuple, list)) else tuple(rest)
        return self.emit("Transpose", [x], {"perm": tuple(axes)} if axes is not None else {})

    def npx_expand_dims(self, node: ast.Call, args: list[Val], kw: dict[str, Any]) -> Val:
        x, _ = self._t(args[0])
        axis = self._axis(kw, args, 1, node)
        axes = tuple(axis) if isinstance(axis, (tuple, list)) else (axis,)
        return self.emit("Unsqueeze", [x], {"axes": axes})

    def npx_squeeze(self, node: ast.Call, args: list[Val], kw: dict[str, Any]) -> Val:
        x, _ = self._t(args[0])
        axis = self._axis(kw, args, 1, node)
        if axis is None:
            return self.emit("Squeeze", [x])
        return self.emit("Squeeze", [x], {"axes": tuple(axis) if isinstance(axis, (tuple, list)) else (axis,)})

    def _items(self, v: Val, node: ast.AST) -> list[Val]:
        if isinstance(v, TupleVal):
            return list(v.items)
        x, t = self._t(v)
        if t.shape and isinstance(t.shape[0], int):
            return [self.emit("Gather", [x, self.static_const(i, "i64")], {"axis": 0}) for i in range(t.shape[0])]
        raise self.error(node, "expected a list or tuple of arrays", "write [a, b, ...]")

    def npx_stack(self, node: ast.Call, args: list[Val], kw: dict[str, Any]) -> Val:
        axis = self._axis(kw, args, 1, node, 0)
        if not isinstance(args[0], TupleVal):  # an array (or a list variable) is the list of its rows
            rows, rank = self._rank(args[0], node)
            to = int(axis) % rank
            if to == 0:
                return self.emit("Identity", [rows])
            return self.npx_moveaxis(node, [rows, Static(0), Static(to)], {})
        nodes = self.unify(self._items(args[0], node), arith=False)
        r = len(nodes[0].type.shape) if isinstance(nodes[0].type, TensorType) and nodes[0].type.shape is not None \
            else None
        a = int(axis) if axis >= 0 or r is None else int(axis) + r + 1
        return self.emit("Concat", [self.emit("Unsqueeze", [n], {"axes": (a,)}) for n in nodes], {"axis": a})

    def npx_concatenate(self, node: ast.Call, args: list[Val], kw: dict[str, Any]) -> Val:
        axis = self._axis(kw, args, 1, node, 0)
        if not isinstance(args[0], TupleVal):  # rows of an array (or a list variable) joined along `axis`
            x, r = self._rank(args[0], node)
            if axis is None:
                return self._flat(x)
            if r < 2:
                raise self.error(node, "zero-dimensional arrays cannot be concatenated")
            a = int(axis) % (r - 1)
            moved = self.as_node(self.npx_moveaxis(node, [x, Static(0), Static(a)], {}))
            shape = self.emit("ShapeOf", [moved])
            parts = [self.emit("Slice", [shape, *(self.const(np.array([v], np.int64), "i64") for v in (0, a, 0))]),
                     self.const(np.array([-1], np.int64), "i64"),
                     self.emit("Slice", [shape, *(self.const(np.array([v], np.int64), "i64")
                                                  for v in (a + 2, I64_MAX, 0))])]
            return self.emit("Reshape", [moved, self.emit("Concat", parts, {"axis": 0})])
        nodes = self.unify(self._items(args[0], node), arith=False)
        if axis is None:
            return self.emit("Concat", [self._flat(n) for n in nodes], {"axis": 0})
        return self.emit("Concat", nodes, {"axis": int(axis)})

    def npx_split(self, node: ast.Call, args: list[Val], kw: dict[str, Any]) -> Val:
        x, r = self._rank(args[0], node)
        parts = self._static(args[1], node, "the number of sections or the split points")
        axis = int(self._axis(kw, args, 2, node, 0)) % r
        t = x.type
        assert isinstance(t, TensorType) and t.shape is not None
        d = t.shape[axis]
        if isinstance(parts, int) and not isinstance(d, int):
            size = self.as_node(self.dim_value(x, axis), "i64")
            out = []
            for i in range(parts):  # equal sections; a size not divisible fails in np.split only
                lo, hi = (self.emit("Reshape", [self.emit("FloorDiv", [self.emit("Mul", [
                    size, self.static_const(j, "i64")]), self.static_const(parts, "i64")]),
                    self.const(np.array([1], np.int64), "i64")]) for j in (i, i + 1))
                out.append(self.emit("Slice", [x, lo, hi, self.const(np.array([axis], np.int64), "i64")]))
            return TupleVal(tuple(out))
        if isinstance(parts, int):
            if d % parts:
                raise self.error(node, f"array split does not result in an equal division ({d} by {parts})")
            bounds = [d // parts * i for i in range(parts + 1)]
        else:
            bounds = [0, *parts, I64_MAX]
        pieces: list[Val] = []
        for b0, b1 in zip(bounds, bounds[1:]):
            ins = [self.const(np.array([v], np.int64), "i64") for v in (b0, b1, axis)]
            pieces.append(self.emit("Slice", [x, *ins]))
        return TupleVal(tuple(pieces))

    def npx_broadcast_to(self, node: ast.Call, args: list[Val], kw: dict[str, Any]) -> Val:
        x, _ = self._t(args[0])
        return self.emit("Expand", [x, self.shape_node(args[1], node)])

    def npx_flip(self, node: ast.Call, args: list[Val], kw: dict[str, Any]) -> Val:
        x, r = self._rank(args[0], node)
        axis = self._axis(kw, args, 1, node)
        axes = range(r) if axis is None else axis if isinstance(axis, (tuple, list)) else (axis,)
        for a in axes:
            ins = [self.const(np.array([v], np.int64), "i64") for v in (-1, -I64_MAX - 1, int(a) % r, -1)]
            x = self.emit("Slice", [x, *ins])
        return x

    def npx_tile(self, node: ast.Call, args: list[Val], kw: dict[str, Any]) -> Val:
        x, r = self._rank(args[0], node)
        reps = self._static(args[1], node, "the repetitions")
        reps = tuple(reps) if isinstance(reps, (tuple, list)) else (reps,)
        if len(reps) < r:
            reps = (1,) * (r - len(reps)) + reps
        while r < len(reps):
            x = self.emit("Unsqueeze", [x], {"axes": (0,)})
            r += 1
        return self.emit("Tile", [x, self.const(np.array(reps, np.int64), "i64")])

    def npx_roll(self, node: ast.Call, args: list[Val], kw: dict[str, Any]) -> Val:
        x, r = self._rank(args[0], node)
        shift = args[1] if len(args) > 1 else Static(kw.pop("shift", None))
        axis = self._axis(kw, args, 2, node)
        self._no_more(node, kw, args, 3)
        if axis is None:  # NumPy rolls the flattened array and restores the shape
            flat = self.emit("Roll", [self._flat(x), self.as_node(shift, "i64")], {"axes": (0,)})
            return self.emit("Reshape", [flat, self.emit("ShapeOf", [x])])
        axes = tuple(axis) if isinstance(axis, (tuple, list)) else (axis,)
        if isinstance(shift, TupleVal) or (isinstance(shift, Static) and isinstance(shift.value, (tuple, list))):
            items = list(shift.items) if isinstance(shift, TupleVal) else [Static(v) for v in shift.value]  # type: ignore[union-attr]
            one = self.const(np.array([1], np.int64), "i64")
            s = self.emit("Concat", [self.emit("Reshape", [self.as_node(i, "i64"), one]) for i in items], {"axis": 0})
            if len(items) != len(axes):  # NumPy broadcasts one shift to many axes and the converse
                raise self.error(node, f"`np.roll`: {len(items)} shifts for {len(axes)} axes")
        else:
            s = self.as_node(shift, "i64")
            if len(axes) > 1:
                s = self.emit("Expand", [self.emit("Reshape", [s, self.const(np.array([1], np.int64), "i64")]),
                                         self.const(np.array([len(axes)], np.int64), "i64")])
        return self.emit("Roll", [x, s], {"axes": tuple(int(a) % r for a in axes)})

    def npx_repeat(self, node: ast.Call, args: list[Val], kw: dict[str, Any]) -> Val:
        x, r = self._rank(args[0], node)
        reps = self._static(args[1] if len(args) > 1 else Static(kw.pop("repeats", None)), node, "the repeats")
        axis = self._axis(kw, args, 2, node)
        self._no_more(node, kw, args, 3)
        if axis is None:
            x, r, axis = self._flat(x), 1, 0
        a = int(axis) % max(r, 1)
        if not isinstance(reps, int):  # one count per element: a gather with the indices known now
            counts = np.asarray(reps, np.int64)
            if counts.ndim != 1 or (counts < 0).any():
                raise self.error(node, "`np.repeat`: repeats must be a non-negative int or a list of them")
            idx = np.repeat(np.arange(len(counts), dtype=np.int64), counts)
            return self.emit("Gather", [x, self.const(idx, "i64")], {"axis": a})
        if reps < 0:
            raise self.error(node, "`np.repeat`: repeats must be non-negative")
        # x[..., i, ...] -> [..., i, k, ...] (k < reps) -> merged: each entry `reps` times in a row
        t = self.emit("Unsqueeze", [x], {"axes": (a + 1,)})
        tiles = [1] * (r + 1)
        tiles[a + 1] = reps
        t = self.emit("Tile", [t, self.const(np.array(tiles, np.int64), "i64")])
        shape = self.emit("ShapeOf", [x])
        dims = [self.emit("Slice", [shape, *(self.const(np.array([v], np.int64), "i64") for v in (lo, hi, 0))])
                for lo, hi in ((0, a), (a, a + 1), (a + 1, I64_MAX))]
        dims[1] = self.emit("Mul", [dims[1], self.const(np.array([reps], np.int64), "i64")])
        return self.emit("Reshape", [t, self.emit("Concat", dims, {"axis": 0})])

    def npx_pad(self, node: ast.Call, args: list[Val], kw: dict[str, Any]) -> Val:
        x, r = self._rank(args[0], node)
        width = self._static(args[1] if len(args) > 1 else Static(kw.pop("pad_width", None)), node, "the pad width")
        mode = str(self._static(args[2], node, "the mode")) if len(args) > 2 else kw.pop("mode", "constant")
        value = kw.pop("constant_values", 0)
        self._no_more(node, kw, args, 3)
        modes = {"constant": "constant", "edge": "edge", "reflect": "reflect"}
        if mode not in modes:
            raise self.error(node, f"`np.pad` mode {mode!r} is not supported", "use constant, edge or reflect")
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            raise self.error(node, "`np.pad`: constant_values must be one number here")
        try:
            w = np.broadcast_to(np.asarray(width, np.int64), (r, 2))
        except ValueError:
            raise self.error(node, f"`np.pad`: pad width {width!r} does not fit an array of rank {r}") from None
        pads = np.concatenate([w[:, 0], w[:, 1]])
        return self.emit("Pad", [x, self.const(pads, "i64")], {"mode": modes[mode], "value": float(value)})

    def npx_cumprod(self, node: ast.Call, args: list[Val], kw: dict[str, Any]) -> Val:
        return self._running("CumProd", node, args, kw)

    def npx_norm(self, node: ast.Call, args: list[Val], kw: dict[str, Any]) -> Val:
        x, r = self._rank(args[0], node)
        ord_ = self._static(args[1], node, "ord") if len(args) > 1 else kw.pop("ord", None)
        axis = self._axis(kw, args, 2, node)
        keep = bool(kw.pop("keepdims", False))
        self._no_more(node, kw, args, 3)
        if not _dtype(x).startswith("f"):
            x = self.cast(x, "f64")
        n_axes = r if axis is None else len(axis) if isinstance(axis, (tuple, list)) else 1
        if ord_ in (None, "fro") or (ord_ == 2 and n_axes == 1):  # the 2-norm of the entries
            s = self._reduce("ReduceSum", node, [self.emit("Mul", [x, x])], {"axis": axis, "keepdims": keep})
            return self.emit("Sqrt", [s])
        if n_axes != 1:
            raise self.error(node, f"`np.linalg.norm` with ord={ord_!r} over {n_axes} axes (a matrix norm) "
                                   "is not supported", "use ord=None ('fro') or give one axis")
        a = self.emit("Abs", [x])
        if ord_ in (float("inf"), -float("inf")):
            return self._reduce("ReduceMax" if ord_ > 0 else "ReduceMin", node, [a], {"axis": axis, "keepdims": keep})
        if ord_ == 1:
            return self._reduce("ReduceSum", node, [a], {"axis": axis, "keepdims": keep})
        if isinstance(ord_, (int, float)) and ord_ > 0:
            p = self.static_const(float(ord_), _dtype(x))
            s = self._reduce("ReduceSum", node, [self.emit("Pow", [a, p])], {"axis": axis, "keepdims": keep})
            return self.emit("Pow", [s, self.static_const(1.0 / float(ord_), _dtype(x))])
        raise self.error(node, f"`np.linalg.norm` with ord={ord_!r} is not supported",
                         "use ord None, 1, 2, p > 0 or inf")

    def npx_take(self, node: ast.Call, args: list[Val], kw: dict[str, Any]) -> Val:
        x, _ = self._t(args[0])
        idx = self.as_node(args[1])
        axis = self._axis(kw, args, 2, node)
        if axis is None:
            return self.emit("Gather", [self._flat(x), idx], {"axis": 0})
        return self.emit("Gather", [x, idx], {"axis": int(axis)})

    def npx_take_along_axis(self, node: ast.Call, args: list[Val], kw: dict[str, Any]) -> Val:
        x, _ = self._t(args[0])
        idx = self.as_node(args[1])
        axis = self._axis(kw, args, 2, node)
        return self.emit("GatherElements", [x, idx], {"axis": int(axis)})

    def npx_size(self, node: ast.Call, args: list[Val], kw: dict[str, Any]) -> Val:
        return self.size_of(self.as_node(args[0]))

    def size_of(self, x: Node) -> Val:
        t = x.type
        assert isinstance(t, TensorType) and t.shape is not None
        out: Val = Static(1)
        for i in range(len(t.shape)):
            d = self.dim_value(x, i)
            if isinstance(out, Static) and isinstance(d, Static):
                out = Static(out.value * d.value)
            else:
                out = self.emit("Mul", [self.as_node(out, "i64"), self.as_node(d, "i64")])
        return out

    # --- math --------------------------------------------------------------------------------
    def npx_clip(self, node: ast.Call, args: list[Val], kw: dict[str, Any]) -> Val:
        lo = args[1] if len(args) > 1 else Static(kw.pop("a_min", kw.pop("min", None)))
        hi = args[2] if len(args) > 2 else Static(kw.pop("a_max", kw.pop("max", None)))
        x = args[0]
        if not (isinstance(lo, Static) and lo.value is None):
            a, b = self.unify([x, lo], arith=True)
            x = self.emit("Maximum", [a, b])
        if not (isinstance(hi, Static) and hi.value is None):
            a, b = self.unify([x, hi], arith=True)
            x = self.emit("Minimum", [a, b])
        return x

    def npx_isnan(self, node: ast.Call, args: list[Val], kw: dict[str, Any]) -> Val:
        x, _ = self._t(args[0])
        return self.emit("NotEqual", [x, x])

    def npx_isinf(self, node: ast.Call, args: list[Val], kw: dict[str, Any]) -> Val:
        x, _ = self._t(args[0])
        return self.emit("Equal", [self.emit("Abs", [x]), self.static_const(float("inf"), _dtype(x))])

    def npx_isfinite(self, node: ast.Call, args: list[Val], kw: dict[str, Any]) -> Val:
        x, _ = self._t(args[0])
        d = self.emit("Sub", [x, x])  # 0 where finite, nan where inf or nan
        return self.emit("Equal", [d, d])

    def npx_log1p(self, node: ast.Call, args: list[Val], kw: dict[str, Any]) -> Val:
        a, b = self.unify([args[0], Static(1.0)], arith=True)
        return self.emit("Log", [self.emit("Add", [a, b])])

    def npx_expm1(self, node: ast.Call, args: list[Val], kw: dict[str, Any]) -> Val:
        x, _ = self._t(args[0])
        e = self.emit("Exp", [self.cast(x, "f64") if not _dtype(x).startswith("f") else x])
        return self.emit("Sub", [e, self.static_const(1.0, _dtype(e))])

    def npx_power(self, node: ast.Call, args: list[Val], kw: dict[str, Any]) -> Val:
        a, b = self.unify(args[:2], arith=True)
        return self.emit("Pow", [a, b])

    def npx_square(self, node: ast.Call, args: list[Val], kw: dict[str, Any]) -> Val:
        x, _ = self._t(args[0])
        return self.emit("Mul", [x, x])

    def npx_logical_and(self, node: ast.Call, args: list[Val], kw: dict[str, Any]) -> Val:
        return self.emit("And", [self._bool(a) for a in args[:2]])

    def npx_logical_or(self, node: ast.Call, args: list[Val], kw: dict[str, Any]) -> Val:
        return self.emit("Or", [self._bool(a) for a in args[:2]])

    def npx_logical_xor(self, node: ast.Call, args: list[Val], kw: dict[str, Any]) -> Val:
        return self.emit("Xor", [self._bool(a) for a in args[:2]])

    def npx_logical_not(self, node: ast.Call, args: list[Val], kw: dict[str, Any]) -> Val:
        return self.emit("Not", [self._bool(args[0])])

    def _bool(self, v: Val) -> Node:
        x = self.as_node(v)
        return x if _dtype(x) == "bool" else self.emit("NotEqual", [x, self.static_const(0, _dtype(x))])

    # --- linear algebra ----------------------------------------------------------------------
    def npx_einsum(self, node: ast.Call, args: list[Val], kw: dict[str, Any]) -> Val:
        eq = self._static(args[0], node, "the einsum equation")
        ops = self.unify(args[1:], arith=True)
        return self.emit("Einsum", ops, {"equation": str(eq).replace(" ", "")})

    def npx_outer(self, node: ast.Call, args: list[Val], kw: dict[str, Any]) -> Val:
        a, b = self.unify(args[:2], arith=True)
        return self.emit("Mul", [self.emit("Unsqueeze", [self._flat(a)], {"axes": (1,)}),
                                 self.emit("Unsqueeze", [self._flat(b)], {"axes": (0,)})])


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
