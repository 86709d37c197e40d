"""The statements of ``@nx.script`` other than control flow: assignments (to names,
tuples and elements), augmented assignments, lists, ``with nx.device(...)``, expression
statements and ``assert``."""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING

import numpy as np

from nexus.frontend.script import control, expr, lists, subscripts
from nexus.frontend.script.annotations import is_number
from nexus.frontend.script.ssa import LoopTypeRetry
from nexus.frontend.script.values import Static, TupleVal, Val
from nexus.ir.types import TensorType, TupleType, Type

if TYPE_CHECKING:
    from nexus.frontend.script.visitor import Lowering

TUPLE_HINT = "$tuple"  # hints[(TUPLE_HINT, var)]: var is a tuple variable of that nesting (tuple_nesting)


def stmt_Pass(low: Lowering, node: ast.Pass) -> None:
    pass


def stmt_With(low: Lowering, node: ast.With) -> None:
    """``with nx.device("/GPU:0"):`` / ``with nx.machine("host1"):`` place the ops of
    the body (seed 001, section 4.2), nesting like the DSL's; no other context manager."""
    saved = low.placement
    placement = dict(saved)
    for item in node.items:
        placement.update(placement_of(low, item))
    low.placement = placement
    try:
        low.body(node.body)
    finally:
        low.placement = saved


def placement_of(low: Lowering, item: ast.withitem) -> dict[str, str]:
    hint = "only `with nx.device(\"/CPU:0\")` and `with nx.machine(\"host1\")` are supported in a script"
    call = item.context_expr
    if item.optional_vars is not None or not isinstance(call, ast.Call) or call.keywords and any(
            k.arg != "machine" for k in call.keywords):
        raise low.error(item.context_expr, "this `with` statement is not supported", hint)
    fn = low.expr(call.func)
    kind = getattr(getattr(fn, "value", None), "name", None) if isinstance(fn, Static) else None
    if kind is None and isinstance(fn, Static):
        kind = {"device": "device", "machine": "machine"}.get(getattr(fn.value, "__name__", ""))
    if kind not in ("device", "machine") or len(call.args) != 1:
        raise low.error(item.context_expr, "this `with` statement is not supported", hint)
    values = [low.expr(call.args[0]), *(low.expr(k.value) for k in call.keywords)]
    if not all(isinstance(v, Static) and isinstance(v.value, str) for v in values):
        raise low.error(item.context_expr, f"nx.{kind}(...) takes a string known when the script is built", hint)
    out = {kind: values[0].value}  # type: ignore[union-attr]
    if len(values) > 1:
        out["machine"] = values[1].value  # type: ignore[union-attr]
    return out


def stmt_Expr(low: Lowering, node: ast.Expr) -> None:
    if isinstance(node.value, ast.Constant):
        return  # a docstring or a bare constant does nothing
    call = node.value
    if isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr == "append" \
            and isinstance(call.func.value, ast.Name) and call.func.value.id in low.lists:
        if len(call.args) != 1 or call.keywords:
            raise low.error(call, "`list.append` takes one value")
        lists.list_append(low, call.func.value, low.expr(call.args[0]), call)
        return
    low.expr(node.value)


def stmt_Assign(low: Lowering, node: ast.Assign) -> None:
    # A list literal stored in a name is a list variable (see nexus.frontend.script.lists).
    if isinstance(node.value, ast.List) and any(isinstance(t, ast.Name) for t in node.targets):
        if len(node.targets) != 1 or not isinstance(node.targets[0], ast.Name):
            raise low.error(node.value, "a list can be stored in one variable (`xs = []`), not several",
                             "assign it to one name")
        lists.list_new(low, node.targets[0], node.value, ("list", control.loop_key(low, node.value)))
        return
    refuse_list_alias(low, node)
    value = low.expr(node.value)
    for target in node.targets:
        assign(low, target, value)


def refuse_list_alias(low: Lowering, node: ast.Assign) -> None:
    """``zs = ys`` for a list ``ys``: in Python both names are one list and see each
    other's appends; a script's list is a value (a stacked tensor or a sequence), so they would
    not.  Refused rather than run differently."""
    sources = node.value.elts if isinstance(node.value, ast.Tuple) else [node.value]
    for src in sources:
        if not (isinstance(src, ast.Name) and src.id in low.lists):
            continue
        if all(isinstance(t, ast.Name) and t.id == src.id for t in node.targets):
            continue  # `ys = ys`
        raise low.error(src, f"`{src.id}` is a list: another name for it would share it in Python but "
                              "hold a copy in a script (a list is a value here)",
                         f"keep one name for the list; `{src.id}[:]` copies its items so far (an array "
                         "in a script)")


def stmt_AnnAssign(low: Lowering, node: ast.AnnAssign) -> None:
    if node.value is not None:
        assign(low, node.target, low.expr(node.value))


def stmt_AugAssign(low: Lowering, node: ast.AugAssign) -> None:
    if isinstance(node.target, ast.Subscript):
        # `x[i] += v` is `x[i] = x[i] + v` (NumPy's buffered semantics: a repeated index
        # adds once, as np.add.at would not).
        current = expr.expr_Subscript(low, node.target)
        assign(low, node.target, expr.binop(low, node.op, current, low.expr(node.value), node))
        return
    if not isinstance(node.target, ast.Name):
        raise low.error(node.target, "augmented assignment only to plain variables is supported",
                         "write `x = x + ...` on a variable")
    current = low.load(node.target.id, node.target)
    # Tensors are values in a script: `x += 1` rebinds x (it never mutates an array).
    assign(low, node.target, expr.binop(low, node.op, current, low.expr(node.value), node))


def assign(low: Lowering, target: ast.expr, value: Val) -> None:
    if isinstance(target, ast.Name):
        if isinstance(value, TupleVal):
            assign_tuple(low, target, target.id, value)
            return
        if low.var(target.id) in low.tuple_vars:
            raise low.error(target, f"`{target.id}` holds a tuple elsewhere; a script variable holds tuples or "
                                    "values, not both", "use another name for one of them")
        if isinstance(value, Static) and value.value is None:
            low.bind_none(target.id, target)
            low.lists.pop(target.id, None)
            return
        if isinstance(value, Static) and not is_number(value.value) \
                and not isinstance(value.value, (np.ndarray, np.generic)):
            raise low.error(target, f"cannot store {type(value.value).__name__} `{target.id}` in a variable",
                             "use the function or module directly where it is called")
        node = low.as_node(value)
        if node.name is None and node.op.name != "Constant":
            node.name = target.id
        low.value_vars.add(low.var(target.id))
        low.bind(target.id, node)
        low.lists.pop(target.id, None)  # the name holds an array now, not a list
        return
    if isinstance(target, (ast.Tuple, ast.List)):
        items = unpack(low, value, len(target.elts), target)
        for t, v in zip(target.elts, items):
            assign(low, t, v)
        return
    if isinstance(target, ast.Subscript):
        assign_item(low, target, value)
        return
    raise low.error(target, "only variables and tuples of variables can be assigned",
                     "build a new tensor instead of assigning into one")


def assign_tuple(low: Lowering, target: ast.Name, name: str, value: TupleVal) -> None:
    """``t = (a, b)``: a tuple variable is one hidden variable per item, ``t#0``, ``t#1``
    (SSA tracks each; reading ``t`` gathers them), of one length on every path."""
    var = low.var(name)
    shape = tuple_shape(value)
    known = low.tuple_vars.get(var)
    if known is not None and known != shape and var in low.tuple_assigned or known is None and var in low.value_vars:
        raise low.error(target, f"`{target.id}` holds {'a value' if known is None else 'a tuple of another length'} "
                                "elsewhere; a script variable holds tuples of one length, or values",
                         "use another name for one of them")
    if known is None and var in low.plain_reads or known is not None and known != shape \
            and var not in low.tuple_assigned:
        # read before this (in a loop, or on a path that raises) as a value or as a tuple of
        # the wrong length: build again knowing it is this tuple
        raise LoopTypeRetry((TUPLE_HINT, var), tuple_type(shape))
    low.tuple_assigned.add(var)
    register_tuple(low, var, shape)
    for k, item in enumerate(value.items):
        if isinstance(item, TupleVal):
            assign_tuple(low, target, f"{name}#{k}", item)
        elif isinstance(item, Static) and not is_number(item.value) \
                and not isinstance(item.value, (np.ndarray, np.generic)):
            raise low.error(target, f"a tuple stored in a variable holds numbers and tensors, not "
                                    f"{type(item.value).__name__}", "use the value directly where it is needed")
        else:
            low.bind(f"{name}#{k}", low.as_node(item))


def tuple_type(nesting: tuple[object, ...]) -> TupleType:
    """A tuple variable's nesting as a hint (a TupleType, a bool per item)."""
    return TupleType(tuple(tuple_type(n) if isinstance(n, tuple) else TensorType("bool", ()) for n in nesting))


def tuple_nesting(t: Type) -> tuple[object, ...]:
    assert isinstance(t, TupleType)
    return tuple(tuple_nesting(e) if isinstance(e, TupleType) else None for e in t.elems)


def register_tuple(low: Lowering, var: str, nesting: tuple[object, ...]) -> None:
    """``var`` (and its items that are tuples) hold tuples of this nesting."""
    low.tuple_vars[var] = nesting
    for k, n in enumerate(nesting):
        if isinstance(n, tuple):
            register_tuple(low, f"{var}#{k}", n)


def with_tuple_items(low: Lowering, names: list[str]) -> list[str]:
    """``names`` and, for the tuple variables among them, their items' variables."""
    out = list(names)
    for var in names:
        nesting = low.tuple_vars.get(var)
        if nesting is not None:
            out += with_tuple_items(low, [f"{var}#{k}" for k in range(len(nesting))])
    return out


def literal_tuple_nesting(fdef: ast.FunctionDef, name: str) -> tuple[object, ...] | None:
    """The nesting of a tuple literal ``fdef`` assigns to ``name`` (``t = (a, (b, c))``),
    if it does: a read lowered before that assignment (a loop's earlier line) reads a tuple."""
    for node in ast.walk(fdef):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Tuple) \
                and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            return _nesting(node.value)
    return None


def _nesting(t: ast.Tuple) -> tuple[object, ...]:
    return tuple(_nesting(e) if isinstance(e, ast.Tuple) else None for e in t.elts)


def tuple_shape(v: TupleVal) -> tuple[object, ...]:
    """The nesting of a tuple: None per item, a tuple per nested tuple."""
    return tuple(tuple_shape(i) if isinstance(i, TupleVal) else None for i in v.items)


def assign_item(low: Lowering, target: ast.Subscript, value: Val) -> None:
    """``x[index] = v``: x is rebound to a SetItem of its old value (as JAX's
    ``x.at[index].set(v)``); the caller's arrays and other names never change."""
    if not isinstance(target.value, ast.Name):
        raise low.error(target, "only a variable's elements can be assigned",
                         "write `x[i, j] = v` instead of `x[i][j] = v`, on a variable `x`")
    name = target.value.id
    base = low.load(name, target.value)
    if isinstance(base, TupleVal) or isinstance(base, Static) and not isinstance(base.value, np.ndarray):
        raise low.error(target, f"`{name}` is not a tensor: only tensors' elements can be assigned",
                         "build a tensor, e.g. with np.zeros(n), and assign into it")
    x = low.as_node(base)
    if lists.is_seq(x):
        lists.set_item(low, target, x, value)
        return
    kinds, idx = subscripts.store_index(low, x, target)
    t = x.type
    assert isinstance(t, TensorType)
    if isinstance(value, TupleVal):  # `x[i] = [a, b, c]`: NumPy stores np.array([a, b, c])
        value = expr.stack(low, value)
    v = low.as_node(value, t.dtype)
    if isinstance(v.type, TensorType) and v.type.dtype != t.dtype:
        v = low.cast(v, t.dtype)  # NumPy casts the value to the array's dtype
    new = low.emit("SetItem", [x, v, *idx], {"kinds": kinds})
    new.name = name
    low.bind(name, new)


def unpack(low: Lowering, value: Val, n: int, target: ast.AST) -> list[Val]:
    if isinstance(value, TupleVal):
        if len(value.items) != n:
            raise low.error(target, f"cannot unpack {len(value.items)} values into {n} names",
                             "give as many names as there are values")
        return list(value.items)
    x = low.as_node(value)
    t = x.type
    if isinstance(t, TensorType) and t.shape and t.shape[0] == n:
        return [low.emit("Gather", [x, low.const(i, "i64")], {"axis": 0}) for i in range(n)]
    raise low.error(target, f"cannot unpack a value of type {t} into {n} names",
                     "unpack tuples, or tensors whose first dim is a known constant")


def stmt_Assert(low: Lowering, node: ast.Assert) -> None:
    """``assert test, msg``: Python's ``if not test: raise AssertionError(msg)`` (the call
    raises AssertionError with that message, the line as a note; ``msg`` a constant)."""
    args: list[object] = []
    if node.msg is not None:
        m = low.expr(node.msg)
        if not (isinstance(m, Static) and isinstance(m.value, (str, int, float))):
            raise low.error(node.msg, "the assert message must be a constant", "use a plain string literal")
        args = [m.value]
    test = low.expr(node.test)
    if isinstance(test, Static) and (is_number(test.value) or test.value is None) and test.value:
        return
    message = control.raise_message(AssertionError, args, low.scope.parsed.src.file_line(node))
    low.emit("Assert", [expr.truth(low, test, node.test)], {"message": message})
