"""The one visitor of ``@nx.script``: :class:`Lowering` holds the state of lowering one
function (the graph, the SSA builder, the scope, the current block and source position)
and the dispatch from AST nodes to the plain functions that lower them, in
:mod:`~nexus.frontend.script.expr` (expressions), :mod:`~nexus.frontend.script.calls`
(calls), :mod:`~nexus.frontend.script.control` (blocks, branches, loops, return),
:mod:`~nexus.frontend.script.build` (the other statements), ``subscripts`` and the
NumPy surface; each takes the lowering first.  :func:`build_graph` lowers one parsed
function for one signature of argument types."""

from __future__ import annotations

import ast
import builtins
import types
from collections.abc import Callable, Hashable, Sequence
from typing import Any

import numpy as np

from nexus.frontend.dsl.state import State
from nexus.frontend.script import build, calls, control, expr
from nexus.frontend.script.annotations import (
    I64_MAX,
    I64_MIN,
    is_number,
    py_dtype,
)
from nexus.frontend.script.errors import ScriptError, SourceText, _construct_name, _hint_for, error_at, matmul_mismatch
from nexus.frontend.script.source import ParsedFunction
from nexus.frontend.script.ssa import MergeTypeError, ScriptSSA
from nexus.frontend.script.values import (
    Scope,
    Static,
    TupleVal,
    Val,
    _describe,
)
from nexus.ir.graph import Graph
from nexus.ir.node import Block, Node, SourceLoc
from nexus.ir.opdef import DATAFLOW_KINDS, OpTypeError, get_op
from nexus.ir.types import TensorType, Type, dtype_of, numpy_dtype

CalleeBuilder = Callable[[Any, Sequence[Type], ast.AST], Graph]


class Lowering:
    """Lowers one function (the script or an inlined helper) into nodes of ``g``."""

    def __init__(self, g: Graph, ssa: ScriptSSA, scope: Scope, build_callee: CalleeBuilder):
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
        self.lists: dict[str, Hashable] = {}  # list variables -> where they were made (retry key)
        self.inline_stack: list[types.CodeType] = []  # the helpers being inlined (no recursion)
        self.inline_count = 0
        self.script_builder = build_callee
        self.return_types: list[tuple[Type, ...]] = []
        self.sources: dict[str, SourceText] = {scope.parsed.src.file: scope.parsed.src}

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
            method = EXPRESSIONS.get(type(node).__name__)
            if method is None:
                raise self.error(node, f"{_construct_name(node)} is not supported in a script",
                                 _hint_for(node))
            return method(self, node)
        finally:
            self.restore(prev)

    def value(self, node: ast.expr) -> Node:
        return self.as_node(self.expr(node))

    # --- statements -----------------------------------------------------------------------
    def body(self, stmts: list[ast.stmt]) -> None:
        for s in stmts:
            if self.block is None:
                return  # after return/break/continue: never runs
            self.stmt(s)

    def stmt(self, node: ast.stmt) -> None:
        prev = self.at(node)
        self.sources.setdefault(self.scope.parsed.src.file, self.scope.parsed.src)
        try:
            method = STATEMENTS.get(type(node).__name__)
            if method is None:
                raise self.error(node, f"the `{type(node).__name__}` statement is not supported in a script",
                                 "use assignments, if/while/for, break/continue, return and assert")
            try:
                method(self, node)
            except MergeTypeError as e:
                raise control.merge_error_at(self, e, node) from None
        finally:
            self.restore(prev)


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


def build_graph(parsed: ParsedFunction, fn_globals: dict[str, Any], closure: dict[str, Any],
                arg_types: Sequence[Type], hints: dict[Hashable, Type], build_callee: CalleeBuilder,
                name: str | None = None) -> Graph:
    """Lower ``parsed`` for ``arg_types``.  Raises ScriptError, or LoopTypeRetry when a loop
    variable's type must be generalised (the caller builds again with the hint)."""
    fdef = parsed.fdef
    params = [a.arg for a in fdef.args.args]
    g = Graph(name or fdef.name, list(arg_types), params)
    ssa = ScriptSSA(g, hints)
    scope = Scope(parsed, fn_globals, closure)
    low = Lowering(g, ssa, scope, build_callee)
    ssa.current_loc = lambda: low._loc
    for p, arg in zip(params, g.args):
        ssa.set_value(p, g.start_block, arg)
    low.body(fdef.body)
    if low.block is not None:
        if scope.ret_arity:
            last = fdef.body[-1]
            raise low.error(last, f"`{fdef.name}` can reach its end without a return (Python would return None)",
                            "add a return at the end, or make every path return")
        prev = low.at(fdef.body[-1])
        control.add_return(low, fdef, [])
        low.restore(prev)
    for problem in ssa.finish():
        raise _undef_error(low, str(problem.var), problem.user, ssa.edge_desc.get(problem.edge, "some path"))
    return g


def _undef_error(low: Lowering, var: str, user: Node, desc: str) -> ScriptError:
    use = _first_real_use(user)
    name = var.rsplit(".", 1)[-1] if "." in var and not var.startswith("$") else var
    loc = use.loc if use is not None else None
    src = low.sources.get(loc.file) if loc is not None else None
    msg = f"variable `{name}` may be undefined here: it is not assigned on the path {desc}"
    hint = f"assign `{name}` before the branch or loop, or on every path that reaches this use"
    if loc is None or src is None:
        return ScriptError(msg, low.scope.parsed.src.file, 0, 0, "", hint, low.scope.parsed.src.func_name)
    rel = loc.line - src.line_offset
    text = " " * src.col_offset + src.lines[rel - 1] if 0 < rel <= len(src.lines) else ""
    return ScriptError(msg, loc.file, loc.line, loc.col, text, hint, src.func_name)


def _first_real_use(node: Node) -> Node | None:
    seen: set[Node] = set()
    work = [node]
    while work:
        n = work.pop(0)
        if n in seen:
            continue
        seen.add(n)
        if n.op.name != "Phi" and n.loc is not None:
            return n
        work.extend(n.users)
    return None


def _table(prefix: str) -> dict[str, Callable[..., Any]]:
    """AST node class name -> the function that lowers it (``expr_BinOp``, ``stmt_If``)."""
    return {k[len(prefix):]: v for mod in (expr, calls, control, build) for k, v in vars(mod).items()
            if k.startswith(prefix) and callable(v)}


EXPRESSIONS = _table("expr_")
STATEMENTS = _table("stmt_")
