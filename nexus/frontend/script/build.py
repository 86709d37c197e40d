"""Statements and control flow of ``@nx.script``, and :func:`build_graph`, which lowers one
parsed function for one signature of argument types.

Control flow is built as blocks while walking the AST: ``if`` ends the block with a Cond
whose exits start the branches; loops get a header block that stays *unsealed* (in the
sense of Braun et al.) until its back edges (the body's end and every ``continue``) are
known; ``break`` edges and the loop's exit meet after it.  Code after ``return``,
``break`` or ``continue`` is unreachable and not lowered, so a variable only has to be
defined on the paths that can reach its use.
"""

from __future__ import annotations

import ast
import builtins
from collections.abc import Callable, Hashable, Sequence
from typing import Any

import numpy as np

from nexus.frontend.script import subscripts
from nexus.frontend.script.annotations import is_int, is_number
from nexus.frontend.script.calls import CallLowering
from nexus.frontend.script.errors import ScriptError, SourceText
from nexus.frontend.script.source import ParsedFunction
from nexus.frontend.script.ssa import LoopTypeRetry, MergeTypeError, ScriptSSA
from nexus.frontend.script.values import Edge, Loop, Scope, Static, TupleVal, Val, _dtype
from nexus.ir.graph import Graph
from nexus.ir.node import Node
from nexus.ir.types import TensorType, Type, numpy_dtype

CalleeBuilder = Callable[[Any, Sequence[Type], ast.AST], Graph]


class Lowering(CallLowering):
    """Lowers the statements of a function (and of inlined helpers) into ``g``."""

    def __init__(self, g: Graph, ssa: ScriptSSA, scope: Scope, build_callee: CalleeBuilder):
        self.lists: dict[str, Hashable] = {}  # list variables -> where they were made (retry key)
        super().__init__(g, ssa, scope)
        self.inline_stack = []
        self.inline_count = 0
        self.script_builder = build_callee
        self.return_types: list[tuple[Type, ...]] = []
        self.sources: dict[str, SourceText] = {scope.parsed.src.file: scope.parsed.src}

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
            method = getattr(self, "stmt_" + type(node).__name__, None)
            if method is None:
                raise self.error(node, f"the `{type(node).__name__}` statement is not supported in a script",
                                 "use assignments, if/while/for, break/continue, return and assert")
            try:
                method(node)
            except MergeTypeError as e:
                raise self.merge_error_at(e, node) from None
        finally:
            self.restore(prev)

    def stmt_Pass(self, node: ast.Pass) -> None:
        pass

    def stmt_With(self, node: ast.With) -> None:
        """``with nx.device("/GPU:0"):`` / ``with nx.machine("host1"):`` place the ops of
        the body (seed 001, section 4.2), nesting like the DSL's; no other context manager."""
        saved = self.placement
        placement = dict(saved)
        for item in node.items:
            placement.update(self.placement_of(item))
        self.placement = placement
        try:
            self.body(node.body)
        finally:
            self.placement = saved

    def placement_of(self, item: ast.withitem) -> dict[str, str]:
        hint = "only `with nx.device(\"/CPU:0\")` and `with nx.machine(\"host1\")` are supported in a script"
        call = item.context_expr
        if item.optional_vars is not None or not isinstance(call, ast.Call) or call.keywords and any(
                k.arg != "machine" for k in call.keywords):
            raise self.error(item.context_expr, "this `with` statement is not supported", hint)
        fn = self.expr(call.func)
        kind = getattr(getattr(fn, "value", None), "name", None) if isinstance(fn, Static) else None
        if kind is None and isinstance(fn, Static):
            kind = {"device": "device", "machine": "machine"}.get(getattr(fn.value, "__name__", ""))
        if kind not in ("device", "machine") or len(call.args) != 1:
            raise self.error(item.context_expr, "this `with` statement is not supported", hint)
        values = [self.expr(call.args[0]), *(self.expr(k.value) for k in call.keywords)]
        if not all(isinstance(v, Static) and isinstance(v.value, str) for v in values):
            raise self.error(item.context_expr, f"nx.{kind}(...) takes a string known when the script is built", hint)
        out = {kind: values[0].value}  # type: ignore[union-attr]
        if len(values) > 1:
            out["machine"] = values[1].value  # type: ignore[union-attr]
        return out

    def stmt_Expr(self, node: ast.Expr) -> None:
        if isinstance(node.value, ast.Constant):
            return  # a docstring or a bare constant does nothing
        call = node.value
        if isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr == "append" \
                and isinstance(call.func.value, ast.Name) and call.func.value.id in self.lists:
            if len(call.args) != 1 or call.keywords:
                raise self.error(call, "`list.append` takes one value")
            self.list_append(call.func.value, self.expr(call.args[0]), call)
            return
        self.expr(node.value)

    # --- lists: a list variable holds its stacked tensor [n, *shape] ---------------------------
    def list_new(self, target: ast.Name, literal: ast.List) -> None:
        """``name = [a, b, ...]``: an empty list, then one Append per item.  The element type
        comes from the first append; until a build has seen it (a retry, as for loop
        variables whose type changes) the empty list is a placeholder."""
        site = ("list", self.loop_key(literal))
        self.lists[target.id] = site
        hint = self.ssa.hints.get(site)
        if isinstance(hint, TensorType) and hint.shape is not None:
            empty = np.zeros((0, *(d if isinstance(d, int) else 0 for d in hint.shape)), numpy_dtype(hint.dtype))
        else:
            empty = np.zeros((0,), np.float64)
        node = self.g.add("Constant", [], self.cur, {"value": empty}, loc=self._loc)
        self.ssa.set_value(self.var(target.id), self.cur, node)
        for item in literal.elts:
            self.list_append(target, self.expr(item), item)

    def list_append(self, target: ast.Name, value: Val, node: ast.AST) -> None:
        lst = self.as_node(self.load(target.id, target))
        x = self.as_node(value)
        lt, xt = lst.type, x.type
        assert isinstance(lt, TensorType) and isinstance(xt, TensorType)
        if lt.dtype != xt.dtype or lt.shape is None or xt.shape is None or len(lt.shape) != len(xt.shape) + 1:
            site = self.lists[target.id]
            if site not in self.ssa.hints:
                raise LoopTypeRetry(site, xt)  # build again with the element type known
            raise self.error(node, f"`{target.id}` holds values of type {self.ssa.hints[site]}; this one is {xt}",
                             "a list in a script holds values of one dtype and rank (it is their stacked tensor)")
        new = self.emit("Append", [lst, x])
        new.name = target.id
        self.ssa.set_value(self.var(target.id), self.cur, new)

    def stmt_Assign(self, node: ast.Assign) -> None:
        if isinstance(node.value, ast.List) and any(isinstance(t, ast.Name) for t in node.targets):
            if len(node.targets) != 1 or not isinstance(node.targets[0], ast.Name):
                raise self.error(node.value, "a list can be stored in one variable (`xs = []`), not several",
                                 "assign it to one name")
            self.list_new(node.targets[0], node.value)
            return
        self.refuse_list_alias(node)
        value = self.expr(node.value)
        for target in node.targets:
            self.assign(target, value)

    def refuse_list_alias(self, node: ast.Assign) -> None:
        """``zs = ys`` for a list ``ys``: in Python both names are one list and see each
        other's appends; a script's list is a value (its stacked tensor), so they would
        not.  Refused rather than run differently."""
        sources = node.value.elts if isinstance(node.value, ast.Tuple) else [node.value]
        for src in sources:
            if not (isinstance(src, ast.Name) and src.id in self.lists):
                continue
            if all(isinstance(t, ast.Name) and t.id == src.id for t in node.targets):
                continue  # `ys = ys`
            raise self.error(src, f"`{src.id}` is a list: another name for it would share it in Python but "
                                  "hold a copy in a script (a list is its stacked tensor here)",
                             f"keep one name for the list; `{src.id}[:]` copies its items so far (an array "
                             "in a script)")

    def stmt_AnnAssign(self, node: ast.AnnAssign) -> None:
        if node.value is not None:
            self.assign(node.target, self.expr(node.value))

    def stmt_AugAssign(self, node: ast.AugAssign) -> None:
        if isinstance(node.target, ast.Subscript):
            # `x[i] += v` is `x[i] = x[i] + v` (NumPy's buffered semantics: a repeated index
            # adds once, as np.add.at would not).
            current = self.expr_Subscript(node.target)
            self.assign(node.target, self.binop(node.op, current, self.expr(node.value), node))
            return
        if not isinstance(node.target, ast.Name):
            raise self.error(node.target, "augmented assignment only to plain variables is supported",
                             "write `x = x + ...` on a variable")
        current = self.load(node.target.id, node.target)
        # Tensors are values in a script: `x += 1` rebinds x (it never mutates an array).
        self.assign(node.target, self.binop(node.op, current, self.expr(node.value), node))

    def assign(self, target: ast.expr, value: Val) -> None:
        if isinstance(target, ast.Name):
            if isinstance(value, TupleVal):
                raise self.error(target, "a tuple cannot be stored in a variable",
                                 f"unpack it: `{target.id}_a, {target.id}_b = ...`")
            if isinstance(value, Static) and not is_number(value.value) \
                    and not isinstance(value.value, (np.ndarray, np.generic)):
                raise self.error(target, f"cannot store {type(value.value).__name__} `{target.id}` in a variable",
                                 "use the function or module directly where it is called")
            node = self.as_node(value)
            if node.name is None and node.op.name != "Constant":
                node.name = target.id
            self.ssa.set_value(self.var(target.id), self.cur, node)
            self.lists.pop(target.id, None)  # the name holds an array now, not a list
            return
        if isinstance(target, (ast.Tuple, ast.List)):
            items = self.unpack(value, len(target.elts), target)
            for t, v in zip(target.elts, items):
                self.assign(t, v)
            return
        if isinstance(target, ast.Subscript):
            self.assign_item(target, value)
            return
        raise self.error(target, "only variables and tuples of variables can be assigned",
                         "build a new tensor instead of assigning into one")

    def assign_item(self, target: ast.Subscript, value: Val) -> None:
        """``x[index] = v``: x is rebound to a SetItem of its old value (as JAX's
        ``x.at[index].set(v)``); the caller's arrays and other names never change."""
        if not isinstance(target.value, ast.Name):
            raise self.error(target, "only a variable's elements can be assigned",
                             "write `x[i, j] = v` instead of `x[i][j] = v`, on a variable `x`")
        name = target.value.id
        base = self.load(name, target.value)
        if isinstance(base, TupleVal) or isinstance(base, Static) and not isinstance(base.value, np.ndarray):
            raise self.error(target, f"`{name}` is not a tensor: only tensors' elements can be assigned",
                             "build a tensor, e.g. with np.zeros(n), and assign into it")
        x = self.as_node(base)
        kinds, idx = subscripts.store_index(self, x, target)
        if isinstance(value, TupleVal):
            raise self.error(target, "a tuple cannot be stored into a tensor", "stack it first")
        t = x.type
        assert isinstance(t, TensorType)
        v = self.as_node(value, t.dtype)
        if isinstance(v.type, TensorType) and v.type.dtype != t.dtype:
            v = self.cast(v, t.dtype)  # NumPy casts the value to the array's dtype
        new = self.emit("SetItem", [x, v, *idx], {"kinds": kinds})
        new.name = name
        self.ssa.set_value(self.var(name), self.cur, new)

    def unpack(self, value: Val, n: int, target: ast.AST) -> list[Val]:
        if isinstance(value, TupleVal):
            if len(value.items) != n:
                raise self.error(target, f"cannot unpack {len(value.items)} values into {n} names",
                                 "give as many names as there are values")
            return list(value.items)
        x = self.as_node(value)
        t = x.type
        if isinstance(t, TensorType) and t.shape and t.shape[0] == n:
            return [self.emit("Gather", [x, self.const(i, "i64")], {"axis": 0}) for i in range(n)]
        raise self.error(target, f"cannot unpack a value of type {t} into {n} names",
                         "unpack tuples, or tensors whose first dim is a known constant")

    def merge_error_at(self, e: MergeTypeError, node: ast.stmt) -> ScriptError:
        # A loop variable retyped inside the loop: point at the assignment that retypes it.
        err = self.merge_error(e, node)
        loc = e.where.loc if e.where is not None else None
        src = self.sources.get(loc.file) if loc is not None else None
        if loc is None or src is None:
            return err
        rel = loc.line - src.line_offset
        text = " " * src.col_offset + src.lines[rel - 1] if 0 < rel <= len(src.lines) else ""
        return ScriptError(err.reason, loc.file, loc.line, loc.col, text, err.hint, src.func_name)

    # --- if ------------------------------------------------------------------------------
    def stmt_If(self, node: ast.If) -> None:
        test = self.expr(node.test)
        if isinstance(test, Static) and (is_number(test.value) or test.value is None):
            self.body(node.body if test.value else node.orelse)  # decided now: one side only
            return
        line = self.scope.parsed.src.file_line(node)
        true, false = self.branch(self.truth(test, node.test))
        self.block = self.new_block(f"then{line}", [true])
        self.body(node.body)
        edges: list[Edge] = []
        if self.block is not None:
            edges.append((self.block, f"through the `if` branch at line {line}"))
        if node.orelse:
            self.block = self.new_block(f"else{line}", [false])
            self.body(node.orelse)
            if self.block is not None:
                edges.append((self.block, f"through the `else` branch of the `if` at line {line}"))
        else:
            edges.append((false, f"where the `if` condition at line {line} is false"))
        self.block = self.merge(edges, "endif")

    # --- loops -----------------------------------------------------------------------------
    def loop_key(self, node: ast.AST) -> Hashable:
        return (self.scope.prefix, id(node))

    def open_loop(self, node: ast.stmt, kind: str, counter: str | None = None) -> tuple[Any, int]:
        line = self.scope.parsed.src.file_line(node)
        header = self.g.new_block(f"{kind}{line}")
        assigned = [self.var(n) for n in self.scope.parsed.names_bound_in(node)]
        self.ssa.loop_header(header, self.loop_key(node), assigned if counter is None else [*assigned, counter])
        header.append_input(self.edge_ctrl((self.cur, f"entering the loop at line {line} (when it runs zero "
                                                      "times)")))
        self.block = header
        return header, line

    def close_loop(self, node: ast.While | ast.For, header: Any, line: int, back: list[Edge],
                   exits: list[Edge], loop: Loop) -> None:
        for e in back:
            header.append_input(self.edge_ctrl(e))
        self.ssa.seal(header)
        self.block = self.merge(exits, "loopexit")
        if node.orelse and self.block is not None:
            self.body(node.orelse)
        after: list[Edge] = []
        if self.block is not None:
            after.append((self.block, f"where the loop at line {line} ends normally"))
        after.extend(loop.breaks)
        self.block = self.merge(after, "endloop")

    def stmt_While(self, node: ast.While) -> None:
        header, line = self.open_loop(node, "while")
        test = self.expr(node.test)
        exits: list[Edge] = []
        if isinstance(test, Static) and (is_number(test.value) or test.value is None):
            if not test.value:
                self.ssa.seal(header)
                self.body(node.orelse)
                return
        else:
            true, false = self.branch(self.truth(test, node.test))
            exits.append((false, f"where the loop at line {line} ends"))
            self.block = self.new_block(f"body{line}", [true])
        loop = Loop()
        self.scope.loops.append(loop)
        self.body(node.body)
        self.scope.loops.pop()
        back: list[Edge] = [(self.block, f"repeating the loop at line {line}")] if self.block is not None else []
        back += loop.continues
        self.close_loop(node, header, line, back, exits, loop)

    def stmt_For(self, node: ast.For) -> None:
        it = node.iter
        line = self.scope.parsed.src.file_line(node)
        rows: Node | None = None
        if isinstance(it, ast.Call) and isinstance(self.expr(it.func), Static) \
                and self.expr(it.func).value is builtins.range:  # type: ignore[union-attr]
            if it.keywords or not 1 <= len(it.args) <= 3:
                raise self.error(it, "range() takes 1 to 3 positional arguments")
            vals = [self.range_arg(self.expr(a), a) for a in it.args]
            start, stop, step = (Static(0), vals[0], Static(1)) if len(vals) == 1 else \
                (vals[0], vals[1], vals[2] if len(vals) == 3 else Static(1))
        else:
            v = self.expr(it)
            if not isinstance(v, Node):
                raise self.error(it, "`for` loops run over range(...) or over a tensor's first axis",
                                 "for other iterables write `for i in range(len(x))` and index")
            t = v.type
            if not isinstance(t, TensorType) or not t.shape:
                raise self.error(it, f"cannot iterate over a value of type {t}",
                                 "iterate over range(n) or over a tensor of rank >= 1")
            rows = v
            start, stop, step = Static(0), self.dim_value(v, 0), Static(1)
        if isinstance(step, Static) and step.value == 0:
            raise self.error(it, "range() arg 3 must not be zero")
        start_n, stop_n, step_n = (self.as_node(x, "i64") for x in (start, stop, step))
        if not isinstance(step, Static):
            ok = self.emit("NotEqual", [step_n, self.const(0, "i64")])
            self.emit("Assert", [ok], {"message": "range() arg 3 must not be zero"})
        counter = self.var(f"$for{line}_{node.col_offset}")
        self.ssa.set_value(counter, self.cur, start_n)
        header, line = self.open_loop(node, "for", counter)
        i = self.ssa.get_value(counter, header)
        assert isinstance(i, Node)
        cond = self.range_cond(i, stop_n, step, step_n)
        true, false = self.branch(cond)
        exits: list[Edge] = [(false, f"where the loop at line {line} ends")]
        self.block = self.new_block(f"body{line}", [true])
        item: Node = i if rows is None else self.emit("Gather", [rows, i], {"axis": 0})
        self.assign(node.target, item)
        loop = Loop()
        self.scope.loops.append(loop)
        self.body(node.body)
        self.scope.loops.pop()
        latch_edges: list[Edge] = [(self.block, "the loop body")] if self.block is not None else []
        latch = self.merge(latch_edges + loop.continues, "latch")
        back: list[Edge] = []
        if latch is not None:
            self.block = latch
            cur = self.ssa.get_value(counter, latch)
            assert isinstance(cur, Node)
            step_n = self.ssa.resolve(step_n)
            self.ssa.set_value(counter, latch, self.emit("Add", [cur, step_n], name="next"))
            back.append((latch, f"repeating the loop at line {line}"))
        self.close_loop(node, header, line, back, exits, loop)

    def range_arg(self, v: Val, node: ast.AST) -> Val:
        if isinstance(v, Static):
            if isinstance(v.value, bool) or not isinstance(v.value, int):
                raise self.error(node, f"range() needs ints, got {type(v.value).__name__}", "convert with int(...)")
            return v
        n = self.as_node(v)
        t = n.type
        if not (isinstance(t, TensorType) and t.shape == () and (is_int(t.dtype) or t.dtype == "bool")):
            raise self.error(node, f"range() needs int scalars, got {t}", "convert with int(...)")
        return n

    def range_cond(self, i: Node, stop: Node, step: Val, step_n: Node) -> Node:
        if isinstance(step, Static):
            return self.emit("Less" if step.value > 0 else "Greater", [i, stop])
        zero = self.const(0, "i64")
        up = self.emit("And", [self.emit("Greater", [step_n, zero]), self.emit("Less", [i, stop])])
        down = self.emit("And", [self.emit("Less", [step_n, zero]), self.emit("Greater", [i, stop])])
        return self.emit("Or", [up, down])

    def current_loop(self, node: ast.stmt, word: str) -> Loop:
        if not self.scope.loops:
            raise self.error(node, f"`{word}` outside a loop")
        return self.scope.loops[-1]

    def stmt_Break(self, node: ast.Break) -> None:
        line = self.scope.parsed.src.file_line(node)
        self.current_loop(node, "break").breaks.append((self.cur, f"through the `break` at line {line}"))
        self.block = None

    def stmt_Continue(self, node: ast.Continue) -> None:
        line = self.scope.parsed.src.file_line(node)
        self.current_loop(node, "continue").continues.append((self.cur, f"through the `continue` at line {line}"))
        self.block = None

    # --- return and assert ----------------------------------------------------------------------
    def stmt_Return(self, node: ast.Return) -> None:
        values: list[Val] = []
        if node.value is not None:
            v = self.expr(node.value)
            if isinstance(v, TupleVal):
                values = list(v.items)
            elif not (isinstance(v, Static) and v.value is None):
                values = [v]
        self.add_return(node, values)

    def add_return(self, node: ast.AST, values: list[Val]) -> None:
        nodes = [self.as_node(v) for v in values]
        scope = self.scope
        if scope.ret_arity is not None and scope.ret_arity != len(nodes):
            raise self.error(node, f"this return gives {len(nodes)} values but an earlier one gives "
                                   f"{scope.ret_arity}", "return the same number of values everywhere")
        scope.ret_arity = len(nodes)
        line = scope.parsed.src.file_line(node)
        if scope.inline:
            scope.returns.append(((self.cur, f"the return at line {line}"), nodes))
        else:
            types = tuple(n.type for n in nodes)
            for earlier in self.return_types:
                for a, b in zip(earlier, types):
                    if not (isinstance(a, TensorType) and isinstance(b, TensorType) and a.dtype == b.dtype):
                        raise self.error(node, f"this return gives {b} but an earlier return gives {a}",
                                         "return one type on every path (convert with float(...)/int(...))")
            self.return_types.append(types)
            r = self.emit("Return", nodes)
            self.g.end_block.append_input(r)
        self.block = None

    def stmt_Assert(self, node: ast.Assert) -> None:
        src = self.scope.parsed.src
        line = src.file_line(node)
        if node.msg is None:
            text = src.lines[node.lineno - 1].strip() if 0 < node.lineno <= len(src.lines) else "assert"
            message = f"{text} (at {src.file}:{line})"
        else:
            m = self.expr(node.msg)
            if not (isinstance(m, Static) and isinstance(m.value, (str, int, float))):
                raise self.error(node.msg, "the assert message must be a constant", "use a plain string literal")
            message = str(m.value)
        test = self.expr(node.test)
        if isinstance(test, Static) and (is_number(test.value) or test.value is None) and test.value:
            return
        self.emit("Assert", [self.truth(test, node.test)], {"message": message})


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
        low.add_return(fdef, [])
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


__all__ = ["Lowering", "build_graph", "_dtype"]
