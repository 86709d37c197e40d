"""Calls inside ``@nx.script``: builtins (abs, min, max, float, int, bool, len, round),
``math`` and NumPy functions, ``nx.<op>`` (any op of the registry), other scripts (a
``Call`` node) and undecorated Python helpers (parsed and inlined)."""

from __future__ import annotations

import ast
import builtins
import math
import types
from typing import TYPE_CHECKING, Any

import numpy as np

from nexus.frontend.dsl.state import StateMethod, script_state_call
from nexus.frontend.names import FUNCTION_KINDS, public_ops

# math.* / numpy.* functions -> (op, result cast).  math results are Python floats
# (f64) except floor/ceil, which return ints.
from nexus.frontend.script import control, expr, lists, numpy_creation, numpy_surface
from nexus.frontend.script.annotations import is_int, is_number, py_dtype, weak_dtype_of
from nexus.frontend.script.numpy_creation import _hashable
from nexus.frontend.script.source import parse_function
from nexus.frontend.script.ssa import generalize_all
from nexus.frontend.script.values import Edge, NexusOp, PathEnded, Scope, Static, TupleVal, Val, _dtype
from nexus.ir.graph import Graph
from nexus.ir.node import Block, Node
from nexus.ir.opdef import REGISTRY, REQUIRED, UNIVERSAL_ATTRS, get_op
from nexus.ir.types import DTYPES, TensorType, TupleType, dtype_of, numpy_dtype
from nexus.ops.state import effect_deps, has_state

if TYPE_CHECKING:
    from nexus.frontend.script.visitor import Lowering


_MATH: dict[Any, tuple[str, str | None]] = {
    math.exp: ("Exp", None), math.log: ("Log", None), math.tanh: ("Tanh", None), math.sqrt: ("Sqrt", None),
    math.sin: ("Sin", None), math.cos: ("Cos", None), math.erf: ("Erf", None), math.fabs: ("Abs", None),
    math.floor: ("Floor", "i64"), math.ceil: ("Ceil", "i64"),
}
_NUMPY: dict[Any, str] = {
    np.exp: "Exp", np.log: "Log", np.tanh: "Tanh", np.sqrt: "Sqrt", np.sin: "Sin", np.cos: "Cos",
    np.abs: "Abs", np.floor: "Floor", np.ceil: "Ceil", np.maximum: "Maximum", np.minimum: "Minimum",
    np.matmul: "MatMul", np.dot: "MatMul", np.where: "Where", np.sum: "ReduceSum", np.mean: "ReduceMean",
    np.max: "ReduceMax", np.min: "ReduceMin", np.concatenate: "Concat", np.transpose: "Transpose",
    np.negative: "Neg", np.round: "Round", np.sign: "Sign",
}
_DTYPE_NAMES = {np.float32: "f32", np.float64: "f64", np.int32: "i32", np.int64: "i64", np.bool_: "bool",
                np.float16: "f16", np.int8: "i8", np.int16: "i16", np.uint8: "u8", float: "f64", int: "i64",
                bool: "bool"}


def op_for_name(name: str) -> str | None:
    """The registry op for ``nx.<name>``: a public name, the one table the DSL uses too
    (``nexus.frontend.names``), or the op's own name (``nx.MatMul``)."""
    op = public_ops().get(name)
    if op is not None:
        return op.name
    return name if name in REGISTRY and REGISTRY[name].kind in FUNCTION_KINDS else None


def expr_Call(low: Lowering, node: ast.Call) -> Val:
    fn = low.expr(node.func)
    for kw in node.keywords:
        if kw.arg is None:
            raise low.error(kw.value, "`**` arguments are not supported", "pass keyword arguments by name")
    if not isinstance(fn, Static):
        raise low.error(node.func, "only functions can be called (this is a tensor or a tuple)")
    obj = fn.value
    # Before _NUMPY: NumPy's defaults and keywords.
    surface = numpy_surface.numpy_surface(low, obj, node)
    if surface is not None:
        return surface
    if isinstance(obj, NexusOp):
        return call_op(low, obj.name, node, f"nx.{obj.name}")
    if isinstance(obj, StateMethod):
        return script_state_call(low, obj, node)
    if getattr(obj, "__nexus_script__", False):
        return call_script(low, obj, node)
    if isinstance(obj, Graph):  # an imported or parsed graph: a Call of it
        return call_script(low, obj, node)
    if obj in _MATH if _hashable(obj) else False:
        op, result = _MATH[obj]
        return call_math(low, op, result, node)
    if obj in _NUMPY if _hashable(obj) else False:
        return call_op(low, _NUMPY[obj], node, f"np.{getattr(obj, '__name__', '?')}", numpy=True)
    composed = numpy_creation.numpy_call(low, obj, node)
    if composed is not None:
        return composed
    if _hashable(obj) and getattr(builtins, getattr(obj, "__name__", ""), None) is obj:
        return call_builtin(low, str(getattr(obj, "__name__", "")), node)
    module = getattr(obj, "__module__", "") or ""
    if module.startswith("nexus") and callable(obj) and not isinstance(obj, types.FunctionType) \
            or module.startswith("nexus.frontend.dsl") or module == "nexus":
        return call_op(low, obj.__name__, node, f"nx.{obj.__name__}")
    if isinstance(obj, types.FunctionType):
        if module.startswith("nexus"):
            return call_op(low, obj.__name__, node, f"nx.{obj.__name__}")
        return inline(low, obj, node)
    if isinstance(obj, type) and issubclass(obj, np.generic) or isinstance(obj, np.dtype):
        return numpy_scalar(low, obj, node)
    name = getattr(obj, "__name__", type(obj).__name__)
    if module.startswith("numpy") or isinstance(obj, np.ufunc):
        raise low.error(node, f"the NumPy function `{name}` is not supported in a script",
                         "compose it from the supported ones (listed in nexus.frontend.script.numpy_surface and "
                         "the script docstring), or compute it outside the script and pass it in")
    raise low.error(node, f"calling `{name}` is not supported in a script",
                     "call nx ops, math/NumPy functions, other @nx.script functions or plain Python helpers")


def numpy_scalar(low: Lowering, kind: Any, node: ast.Call) -> Val:
    """``np.uint32(7)``, ``np.float32(x)``: a number folds to the NumPy scalar (so it keeps
    NumPy's promotion), a 0-d tensor is cast to that dtype."""
    scalar = kind.type if isinstance(kind, np.dtype) else kind
    shown = f"np.{getattr(scalar, '__name__', scalar)}"
    try:
        to = dtype_of(np.dtype(scalar))
    except (TypeError, ValueError):
        raise low.error(node, f"`{shown}` has no Nexus dtype", "use one of " + ", ".join(DTYPES)) from None
    if len(node.args) != 1 or node.keywords:
        raise low.error(node, f"`{shown}(...)` takes one positional argument here, got {len(node.args)}")
    v = low.expr(node.args[0])
    if isinstance(v, Static) and (is_number(v.value) or isinstance(v.value, np.generic)):
        return Static(scalar(v.value))
    x = low.as_node(v)
    if not (isinstance(x.type, TensorType) and x.type.shape == ()):
        raise low.error(node, f"`{shown}(x)` needs a number or a 0-d tensor, got {x.type}",
                         f"use x.astype({shown}) for arrays")
    return low.cast(x, to)


# --- argument helpers -------------------------------------------------------------------


def positional(low: Lowering, node: ast.Call) -> list[Val]:
    out: list[Val] = []
    for a in node.args:
        v = low.expr(a)
        out.extend(v.items if isinstance(v, TupleVal) else [v])
    return out


def static_kwargs(low: Lowering, node: ast.Call) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for kw in node.keywords:
        assert kw.arg is not None
        try:
            value = ast.literal_eval(kw.value)
        except ValueError:
            v = low.expr(kw.value)
            if not isinstance(v, Static):
                raise low.error(kw.value, f"keyword argument `{kw.arg}` must be known when the graph is built",
                                 "pass a constant (attributes are not tensors)") from None
            value = v.value
        if isinstance(value, list):
            value = tuple(value)
        if kw.arg in ("dtype", "to"):
            value = _DTYPE_NAMES.get(value, value) if _hashable(value) else value
            if value not in DTYPES:
                try:
                    value = dtype_of(value)
                except (ValueError, TypeError):
                    raise low.error(kw.value, f"unknown dtype {value!r}", f"use one of {', '.join(DTYPES)}") \
                        from None
        out[kw.arg] = value
    return out


# --- ops ----------------------------------------------------------------------------------


def call_op(low: Lowering, name: str, node: ast.Call, shown: str, numpy: bool = False) -> Val:
    if name == "constant" and not numpy:  # nx.constant: a value, not a function of tensors
        return call_constant(low, node, shown)
    op = op_for_name(name)
    if op is None:
        raise low.error(node, f"`{shown}` is not an op of the registry",
                         "see nexus.ir.all_ops() for the ops there are")
    opdef = get_op(op)
    args = positional(low, node)
    if numpy:  # NumPy reads a list as an array
        args = [lists.as_array(low, a) for a in args]
    attrs = static_kwargs(low, node)
    if "axis" in attrs and "axis" not in opdef.attrs and "axes" in opdef.attrs:
        axis = attrs.pop("axis")
        attrs["axes"] = tuple(axis) if isinstance(axis, tuple) else (axis,)
    if "dtype" in attrs and "to" in opdef.attrs:
        attrs["to"] = attrs.pop("dtype")
    if op == "Cast" and len(args) == 2 and isinstance(args[1], Static):
        attrs["to"] = _DTYPE_NAMES.get(args[1].value, args[1].value)
        args = args[:1]
    if numpy and op == "Concat" and "axis" not in attrs:
        attrs["axis"] = 0
    if numpy and op == "Transpose" and "axes" in attrs:
        attrs["perm"] = attrs.pop("axes")
    missing = any(spec.default is REQUIRED and a not in attrs for a, spec in opdef.attrs.items())
    if not numpy and (missing or not opdef.arity_ok(len(args))):  # NumPy's signature, nx.roll(a, s, 0)
        mirrored = numpy_surface.nx_as_numpy(low, name, node)
        if mirrored is not None:
            return mirrored
    if not opdef.arity_ok(len(args)):
        raise low.error(node, f"`{shown}` ({op}) takes {opdef.arity_text()} tensor arguments, got {len(args)}")
    unknown = set(attrs) - set(opdef.attrs) - UNIVERSAL_ATTRS
    if unknown:
        known = ", ".join(sorted(opdef.attrs)) or "none"
        raise low.error(node, f"`{shown}` ({op}) has no attribute `{sorted(unknown)[0]}` (it has: {known})")
    if op == "Where":
        c = low.as_node(args[0])
        nodes = [c, *expr.unify(low, args[1:], arith=False)]
    elif opdef.promotion in ("arith", "logical"):  # OpDef.promotion says how
        nodes = expr.unify(low, args, arith=opdef.promotion == "arith")
    elif opdef.promotion == "float":
        nodes = [to_float(low, low.as_node(a)) for a in args]
    else:
        nodes = [low.as_node(a) for a in args]
    out = low.emit(op, nodes, attrs)
    if isinstance(out.type, TupleType):
        return TupleVal(tuple(low.emit("Proj", [out], {"num": i}) for i in range(len(out.type.elems))))
    return out


def call_constant(low: Lowering, node: ast.Call, shown: str) -> Node:
    """``nx.constant(value, dtype=None, name=None)``, the DSL's signature: a Constant
    holding a value known when the graph is built.  Without ``dtype`` a Python number
    keeps Python's typing (a weak scalar, as the literal itself would be)."""
    attrs = static_kwargs(low, node)
    unknown = sorted(set(attrs) - {"dtype", "name"})
    if len(node.args) != 1 or unknown:
        got = f"the keyword `{unknown[0]}`" if unknown else f"{len(node.args)} positional arguments"
        raise low.error(node, f"`{shown}` takes one value and the keywords dtype and name, got {got}",
                         "write nx.constant(1.0) or nx.constant(values, dtype=np.float32)")
    try:
        value: Any = ast.literal_eval(node.args[0])  # numbers, and lists or tuples of them
    except ValueError:
        v = low.expr(node.args[0])
        if not isinstance(v, Static):
            raise low.error(node.args[0], f"`{shown}` needs a value known when the graph is built, "
                                           "not a tensor computed by the script",
                             "use the tensor itself, or nx.cast(x, dtype) to change its dtype") from None
        value = v.value
    dtype = attrs.get("dtype")
    if is_number(value) and dtype is None:
        if "name" not in attrs:
            return low.static_const(value)
        dtype = py_dtype(value)
    try:
        arr = np.asarray(value, dtype=None if dtype is None else numpy_dtype(dtype))
        dtype_of(arr.dtype)
    except (ValueError, TypeError, OverflowError) as e:
        raise low.error(node.args[0], f"`{shown}` cannot hold {value!r}: {e}",
                         "pass a number, a NumPy array, or a list of numbers") from None
    if "name" in attrs:
        return low.g.add("Constant", [], low.g.start_block, {"value": arr}, name=str(attrs["name"]),
                          loc=low._loc)
    return low.const(arr, dtype_of(arr.dtype))


def to_float(low: Lowering, x: Node) -> Node:
    return x if _dtype(x).startswith("f") else low.cast(x, "f64")


def call_math(low: Lowering, op: str, result: str | None, node: ast.Call) -> Val:
    args = positional(low, node)
    if len(args) != 1 or node.keywords:
        raise low.error(node, f"math function takes one argument here, got {len(args)}")
    a = args[0]
    if isinstance(a, Static) and is_number(a.value):
        try:
            return Static(_call_python(op, a.value))
        except (ValueError, OverflowError):
            pass  # raised at run time instead, if that line runs
    x = low.as_node(a)
    if weak_dtype_of(x) is None:
        raise low.error(node, "math functions take Python numbers, not tensors",
                         "use the NumPy or nx function (np.exp(x), nx.exp(x)) for tensors")
    out = low.emit(op, [low.cast(x, "f64")])
    return low.cast(out, result) if result else out


# --- builtins -----------------------------------------------------------------------------


def call_builtin(low: Lowering, name: str, node: ast.Call) -> Val:
    if node.keywords:
        raise low.error(node, f"keyword arguments to `{name}` are not supported")
    args = positional(low, node)
    if all(isinstance(a, Static) and is_number(a.value) for a in args) and name in (
            "abs", "min", "max", "float", "int", "bool", "round"):
        try:
            return Static(getattr(builtins, name)(*[a.value for a in args]))  # type: ignore[union-attr]
        except Exception as e:  # noqa: BLE001
            raise low.error(node, f"{name}(...) fails: {e}") from None
    if name == "abs" and len(args) == 1:
        x = low.as_node(args[0])
        return low.emit("Abs", [low.cast(x, "i64") if _dtype(x) == "bool" else x])
    if name in ("min", "max"):
        return min_max(low, name, args, node)
    if name in ("float", "int", "bool") and len(args) == 1:
        x = low.as_node(args[0])
        t = x.type
        if not (isinstance(t, TensorType) and t.shape == ()):
            raise low.error(node, f"{name}() of a tensor of type {t} is not supported",
                             "index one element first, or use nx.cast(x, dtype) for tensors")
        if name == "bool":
            return expr.truth(low, x, node)
        return low.cast(x, "f64" if name == "float" else "i64")
    if name == "round" and len(args) == 1:
        x = low.as_node(args[0])
        if is_int(_dtype(x)):
            return x
        return low.cast(low.emit("Round", [x]), "i64")
    if name == "len" and len(args) == 1 and isinstance(args[0], TupleVal):
        return Static(len(args[0].items))
    if name == "divmod" and len(args) == 2:  # Python's (a // b, a % b), each with its own rules
        return TupleVal((expr.binop(low, ast.FloorDiv(), args[0], args[1], node),
                         expr.binop(low, ast.Mod(), args[0], args[1], node)))
    if name == "len" and len(args) == 1:
        x = low.as_node(args[0])
        if lists.is_seq(x):
            return lists.length(low, x)
        t = x.type
        if not isinstance(t, TensorType) or not t.shape:
            raise low.error(node, f"len() needs a tensor of rank >= 1, got {t}")
        return expr.dim_value(low, x, 0)
    if name == "range":
        raise low.error(node, "range() is only supported as the iterable of a `for` loop",
                         "write `for i in range(...)`")
    if name == "print":
        raise low.error(node, "print() is not supported in a script", "return the value, or use assert")
    raise low.error(node, f"the builtin `{name}` is not supported in a script (with these arguments)",
                     "supported: abs, min, max, float, int, bool, round, len, divmod, range (in for)")


def min_max(low: Lowering, name: str, args: list[Val], node: ast.Call) -> Val:
    op = "Minimum" if name == "min" else "Maximum"
    if len(args) == 1:
        x = low.as_node(args[0])
        t = x.type
        if not (isinstance(t, TensorType) and t.shape is not None and len(t.shape) == 1):
            raise low.error(node, f"{name}() of one argument needs a 1-D tensor, got {t}",
                             f"use nx.reduce_{name}(x) for tensors")
        return low.emit("ReduceMin" if name == "min" else "ReduceMax", [x])
    if len(args) < 2:
        raise low.error(node, f"{name}() needs at least one argument")
    nodes = expr.unify(low, args, arith=False)
    out = nodes[0]
    for n in nodes[1:]:
        out = low.emit(op, [out, n])
    return out


# --- scripts and helpers ------------------------------------------------------------------


def call_script(low: Lowering, fn: Any, node: ast.Call) -> Val:
    if node.keywords:
        raise low.error(node, "keyword arguments to a script call are not supported", "pass them by position")
    args = [low.as_node(a) for a in positional(low, node)]
    if isinstance(fn, Graph):
        if len(args) != len(fn.args):
            raise low.error(node, f"graph @{fn.name} takes {len(fn.args)} arguments, got {len(args)}")
        callee = fn
    else:
        callee = low.script_builder(fn, [a.type for a in args], node)
    deps = effect_deps(low.cur) if has_state(callee) else []
    out = low.emit("Call", args, {"callee": callee})
    for d in deps:  # a callee with state: in order with this block's state ops
        out.add_dep(d)
    t = out.type
    if isinstance(t, TupleType):
        if not t.elems:
            return Static(None)
        return TupleVal(tuple(low.emit("Proj", [out], {"num": i}) for i in range(len(t.elems))))
    return out


def inline(low: Lowering, fn: types.FunctionType, node: ast.Call) -> Val:
    """Parse a plain Python helper and lower its body here, returns merged."""
    code = fn.__code__
    if code in low.inline_stack:
        raise low.error(node, f"`{fn.__name__}` calls itself; recursive helpers cannot be inlined",
                         "write the recursion as a loop")
    parsed = parse_function(fn)
    params = [a.arg for a in parsed.fdef.args.args]
    args = positional(low, node)
    kwargs = {kw.arg: kw.value for kw in node.keywords}
    for p in params[len(args):]:
        if p not in kwargs:
            raise low.error(node, f"`{fn.__name__}()` is missing argument `{p}`")
        args.append(low.expr(kwargs.pop(p)))
    if len(args) != len(params) or kwargs:
        raise low.error(node, f"`{fn.__name__}()` takes {len(params)} arguments, got {len(args) + len(kwargs)}")
    low.inline_count += 1
    closure = dict(zip(code.co_freevars, [c.cell_contents for c in fn.__closure__ or ()]))
    scope = Scope(parsed, fn.__globals__, closure, prefix=f"{fn.__name__}.{low.inline_count}.", inline=True)
    for p, v in zip(params, args):
        if isinstance(v, Static) and not is_number(v.value):
            if p in _reassigned(parsed.fdef, p):
                raise low.error(node, f"argument `{p}` of `{fn.__name__}` is a {type(v.value).__name__} "
                                       "and is reassigned inside", "pass tensors or numbers")
            scope.statics[p] = v
        elif isinstance(v, TupleVal):
            raise low.error(node, f"argument `{p}` of `{fn.__name__}` is a tuple", "pass its items separately")
        else:
            low.ssa.set_value(scope.prefix + p, low.cur, low.as_node(v))
    low.unbind_locals(scope.prefix)
    outer = low.scope
    low.scope = scope
    low.inline_stack.append(code)
    try:
        low.body(parsed.fdef.body)  # type: ignore[attr-defined]
        if low.block is not None:  # its end: Python returns None there
            scope.none_returns.append((low.block, parsed.fdef.body[-1]))
        low.settle_none_returns(scope, [tuple(v.type for v in values) for _, values in scope.returns])
    finally:
        low.inline_stack.pop()
        low.scope = outer
    return merge_returns(low, scope, node)


def merge_returns(low: Lowering, scope: Scope, node: ast.AST) -> Val:
    rets = scope.returns
    if not rets:  # every path of the helper raises (or never ends): so does the call
        assert low.block is None
        raise PathEnded
    arity = len(rets[0][1])
    if len(rets) == 1:
        edge, values = rets[0]
        assert isinstance(edge[0], Block)
        low.block = edge[0]
        out_values = values
    else:
        edges: list[Edge] = [e for e, _ in rets]
        join = control.merge(low, edges, "ret")
        assert join is not None
        low.block = join
        out_values = []
        for i in range(arity):
            vals = [v[i] for _, v in rets]
            t = generalize_all([v.type for v in vals])
            if t is None:
                kinds = " and ".join(sorted({str(v.type) for v in vals}))
                raise low.error(node, f"the helper returns different types ({kinds}) on different paths",
                                 "return one type on every path")
            out_values.append(low.emit("Phi", vals, type=t) if len({id(v) for v in vals}) > 1 else vals[0])
    if arity == 0:
        return Static(None)
    return out_values[0] if arity == 1 else TupleVal(tuple(out_values))


def _reassigned(fdef: ast.FunctionDef, name: str) -> set[str]:
    for node in ast.walk(fdef):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store) and node.id == name:
            return {name}
    return set()


# The ops of _MATH on Python numbers known when the graph is built: folded with math's
# own function (its errors and rounding), keyed by op.
PYTHON_MATH: dict[str, Any] = {
    "Exp": math.exp, "Log": math.log, "Tanh": math.tanh, "Sqrt": math.sqrt, "Sin": math.sin, "Cos": math.cos,
    "Erf": math.erf, "Abs": math.fabs, "Floor": math.floor, "Ceil": math.ceil,
}


def _call_python(op: str, x: Any) -> Any:
    return PYTHON_MATH[op](x)
