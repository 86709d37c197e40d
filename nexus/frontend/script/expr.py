"""Expressions of ``@nx.script``: names, constants, operators with Python's typing,
short-circuit ``and``/``or``, conditional expressions, chained comparisons, attributes.
Each ``expr_<AST class>(low, node)`` is found by :class:`~nexus.frontend.script.visitor.Lowering`'s
dispatch."""

from __future__ import annotations

import ast
import operator
import types
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from nexus.frontend.dsl.state import State, StateMethod
from nexus.frontend.names import BINARY, BY_SYNTAX, COMPARE
from nexus.frontend.script import control, numpy_surface, subscripts
from nexus.frontend.script.annotations import (
    common_dtype,
    is_float,
    is_int,
    is_number,
    py_dtype,
    weak_dtype_of,
)
from nexus.frontend.script.ssa import generalize_all
from nexus.frontend.script.values import (
    TENSOR_METHODS,
    Edge,
    NexusOp,
    PathEnded,
    Static,
    TensorMethod,
    TupleVal,
    Val,
    _describe,
    _dtype,
    _fits_not,
    _fold,
)
from nexus.ir.node import Block, Node
from nexus.ir.types import TensorType, dtype_of, format_dim, numpy_dtype

if TYPE_CHECKING:
    from nexus.frontend.script.visitor import Lowering


# &, |, ^ on bools are the logical ops (Python's True & False is a bool).
_LOGICAL = {o.op: o.on_bools for o in BINARY if o.on_bools}
_SHIFTS = frozenset({"LeftShift", "RightShift"})


def expr_Constant(low: Lowering, node: ast.Constant) -> Val:
    if node.value is Ellipsis:
        raise low.error(node, "`...` is not supported", "write the slices out (`x[:, 0]`)")
    if isinstance(node.value, (bytes, complex)):
        raise low.error(node, f"{type(node.value).__name__} constants are not supported",
                         "use int, float or bool")
    return Static(node.value)


def expr_Name(low: Lowering, node: ast.Name) -> Val:
    return low.load(node.id, node)


def expr_Tuple(low: Lowering, node: ast.Tuple) -> Val:
    return TupleVal(tuple(low.expr(e) for e in node.elts))


def expr_List(low: Lowering, node: ast.List) -> Val:
    # A list literal read as a value (np.concatenate([a, b]), np.array([1.0, x])) is
    # its items; a list kept in a variable is refused where it is stored.
    return TupleVal(tuple(low.expr(e) for e in node.elts))


def expr_Attribute(low: Lowering, node: ast.Attribute) -> Val:
    base = low.expr(node.value)
    if isinstance(base, Static):
        obj = base.value
        if isinstance(obj, types.ModuleType) and (obj.__name__ == "nexus" or obj.__name__.startswith("nexus.")):
            return Static(NexusOp(node.attr))
        if isinstance(obj, types.ModuleType):
            if not hasattr(obj, node.attr):
                raise low.error(node, f"module `{obj.__name__}` has no attribute `{node.attr}`")
            attr = getattr(obj, node.attr)
            return low.outer_value(f"{obj.__name__}.{node.attr}", attr, node)
        if isinstance(obj, State) and node.attr in ("read", "assign"):
            return Static(StateMethod(obj, node.attr))
        raise low.error(node, f"attribute `.{node.attr}` of {_describe(obj)} is not supported",
                         "compute the value outside the script and pass it in")
    if isinstance(base, Node):
        return tensor_attribute(low, base, node)
    raise low.error(node, f"attribute `.{node.attr}` of a tuple is not supported")


def tensor_attribute(low: Lowering, x: Node, node: ast.Attribute) -> Val:
    t = x.type
    if node.attr == "T" and isinstance(t, TensorType):
        return low.emit("Transpose", [x])
    if node.attr == "ndim" and isinstance(t, TensorType) and t.shape is not None:
        return Static(len(t.shape))
    if node.attr == "shape" and isinstance(t, TensorType) and t.shape is not None:
        return TupleVal(tuple(dim_value(low, x, i) for i in range(len(t.shape))))
    if node.attr == "size" and isinstance(t, TensorType) and t.shape is not None:
        return numpy_surface.size_of(low, x)
    if node.attr == "dtype" and isinstance(t, TensorType):
        return Static(np.dtype(numpy_dtype(t.dtype)))
    if node.attr in TENSOR_METHODS:
        return Static(TensorMethod(node.attr, x))
    raise low.error(node, f"tensor attribute `.{node.attr}` is not supported",
                     "use nx functions (nx.transpose, nx.shape_of ...) or len(x)")


def dim_value(low: Lowering, x: Node, axis: int) -> Val:
    t = x.type
    assert isinstance(t, TensorType) and t.shape is not None
    d = t.shape[axis]
    if isinstance(d, int):
        return Static(d)
    return low.emit("DimSize", [x], {"axis": axis})


# --- operators -------------------------------------------------------------------------


def unify(low: Lowering, vals: list[Val], arith: bool) -> list[Node]:
    """Cast operands to their common dtype (NumPy promotion, Python scalars weak);
    arithmetic on bools is done on ints, as Python does."""
    strong: list[str] = []
    weak: list[str] = []
    for v in vals:
        if isinstance(v, TupleVal):
            raise low.error(None, "a tuple cannot be used in arithmetic", "unpack it first: `a, b = ...`")
        if isinstance(v, Static) and not is_number(v.value) and not isinstance(v.value, (np.ndarray, np.generic)):
            raise low.error(None, f"{_describe(v.value)} cannot be used in arithmetic")
        w = weak_dtype_of(v.value if isinstance(v, Static) else v)
        if w is not None:
            weak.append(w)
        elif isinstance(v, Static):
            strong.append(dtype_of(np.asarray(v.value).dtype))
        else:
            t = v.type
            if not isinstance(t, TensorType):
                raise low.error(None, f"a value of type {t} cannot be used in arithmetic")
            strong.append(t.dtype)
    dt = common_dtype(strong, weak)
    if arith and dt == "bool":
        dt = "i64"
    return [low.as_node(v, dt) for v in vals]


def stack(low: Lowering, v: TupleVal, dtype: str | None = None) -> Node:
    """A list or tuple of numbers and tensors (nested: rows) as one array, as
    ``np.array`` makes it: NumPy's common dtype (or ``dtype``), the items on a new first
    axis."""
    items = [stack(low, i) if isinstance(i, TupleVal) else i for i in v.items]
    if not items:
        raise low.error(None, "an empty list has no dtype or shape here", "use np.zeros(0)")
    nodes = unify(low, items, arith=False)
    if dtype is not None:
        nodes = [low.cast(n, dtype) for n in nodes]
    return low.emit("Concat", [low.emit("Unsqueeze", [n], {"axes": (0,)}) for n in nodes], {"axis": 0})


def expr_BinOp(low: Lowering, node: ast.BinOp) -> Val:
    return binop(low, node.op, low.expr(node.left), low.expr(node.right), node)


def binop(low: Lowering, op: ast.operator, a: Val, b: Val, node: ast.AST) -> Val:
    spelling = BY_SYNTAX[type(op)]
    name, fn = spelling.op, spelling.fn
    if isinstance(a, Static) and isinstance(b, Static) and is_number(a.value) and is_number(b.value):
        folded = _fold(fn, a.value, b.value)
        if folded is not None:
            return folded
        if _fits_not(fn, a.value, b.value):
            raise low.error(node, f"the integer result of `{a.value!r} {spelling.symbol} {b.value!r}` "
                                   "does not fit in int64", "scripts compute with 64-bit integers; use a float")
    if name in _LOGICAL or name in _SHIFTS:
        return bitwise(low, name, spelling.symbol, a, b, node)
    if name == "Pow":
        return power(low, a, b, node)
    x, y = unify(low, [a, b], arith=True)
    if name == "Div" and not is_float(_dtype(x)):
        x, y = low.cast(x, "f64"), low.cast(y, "f64")  # Python's / on ints gives a float
    return low.emit(name, [x, y])


def bitwise(low: Lowering, name: str, sym: str, a: Val, b: Val, node: ast.AST) -> Node:
    """``&``, ``|``, ``^``, ``<<``, ``>>`` with Python's typing: on two bools the first
    three are the logical ops; a bool next to an int is an int (``True & 3 == 1``), and
    shifts make bools ints (``True << 1 == 2``).  Floats have no bitwise ops."""
    x, y = unify(low, [a, b], arith=name in _SHIFTS)
    dt = _dtype(x)
    if dt == "bool":
        return low.emit(_LOGICAL[name], [x, y])
    if not is_int(dt):
        raise low.error(node, f"`{sym}` needs integers or bools, not {dt}",
                         "convert with int(...) (nx.cast(x, 'i64') for tensors)")
    return low.emit(name, [x, y])


def power(low: Lowering, a: Val, b: Val, node: ast.AST) -> Node:
    x, y = unify(low, [a, b], arith=True)
    if is_int(_dtype(x)):
        if not (isinstance(b, Static) and isinstance(b.value, int) and b.value >= 0):
            raise low.error(node, "`**` on integers needs a constant exponent >= 0 (Python gives a float "
                                   "for negative exponents)", "write float(a) ** b")
    return low.emit("Pow", [x, y])


def expr_UnaryOp(low: Lowering, node: ast.UnaryOp) -> Val:
    v = low.expr(node.operand)
    if isinstance(node.op, ast.Not):
        if isinstance(v, Static) and (is_number(v.value) or v.value is None):
            return Static(not v.value)
        return low.emit("Not", [truth(low, v, node.operand)])
    if isinstance(v, Static) and is_number(v.value):
        unary: Any = {ast.USub: operator.neg, ast.UAdd: operator.pos,
                      ast.Invert: operator.invert}[type(node.op)]
        folded = _fold(lambda x, _: unary(x), v.value, None)
        if folded is not None:
            return folded
    x = low.as_node(v)
    dt = _dtype(x)
    if isinstance(node.op, ast.UAdd):
        return low.cast(x, "i64") if dt == "bool" else x
    if isinstance(node.op, ast.USub):
        if dt == "bool":
            x = low.cast(x, "i64")
        return low.emit("Neg", [x])
    # ~x: logical not on bool tensors (NumPy), -x - 1 on ints and Python bools (Python)
    if dt == "bool" and weak_dtype_of(x) is None:
        return low.emit("Not", [x])
    if dt == "bool":
        x = low.cast(x, "i64")
    if not is_int(_dtype(x)):
        raise low.error(node, f"`~` needs an integer or a bool, not {_dtype(x)}",
                         "convert with int(...) (nx.cast(x, 'i64') for tensors)")
    return low.emit("BitwiseNot", [x])


def truth(low: Lowering, v: Val, node: ast.AST | None = None) -> Node:
    """A bool scalar: Python's truth value of ``v``."""
    if isinstance(v, Static):
        if is_number(v.value) or v.value is None:
            return low.const(bool(v.value), "bool")
        raise low.error(node, f"the truth value of {_describe(v.value)} is not supported")
    if isinstance(v, TupleVal):
        raise low.error(node, "the truth value of a tuple is not supported", "test its items")
    t = v.type
    if not isinstance(t, TensorType) or t.shape is None or t.shape != ():
        shape = "unknown" if not isinstance(t, TensorType) or t.shape is None else \
            "[" + ", ".join(format_dim(d) for d in t.shape) + "]"
        raise low.error(node, f"the truth value of a tensor of shape {shape} is ambiguous",
                         "reduce it to a scalar first, e.g. `nx.reduce_max(x) > 0` or compare one element")
    if t.dtype == "bool":
        return v
    return low.emit("NotEqual", [v, low.const(0, t.dtype)])


def expr_Compare(low: Lowering, node: ast.Compare) -> Val:
    found = none_test(low, node)
    if found is not None:
        return found
    left = low.expr(node.left)
    if len(node.ops) == 1:
        return compare(low, node.ops[0], left, low.expr(node.comparators[0]), node)
    # a < b < c: `a < b and b < c`, b evaluated once, short-circuit.
    state = {"prev": left}

    def step(k: int) -> Callable[[], Val]:
        def run() -> Val:
            right = low.expr(node.comparators[k])
            out = compare(low, node.ops[k], state["prev"], right, node)
            state["prev"] = right
            return out
        return run

    return short_circuit(low, True, [step(k) for k in range(len(node.ops))], node)


def compare(low: Lowering, op: ast.cmpop, a: Val, b: Val, node: ast.AST) -> Val:
    if isinstance(op, (ast.Is, ast.IsNot)) and (_is_none(a) or _is_none(b)):
        # `x is None`: known when the graph is built (a tensor or number never is None)
        return Static((_is_none(a) and _is_none(b)) == isinstance(op, ast.Is))
    if isinstance(op, (ast.In, ast.NotIn)):
        found = contains(low, b, a, node)
        if isinstance(op, ast.In):
            return found
        return Static(not found.value) if isinstance(found, Static) else low.emit("Not", [low.as_node(found)])
    if type(op) not in BY_SYNTAX or BY_SYNTAX[type(op)] not in COMPARE:
        word = {ast.Is: "is", ast.IsNot: "is not"}.get(type(op), "?")
        raise low.error(node, f"the `{word}` comparison is only supported against None",
                         "compare values with ==, !=, <, <=, >, >=")
    name, fn = BY_SYNTAX[type(op)].op, BY_SYNTAX[type(op)].fn
    if isinstance(a, Static) and isinstance(b, Static) and is_number(a.value) and is_number(b.value):
        return Static(fn(a.value, b.value))
    x, y = unify(low, [a, b], arith=False)
    return low.emit(name, [x, y])


def none_test(low: Lowering, node: ast.Compare) -> Val | None:
    """``x is None`` (``is not``, ``==``, ``!=``) for a variable that holds None on some
    paths: its run-time flag.  None for other comparisons."""
    if len(node.ops) != 1 or not isinstance(node.ops[0], (ast.Is, ast.IsNot, ast.Eq, ast.NotEq)):
        return None
    a, b = node.left, node.comparators[0]
    if isinstance(a, ast.Constant) and a.value is None:
        a, b = b, a
    if not (isinstance(a, ast.Name) and isinstance(b, ast.Constant) and b.value is None):
        return None
    flag = low.is_none(a.id, a)
    if flag is None:
        return None
    return flag if isinstance(node.ops[0], (ast.Is, ast.Eq)) else low.emit("Not", [flag])


def _is_none(v: Val) -> bool:
    return isinstance(v, Static) and v.value is None


def contains(low: Lowering, seq: Val, x: Val, node: ast.AST) -> Val:
    """``x in seq`` for a number ``x``: in a tuple or list, whether an item equals it
    (Python's ``in``); in a tensor, whether an element does (NumPy's ``__contains__``)."""
    if isinstance(x, TupleVal) or isinstance(x, Node) and not (isinstance(x.type, TensorType) and x.type.shape == ()):
        raise low.error(node, "`in` is supported for a number on the left",
                         "compare the elements with == and reduce with np.any")
    if isinstance(seq, TupleVal):
        found: Val = Static(False)
        for item in seq.items:
            if isinstance(item, TupleVal) or isinstance(item, Node) and not (
                    isinstance(item.type, TensorType) and item.type.shape == ()):
                raise low.error(node, "`in` over a tuple or list of numbers only",
                                 "compare with each item with ==")
            eq = compare(low, ast.Eq(), x, item, node)
            if isinstance(eq, Static):
                if eq.value:
                    return Static(True)
                continue
            found = eq if isinstance(found, Static) else low.emit("Or", [low.as_node(found), low.as_node(eq)])
        return found
    arr = low.as_node(seq)
    if not isinstance(arr.type, TensorType) or not arr.type.shape:
        raise low.error(node, f"`in` needs a tuple, a list or a tensor of rank >= 1 on the right, got {arr.type}")
    a, v = unify(low, [arr, x], arith=False)
    hits = low.emit("ReduceSum", [low.cast(low.emit("Equal", [a, v]), "i64")], {"keepdims": False})
    return low.emit("Greater", [hits, low.const(0, "i64")])


def expr_BoolOp(low: Lowering, node: ast.BoolOp) -> Val:
    is_and = isinstance(node.op, ast.And)
    return short_circuit(low, is_and, [lambda e=e: low.expr(e) for e in node.values], node)  # type: ignore[misc]


def short_circuit(low: Lowering, is_and: bool, parts: list[Callable[[], Val]], node: ast.AST) -> Val:
    """``a and b and ...`` / ``a or b ...`` as control flow with Python's value
    semantics: the result is the first operand that decides, else the last."""
    word = "and" if is_and else "or"
    v = parts[0]()
    rest = list(parts[1:])
    # Operands known now decide now.
    while rest and isinstance(v, Static) and (is_number(v.value) or v.value is None):
        if bool(v.value) != is_and:
            return v
        v = rest.pop(0)()
    if not rest:
        return v
    edges: list[tuple[Edge, Val]] = []
    line = getattr(node, "lineno", 0) + low.scope.parsed.src.line_offset
    for part in rest:
        t = truth(low, v, node)
        true, false = control.branch(low, t)
        done, go = (false, true) if is_and else (true, false)
        edges.append(((done, f"where the `{word}` at line {line} stops early"), v))
        low.block = control.new_block(low, f"{word}{line}", [go])
        try:
            v = part()
        except PathEnded:  # this operand raises: the paths that stopped before it go on
            return join_values(low, edges, f"the operands of `{word}`", node)
    edges.append(((low.cur, f"where the `{word}` at line {line} evaluates its last operand"), v))
    return join_values(low, edges, f"the operands of `{word}`", node)


def join_values(low: Lowering, edges: list[tuple[Edge, Val]], what: str, node: ast.AST) -> Node:
    """Merge ``edges`` into a new block whose Phi selects the matching value."""
    # Literals take the type of the other operands (weak typing); others must agree.
    types_ = [v.type for v in (x for _, x in edges) if isinstance(v, Node)]
    nodes: list[Node] = []
    for edge, v in edges:
        if isinstance(v, Static) and types_ and is_number(v.value):
            t = types_[0]
            assert isinstance(t, TensorType)
            dtype = t.dtype if t.shape == () else py_dtype(v.value)
            if is_int(dtype) and isinstance(v.value, float):
                dtype = "f64"
            block_of_edge = edge[0] if isinstance(edge[0], Block) else edge[0].block
            assert block_of_edge is not None
            saved, low.block = low.block, block_of_edge
            nodes.append(low.as_node(v, dtype))
            low.block = saved
        else:
            nodes.append(low.as_node(v))
    out = generalize_all([n.type for n in nodes])
    if out is None:
        kinds = " and ".join(sorted({str(n.type) for n in nodes}))
        raise low.error(node, f"{what} have different types ({kinds}); Python would give either",
                         "make both sides the same type, e.g. with float(...) or a comparison")
    join = control.merge(low, [e for e, _ in edges], "join")
    assert join is not None
    low.block = join
    if all(n is nodes[0] for n in nodes):
        return nodes[0]  # `x if c else x`: a Phi would be trivial
    return low.emit("Phi", nodes, type=out)


def expr_IfExp(low: Lowering, node: ast.IfExp) -> Val:
    test = low.expr(node.test)
    if isinstance(test, Static) and (is_number(test.value) or test.value is None):
        return low.expr(node.body if test.value else node.orelse)
    line = low.scope.parsed.src.file_line(node)
    true, false = control.branch(low, truth(low, test, node.test))
    arms: list[tuple[Edge, Val]] = []
    for side, exit_, word in ((node.body, true, "true"), (node.orelse, false, "false")):
        low.block = control.new_block(low, f"ifexp_{word}{line}", [exit_])
        try:
            v = low.expr(side)
        except PathEnded:  # this side raises: only the other goes on
            continue
        arms.append(((low.cur, f"the {word} side of the conditional expression at line {line}"), v))
    if not arms:
        raise PathEnded
    return join_values(low, arms, "the two sides of the conditional expression", node)


def expr_Subscript(low: Lowering, node: ast.Subscript) -> Val:
    return subscripts.load(low, node)
