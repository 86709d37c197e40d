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
from typing import Any, NoReturn

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
from nexus.frontend.script.ssa import LoopTypeRetry, MergeTypeError, ScriptSSA, covers, generalize, generalize_all
from nexus.frontend.script.values import (
    PathEnded,
    Scope,
    Static,
    TupleVal,
    Val,
    _describe,
)
from nexus.ir.analysis import may_fail
from nexus.ir.cons import PENDING
from nexus.ir.graph import Graph
from nexus.ir.node import Block, Node, SourceLoc
from nexus.ir.opdef import DATAFLOW_KINDS, OpTypeError, get_op
from nexus.ir.types import TensorType, Type, dtype_of, numpy_dtype

CalleeBuilder = Callable[[Any, Sequence[Type], ast.AST], Graph]

# The message prefix of the Assert that a read of a maybe-undefined variable makes: a
# script call raises UnboundLocalError for it (and returns None for its own NO_RETURN's).
UNBOUND = "UnboundLocalError: "
NO_RETURN = "NoReturn: "
NONE_USE = "TypeError: "  # the message prefix of the Assert where a variable holding None is used
NONE_HINT = "$none"  # hints[(NONE_HINT, var)]: var is assigned None somewhere; the type of its other values
UNDEF_HINT = "$undef"  # hints[(UNDEF_HINT, var)]: the type of a variable to flag


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
        self.list_sites: dict[Hashable, Any] = {}  # list site -> what this build knows of it (lists._Site)
        self.list_pending: list[tuple[Node, Hashable, str, TensorType]] = []  # see lists.check_loop
        self.inline_stack: list[types.CodeType] = []  # the helpers being inlined (no recursion)
        self.inline_count = 0
        self.script_builder = build_callee
        self._last_assert: dict[Block, Node] = {}  # see emit
        self.return_types: list[tuple[Type, ...]] = []
        self.reads: list[tuple[str, Node]] = []  # (variable, Phi) read, unflagged
        self.sources: dict[str, SourceText] = {scope.parsed.src.file: scope.parsed.src}
        self.stand_ins: dict[str, Node] = {}  # flagged variable -> its stand-in (made at entry)
        self.none_stand_ins: dict[str, Node] = {}  # variable that may hold None -> what stands for None
        # Tuple variables -> their nesting (build.assign_tuple); variables assigned values
        self.tuple_vars: dict[str, tuple[object, ...]] = {}
        self.value_vars: set[str] = set()
        self.plain_reads: set[str] = set()  # variables read as values (not tuples)
        self.tuple_assigned: set[str] = set()  # tuple variables assigned so far in this build
        self.raises: list[Block] = []  # blocks a raise ended: their Returns (of stand-ins) come last
        # Variables read where no path lowered so far had assigned them (the read raised)
        self.unbound: set[str] = set()

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
        where = block or self.cur
        try:
            out = self.g.add(op, inputs, where, attrs, type=type, name=name, loc=self._loc)
        except OpTypeError as e:
            raise self.op_error(op, inputs, attrs, e) from None
        # Checks run in program order, the first that fails being the error Python raises: a
        # block's Asserts are chained by ordering edges, and what may fail after one waits for it.
        last = self._last_assert.get(where)
        if last is not None and (op == "Assert" or may_fail(out)):
            out.add_dep(last)
        if op == "Assert":
            self._last_assert[where] = out
        return out

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

    def load(self, name: str, node: ast.AST, none_ok: bool = False) -> Val:
        """The value of the variable ``name`` read at ``node``: raises UnboundLocalError at
        run time where it is unassigned, and TypeError where it holds None (unless
        ``none_ok``: the reader asks :meth:`is_none` itself)."""
        scope = self.scope
        if name in scope.statics:
            return scope.statics[name]
        shape = self.tuple_vars.get(self.var(name))
        if shape is not None:  # a tuple variable: its items' hidden variables
            return TupleVal(tuple(self.load(f"{name}#{k}", node) for k in range(len(shape))))
        if name in scope.parsed.assigned or "#" in name:
            var = self.var(name)
            self.plain_reads.add(var)
            v = self.ssa.get_value(var, self.cur)
            if v is None or v in self.ssa.pending or v in self.ssa.placeholders or v.type == PENDING:
                # No path here has a value as the SSA sees it (one entering a loop that
                # assigns it later, say): flagged, if an assignment lowered so far gives a type.
                nesting = build.literal_tuple_nesting(scope.parsed.fdef, name)
                if nesting is not None and "$" not in var:  # assigned a tuple below: a tuple variable
                    raise LoopTypeRetry((build.TUPLE_HINT, var), build.tuple_type(nesting))
                t = _undef_type(self, var, [])
                if t is not None:
                    raise LoopTypeRetry((UNDEF_HINT, var), t)
                if not _eligible(self, var):
                    raise self.error(node, f"variable `{name}` is used before it is assigned on this path",
                                     f"assign `{name}` before this line on every path that reaches it")
                # No path lowered so far assigns it: the read raises, and the path ends.  An
                # assignment lowered later (further on in a loop whose back edge reaches here)
                # has it flagged instead (build_graph).
                self.unbound.add(var)
                self.raise_here(unbound_message(name, self.scope.parsed.src.file_line(node)))
            flag = self.ssa.defined_flag(var)
            if flag is not None:
                self.check_defined(name, flag, node)
            elif v.op.name == "Phi":
                self.reads.append((var, v))  # Python raises at a read whose value goes unused too
            if var in self.ssa.nones and not none_ok:
                self.check_not_none(name, node)
            return v
        if name in scope.closure:
            return self.outer_value(name, scope.closure[name], node)
        if name in scope.globals:
            return self.outer_value(name, scope.globals[name], node)
        if hasattr(builtins, name):
            return Static(getattr(builtins, name))
        raise self.error(node, f"name `{name}` is not defined", "define it at module level or pass it in")

    def bind(self, name: str, value: Node, is_none: bool = False) -> None:
        """Assign ``value`` to the variable ``name`` here (and mark it defined if it is
        flagged: maybe undefined where it is read; ``is_none``: the value stands for None)."""
        var = self.var(name)
        none_flag = self.ssa.nones.get(var)
        if none_flag is not None and not is_none:  # its values must have the type its stand-in has
            t = self.ssa.hints.get((NONE_HINT, var))
            if t is not None and t != value.type and not covers(t, value.type):
                raise LoopTypeRetry((NONE_HINT, var), generalize(t, value.type) or value.type)
        self.ssa.set_value(var, self.cur, value)
        flag = self.ssa.defined_flag(var)
        if flag is not None:
            self.ssa.set_value(flag, self.cur, self.const(True, "bool"))
        if none_flag is not None:
            self.ssa.set_value(none_flag, self.cur, self.const(is_none, "bool"))

    def bind_none(self, name: str, node: ast.AST) -> None:
        """``name = None``: the variable holds its stand-in and its "is None" flag is True
        (a first one builds again with the type of its other values)."""
        var = self.var(name)
        if "$" in var or var in self.tuple_vars:
            raise self.error(node, f"`{name}` cannot hold None here", "use another variable for None")
        t = self.ssa.hints.get((NONE_HINT, var))
        if t is None or var not in self.ssa.nones:
            known = generalize_all([v.type for v in self.ssa.bound_values(var) if v.type != PENDING] or [PENDING])
            guess = known if isinstance(known, TensorType) and known != PENDING else TensorType("i64", ())
            raise LoopTypeRetry((NONE_HINT, var), guess)
        self.value_vars.add(var)
        self.bind(name, self.none_stand_ins[var], is_none=True)

    def is_none(self, name: str, node: ast.AST) -> Node | None:
        """The run-time "holds None" bool of the variable ``name`` (after checking that it
        is assigned), or None where it never holds None."""
        var = self.var(name)
        flag = self.ssa.nones.get(var)
        if flag is None or name in self.scope.statics or var in self.tuple_vars:
            return None
        self.load(name, node, none_ok=True)
        f = self.ssa.get_value(flag, self.cur)
        assert f is not None
        return f

    def check_not_none(self, name: str, node: ast.AST) -> None:
        """A read of a variable that may hold None, as a value: Python's TypeError where it does."""
        f = self.ssa.get_value(self.ssa.nones[self.var(name)], self.cur)
        assert f is not None
        if f is self.const(False, "bool"):
            return
        line = self.scope.parsed.src.file_line(node)
        self.emit("Assert", [self.emit("Not", [f])],
                  {"message": f"{NONE_USE}'{name}' is None here (line {line}), where a script needs a value"})

    def check_defined(self, name: str, flag: str, node: ast.AST) -> None:
        """A read of a flagged variable: raises UnboundLocalError at run time where its
        flag is False (nothing when the flag is True on every path reaching here; the
        path ends when it is False on every one)."""
        f = self.ssa.get_value(flag, self.cur)
        assert f is not None
        if f is self.const(True, "bool"):
            return
        message = unbound_message(name, self.scope.parsed.src.file_line(node))
        if f is self.const(False, "bool"):
            self.raise_here(message)
        self.emit("Assert", [f], {"message": message})

    def raise_here(self, message: str) -> NoReturn:
        """Python raises here on every path that reaches this point: an Assert that always
        fails, with ``message`` (see :func:`nexus.frontend.script.control.raised_error`
        for how a script call turns it into Python's exception).  The path ends there (the
        block's Return, of stand-ins, comes once the function's return types are known:
        :func:`settle_raises`), and :class:`PathEnded` unwinds the lowering of the
        statement, whose code after this point is dead."""
        self.emit("Assert", [self.const(False, "bool")], {"message": message})
        self.raises.append(self.cur)
        self.block = None
        raise PathEnded

    def outer_value(self, name: str, value: Any, node: ast.AST) -> Val:
        """A global or closure variable: numbers and arrays become constants."""
        if is_number(value) or isinstance(value, (str, np.dtype)) or value is None:
            return Static(value)
        if isinstance(value, (np.ndarray, np.generic)):
            try:
                dtype_of(np.asarray(value).dtype)
            except ValueError:
                raise self.error(node, f"global `{name}` has dtype {np.asarray(value).dtype}, which Nexus "
                                       "does not have", "convert it to float32/float64/int64") from None
            return Static(value)
        if isinstance(value, tuple):  # a constant tuple (of numbers, arrays, tuples) reads like a literal
            return TupleVal(tuple(self.outer_value(name, v, node) for v in value))
        if isinstance(value, (types.ModuleType, types.FunctionType, types.BuiltinFunctionType, type, State)) \
                or callable(value):
            return Static(value)
        raise self.error(node, f"global `{name}` is a {type(value).__name__}; scripts can use numbers, arrays, "
                               "modules and functions from outside",
                         f"pass `{name}` as an argument or make it a NumPy array")

    def unbind_locals(self, prefix: str) -> None:
        """An inlined helper's call starts here: its flagged locals (names under ``prefix``)
        are unassigned again, whatever an earlier call (an earlier loop iteration) left."""
        for var, flag in self.ssa.flags.items():
            if var.startswith(prefix):
                self.ssa.set_value(var, self.cur, self.stand_ins[var])
                self.ssa.set_value(flag, self.cur, self.const(False, "bool"))
        for var, flag in self.ssa.nones.items():
            if var.startswith(prefix):
                self.ssa.set_value(flag, self.cur, self.const(False, "bool"))

    def none_return_message(self, node: ast.AST) -> str:
        """The message of the Assert where the function being lowered returns None at ``node``."""
        return none_message(self.scope.parsed, node)

    def settle_none_returns(self, scope: Scope, returns: list[tuple[Type, ...]]) -> None:
        """See :func:`settle_none_returns` (for the inliner, which this module imports)."""
        settle_none_returns(self, scope, returns)

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
            except PathEnded:  # it raises on every path: the code after it is dead
                assert self.block is None
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
    variable's type must be generalised (the caller builds again with the hint).

    Python's run-time semantics for what a script cannot know when it is built (issue 30):
    a variable read where some path has not assigned it is *flagged* (a retry with the
    hint ``(UNDEF_HINT, var)``: see :mod:`nexus.frontend.script.ssa`), and its reads raise
    UnboundLocalError at run time on those paths only; a read where no path lowered so
    far assigns it raises there, ending the path (:meth:`Lowering.raise_here`, as a
    ``raise`` statement does), unless an assignment lowered later reaches it after all
    (through a loop's back edge: it is flagged then); the end of a function whose other
    paths return values raises there (Python returns None)."""
    fdef = parsed.fdef
    params = [a.arg for a in fdef.args.args]
    g = Graph(name or fdef.name, list(arg_types), params)
    ssa = ScriptSSA(g, hints)
    scope = Scope(parsed, fn_globals, closure)
    low = Lowering(g, ssa, scope, build_callee)
    ssa.current_loc = lambda: low._loc
    for p, arg in zip(params, g.args):
        ssa.set_value(p, g.start_block, arg)
    low.value_vars.update(params)
    for key, t in hints.items():
        if isinstance(key, tuple) and len(key) == 2 and key[0] == build.TUPLE_HINT:
            build.register_tuple(low, key[1], build.tuple_nesting(t))
    for key, t in hints.items():
        if isinstance(key, tuple) and len(key) == 2 and key[0] == UNDEF_HINT:
            flag_variable(low, key[1], t)
        if isinstance(key, tuple) and len(key) == 2 and key[0] == NONE_HINT:
            none_variable(low, key[1], t)
    low.body(fdef.body)
    if low.block is not None:
        scope.none_returns.append((low.block, fdef.body[-1]))
    settle_none_returns(low, scope, low.return_types)
    settle_raises(low, scope, low.return_types)
    # Every variable to flag that this build found: one build again for all of them.
    flag: dict[str, Type] = {}
    for var in low.unbound:  # a read raised, yet an assignment was lowered after it (a loop's)
        types = [v.type for v in ssa.bound_values(var) if v.type != PENDING]
        if types:
            general = generalize_all(types)
            if general is None or stand_in(low, general) is None:
                kinds = ", ".join(sorted({str(t) for t in types}))
                raise low.error(fdef, f"variable `{_source_name(var)}` is read where it may be unassigned, and "
                                      f"its values ({kinds}) have no value to stand in for it there",
                                f"assign `{_source_name(var)}` before the loop or branch")
            flag[var] = general
    for var, read in low.reads:  # a read maybe undefined whose value is dead still raises in Python
        read = ssa.resolve(read)
        if var not in flag and _reaches_placeholder(ssa, read, var):
            found = _undef_type(low, var, [read])
            if found is not None:
                flag[var] = found
    problems = ssa.finish()
    for problem in problems:
        var = str(problem.var)
        if var in flag:
            continue
        found = _undef_type(low, var, [p.user for p in problems if p.var == problem.var])
        if found is None:
            raise _undef_error(low, var, problem.user, ssa.edge_desc.get(problem.edge, "some path"))
        flag[var] = found
    if flag:  # build again with these flagged
        pairs = [((UNDEF_HINT, var), t) for var, t in flag.items()]
        raise LoopTypeRetry(pairs[0][0], pairs[0][1], tuple(pairs[1:]))
    return g


def none_variable(low: Lowering, var: str, t: Type) -> None:
    """``var`` is assigned None somewhere (its other values have type ``t``): it gets a
    hidden "is None" flag, False at entry, True where None is assigned; its stand-in
    stands for None."""
    stand = stand_in(low, t)
    assert stand is not None
    low.none_stand_ins[var] = stand
    low.ssa.nones[var] = f"$none.{var}"
    low.ssa.set_value(low.ssa.nones[var], low.g.start_block, low.const(False, "bool"))


def flag_variable(low: Lowering, var: str, t: Type) -> None:
    """``var`` may be read where it is undefined: bind it at entry to a stand-in of its
    type and its hidden "defined" flag to False (assignments set the flag, reads check it)."""
    stand = stand_in(low, t)
    assert stand is not None
    flag = f"$defined.{var}"
    low.ssa.flags[var] = flag
    low.stand_ins[var] = stand
    low.ssa.set_value(var, low.g.start_block, stand)
    low.ssa.set_value(flag, low.g.start_block, low.const(False, "bool"))


def stand_in(low: Lowering, t: Type) -> Node | None:
    """A value of type ``t`` made at entry, for a path where the variable has none (its
    reads there raise first, so any value of the type will do): an argument of that type,
    else zeros (cast from an argument of that shape), else None (not a tensor).

    A dim that is a symbol no argument has (a size computed on the assigning path) has no
    value at entry: the zeros have size 1 there and keep the symbol in their type, which
    only the paths that assigned the variable ever read (size 1 broadcasts, so an op that a
    pass moves above the read's check cannot fail on it either)."""
    if not isinstance(t, TensorType):
        return None
    for arg in low.g.args:
        at = arg.type
        if isinstance(at, TensorType) and at.shape == t.shape and t.shape is not None \
                and not all(isinstance(d, int) for d in t.shape):
            if at.dtype == t.dtype:
                return arg
            return low.emit("Cast", [arg], {"to": t.dtype}, block=low.g.start_block)
    if t.shape is None:
        return low.g.add("Constant", [], low.g.start_block, {"value": np.zeros((), numpy_dtype(t.dtype))},
                         type=t, loc=low._loc)
    zeros = np.zeros(tuple(d if isinstance(d, int) else 1 for d in t.shape), numpy_dtype(t.dtype))
    if all(isinstance(d, int) for d in t.shape):
        return low.const(zeros, t.dtype)
    return low.g.add("Constant", [], low.g.start_block, {"value": zeros}, type=t, loc=low._loc)


def _reaches_placeholder(ssa: ScriptSSA, node: Node, var: str) -> bool:
    """Whether ``node`` is, or is a Phi selecting (through Phis), an undefined operand of
    ``var`` (another variable's, reached through `var = other`, is that read's to raise)."""
    seen: set[Node] = set()
    work = [node]
    while work:
        n = work.pop()
        if n in ssa.placeholders:
            if ssa.placeholders[n][0] == var:
                return True
            continue
        if n in seen or n.op.name != "Phi":
            continue
        seen.add(n)
        work.extend(n.inputs)
    return False


def _eligible(low: Lowering, var: str) -> bool:
    """Whether ``var`` may be flagged: a variable of the source (the script's or an inlined
    helper's, not the frontend's own ``$`` ones), not flagged yet."""
    return not ("$" in var or var in low.ssa.flags)


def _undef_type(low: Lowering, var: str, users: list[Node]) -> Type | None:
    """The type to flag ``var`` with, from ``users`` (the Phis that meet it undefined)
    and its values bound so far: None where it cannot be (a frontend variable, no value to
    stand in for that type, a variable flagged already, one that no lowered path assigns:
    its reads raise, :meth:`Lowering.raise_here`)."""
    if not _eligible(low, var):
        return None
    phis = [u for u in users if u.op.name == "Phi"]  # a removed trivial Phi leaves other users
    types = [u.type for u in [*phis, *low.ssa.bound_values(var)] if u.type != PENDING]
    if not types:  # no assignment of it is lowered (they are under conditions known to be false)
        return None
    t = generalize_all(types)
    return t if t is not None and stand_in(low, t) is not None else None


def settle_none_returns(low: Lowering, scope: Scope, returns: list[tuple[Type, ...]]) -> None:
    """The paths of ``scope``'s function that return None (``return``, ``return None``,
    its end): plain returns of nothing where no path returns values; else (the other
    returns give values of ``returns``' types) Python's None, which the script's call
    returns (a helper's caller fails: it needs a value).  Their Return gives stand-ins of
    the other returns' types (which never reach the caller)."""
    for block, node in scope.none_returns:
        prev = low.at(node)
        low.block = block
        values = _stand_ins(low, scope, returns, node, "returns None")
        if scope.ret_arity:
            low.emit("Assert", [low.const(False, "bool")], {"message": none_message(scope.parsed, node)})
        control.add_return(low, node, values)
        low.restore(prev)
    scope.none_returns.clear()


def settle_raises(low: Lowering, scope: Scope, returns: list[tuple[Type, ...]]) -> None:
    """The blocks that end with a raise (:meth:`Lowering.raise_here`; an inlined helper's
    too) end with a Return of stand-ins for the script's ``returns``, which no caller sees."""
    for block in low.raises:
        low.block = block
        nodes = [low.as_node(v) for v in _stand_ins(low, scope, returns, scope.parsed.fdef, "raises")]
        low.g.end_block.append_input(low.emit("Return", nodes))
    low.raises.clear()
    low.block = None


def _stand_ins(low: Lowering, scope: Scope, returns: list[tuple[Type, ...]], node: ast.AST,
               what: str) -> list[Val]:
    """Stand-ins for the values of ``returns`` (types of the other returns), where the
    function returns None or raises."""
    first = returns[0] if returns else ()
    values: list[Val] = []
    for t in (generalize_all([r[i] for r in returns]) for i in range(len(first))):
        stand = stand_in(low, t) if t is not None else None
        if stand is None:
            raise low.error(node, f"`{scope.parsed.fdef.name}` {what} here, and its other returns give {t}, "
                                  "which has no value to stand in for it", "return a value on every path")
        values.append(stand)
    return values


def unbound_message(name: str, line: int) -> str:
    """The message of the Assert where a read of ``name`` at ``line`` raises
    UnboundLocalError (Python's message, and the line)."""
    name = name.split("#")[0]  # an item of a tuple variable: the variable
    return f"{UNBOUND}cannot access local variable '{name}' where it is not associated with a value (line {line})"


def none_message(parsed: ParsedFunction, node: ast.AST) -> str:
    """The message of the Assert where ``parsed`` returns None at ``node`` (whose other
    paths return values): its call returns None there (see :func:`returns_none`)."""
    line = parsed.src.file_line(node)
    what = "reached its end without a return" if node is parsed.fdef.body[-1] and not isinstance(
        node, ast.Return) else "returns None"
    return f"{_none_prefix(parsed)}{what} at line {line}, where Python returns None"


def returns_none(message: str, parsed: ParsedFunction) -> bool:
    """Whether an Assert's ``message`` is one of ``parsed``'s own None returns."""
    return message.startswith(_none_prefix(parsed))


def _none_prefix(parsed: ParsedFunction) -> str:
    return f"{NO_RETURN}{parsed.fdef.name} (line {parsed.src.file_line(parsed.fdef)}) "


def _undef_error(low: Lowering, var: str, user: Node, desc: str) -> ScriptError:
    use = _first_real_use(user)
    name = _source_name(var)
    loc = use.loc if use is not None else None
    src = low.sources.get(loc.file) if loc is not None else None
    msg = f"variable `{name}` may be undefined here: it is not assigned on the path {desc}"
    hint = f"assign `{name}` before the branch or loop, or on every path that reaches this use"
    if loc is None or src is None:
        return ScriptError(msg, low.scope.parsed.src.file, 0, 0, "", hint, low.scope.parsed.src.func_name)
    rel = loc.line - src.line_offset
    text = " " * src.col_offset + src.lines[rel - 1] if 0 < rel <= len(src.lines) else ""
    return ScriptError(msg, loc.file, loc.line, loc.col, text, hint, src.func_name)


def _source_name(var: str) -> str:
    """The name ``var`` has in the source (an inlined helper's local, a tuple's item)."""
    name = var.rsplit(".", 1)[-1] if "." in var and not var.startswith("$") else var
    return name.split("#")[0]


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
