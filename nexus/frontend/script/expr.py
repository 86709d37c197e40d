"""Expressions of ``@nx.script``: names, constants, operators with Python's typing,
short-circuit ``and``/``or``, conditional expressions, chained comparisons, subscripts
and slices.  Calls are in :mod:`nexus.frontend.script.calls`; statements and control flow
in :mod:`nexus.frontend.script.build`."""

from __future__ import annotations

import ast
import builtins
import operator
import types
from collections.abc import Callable
from typing import Any

import numpy as np

from nexus.frontend.dsl.state import State, StateMethod
from nexus.frontend.names import BINARY, BY_SYNTAX, COMPARE
from nexus.frontend.script import numpy_surface, subscripts
from nexus.frontend.script.annotations import (
    I64_MAX,
    I64_MIN,
    common_dtype,
    is_float,
    is_int,
    is_number,
    py_dtype,
    weak_dtype_of,
)
from nexus.frontend.script.errors import ScriptError, SourceText, _construct_name, _hint_for, error_at, matmul_mismatch
from nexus.frontend.script.ssa import MergeTypeError, ScriptSSA, generalize_all
from nexus.frontend.script.values import (
    TENSOR_METHODS,
    Edge,
    NexusOp,
    Scope,
    Static,
    TensorMethod,
    TupleVal,
    Val,
    _describe,
    _dtype,
    _fits_not,
    _fold,
)
from nexus.ir.graph import Graph
from nexus.ir.node import Block, Node, SourceLoc
from nexus.ir.opdef import DATAFLOW_KINDS, OpTypeError, get_op
from nexus.ir.types import TensorType, Type, dtype_of, format_dim, numpy_dtype

# &, |, ^ on bools are the logical ops (Python's True & False is a bool).
_LOGICAL = {o.op: o.on_bools for o in BINARY if o.on_bools}
_SHIFTS = frozenset({"LeftShift", "RightShift"})


class ExprLowering:
    """Turns expressions into nodes of ``g`` at the current block ``self.block``."""

    def __init__(self, g: Graph, ssa: ScriptSSA, scope: Scope):
        self.g = g
        self.ssa = ssa
        self.scope = scope
        self.block: Block | None = g.start_block
        self._node: ast.AST | None = None
        self._src: SourceText | None = None
        self._loc_memo: SourceLoc | None = None  # _loc of _node, made when first asked for
        self._consts: dict[tuple[str, bytes], Node] = {}
        # `with nx.device(...)` / `with nx.machine(...)`: attrs stamped on the data nodes made
        self.placement: dict[str, str] = {}

    # --- errors and locations ------------------------------------------------------------
    def error(self, node: ast.AST | None, msg: str, hint: str = "") -> ScriptError:
        return error_at(self.scope.parsed.src, node if node is not None else self._node, msg, hint)

    def at(self, node: ast.AST) -> tuple[ast.AST | None, SourceText | None, SourceLoc | None]:
        """Make ``node`` the current source position; returns the previous one."""
        prev = (self._node, self._src, self._loc_memo)
        self._node = node
        self._src = self.scope.parsed.src
        self._loc_memo = None
        return prev

    def restore(self, prev: tuple[ast.AST | None, SourceText | None, SourceLoc | None]) -> None:
        self._node, self._src, self._loc_memo = prev

    @property
    def _loc(self) -> SourceLoc | None:
        """The current source position.  Made lazily: most expressions (names, constants)
        emit no node, so most positions are never needed."""
        loc = self._loc_memo
        if loc is None and self._node is not None and self._src is not None:
            src, node = self._src, self._node
            loc = self._loc_memo = SourceLoc(src.file, src.file_line(node), src.file_col(node))
        return loc

    @property
    def cur(self) -> Block:
        assert self.block is not None, "emitting into unreachable code"
        return self.block

    def emit(self, op: str, inputs: list[Node], attrs: dict[str, Any] | None = None, *,
             type: Type | None = None, name: str | None = None, block: Block | None = None) -> Node:
        if self.placement and op != "Constant" and get_op(op).kind in DATAFLOW_KINDS:
            attrs = {**self.placement, **(attrs or {})}
        try:
            return self.g.add(op, inputs, block or self.cur, attrs, type=type, name=name, loc=self._loc)
        except OpTypeError as e:
            raise self.op_error(op, inputs, attrs, e) from None

    def op_error(self, op: str, inputs: list[Node], attrs: dict[str, Any] | None, e: OpTypeError) -> ScriptError:
        """An op's type rule rejected its operands.  A conversion hint only where the dtypes
        are at fault; a shape error names the shapes (for MatMul the dims that disagree)."""
        kinds = ", ".join(str(v.type) for v in inputs)
        if not _shapes_at_fault(op, inputs, attrs):
            return self.error(None, f"{e} (operands: {kinds})", "convert explicitly with float(...)/int(...)")
        types_ = [v.type for v in inputs]
        if op == "MatMul" and all(isinstance(t, TensorType) for t in types_):
            why = matmul_mismatch(types_[0], types_[1], _operand_texts(self._node))  # type: ignore[arg-type]
            if why is not None:
                return self.error(None, why[0], why[1])
        return self.error(None, f"{e} (operands: {kinds})")

    def const(self, value: Any, dtype: str) -> Node:
        """A Constant in the entry block (evaluated once per call, shared)."""
        arr = np.asarray(value, dtype=numpy_dtype(dtype))
        key = (dtype + str(arr.shape), arr.tobytes())
        hit = self._consts.get(key)
        if hit is not None and hit.graph is self.g:
            return hit
        node = self.g.add("Constant", [], self.g.start_block, {"value": arr}, loc=self._loc)
        self._consts[key] = node
        return node

    def static_const(self, value: Any, dtype: str | None = None) -> Node:
        if isinstance(value, int) and not isinstance(value, bool) and not I64_MIN <= value <= I64_MAX:
            raise self.error(None, f"the integer {value} does not fit in int64",
                             "scripts compute with 64-bit integers; use a float")
        return self.const(value, dtype or py_dtype(value))

    def as_node(self, v: Val, dtype: str | None = None) -> Node:
        """A graph value for ``v``, cast to ``dtype`` when given."""
        if isinstance(v, Static):
            if isinstance(v.value, np.ndarray) or isinstance(v.value, np.generic):
                node = self.const(v.value, dtype_of(np.asarray(v.value).dtype))
                return self.cast(node, dtype) if dtype else node
            if not is_number(v.value):
                raise self.error(None, f"{_describe(v.value)} cannot be used as a tensor value",
                                 "use numbers, arrays and tensors in computations")
            return self.static_const(v.value, dtype)
        if isinstance(v, TupleVal):
            raise self.error(None, "a tuple cannot be used as a value here",
                             "unpack it first: `a, b = ...`")
        return self.cast(v, dtype) if dtype else v

    def cast(self, v: Node, dtype: str) -> Node:
        t = v.type
        if isinstance(t, TensorType) and t.dtype == dtype:
            return v
        return self.emit("Cast", [v], {"to": dtype})

    # --- names ---------------------------------------------------------------------------
    def var(self, name: str) -> str:
        return self.scope.prefix + name

    def load(self, name: str, node: ast.AST) -> Val:
        scope = self.scope
        if name in scope.statics:
            return scope.statics[name]
        if name in scope.parsed.assigned:
            v = self.ssa.get_value(self.var(name), self.cur)
            if v is None:
                raise self.error(node, f"variable `{name}` is used before it is assigned on this path",
                                 f"assign `{name}` before this line on every path that reaches it")
            return v
        if name in scope.closure:
            return self.outer_value(name, scope.closure[name], node)
        if name in scope.globals:
            return self.outer_value(name, scope.globals[name], node)
        if hasattr(builtins, name):
            return Static(getattr(builtins, name))
        raise self.error(node, f"name `{name}` is not defined", "define it at module level or pass it in")

    def outer_value(self, name: str, value: Any, node: ast.AST) -> Val:
        """A global or closure variable: numbers and arrays become constants."""
        if is_number(value) or isinstance(value, str) or value is None:
            return Static(value)
        if isinstance(value, (np.ndarray, np.generic)):
            try:
                dtype_of(np.asarray(value).dtype)
            except ValueError:
                raise self.error(node, f"global `{name}` has dtype {np.asarray(value).dtype}, which Nexus "
                                       "does not have", "convert it to float32/float64/int64") from None
            return Static(value)
        if isinstance(value, (types.ModuleType, types.FunctionType, types.BuiltinFunctionType, type, State)) \
                or callable(value):
            return Static(value)
        raise self.error(node, f"global `{name}` is a {type(value).__name__}; scripts can use numbers, arrays, "
                               "modules and functions from outside",
                         f"pass `{name}` as an argument or make it a NumPy array")

    # --- expressions ---------------------------------------------------------------------
    def expr(self, node: ast.expr) -> Val:
        prev = self.at(node)
        try:
            method = getattr(self, "expr_" + type(node).__name__, None)
            if method is None:
                raise self.error(node, f"{_construct_name(node)} is not supported in a script",
                                 _hint_for(node))
            return method(node)
        finally:
            self.restore(prev)

    def value(self, node: ast.expr) -> Node:
        return self.as_node(self.expr(node))

    def expr_Constant(self, node: ast.Constant) -> Val:
        if node.value is Ellipsis:
            raise self.error(node, "`...` is not supported", "write the slices out (`x[:, 0]`)")
        if isinstance(node.value, (bytes, complex)):
            raise self.error(node, f"{type(node.value).__name__} constants are not supported",
                             "use int, float or bool")
        return Static(node.value)

    def expr_Name(self, node: ast.Name) -> Val:
        return self.load(node.id, node)

    def expr_Tuple(self, node: ast.Tuple) -> Val:
        return TupleVal(tuple(self.expr(e) for e in node.elts))

    def expr_List(self, node: ast.List) -> Val:
        # A list literal read as a value (np.concatenate([a, b]), np.array([1.0, x])) is
        # its items; a list kept in a variable is refused where it is stored.
        return TupleVal(tuple(self.expr(e) for e in node.elts))

    def expr_Attribute(self, node: ast.Attribute) -> Val:
        base = self.expr(node.value)
        if isinstance(base, Static):
            obj = base.value
            if isinstance(obj, types.ModuleType) and (obj.__name__ == "nexus" or obj.__name__.startswith("nexus.")):
                return Static(NexusOp(node.attr))
            if isinstance(obj, types.ModuleType):
                if not hasattr(obj, node.attr):
                    raise self.error(node, f"module `{obj.__name__}` has no attribute `{node.attr}`")
                attr = getattr(obj, node.attr)
                return self.outer_value(f"{obj.__name__}.{node.attr}", attr, node)
            if isinstance(obj, State) and node.attr in ("read", "assign"):
                return Static(StateMethod(obj, node.attr))
            raise self.error(node, f"attribute `.{node.attr}` of {_describe(obj)} is not supported",
                             "compute the value outside the script and pass it in")
        if isinstance(base, Node):
            return self.tensor_attribute(base, node)
        raise self.error(node, f"attribute `.{node.attr}` of a tuple is not supported")

    def tensor_attribute(self, x: Node, node: ast.Attribute) -> Val:
        t = x.type
        if node.attr == "T" and isinstance(t, TensorType):
            return self.emit("Transpose", [x])
        if node.attr == "ndim" and isinstance(t, TensorType) and t.shape is not None:
            return Static(len(t.shape))
        if node.attr == "shape" and isinstance(t, TensorType) and t.shape is not None:
            return TupleVal(tuple(self.dim_value(x, i) for i in range(len(t.shape))))
        if node.attr == "size" and isinstance(t, TensorType) and t.shape is not None:
            return numpy_surface.size_of(self, x)  # type: ignore[arg-type]
        if node.attr == "dtype" and isinstance(t, TensorType):
            return Static(np.dtype(numpy_dtype(t.dtype)))
        if node.attr in TENSOR_METHODS:
            return Static(TensorMethod(node.attr, x))
        raise self.error(node, f"tensor attribute `.{node.attr}` is not supported",
                         "use nx functions (nx.transpose, nx.shape_of ...) or len(x)")

    def dim_value(self, x: Node, axis: int) -> Val:
        t = x.type
        assert isinstance(t, TensorType) and t.shape is not None
        d = t.shape[axis]
        if isinstance(d, int):
            return Static(d)
        return self.emit("DimSize", [x], {"axis": axis})

    # --- operators -------------------------------------------------------------------------
    def unify(self, vals: list[Val], arith: bool) -> list[Node]:
        """Cast operands to their common dtype (NumPy promotion, Python scalars weak);
        arithmetic on bools is done on ints, as Python does."""
        strong: list[str] = []
        weak: list[str] = []
        for v in vals:
            if isinstance(v, TupleVal):
                raise self.error(None, "a tuple cannot be used in arithmetic", "unpack it first: `a, b = ...`")
            if isinstance(v, Static) and not is_number(v.value) and not isinstance(v.value, (np.ndarray, np.generic)):
                raise self.error(None, f"{_describe(v.value)} cannot be used in arithmetic")
            w = weak_dtype_of(v.value if isinstance(v, Static) else v)
            if w is not None:
                weak.append(w)
            elif isinstance(v, Static):
                strong.append(dtype_of(np.asarray(v.value).dtype))
            else:
                t = v.type
                if not isinstance(t, TensorType):
                    raise self.error(None, f"a value of type {t} cannot be used in arithmetic")
                strong.append(t.dtype)
        dt = common_dtype(strong, weak)
        if arith and dt == "bool":
            dt = "i64"
        return [self.as_node(v, dt) for v in vals]

    def expr_BinOp(self, node: ast.BinOp) -> Val:
        return self.binop(node.op, self.expr(node.left), self.expr(node.right), node)

    def binop(self, op: ast.operator, a: Val, b: Val, node: ast.AST) -> Val:
        spelling = BY_SYNTAX[type(op)]
        name, fn = spelling.op, spelling.fn
        if isinstance(a, Static) and isinstance(b, Static) and is_number(a.value) and is_number(b.value):
            folded = _fold(fn, a.value, b.value)
            if folded is not None:
                return folded
            if _fits_not(fn, a.value, b.value):
                raise self.error(node, f"the integer result of `{a.value!r} {spelling.symbol} {b.value!r}` "
                                       "does not fit in int64", "scripts compute with 64-bit integers; use a float")
        if name in _LOGICAL or name in _SHIFTS:
            return self.bitwise(name, spelling.symbol, a, b, node)
        if name == "Pow":
            return self.power(a, b, node)
        x, y = self.unify([a, b], arith=True)
        if name == "Div" and not is_float(_dtype(x)):
            x, y = self.cast(x, "f64"), self.cast(y, "f64")  # Python's / on ints gives a float
        return self.emit(name, [x, y])

    def bitwise(self, name: str, sym: str, a: Val, b: Val, node: ast.AST) -> Node:
        """``&``, ``|``, ``^``, ``<<``, ``>>`` with Python's typing: on two bools the first
        three are the logical ops; a bool next to an int is an int (``True & 3 == 1``), and
        shifts make bools ints (``True << 1 == 2``).  Floats have no bitwise ops."""
        x, y = self.unify([a, b], arith=name in _SHIFTS)
        dt = _dtype(x)
        if dt == "bool":
            return self.emit(_LOGICAL[name], [x, y])
        if not is_int(dt):
            raise self.error(node, f"`{sym}` needs integers or bools, not {dt}",
                             "convert with int(...) (nx.cast(x, 'i64') for tensors)")
        return self.emit(name, [x, y])

    def power(self, a: Val, b: Val, node: ast.AST) -> Node:
        x, y = self.unify([a, b], arith=True)
        if is_int(_dtype(x)):
            if not (isinstance(b, Static) and isinstance(b.value, int) and b.value >= 0):
                raise self.error(node, "`**` on integers needs a constant exponent >= 0 (Python gives a float "
                                       "for negative exponents)", "write float(a) ** b")
        return self.emit("Pow", [x, y])

    def expr_UnaryOp(self, node: ast.UnaryOp) -> Val:
        v = self.expr(node.operand)
        if isinstance(node.op, ast.Not):
            if isinstance(v, Static) and (is_number(v.value) or v.value is None):
                return Static(not v.value)
            return self.emit("Not", [self.truth(v, node.operand)])
        if isinstance(v, Static) and is_number(v.value):
            unary: Any = {ast.USub: operator.neg, ast.UAdd: operator.pos,
                          ast.Invert: operator.invert}[type(node.op)]
            folded = _fold(lambda x, _: unary(x), v.value, None)
            if folded is not None:
                return folded
        x = self.as_node(v)
        dt = _dtype(x)
        if isinstance(node.op, ast.UAdd):
            return self.cast(x, "i64") if dt == "bool" else x
        if isinstance(node.op, ast.USub):
            if dt == "bool":
                x = self.cast(x, "i64")
            return self.emit("Neg", [x])
        # ~x: logical not on bool tensors (NumPy), -x - 1 on ints and Python bools (Python)
        if dt == "bool" and weak_dtype_of(x) is None:
            return self.emit("Not", [x])
        if dt == "bool":
            x = self.cast(x, "i64")
        if not is_int(_dtype(x)):
            raise self.error(node, f"`~` needs an integer or a bool, not {_dtype(x)}",
                             "convert with int(...) (nx.cast(x, 'i64') for tensors)")
        return self.emit("BitwiseNot", [x])

    def truth(self, v: Val, node: ast.AST | None = None) -> Node:
        """A bool scalar: Python's truth value of ``v``."""
        if isinstance(v, Static):
            if is_number(v.value) or v.value is None:
                return self.const(bool(v.value), "bool")
            raise self.error(node, f"the truth value of {_describe(v.value)} is not supported")
        if isinstance(v, TupleVal):
            raise self.error(node, "the truth value of a tuple is not supported", "test its items")
        t = v.type
        if not isinstance(t, TensorType) or t.shape is None or t.shape != ():
            shape = "unknown" if not isinstance(t, TensorType) or t.shape is None else \
                "[" + ", ".join(format_dim(d) for d in t.shape) + "]"
            raise self.error(node, f"the truth value of a tensor of shape {shape} is ambiguous",
                             "reduce it to a scalar first, e.g. `nx.reduce_max(x) > 0` or compare one element")
        if t.dtype == "bool":
            return v
        return self.emit("NotEqual", [v, self.const(0, t.dtype)])

    def expr_Compare(self, node: ast.Compare) -> Val:
        left = self.expr(node.left)
        if len(node.ops) == 1:
            return self.compare(node.ops[0], left, self.expr(node.comparators[0]), node)
        # a < b < c: `a < b and b < c`, b evaluated once, short-circuit.
        state = {"prev": left}

        def step(k: int) -> Callable[[], Val]:
            def run() -> Val:
                right = self.expr(node.comparators[k])
                out = self.compare(node.ops[k], state["prev"], right, node)
                state["prev"] = right
                return out
            return run

        return self.short_circuit(True, [step(k) for k in range(len(node.ops))], node)

    def compare(self, op: ast.cmpop, a: Val, b: Val, node: ast.AST) -> Val:
        if type(op) not in BY_SYNTAX or BY_SYNTAX[type(op)] not in COMPARE:
            word = {ast.Is: "is", ast.IsNot: "is not", ast.In: "in", ast.NotIn: "not in"}.get(type(op), "?")
            raise self.error(node, f"the `{word}` comparison is not supported",
                             "compare values with ==, !=, <, <=, >, >=")
        name, fn = BY_SYNTAX[type(op)].op, BY_SYNTAX[type(op)].fn
        if isinstance(a, Static) and isinstance(b, Static) and is_number(a.value) and is_number(b.value):
            return Static(fn(a.value, b.value))
        x, y = self.unify([a, b], arith=False)
        return self.emit(name, [x, y])

    def expr_BoolOp(self, node: ast.BoolOp) -> Val:
        is_and = isinstance(node.op, ast.And)
        return self.short_circuit(is_and, [lambda e=e: self.expr(e) for e in node.values], node)  # type: ignore[misc]

    def short_circuit(self, is_and: bool, parts: list[Callable[[], Val]], node: ast.AST) -> Val:
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
        line = getattr(node, "lineno", 0) + self.scope.parsed.src.line_offset
        for part in rest:
            t = self.truth(v, node)
            true, false = self.branch(t)
            done, go = (false, true) if is_and else (true, false)
            edges.append(((done, f"where the `{word}` at line {line} stops early"), v))
            self.block = self.new_block(f"{word}{line}", [go])
            v = part()
        edges.append(((self.cur, f"where the `{word}` at line {line} evaluates its last operand"), v))
        return self.join_values(edges, f"the operands of `{word}`", node)

    def join_values(self, edges: list[tuple[Edge, Val]], what: str, node: ast.AST) -> Node:
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
                saved, self.block = self.block, block_of_edge
                nodes.append(self.as_node(v, dtype))
                self.block = saved
            else:
                nodes.append(self.as_node(v))
        out = generalize_all([n.type for n in nodes])
        if out is None:
            kinds = " and ".join(sorted({str(n.type) for n in nodes}))
            raise self.error(node, f"{what} have different types ({kinds}); Python would give either",
                             "make both sides the same type, e.g. with float(...) or a comparison")
        join = self.merge([e for e, _ in edges], "join")
        assert join is not None
        self.block = join
        if all(n is nodes[0] for n in nodes):
            return nodes[0]  # `x if c else x`: a Phi would be trivial
        return self.emit("Phi", nodes, type=out)

    def expr_IfExp(self, node: ast.IfExp) -> Val:
        test = self.expr(node.test)
        if isinstance(test, Static) and (is_number(test.value) or test.value is None):
            return self.expr(node.body if test.value else node.orelse)
        line = self.scope.parsed.src.file_line(node)
        true, false = self.branch(self.truth(test, node.test))
        self.block = self.new_block(f"ifexp_then{line}", [true])
        a = self.expr(node.body)
        a_edge: Edge = (self.cur, f"the true side of the conditional expression at line {line}")
        self.block = self.new_block(f"ifexp_else{line}", [false])
        b = self.expr(node.orelse)
        b_edge: Edge = (self.cur, f"the false side of the conditional expression at line {line}")
        return self.join_values([(a_edge, a), (b_edge, b)], "the two sides of the conditional expression", node)


    def expr_Subscript(self, node: ast.Subscript) -> Val:
        return subscripts.load(self, node)  # type: ignore[arg-type]

    # --- control helpers used by expressions and statements ----------------------------------
    def branch(self, cond: Node) -> tuple[Node, Node]:
        """End the current block with a Cond; returns its (true, false) exits."""
        c = self.emit("Cond", [cond])
        false = self.emit("Proj", [c], {"num": 0})
        true = self.emit("Proj", [c], {"num": 1})
        self.block = None
        return true, false

    def new_block(self, name: str, preds: list[Node], sealed: bool = True,
                  desc: list[str] | None = None) -> Block:
        b = self.g.new_block(name, preds)
        if desc:
            for p, d in zip(preds, desc):
                self.ssa.edge_desc[p] = d
        if sealed:
            self.ssa.seal(b)
        return b

    def edge_ctrl(self, edge: Edge) -> Node:
        """The control value of an edge: a Jmp at the end of a falling-through block."""
        src, desc = edge
        if isinstance(src, Block):
            ctrl = self._thread(src) or self.g.add("Jmp", [], src, loc=self._loc)
        else:
            ctrl = src
        self.ssa.edge_desc[ctrl] = desc
        return ctrl

    def _thread(self, block: Block) -> Node | None:
        """An empty block with one predecessor that no variable was read or written in
        (``if c: break``, a loop exit with no ``else``) is dropped: its predecessor's exit
        goes straight to the target, saving a block per edge at run time."""
        if block.members or block.num_inputs != 1 or self.ssa.has_values(block) \
                or block is self.g.start_block or block in self.ssa.loop_keys:
            return None
        ctrl = block.input(0)
        block.remove_input(0)
        self.ssa.drop_block(block)
        self.g.erase(block)
        return ctrl

    def merge(self, edges: list[Edge], name: str) -> Block | None:
        """The block where ``edges`` meet (sealed); one falling-through block continues."""
        if not edges:
            return None
        if len(edges) == 1 and isinstance(edges[0][0], Block):
            return edges[0][0]
        ctrls = [self.edge_ctrl(e) for e in edges]
        b = self.g.new_block(f"{name}{self._line()}", ctrls)
        self.ssa.seal(b)
        return b

    def _line(self) -> int:
        return self._loc.line if self._loc is not None else 0

    def merge_error(self, e: MergeTypeError, node: ast.AST) -> ScriptError:
        var = e.var
        parts = "; ".join(f"{t} on {d}" for t, d in e.types)
        return self.error(node, f"variable `{var}` has different types on different paths: {parts}",
                          f"give `{var}` one type on every path (e.g. initialise it as 0.0 for a float, "
                          "or convert with float(...)/int(...))")


def _shapes_at_fault(op: str, inputs: list[Node], attrs: dict[str, Any] | None) -> bool:
    """Whether ``op``'s type rule accepts these operands once their shapes are forgotten
    (unknown rank): then the shapes, not the dtypes or attributes, are what it rejected."""
    opdef = get_op(op)
    if opdef.type_rule is None or not opdef.arity_ok(len(inputs)):
        return False
    types_ = [TensorType(t.dtype, None) if isinstance(t, TensorType) else t for t in (v.type for v in inputs)]
    if any(t is None for t in types_):
        return False
    try:
        opdef.type_rule(types_, opdef.complete_attrs(attrs or {}), [None] * len(inputs))  # type: ignore[arg-type]
    except Exception:  # noqa: BLE001  (rejected for another reason than the shapes)
        return False
    return True


def _operand_texts(node: ast.AST | None) -> tuple[str, str]:
    """The two operands of ``a @ b`` or ``f(a, b)`` as written, for hints."""
    if isinstance(node, ast.BinOp):
        return ast.unparse(node.left), ast.unparse(node.right)
    if isinstance(node, ast.Call) and len(node.args) >= 2:
        return ast.unparse(node.args[0]), ast.unparse(node.args[1])
    return "the left operand", "the right operand"


