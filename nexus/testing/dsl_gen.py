"""Random control-flow programs for differential testing of the with-statement DSL.

A hypothesis strategy draws a small program (nested while/if/break/continue over a few
i64 and f32 variables, every loop bounded by its own counter) and renders it twice: as
a DSL builder (``build() -> Graph``) and as the same program in plain Python over NumPy
scalars (``run() -> tuple``), which is the oracle.  Both are source text, so a failing
example prints as two readable programs.

Arithmetic is NumPy's on both sides (np.int64 / np.float32 scalars in the oracle, the
op kernels in the graph), so results must agree bit for bit.
"""

from __future__ import annotations

import linecache
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from hypothesis import strategies as st

INT_VARS = ("i0", "i1", "i2")
FLOAT_VARS = ("f0", "f1")
MAX_DEPTH = 3
MAX_TRIPS = 4

# op symbol -> DSL function name
_BINOPS = {"+": "add", "-": "subtract", "*": "multiply"}
_CMPS = {"<": "less", "<=": "less_equal", ">": "greater", ">=": "greater_equal", "==": "equal", "!=": "not_equal"}


# --- the program tree --------------------------------------------------------------------
@dataclass
class Expr:
    """("var", name) | ("const", value) | (op, left, right) | ("cast", inner) | ("mod", inner)."""

    kind: str
    args: tuple[Any, ...]
    is_float: bool
    use_function: bool = False  # render as nx.add(a, b) rather than a + b


@dataclass
class Assign:
    var: str
    value: Expr


@dataclass
class If:
    cond: Expr
    then: list[Any] | None
    orelse: list[Any] | None


@dataclass
class While:
    counter: str
    trips: int
    extra: Expr | None  # `counter < trips & extra`
    body: list[Any]
    style: str  # "value", "function", "lambda" (a callable), "prebuilt" (a value built earlier)


@dataclass
class Jump:
    kind: str  # "break", "continue" or "return" (of every variable)


@dataclass
class Program:
    inits: dict[str, int | float]
    body: list[Any]
    counters: list[str] = field(default_factory=list)

    def dsl_source(self) -> str:
        return _render_dsl(self)

    def python_source(self) -> str:
        return _render_python(self)

    def build(self) -> Any:
        """The DSL builder run: a Graph."""
        ns = _exec(self.dsl_source(), "<dsl_gen dsl>")
        return ns["build"]()

    def run_python(self) -> tuple[Any, ...]:
        ns = _exec(self.python_source(), "<dsl_gen python>")
        return tuple(ns["run"]())


def _exec(source: str, filename: str) -> dict[str, Any]:
    import nexus as nx

    ns: dict[str, Any] = {"nx": nx, "np": np}
    # Known to linecache, so that the DSL can read the source like a file's.
    filename = f"{filename[:-1]} {hash(source) & 0xFFFFFFFF:08x}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    exec(compile(source, filename, "exec"), ns)  # noqa: S102 - our own generated test programs
    return ns


# --- strategies --------------------------------------------------------------------------
@st.composite
def expressions(draw: st.DrawFn, is_float: bool, depth: int = 0) -> Expr:
    names = FLOAT_VARS if is_float else INT_VARS
    choice = draw(st.integers(0, 4 if depth < 2 else 1))
    fn = draw(st.booleans())
    if choice == 0:
        return Expr("var", (draw(st.sampled_from(names)),), is_float)
    if choice == 1:
        value = draw(st.sampled_from([0.5, 1.0, 1.5, 2.0, -0.75]) if is_float else st.integers(-3, 7))
        return Expr("const", (value,), is_float)
    if choice == 4 and is_float:
        return Expr("cast", (draw(expressions(False, depth + 1)),), True, fn)
    op = draw(st.sampled_from(sorted(_BINOPS)))
    left = Expr("var", (draw(st.sampled_from(names)),), is_float)
    right = draw(expressions(is_float, depth + 1))
    e = Expr(op, (left, right), is_float, fn)
    if op == "*" and not is_float:
        e = Expr("mod", (e,), False, fn)  # keeps ints small
    return e


@st.composite
def conditions(draw: st.DrawFn) -> Expr:
    is_float = draw(st.booleans())
    names = FLOAT_VARS if is_float else INT_VARS
    left = Expr("var", (draw(st.sampled_from(names)),), is_float)
    right = draw(expressions(is_float, 2))
    return Expr(draw(st.sampled_from(sorted(_CMPS))), (left, right), False, draw(st.booleans()))


@st.composite
def blocks(draw: st.DrawFn, depth: int, in_loop: bool, counters: list[str]) -> list[Any]:
    out: list[Any] = []
    # Variables last assigned a Python number in this straight-line run: a loop condition
    # built from one before the loop cannot follow it (the DSL refuses), so such loops
    # get a callable condition.  After a region every variable is a graph value again.
    numbers: set[str] = set()
    for _ in range(draw(st.integers(0 if depth else 1, 4 if depth < 2 else 2))):
        kinds = ["assign", "assign"]
        if depth < MAX_DEPTH:
            kinds += ["if", "while"]
        if in_loop:
            kinds += ["break", "continue"]
        if depth >= 1:
            kinds += ["return"]
        kind = draw(st.sampled_from(kinds))
        if kind == "assign":
            is_float = draw(st.booleans())
            var = draw(st.sampled_from(FLOAT_VARS if is_float else INT_VARS))
            value = draw(expressions(is_float))
            out.append(Assign(var, value))
            if value.kind == "const":
                numbers.add(var)
            else:
                numbers.discard(var)
        elif kind == "if":
            cond = draw(conditions())
            shape = draw(st.sampled_from(["then", "else", "both"]))
            then = draw(blocks(depth + 1, in_loop, counters)) if shape != "else" else None
            orelse = draw(blocks(depth + 1, in_loop, counters)) if shape != "then" else None
            out.append(If(cond, then, orelse))
            numbers.clear()
        elif kind == "while":
            counter = f"c{len(counters)}"
            counters.append(counter)
            extra = draw(st.none() | conditions())
            body = draw(blocks(depth + 1, True, counters))
            style = draw(st.sampled_from(["value", "function", "lambda", "prebuilt"]))
            if extra is not None and _reads(extra) & numbers:
                style = "lambda"
            out.append(While(counter, draw(st.integers(0, MAX_TRIPS)), extra, body, style))
            numbers.clear()
        else:
            out.append(Jump(kind))
            # sometimes code after the jump: unreachable, must not run
            if draw(st.booleans()):
                out.append(Assign(INT_VARS[0], Expr("const", (999,), False)))
            break
    return out


@st.composite
def programs(draw: st.DrawFn) -> Program:
    inits: dict[str, int | float] = {v: draw(st.integers(-5, 10)) for v in INT_VARS}
    inits.update({v: draw(st.sampled_from([0.0, 1.0, -2.5, 3.25])) for v in FLOAT_VARS})
    counters: list[str] = []
    body = draw(blocks(0, False, counters))
    return Program(inits, body, counters)


def _reads(e: Expr) -> set[str]:
    if e.kind == "var":
        return {e.args[0]}
    return set().union(*(_reads(a) for a in e.args if isinstance(a, Expr)))


# --- rendering ---------------------------------------------------------------------------
def _py_expr(e: Expr) -> str:
    if e.kind == "var":
        return str(e.args[0])
    if e.kind == "const":
        return f"np.float32({e.args[0]!r})" if e.is_float else f"np.int64({e.args[0]!r})"
    if e.kind == "cast":
        return f"np.float32({_py_expr(e.args[0])})"
    if e.kind == "mod":
        return f"(({_py_expr(e.args[0])}) % np.int64(97))"
    return f"({_py_expr(e.args[0])} {e.kind} {_py_expr(e.args[1])})"


def _dsl_expr(e: Expr) -> str:
    if e.kind == "var":
        return str(e.args[0])
    if e.kind == "const":
        return repr(e.args[0])  # a Python scalar: weakly typed by the value it meets
    if e.kind == "cast":
        return f"nx.cast({_dsl_expr(e.args[0])}, to='f32')"
    if e.kind == "mod":
        inner = _dsl_expr(e.args[0])
        return f"nx.mod({inner}, 97)" if e.use_function else f"(({inner}) % 97)"
    a, b = e.args
    if a.kind == "const" and b.kind == "const":
        raise AssertionError("generator never makes const-const operations")
    name = _BINOPS.get(e.kind) or _CMPS[e.kind]
    if e.use_function:
        return f"nx.{name}({_dsl_expr(a)}, {_dsl_expr(b)})"
    return f"({_dsl_expr(a)} {e.kind} {_dsl_expr(b)})"


def _render_python(p: Program) -> str:
    lines = ["def run():"]
    for v, x in p.inits.items():
        lines.append(f"    {v} = {_py_expr(Expr('const', (x,), isinstance(x, float)))}")
    for c in p.counters:
        lines.append(f"    {c} = np.int64(0)")
    result = f"({', '.join([*p.inits, *p.counters])},)"
    _py_block(p.body, lines, 1, result)
    lines.append(f"    return {result}")
    return "\n".join(lines) + "\n"


def _py_block(stmts: list[Any] | None, lines: list[str], ind: int, result: str) -> None:
    pad = "    " * ind
    if not stmts:
        lines.append(f"{pad}pass")
        return
    for s in stmts:
        if isinstance(s, Assign):
            lines.append(f"{pad}{s.var} = {_py_expr(s.value)}")
        elif isinstance(s, Jump):
            lines.append(f"{pad}return {result}" if s.kind == "return" else f"{pad}{s.kind}")
        elif isinstance(s, If):
            lines.append(f"{pad}if {_py_expr(s.cond)}:")
            _py_block(s.then, lines, ind + 1, result)
            if s.orelse is not None:
                lines.append(f"{pad}else:")
                _py_block(s.orelse, lines, ind + 1, result)
        elif isinstance(s, While):
            lines.append(f"{pad}{s.counter} = np.int64(0)")
            cond = f"({s.counter} < np.int64({s.trips}))"
            if s.extra is not None:
                cond = f"({cond} & {_py_expr(s.extra)})"
            lines.append(f"{pad}while {cond}:")
            lines.append(f"{pad}    {s.counter} = {s.counter} + np.int64(1)")
            _py_block(s.body, lines, ind + 1, result)


def _render_dsl(p: Program) -> str:
    lines = ["def build():", "    with nx.function('generated') as f:"]
    for v, x in p.inits.items():
        dtype = "f32" if isinstance(x, float) else "i64"
        lines.append(f"        {v} = nx.constant({x!r}, dtype={dtype!r})")
    for c in p.counters:
        lines.append(f"        {c} = nx.constant(0, dtype='i64')")
    result = ", ".join([*p.inits, *p.counters])
    _dsl_block(p.body, lines, 2, result)
    lines.append(f"        f.returns({result})")
    lines.append("    return f.graph")
    return "\n".join(lines) + "\n"


def _dsl_block(stmts: list[Any] | None, lines: list[str], ind: int, result: str) -> None:
    pad = "    " * ind
    if not stmts:
        lines.append(f"{pad}pass")
        return
    for s in stmts:
        if isinstance(s, Assign):
            lines.append(f"{pad}{s.var} = {_dsl_expr(s.value)}")
        elif isinstance(s, Jump):
            lines.append(f"{pad}f.returns({result})" if s.kind == "return" else f"{pad}nx.{s.kind}_()")
        elif isinstance(s, If):
            lines.append(f"{pad}with nx.if_cond({_dsl_expr(s.cond)}):")
            if s.then is not None:
                lines.append(f"{pad}    with nx.then():")
                _dsl_block(s.then, lines, ind + 2, result)
            if s.orelse is not None:
                lines.append(f"{pad}    with nx.else_():")
                _dsl_block(s.orelse, lines, ind + 2, result)
        elif isinstance(s, While):
            lines.append(f"{pad}{s.counter} = nx.constant(0, dtype='i64')")
            cond = f"({s.counter} < {s.trips})" if s.style != "function" else f"nx.less({s.counter}, {s.trips})"
            if s.extra is not None:
                cond = f"({cond} & {_dsl_expr(s.extra)})"
            if s.style == "lambda":
                cond = f"lambda: {cond}"
            elif s.style == "prebuilt":
                lines.append(f"{pad}cond_{s.counter} = {cond}")
                cond = f"cond_{s.counter}"
            lines.append(f"{pad}with nx.while_loop({cond}):")
            lines.append(f"{pad}    {s.counter} = {s.counter} + 1")
            _dsl_block(s.body, lines, ind + 1, result)


AMBIGUOUS = "pass a callable"  # the DSL's refusal of a condition it cannot re-evaluate safely


def same_results(got: Any, want: tuple[Any, ...]) -> bool:
    """Bitwise-equal results (NaN equal to NaN), with matching dtypes."""
    got = got if isinstance(got, tuple) else (got,)
    if len(got) != len(want):
        return False
    for a, b in zip(got, want):
        a, b = np.asarray(a), np.asarray(b)
        if a.dtype != b.dtype or not np.array_equal(a, b, equal_nan=a.dtype.kind == "f"):
            return False
    return True
