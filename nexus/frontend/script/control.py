"""Control flow of ``@nx.script``, built as blocks while walking the AST: ``if`` ends the
block with a Cond whose exits start the branches; loops get a header block that stays
*unsealed* (in the sense of Braun et al.) until its back edges (the body's end and every
``continue``) are known; ``break`` edges and the loop's exit meet after it.  Code after
``return``, ``break`` or ``continue`` is unreachable and not lowered, so a variable only
has to be defined on the paths that can reach its use."""

from __future__ import annotations

import ast
import builtins
import re
from collections.abc import Callable, Hashable
from typing import TYPE_CHECKING, Any

from nexus.frontend.script import build, expr, iterables, lists
from nexus.frontend.script.annotations import (
    is_number,
)
from nexus.frontend.script.errors import ScriptError
from nexus.frontend.script.iterables import range_arg
from nexus.frontend.script.ssa import MergeTypeError
from nexus.frontend.script.values import (
    Edge,
    Loop,
    PathEnded,
    Static,
    TupleVal,
    Val,
)
from nexus.ir.node import Block, Node
from nexus.ir.types import TensorType

if TYPE_CHECKING:
    from nexus.frontend.script.visitor import Lowering


# --- control helpers used by expressions and statements ----------------------------------


def branch(low: Lowering, cond: Node) -> tuple[Node, Node]:
    """End the current block with a Cond; returns its (true, false) exits."""
    c = low.emit("Cond", [cond])
    false = low.emit("Proj", [c], {"num": 0})
    true = low.emit("Proj", [c], {"num": 1})
    low.block = None
    return true, false


def new_block(low: Lowering, name: str, preds: list[Node], sealed: bool = True,
              desc: list[str] | None = None) -> Block:
    b = low.g.new_block(name, preds)
    if desc:
        for p, d in zip(preds, desc):
            low.ssa.edge_desc[p] = d
    if sealed:
        low.ssa.seal(b)
    return b


def edge_ctrl(low: Lowering, edge: Edge) -> Node:
    """The control value of an edge: a Jmp at the end of a falling-through block."""
    src, desc = edge
    if isinstance(src, Block):
        ctrl = _thread(low, src) or low.g.add("Jmp", [], src, loc=low._loc)
    else:
        ctrl = src
    low.ssa.edge_desc[ctrl] = desc
    return ctrl


def _thread(low: Lowering, block: Block) -> Node | None:
    """An empty block with one predecessor that no variable was read or written in
    (``if c: break``, a loop exit with no ``else``) is dropped: its predecessor's exit
    goes straight to the target, saving a block per edge at run time."""
    if block.members or block.num_inputs != 1 or low.ssa.has_values(block) \
            or block is low.g.start_block or block in low.ssa.loop_keys:
        return None
    ctrl = block.input(0)
    block.remove_input(0)
    low.ssa.drop_block(block)
    low.g.erase(block)
    return ctrl


def merge(low: Lowering, edges: list[Edge], name: str) -> Block | None:
    """The block where ``edges`` meet (sealed); one falling-through block continues."""
    if not edges:
        return None
    if len(edges) == 1 and isinstance(edges[0][0], Block):
        return edges[0][0]
    ctrls = [edge_ctrl(low, e) for e in edges]
    b = low.g.new_block(f"{name}{_line(low)}", ctrls)
    low.ssa.seal(b)
    return b


def _line(low: Lowering) -> int:
    return low._loc.line if low._loc is not None else 0


def merge_error(low: Lowering, e: MergeTypeError, node: ast.AST) -> ScriptError:
    var = e.var
    parts = "; ".join(f"{t} on {d}" for t, d in e.types)
    return low.error(node, f"variable `{var}` has different types on different paths: {parts}",
                      f"give `{var}` one type on every path (e.g. initialise it as 0.0 for a float, "
                      "or convert with float(...)/int(...))")


def merge_error_at(low: Lowering, e: MergeTypeError, node: ast.stmt) -> ScriptError:
    # A loop variable retyped inside the loop: point at the assignment that retypes it.
    err = merge_error(low, e, node)
    loc = e.where.loc if e.where is not None else None
    src = low.sources.get(loc.file) if loc is not None else None
    if loc is None or src is None:
        return err
    rel = loc.line - src.line_offset
    text = " " * src.col_offset + src.lines[rel - 1] if 0 < rel <= len(src.lines) else ""
    return ScriptError(err.reason, loc.file, loc.line, loc.col, text, err.hint, src.func_name)


# --- if ------------------------------------------------------------------------------


def stmt_If(low: Lowering, node: ast.If) -> None:
    test = low.expr(node.test)
    if isinstance(test, Static) and (is_number(test.value) or test.value is None):
        low.body(node.body if test.value else node.orelse)  # decided now: one side only
        return
    line = low.scope.parsed.src.file_line(node)
    true, false = branch(low, expr.truth(low, test, node.test))
    low.block = new_block(low, f"then{line}", [true])
    low.body(node.body)
    edges: list[Edge] = []
    if low.block is not None:
        edges.append((low.block, f"through the `if` branch at line {line}"))
    if node.orelse:
        low.block = new_block(low, f"else{line}", [false])
        low.body(node.orelse)
        if low.block is not None:
            edges.append((low.block, f"through the `else` branch of the `if` at line {line}"))
    else:
        edges.append((false, f"where the `if` condition at line {line} is false"))
    low.block = merge(low, edges, "endif")


# --- loops -----------------------------------------------------------------------------


def loop_key(low: Lowering, node: ast.AST) -> Hashable:
    return (low.scope.prefix, id(node))


def open_loop(low: Lowering, node: ast.stmt, kind: str, counter: str | None = None) -> tuple[Any, int]:
    line = low.scope.parsed.src.file_line(node)
    header = low.g.new_block(f"{kind}{line}")
    assigned = build.with_tuple_items(low, [low.var(n) for n in low.scope.parsed.names_bound_in(node)])
    low.ssa.loop_header(header, loop_key(low, node), assigned if counter is None else [*assigned, counter])
    header.append_input(edge_ctrl(low, (low.cur, f"entering the loop at line {line} (when it runs zero "
                                                  "times)")))
    low.block = header
    return header, line


def close_loop(low: Lowering, node: ast.While | ast.For, header: Any, line: int, back: list[Edge],
               exits: list[Edge], loop: Loop) -> None:
    for e in back:
        header.append_input(edge_ctrl(low, e))
    low.ssa.seal(header)
    lists.check_loop(low, header)  # a stacked list fed by a Phi whose shape changes: a sequence
    low.block = merge(low, exits, "loopexit")
    if node.orelse and low.block is not None:
        low.body(node.orelse)
    after: list[Edge] = []
    if low.block is not None:
        after.append((low.block, f"where the loop at line {line} ends normally"))
    after.extend(loop.breaks)
    low.block = merge(low, after, "endloop")


def stmt_While(low: Lowering, node: ast.While) -> None:
    header, line = open_loop(low, node, "while")
    try:
        test = low.expr(node.test)
    except PathEnded:  # the first test raises: the loop never runs, nothing comes back here
        low.ssa.seal(header)
        raise
    exits: list[Edge] = []
    if isinstance(test, Static) and (is_number(test.value) or test.value is None):
        if not test.value:
            low.ssa.seal(header)
            low.body(node.orelse)
            return
    else:
        true, false = branch(low, expr.truth(low, test, node.test))
        exits.append((false, f"where the loop at line {line} ends"))
        low.block = new_block(low, f"body{line}", [true])
    loop = Loop()
    low.scope.loops.append(loop)
    low.body(node.body)
    low.scope.loops.pop()
    back: list[Edge] = [(low.block, f"repeating the loop at line {line}")] if low.block is not None else []
    back += loop.continues
    close_loop(low, node, header, line, back, exits, loop)


def stmt_For(low: Lowering, node: ast.For) -> None:
    it = node.iter
    if iterables.is_wrapped(low, it):
        for_sequence(low, node, iterables.sequence(low, it))
        return
    line = low.scope.parsed.src.file_line(node)
    rows: Node | None = None
    if isinstance(it, ast.Call) and isinstance(low.expr(it.func), Static) \
            and low.expr(it.func).value is builtins.range:  # type: ignore[union-attr]
        if it.keywords or not 1 <= len(it.args) <= 3:
            raise low.error(it, "range() takes 1 to 3 positional arguments")
        vals = [range_arg(low, low.expr(a), a) for a in it.args]
        start, stop, step = (Static(0), vals[0], Static(1)) if len(vals) == 1 else \
            (vals[0], vals[1], vals[2] if len(vals) == 3 else Static(1))
    else:
        v = low.expr(it)
        if lists.is_seq(v):  # a list held as a sequence: a hidden counter over its positions
            for_sequence(low, node, iterables.ListSeq(v))
            return
        if isinstance(v, TupleVal):  # `for s in [a, b]`, a closure's tuple: their stacked values
            v = iterables.literal_items(low, v, it)
        if not isinstance(v, Node):
            raise low.error(it, "`for` loops run over range(...), a list or tuple, or a tensor's first axis",
                             "for other iterables write `for i in range(len(x))` and index")
        t = v.type
        if not isinstance(t, TensorType) or not t.shape:
            raise low.error(it, f"cannot iterate over a value of type {t}",
                             "iterate over range(n) or over a tensor of rank >= 1")
        rows = v
        start, stop, step = Static(0), expr.dim_value(low, v, 0), Static(1)
    if isinstance(step, Static) and step.value == 0:
        raise low.error(it, "range() arg 3 must not be zero")
    start_n, stop_n, step_n = (low.as_node(x, "i64") for x in (start, stop, step))
    if not isinstance(step, Static):
        ok = low.emit("NotEqual", [step_n, low.const(0, "i64")])
        low.emit("Assert", [ok], {"message": "range() arg 3 must not be zero"})
    counter = low.var(f"$for{line}_{node.col_offset}")
    low.ssa.set_value(counter, low.cur, start_n)
    counted_loop(low, node, counter, lambda i: range_cond(low, i, stop_n, step, step_n),
                 lambda i: i if rows is None else low.emit("Gather", [rows, i], {"axis": 0}),
                 lambda: low.ssa.resolve(step_n))


def for_sequence(low: Lowering, node: ast.For, seq: iterables.Seq) -> None:
    """``for target in enumerate/zip/reversed(...)``: a hidden counter over the sequence's
    positions; the target's value is the sequence's item there."""
    line = low.scope.parsed.src.file_line(node)
    n = low.as_node(seq.length(low), "i64")
    counter = low.var(f"$for{line}_{node.col_offset}")
    low.ssa.set_value(counter, low.cur, low.const(0, "i64"))
    counted_loop(low, node, counter, lambda k: low.emit("Less", [k, low.ssa.resolve(n)]),
                 lambda k: seq.item(low, k), lambda: low.const(1, "i64"))


def counted_loop(low: Lowering, node: ast.For, counter: str, test: Callable[[Node], Node],
                 item: Callable[[Node], Val], step: Callable[[], Node]) -> None:
    """The loop of a ``for`` over a hidden ``counter`` (set before it): the body runs while
    ``test(i)`` holds, with the target bound to ``item(i)``; the latch adds ``step()``."""
    header, line = open_loop(low, node, "for", counter)
    i = low.ssa.get_value(counter, header)
    assert isinstance(i, Node)
    true, false = branch(low, test(i))
    exits: list[Edge] = [(false, f"where the loop at line {line} ends")]
    low.block = new_block(low, f"body{line}", [true])
    build.assign(low, node.target, item(i))
    loop = Loop()
    low.scope.loops.append(loop)
    low.body(node.body)
    low.scope.loops.pop()
    latch_edges: list[Edge] = [(low.block, "the loop body")] if low.block is not None else []
    latch = merge(low, latch_edges + loop.continues, "latch")
    back: list[Edge] = []
    if latch is not None:
        low.block = latch
        cur = low.ssa.get_value(counter, latch)
        assert isinstance(cur, Node)
        low.ssa.set_value(counter, latch, low.emit("Add", [cur, step()], name="next"))
        back.append((latch, f"repeating the loop at line {line}"))
    close_loop(low, node, header, line, back, exits, loop)


def range_cond(low: Lowering, i: Node, stop: Node, step: Val, step_n: Node) -> Node:
    if isinstance(step, Static):
        return low.emit("Less" if step.value > 0 else "Greater", [i, stop])
    zero = low.const(0, "i64")
    up = low.emit("And", [low.emit("Greater", [step_n, zero]), low.emit("Less", [i, stop])])
    down = low.emit("And", [low.emit("Less", [step_n, zero]), low.emit("Greater", [i, stop])])
    return low.emit("Or", [up, down])


def current_loop(low: Lowering, node: ast.stmt, word: str) -> Loop:
    if not low.scope.loops:
        raise low.error(node, f"`{word}` outside a loop")
    return low.scope.loops[-1]


def stmt_Break(low: Lowering, node: ast.Break) -> None:
    line = low.scope.parsed.src.file_line(node)
    current_loop(low, node, "break").breaks.append((low.cur, f"through the `break` at line {line}"))
    low.block = None


def stmt_Continue(low: Lowering, node: ast.Continue) -> None:
    line = low.scope.parsed.src.file_line(node)
    current_loop(low, node, "continue").continues.append((low.cur, f"through the `continue` at line {line}"))
    low.block = None


# --- return and assert ----------------------------------------------------------------------


def stmt_Return(low: Lowering, node: ast.Return) -> None:
    values: list[Val] = []
    if isinstance(node.value, ast.Name):
        flag = low.is_none(node.value.id, node.value)
        if flag is not None:  # returns None where it holds None
            low.emit("Assert", [low.emit("Not", [flag])],
                     {"message": low.none_return_message(node)})
            add_return(low, node, [low.load(node.value.id, node.value, none_ok=True)])
            return
    if node.value is not None:
        v = low.expr(node.value)
        if isinstance(v, TupleVal):
            values = list(v.items)
        elif not (isinstance(v, Static) and v.value is None):
            values = [v]
    if not values:  # returns None: how depends on the other returns (visitor.settle_none_returns)
        low.scope.none_returns.append((low.cur, node))
        low.block = None
        return
    add_return(low, node, values)


def add_return(low: Lowering, node: ast.AST, values: list[Val]) -> None:
    nodes = [low.as_node(v) for v in values]
    scope = low.scope
    if scope.ret_arity is not None and scope.ret_arity != len(nodes):
        raise low.error(node, f"this return gives {len(nodes)} values but an earlier one gives "
                               f"{scope.ret_arity}", "return the same number of values everywhere")
    scope.ret_arity = len(nodes)
    line = scope.parsed.src.file_line(node)
    if scope.inline:
        scope.returns.append(((low.cur, f"the return at line {line}"), nodes))
    else:
        types = tuple(n.type for n in nodes)
        for earlier in low.return_types:
            for a, b in zip(earlier, types):
                if not (isinstance(a, TensorType) and isinstance(b, TensorType) and a.dtype == b.dtype):
                    raise low.error(node, f"this return gives {b} but an earlier return gives {a}",
                                     "return one type on every path (convert with float(...)/int(...))")
        low.return_types.append(types)
        r = low.emit("Return", nodes)
        low.g.end_block.append_input(r)
    low.block = None


# --- raise ------------------------------------------------------------------------------------

# The message of the Assert a `raise` makes: "raise ValueError('bad n') (line 7)".  A
# script call raises that exception (class and arguments) instead of the backend's error.
RAISE = "raise "
_RAISE_MESSAGE = re.compile(r"raise ([^\s(]+)\((.*)\) \(line (\d+)\)\Z", re.DOTALL)
# The exception classes raised that are not builtins, by the name their messages give them.
_RAISED: dict[str, type[Exception]] = {}


def stmt_Raise(low: Lowering, node: ast.Raise) -> None:
    """``raise E``, ``raise E("message", 3)`` (an exception class with constant
    arguments, or none): the path raises it at run time and ends there (numba's subset;
    a bare ``raise`` outside an ``except`` is Python's RuntimeError)."""
    if node.cause is not None and not (isinstance(node.cause, ast.Constant) and node.cause.value is None):
        raise low.error(node.cause, "`raise ... from ...` is only supported with `from None`",
                        "raise the exception alone")
    if node.exc is None:
        cls: Any = RuntimeError
        args: list[Any] = ["No active exception to reraise"]
    else:
        call = node.exc if isinstance(node.exc, ast.Call) else None
        if call is not None and call.keywords:
            raise low.error(call, "keyword arguments to an exception are not supported", "pass them by position")
        target = low.expr(call.func if call is not None else node.exc)
        cls = target.value if isinstance(target, Static) else None
        if not (isinstance(cls, type) and issubclass(cls, Exception)):
            raise low.error(node.exc, "`raise` takes an exception class, or a call of one with constant arguments",
                            'write `raise ValueError("message")`')
        args = [_constant_arg(low, a) for a in (call.args if call is not None else [])]
    low.raise_here(raise_message(cls, args, low.scope.parsed.src.file_line(node)))


def _constant_arg(low: Lowering, node: ast.expr) -> Any:
    v = low.expr(node)
    value = v.value if isinstance(v, Static) else None
    try:
        ok = type(value) in (str, int, float, bool) and ast.literal_eval(repr(value)) == value
    except (ValueError, SyntaxError):
        ok = False
    if not ok and not (isinstance(v, Static) and value is None):
        raise low.error(node, "an exception's arguments must be constants (strings, numbers, None)",
                        "the message can be a string literal; f-strings and run-time values are not supported")
    return value


def raise_message(cls: type[Exception], args: list[Any], line: int) -> str:
    """The Assert message of ``raise cls(*args)`` at ``line`` (:func:`raised_error` reads it)."""
    name = cls.__name__
    if getattr(builtins, name, None) is not cls:
        name = key = f"{cls.__module__}.{cls.__qualname__}"
        k = 1
        while _RAISED.setdefault(key, cls) is not cls:  # another class of that name: number it
            k += 1
            key = f"{name}#{k}"
        name = key
    return f"{RAISE}{name}({', '.join(repr(a) for a in args)}) (line {line})"


def raised_error(message: str) -> Exception | None:
    """The exception a script's ``raise`` raises, from its Assert's ``message``; None
    when the message is not one of a ``raise``."""
    m = _RAISE_MESSAGE.match(message)
    if m is None:
        return None
    name, text, line = m.groups()
    cls = _RAISED.get(name) or getattr(builtins, name, None)
    if not (isinstance(cls, type) and issubclass(cls, Exception)):
        return None
    try:
        args = ast.literal_eval(f"({text},)") if text else ()
    except (ValueError, SyntaxError):
        return None
    err = cls(*args)
    err.add_note(f"(raised by the script at line {line})")
    return err
