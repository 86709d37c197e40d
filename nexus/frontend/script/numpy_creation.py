"""NumPy functions in ``@nx.script`` that are no single op: array creation (``zeros``,
``ones``, ``full``, ``empty``, ``*_like``, ``array``/``asarray`` of literals, ``arange``,
``linspace``, ``eye``, ``identity``), each composed from registry ops with NumPy's
defaults (float64 unless ``dtype=`` says otherwise, as NumPy)."""
from __future__ import annotations

import ast
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from nexus.frontend.script import calls, expr, lists
from nexus.frontend.script.annotations import is_number
from nexus.frontend.script.values import Static, TupleVal, Val
from nexus.ir.node import Node
from nexus.ir.types import TensorType, dtype_of, numpy_dtype

if TYPE_CHECKING:
    from nexus.frontend.script.visitor import Lowering


def numpy_call(low: Lowering, fn: Any, node: ast.Call) -> Val | None:
    """The value of ``np.<fn>(...)`` when it is one of these functions, else None."""
    if fn in _SCALAR_TYPES if _hashable(fn) else False:
        args = calls.positional(low, node)
        if len(args) != 1 or node.keywords:
            raise low.error(node, f"`np.{fn.__name__}` takes one value here")
        return low.cast(low.as_node(args[0]), _SCALAR_TYPES[fn])
    name = _COMPOSED.get(fn) if _hashable(fn) else None
    if name is None:
        return None
    return _CREATION[name](low, node, f"np.{name}")


def _static(low: Lowering, v: Val, node: ast.AST, what: str) -> Any:
    if isinstance(v, TupleVal):  # nested tuples too: np.pad's ((1, 2), (0, 1))
        return tuple(_static(low, i, node, what) for i in v.items)
    if not isinstance(v, Static):
        raise low.error(node, f"{what} must be known when the graph is built", "pass a constant")
    return v.value


def _t(low: Lowering, v: Val) -> tuple[Node, TensorType]:
    x = low.as_node(v)
    t = x.type
    assert isinstance(t, TensorType)
    return x, t


def _flat(low: Lowering, x: Node) -> Node:
    return low.emit("Reshape", [x, low.const(np.array([-1], np.int64), "i64")])


# --- creation --------------------------------------------------------------------------


def shape_node(low: Lowering, v: Val, node: ast.AST) -> Node:
    items = list(v.items) if isinstance(v, TupleVal) else \
        list(v.value) if isinstance(v, Static) and isinstance(v.value, (tuple, list)) else [v]
    if all(isinstance(i, Static) and isinstance(i.value, int) for i in items):
        return low.const(np.array([i.value for i in items], np.int64), "i64")  # type: ignore[union-attr]
    parts = []
    for i in items:
        n = low.cast(low.as_node(i), "i64")
        parts.append(low.emit("Reshape", [n, low.const(np.array([1], np.int64), "i64")]))
    return low.emit("Concat", parts, {"axis": 0}) if len(parts) > 1 else parts[0]


def _fill(low: Lowering, node: ast.Call, shown: str, fill: Any, args: list[Val], kw: dict[str, Any]) -> Node:
    if not args:
        raise low.error(node, f"`{shown}` needs a shape")
    dtype = kw.pop("dtype", None)
    if isinstance(fill, Static) or is_number(fill):
        value = fill.value if isinstance(fill, Static) else fill
        dt = dtype or ("f64" if isinstance(value, float) else dtype_of(np.asarray(value).dtype))
        out = low.emit("ConstantOfShape", [shape_node(low, args[0], node)],
                        {"value": np.array(value, numpy_dtype(dt))})
        return out
    f = low.as_node(fill)
    t = f.type
    assert isinstance(t, TensorType)
    zero = low.emit("ConstantOfShape", [shape_node(low, args[0], node)],
                     {"value": np.array(0, numpy_dtype(dtype or t.dtype))})
    return low.emit("Add", [zero, low.cast(f, dtype or t.dtype)])


def _creation(low: Lowering, node: ast.Call, shown: str, fill: Any) -> Node:
    args = [low.expr(a) for a in node.args]  # a shape tuple stays one argument
    kw = calls.static_kwargs(low, node)
    if len(args) > 1 and "dtype" not in kw and isinstance(args[1], Static):
        kw["dtype"] = _dtype_name(args[1].value)
        args = args[:1]
    extra = set(kw) - {"dtype", "order"}
    if extra:
        raise low.error(node, f"`{shown}` has no keyword `{sorted(extra)[0]}` here (it takes shape, dtype)")
    kw.pop("order", None)
    return _fill(low, node, shown, fill, args, kw)


def np_zeros(low: Lowering, node: ast.Call, shown: str) -> Val:
    return _creation(low, node, shown, 0.0)


def np_ones(low: Lowering, node: ast.Call, shown: str) -> Val:
    return _creation(low, node, shown, 1.0)


def np_empty(low: Lowering, node: ast.Call, shown: str) -> Val:
    return _creation(low, node, shown, 0.0)  # zeros: the contents of `empty` are unspecified


def np_full(low: Lowering, node: ast.Call, shown: str) -> Val:
    args = [low.expr(a) for a in node.args]
    kw = calls.static_kwargs(low, node)
    if len(args) != 2:
        raise low.error(node, f"`{shown}` takes a shape and a fill value")
    fill = args[1]
    if isinstance(fill, Static) and is_number(fill.value) and "dtype" not in kw:
        v = fill.value
        kw["dtype"] = "f64" if isinstance(v, float) else "bool" if isinstance(v, bool) else "i64"
    return _fill(low, node, shown, fill, args[:1], kw)


def _like(low: Lowering, node: ast.Call, shown: str, fill: Any) -> Val:
    args = calls.positional(low, node)
    kw = calls.static_kwargs(low, node)
    if not args:
        raise low.error(node, f"`{shown}` needs an array")
    x = low.as_node(args[0])
    t = x.type
    assert isinstance(t, TensorType)
    if fill is None:
        if len(args) != 2:
            raise low.error(node, f"`{shown}` takes an array and a fill value")
        fill = args[1]
    dtype = kw.get("dtype", t.dtype)
    shape = low.emit("ShapeOf", [x])
    if isinstance(fill, Static):
        fill = fill.value
    if is_number(fill):
        return low.emit("ConstantOfShape", [shape], {"value": np.array(fill, numpy_dtype(dtype))})
    f = low.cast(low.as_node(fill), dtype)
    zero = low.emit("ConstantOfShape", [shape], {"value": np.array(0, numpy_dtype(dtype))})
    return low.emit("Add", [zero, f])


def np_zeros_like(low: Lowering, node: ast.Call, shown: str) -> Val:
    return _like(low, node, shown, 0)


def np_ones_like(low: Lowering, node: ast.Call, shown: str) -> Val:
    return _like(low, node, shown, 1)


def np_empty_like(low: Lowering, node: ast.Call, shown: str) -> Val:
    return _like(low, node, shown, 0)


def np_full_like(low: Lowering, node: ast.Call, shown: str) -> Val:
    return _like(low, node, shown, None)


def np_array(low: Lowering, node: ast.Call, shown: str) -> Val:
    kw = calls.static_kwargs(low, node)
    if len(node.args) != 1:
        raise low.error(node, f"`{shown}` takes one value here")
    try:
        value = ast.literal_eval(node.args[0])
        arr = np.asarray(value, dtype=None if "dtype" not in kw else numpy_dtype(kw["dtype"]))
        return low.const(arr, dtype_of(arr.dtype))
    except (ValueError, TypeError):
        pass
    v = low.expr(node.args[0])
    if isinstance(v, TupleVal):
        return expr.stack(low, v, kw.get("dtype"))
    x = low.as_node(lists.as_array(low, v))
    return low.cast(x, kw["dtype"]) if "dtype" in kw else low.emit("Identity", [x])


def np_asarray(low: Lowering, node: ast.Call, shown: str) -> Val:
    return np_array(low, node, shown)


def np_arange(low: Lowering, node: ast.Call, shown: str) -> Val:
    args = calls.positional(low, node)
    kw = calls.static_kwargs(low, node)
    if not 1 <= len(args) <= 3:
        raise low.error(node, f"`{shown}` takes 1 to 3 arguments (start, stop, step)")
    if len(args) == 1:
        args = [Static(0), args[0]]
    if len(args) == 2:
        args = [*args, Static(1)]
    nodes = expr.unify(low, args, arith=True)
    dtype = kw.get("dtype")
    out = low.emit("Range", nodes)
    return low.cast(out, dtype) if dtype else out


# --- creation ----------------------------------------------------------------------------


def npx_linspace(low: Lowering, node: ast.Call, args: list[Val], kw: dict[str, Any]) -> Val:
    num = _static(low, args[2], node, "num") if len(args) > 2 else kw.pop("num", 50)
    endpoint = kw.pop("endpoint", True)
    dtype = kw.pop("dtype", "f64")
    start, stop = (low.cast(low.as_node(v, "f64"), "f64") for v in args[:2])
    div = max(num - 1 if endpoint else num, 1)
    step = low.emit("Div", [low.emit("Sub", [stop, start]), low.static_const(float(div), "f64")])
    i = low.cast(low.emit("Range", [low.static_const(0, "i64"), low.static_const(int(num), "i64"),
                                      low.static_const(1, "i64")]), "f64")
    return low.cast(low.emit("Add", [low.emit("Mul", [i, step]), start]), dtype)


def npx_eye(low: Lowering, node: ast.Call, args: list[Val], kw: dict[str, Any]) -> Val:
    n = args[0]
    m = args[1] if len(args) > 1 else Static(kw.pop("M", None))
    if isinstance(m, Static) and m.value is None:
        m = n
    k = int(kw.pop("k", 0))
    dtype = kw.pop("dtype", "f64")
    rows = low.emit("Range", [low.static_const(0, "i64"), low.as_node(n, "i64"), low.static_const(1, "i64")])
    cols = low.emit("Range", [low.static_const(-k, "i64"),
                               low.emit("Sub", [low.as_node(m, "i64"), low.static_const(k, "i64")]),
                               low.static_const(1, "i64")])
    eq = low.emit("Equal", [low.emit("Unsqueeze", [rows], {"axes": (1,)}),
                             low.emit("Unsqueeze", [cols], {"axes": (0,)})])
    return low.cast(eq, dtype)


def npx_identity(low: Lowering, node: ast.Call, args: list[Val], kw: dict[str, Any]) -> Val:
    return npx_eye(low, node, args[:1], kw)


def _dtype_name(v: Any) -> str:
    from nexus.frontend.script.calls import _DTYPE_NAMES  # noqa: PLC0415  (a cycle at import time)
    if isinstance(v, np.dtype) or isinstance(v, type) and issubclass(v, np.generic):
        try:  # a dtype object or any NumPy scalar type Nexus has (np.uint32, np.dtype("f4"))
            return dtype_of(v)
        except ValueError:
            return str(v)
    return _DTYPE_NAMES.get(v, v) if _hashable(v) else v


def _hashable(obj: Any) -> bool:
    try:
        hash(obj)
    except TypeError:
        return False
    return True


_COMPOSED: dict[Any, str] = {
    np.zeros: "zeros", np.ones: "ones", np.empty: "empty", np.full: "full", np.zeros_like: "zeros_like",
    np.ones_like: "ones_like", np.empty_like: "empty_like", np.full_like: "full_like", np.array: "array",
    np.asarray: "asarray", np.arange: "arange",
}
_SCALAR_TYPES: dict[Any, str] = {np.float32: "f32", np.float64: "f64", np.int32: "i32", np.int64: "i64",
                                 np.bool_: "bool", np.float16: "f16", np.int8: "i8", np.int16: "i16",
                                 np.uint8: "u8"}
_CREATION: dict[str, Callable[..., Val]] = {name: globals()["np_" + name] for name in _COMPOSED.values()}
