"""Errors of ``@nx.script``: every message quotes the source line, points at the column
with a caret, and says what to write instead."""

from __future__ import annotations

import ast
from dataclasses import dataclass

from nexus.ir.types import Dim, TensorType, broadcast_shapes, shape_str


@dataclass(frozen=True)
class SourceText:
    """The source of one parsed function: its file, the dedented lines, and where they
    start in the file (``line_offset`` + ast line = file line; ``col_offset`` + ast col =
    file column)."""

    file: str
    lines: tuple[str, ...]
    line_offset: int
    col_offset: int
    func_name: str

    def file_line(self, node: ast.AST) -> int:
        return getattr(node, "lineno", 1) + self.line_offset

    def file_col(self, node: ast.AST) -> int:
        return getattr(node, "col_offset", 0) + self.col_offset


class ScriptError(SyntaxError):
    """A construct or a use that ``@nx.script`` does not support, or a type error found
    while building the graph.  ``file``, ``line`` and ``col`` say where (1-based line,
    0-based column); the message quotes the line and says what to write instead.

    A subclass of SyntaxError so that tools showing it point at the source; ``str()``
    gives the full message with the quoted line and caret."""

    def __init__(self, msg: str, file: str = "<unknown>", line: int = 0, col: int = 0,
                 text: str = "", hint: str = "", func: str = ""):
        self.reason = msg
        self.file = file
        self.line = line
        self.col = col
        self.hint = hint
        self.func = func
        self.source_line = text
        super().__init__(self.render())
        # SyntaxError's own fields, so tracebacks point at the right place.
        self.filename = file
        self.lineno = line
        self.offset = col + 1
        self.text = text

    def render(self) -> str:
        where = f"{self.file}:{self.line}:{self.col}"
        inside = f" (in @nx.script function `{self.func}`)" if self.func else ""
        out = f"{where}: {self.reason}{inside}"
        if self.source_line:
            stripped = self.source_line.rstrip("\n")
            out += f"\n    {stripped}\n    {' ' * max(self.col, 0)}^"
        if self.hint:
            out += f"\n  instead: {self.hint}"
        return out

    def __str__(self) -> str:
        return self.render()


def error_at(src: SourceText, node: ast.AST | None, msg: str, hint: str = "") -> ScriptError:
    """A ScriptError located at ``node`` of ``src`` (quoting its line)."""
    if node is None or not hasattr(node, "lineno"):
        return ScriptError(msg, src.file, src.line_offset + 1, 0, "", hint, src.func_name)
    rel = getattr(node, "lineno", 1)
    text = src.lines[rel - 1] if 0 < rel <= len(src.lines) else ""
    col = getattr(node, "col_offset", 0)
    # The quoted line is the file's line: restore the indentation removed by dedent.
    full = " " * src.col_offset + text
    return ScriptError(msg, src.file, src.file_line(node), col + src.col_offset, full, hint, src.func_name)


def matmul_mismatch(a: TensorType, b: TensorType, names: tuple[str, str]) -> tuple[str, str] | None:
    """Why ``a @ b`` has no shape under NumPy's matmul rules, as (message, hint): the
    contraction dims that differ, or batch dims that do not broadcast.  The hint names a
    transpose only when it makes the shapes fit.  None when the shapes are not the problem.
    ``names`` are the operands as written (source text), for the hint."""
    sa, sb = a.shape, b.shape
    if sa is None or sb is None:
        return None
    both = f"{a} @ {b}"
    if not sa or not sb:
        return f"the matrix product {both} needs operands of rank >= 1", "multiply by a scalar with `*`"
    ka, kb = len(sa) - 1, max(len(sb) - 2, 0)
    da, db = sa[ka], sb[kb]
    if isinstance(da, int) and isinstance(db, int) and da != db:
        msg = (f"the shapes of the matrix product {both} do not fit: dim {ka} of the left operand is {da} "
               f"but dim {kb} of the right operand is {db}; they must be equal")
        hint = ""
        if len(sa) == 2 and len(sb) == 2:
            if _same_dim(sa[1], sb[1]):
                hint = f"if the right operand is stored transposed, transpose it: `{_paren(names[1])}.T`"
            elif _same_dim(sa[0], sb[0]):
                hint = f"if the left operand is stored transposed, transpose it: `{_paren(names[0])}.T`"
        return msg, hint
    ba, bb = sa[:-2] if len(sa) >= 2 else (), sb[:-2] if len(sb) >= 2 else ()
    try:
        broadcast_shapes(ba, bb)
    except ValueError:
        return f"the batch dims {shape_str(ba)} and {shape_str(bb)} of the matrix product {both} do not broadcast", ""
    return None


def _same_dim(x: Dim, y: Dim) -> bool:
    """Equal for sure: the same int, or the same symbol (sympy's == is structural)."""
    return bool(x == y)


def _paren(text: str) -> str:
    return text if text.replace(".", "").replace("_", "").isalnum() else f"({text})"


def _construct_name(node: ast.AST) -> str:
    names = {"Lambda": "`lambda`", "ListComp": "a list comprehension", "GeneratorExp": "a generator expression",
             "DictComp": "a dict comprehension", "SetComp": "a set comprehension", "JoinedStr": "an f-string",
             "NamedExpr": "`:=`", "Starred": "`*` unpacking", "Dict": "a dict literal", "Set": "a set literal",
             "Await": "`await`", "Yield": "`yield`", "YieldFrom": "`yield from`", "Slice": "a slice here"}
    return names.get(type(node).__name__, f"the expression `{type(node).__name__}`")


def _hint_for(node: ast.AST) -> str:
    if isinstance(node, (ast.ListComp, ast.GeneratorExp)):
        return "write a `for i in range(n)` loop"
    return "rewrite it with the supported constructs (see nexus.frontend.script)"
