"""Parse the text form back into graphs (see :mod:`nexus.ir.printer` for the format).

The parser is line-based: each node is one line, so an error points at its line and
column and no input can make it loop.  Every failure is a :class:`ParseError`.  Nothing
is evaluated: numbers, strings and dim expressions have parsers of their own.  Types and
attribute values nest at most ``MAX_NESTING`` brackets deep and a number literal has at
most ``MAX_NUMBER_CHARS`` characters (:mod:`nexus.ir.limits`): the same text parses on
every interpreter.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from nexus.ir.cfg import is_argument
from nexus.ir.graph import Graph
from nexus.ir.limits import MAX_NESTING, number_too_long
from nexus.ir.node import Block, Node, SourceLoc
from nexus.ir.opdef import UNIVERSAL_ATTRS, OpTypeError, check_attr, get_op
from nexus.ir.types import (
    ALL_DTYPE_NAMES,
    STACK,
    DimBudget,
    DimSyntaxError,
    OptionalType,
    SequenceType,
    TensorType,
    TupleType,
    Type,
    X,
    dtype_kind,
    int_range,
    is_dtype,
    numpy_dtype,
    parse_dim,
)


class ParseError(ValueError):
    """Malformed text; ``line`` and ``col`` are 1-based, ``file`` names the file when known.

    The message quotes at most a short window of the line around the column, so a huge
    line (or a huge token in it) is never echoed in full."""

    def __init__(self, msg: str, line: int, col: int, source_line: str = "", file: str | None = None):
        self.msg, self.line, self.col = _clip(msg, MAX_MESSAGE), line, col
        self.source_line, self.file = source_line, file
        text = f"line {line}, col {col}: {self.msg}"
        if file is not None:
            text = f"{file}: {text}"
        if source_line:
            window, caret = _window(source_line, col - 1)
            text += f"\n  {window}\n  {' ' * caret}^"
        super().__init__(text)

    def in_file(self, file: str) -> ParseError:
        """The same error, naming ``file``."""
        return ParseError(self.msg, self.line, self.col, self.source_line, file)


MAX_MESSAGE = 300
"""Characters of an error message before its middle is cut out."""
_WINDOW = 80  # characters of the source line quoted around the column


def _clip(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    keep = (limit - 5) // 2
    return f"{text[:keep]} ... {text[-keep:]}"


def _window(line: str, col: int) -> tuple[str, int]:
    """At most ``_WINDOW`` characters of ``line`` around the 0-based ``col``, and where the
    column falls in them."""
    if len(line) <= _WINDOW:
        return line, col
    start = max(0, min(col - _WINDOW // 2, len(line) - _WINDOW))
    text = line[start:start + _WINDOW]
    caret = col - start
    if start > 0:
        text, caret = "..." + text, caret + 3
    if start + _WINDOW < len(line):
        text += "..."
    return text, caret


_NAME = re.compile(r"[A-Za-z0-9_.]+")
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_NUMBER = re.compile(r"[-+]?(?:\d+\.?\d*(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?|inf|nan)")
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_DIGITS = re.compile(r"\d+")


@dataclass
class _Ref:
    name: str
    line: int
    col: int


@dataclass
class _Line:
    """A node line, parsed but with its references not yet resolved."""

    name: str | None
    op: str
    inputs: list[_Ref]
    attrs: dict[str, Any]
    deps: list[_Ref]
    type: Type
    loc: SourceLoc | None
    line: int
    col: int


@dataclass
class _BlockText:
    label: str
    preds: list[_Ref]
    lines: list[_Line] = field(default_factory=list)


class _Cursor:
    """A scanner over one line of text."""

    def __init__(self, text: str, lineno: int, budget: DimBudget | None = None):
        self.text, self.pos, self.lineno = text, 0, lineno
        self.budget = DimBudget() if budget is None else budget  # one for the whole text

    def error(self, msg: str, pos: int | None = None) -> ParseError:
        p = self.pos if pos is None else pos
        return ParseError(msg, self.lineno, p + 1, self.text)

    def skip(self) -> None:
        while self.pos < len(self.text) and self.text[self.pos] in " \t":
            self.pos += 1
        if self.pos < len(self.text) and self.text[self.pos] == "#":
            self.pos = len(self.text)

    def at_end(self) -> bool:
        self.skip()
        return self.pos >= len(self.text)

    def peek(self, s: str) -> bool:
        self.skip()
        return self.text.startswith(s, self.pos)

    def accept(self, s: str) -> bool:
        if self.peek(s):
            self.pos += len(s)
            return True
        return False

    def expect(self, s: str) -> None:
        if not self.accept(s):
            found = self.text[self.pos:self.pos + 10] or "end of line"
            raise self.error(f"expected {s!r}, found {found!r}")

    def match(self, pattern: re.Pattern[str], what: str) -> str:
        self.skip()
        m = pattern.match(self.text, self.pos)
        if not m:
            found = self.text[self.pos:self.pos + 10] or "end of line"
            raise self.error(f"expected {what}, found {found!r}")
        self.pos = m.end()
        return m.group(0)

    def ref(self, sigil: str = "%") -> _Ref:
        self.skip()
        col = self.pos + 1
        self.expect(sigil)
        if sigil == "@" and self.peek('"'):  # a graph name that is not plain: @"my-model"
            return _Ref(self.string(), self.lineno, col)
        return _Ref(self.match(_NAME, "a name"), self.lineno, col)

    def string(self) -> str:
        raw = self.match(_STRING, "a string")
        try:
            value = json.loads(raw)
        except json.JSONDecodeError as e:
            raise self.error(f"bad string: {e.msg}") from None
        return str(value)

    def number(self, what: str) -> str:
        start = self.pos
        text = self.match(_NUMBER, what)
        why = number_too_long(text)
        if why is not None:
            raise self.error(why, start)
        return text

    def digits(self, what: str) -> str:
        start = self.pos
        text = self.match(_DIGITS, what)
        why = number_too_long(text)
        if why is not None:
            raise self.error(f"{what}: {why}", start)
        return text

    # --- types -------------------------------------------------------------------------
    def type(self, depth: int = 0) -> Type:
        """A type; ``depth`` counts the tuple parentheses around it."""
        if self.accept("("):
            if depth >= MAX_NESTING:
                raise self.error(f"tuple types nest more than {MAX_NESTING} levels deep", self.pos - 1)
            elems: list[Type] = []
            while not self.accept(")"):
                elems.append(self.type(depth + 1))
                if not self.accept(","):
                    self.expect(")")
                    break
            return TupleType(tuple(elems))
        start = self.pos
        word = self.match(_IDENT, "a type")
        if word == "X":
            return X
        if word == "stack":
            return STACK
        if word in ("seq", "opt") and self.peek("<"):
            return self.container(word, start, depth)
        if not is_dtype(word):
            raise self.error(f"unknown type {word!r} (dtypes: {', '.join(ALL_DTYPE_NAMES)}; or X, stack, "
                             f"seq<...>, opt<...>)", start)
        if not self.peek("["):
            return TensorType(word, ())
        self.expect("[")
        if self.accept("..."):
            self.expect("]")
            return TensorType(word, None)
        dims = []
        if self.accept("]"):
            raise self.error("a shape needs dims; a scalar has no brackets")
        while True:
            dims.append(self.dim())
            if self.accept("]"):
                break
            self.expect(",")
        return TensorType(word, tuple(dims))

    def container(self, word: str, start: int, depth: int) -> Type:
        """``seq<elem>``, ``seq<elem, length>`` or ``opt<elem>``, after the word."""
        if depth >= MAX_NESTING:
            raise self.error(f"types nest more than {MAX_NESTING} levels deep", start)
        self.expect("<")
        at = self.pos
        elem = self.type(depth + 1)
        if word == "opt":
            self.expect(">")
            if not isinstance(elem, (TensorType, SequenceType)):
                raise self.error(f"an optional holds a tensor or a sequence, not {elem}", at)
            return OptionalType(elem)
        if not isinstance(elem, TensorType):
            raise self.error(f"a sequence holds tensors, not {elem}", at)
        length = self.dim(">") if self.accept(",") else None
        self.expect(">")
        return SequenceType(elem, length)

    def dim(self, stops: str = ",]") -> Any:
        self.skip()
        start, depth = self.pos, 0
        while self.pos < len(self.text):
            ch = self.text[self.pos]
            if ch == "(":
                depth += 1
            elif ch == ")":
                depth -= 1
            elif depth == 0 and ch in stops:
                break
            self.pos += 1
        text = self.text[start:self.pos]
        try:
            dim = parse_dim(text, self.budget)
            if isinstance(dim, int) and dim < 0:
                raise DimSyntaxError("a dim cannot be negative", 0)
            return dim
        except DimSyntaxError as e:
            raise self.error(f"bad dim {text.strip()!r}: {e}", start + e.pos) from None
        except (TypeError, ValueError, ZeroDivisionError) as e:
            raise self.error(f"bad dim {text.strip()!r}: {e}", start) from None

    # --- attribute values --------------------------------------------------------------
    def value(self, depth: int = 0) -> Any:
        """An attribute value; ``depth`` counts the list brackets around it."""
        self.skip()
        if self.peek("tensor<"):
            return self.tensor()
        if self.peek("@"):
            return _Ref(self.ref("@").name, self.lineno, self.pos)
        if self.peek('"'):
            return self.string()
        if self.accept("["):
            if depth >= MAX_NESTING:
                raise self.error(f"attribute values nest more than {MAX_NESTING} levels deep", self.pos - 1)
            items = []
            while not self.accept("]"):
                items.append(self.value(depth + 1))
                if not self.accept(","):
                    self.expect("]")
                    break
            return items
        if self.accept("true"):
            return True
        if self.accept("false"):
            return False
        text = self.number("an attribute value")
        if re.fullmatch(r"[-+]?\d+", text):
            return int(text)
        return float(text)

    def tensor(self) -> Any:
        self.expect("tensor<")
        start = self.pos
        t = self.type()
        if not isinstance(t, TensorType) or not t.is_static:
            raise self.error(f"a tensor attribute needs a static tensor type, got {t}", start)
        self.expect(":")
        if self.peek("@"):
            self.expect("@")
            name = self.string()
            self.expect(">")
            return _PayloadRef(name, t, self.lineno, start)
        if self.accept("["):
            items = []
            while not self.accept("]"):
                items.append(self.scalar_text())
                if not self.accept(","):
                    self.expect("]")
                    break
        else:
            items = [self.scalar_text()]
        self.expect(">")
        return self.make_array(items, t, start)

    def scalar_text(self) -> str:
        if self.accept("true"):
            return "true"
        if self.accept("false"):
            return "false"
        return self.number("a number")

    def make_array(self, items: list[str], t: TensorType, start: int) -> np.ndarray:
        shape = tuple(int(d) for d in t.shape or ())
        count = math.prod(shape)  # exact: np.prod would wrap around on huge shapes
        if len(items) != count:
            raise self.error(f"{t} holds {count} values, found {len(items)}", start)
        try:
            dt = numpy_dtype(t.dtype)
            if t.dtype == "bool":
                if any(s not in ("true", "false") for s in items):
                    raise ValueError("bool tensors hold true or false")
                flat = np.array([s == "true" for s in items], dtype=dt)
            elif dtype_kind(t.dtype) in "iu":
                ints = [int(s) for s in items]
                lo, hi = int_range(t.dtype)
                if any(not lo <= v <= hi for v in ints):
                    raise ValueError(f"a value is out of range for {t.dtype}")
                flat = np.array(ints, dtype=dt)
            else:
                flat = np.array([float(s) for s in items], dtype=np.float64).astype(dt)
        except ValueError as e:
            raise self.error(f"bad tensor value: {e}", start) from None
        try:
            return flat.reshape(shape)
        except ValueError as e:  # an empty tensor with an impossibly large dim
            raise self.error(f"bad tensor shape {t}: {e}", start) from None


@dataclass
class _PayloadRef:
    key: str
    type: TensorType
    line: int
    col: int


def parse(text: str, payload: dict[str, np.ndarray] | None = None) -> Graph:
    """Parse text holding one or more graphs; returns the last (the callers come last)."""
    graphs = parse_module(text, payload)
    return graphs[-1]


def parse_module(text: str, payload: dict[str, np.ndarray] | None = None) -> list[Graph]:
    """Parse every graph in ``text``, in order.  Raises ParseError."""
    if not isinstance(text, str):
        raise ParseError("expected text", 1, 1)
    if text.startswith("\ufeff"):  # a UTF-8 byte-order mark, as Windows editors write
        text = text[1:]
    lines = [ln[:-1] if ln.endswith("\r") else ln for ln in text.split("\n")]  # Windows line endings too
    graphs: list[Graph] = []
    by_name: dict[str, Graph] = {}
    budget = DimBudget()  # the symbolic work of all the dims in the text
    i = 0
    while i < len(lines):
        cur = _Cursor(lines[i], i + 1)
        if cur.at_end():
            i += 1
            continue
        if not cur.accept("graph"):
            raise cur.error("expected 'graph @name {'")
        name = cur.ref("@").name
        cur.expect("{")
        if not cur.at_end():
            raise cur.error("expected end of line after '{'")
        i, blocks = _read_blocks(lines, i + 1, budget)
        if name in by_name:
            raise ParseError(f"graph @{name} is defined twice", i, 1)
        try:
            g = _build(name, blocks, by_name, payload or {}, i, budget)
        except ParseError as e:
            if "\n" in str(e) or not 1 <= e.line <= len(lines):
                raise
            # Errors found after a line was read: show that line too.
            raise ParseError(e.msg, e.line, e.col, lines[e.line - 1]) from None
        except (OpTypeError, KeyError, ValueError, TypeError, IndexError) as e:
            msg = e.args[0] if isinstance(e, KeyError) and e.args else str(e)
            raise ParseError(f"in graph @{name}: {msg}", i, 1) from None
        graphs.append(g)
        by_name[name] = g
    if not graphs:
        raise ParseError("no graph found", 1, 1)
    return graphs


def _read_blocks(lines: list[str], i: int, budget: DimBudget) -> tuple[int, list[_BlockText]]:
    blocks: list[_BlockText] = []
    while i < len(lines):
        cur = _Cursor(lines[i], i + 1, budget)
        if cur.at_end():
            i += 1
            continue
        if cur.accept("}"):
            if not cur.at_end():
                raise cur.error("expected end of line after '}'")
            return i + 1, blocks
        if cur.peek("^"):
            label = cur.ref("^").name
            preds = []
            if cur.accept("("):
                while not cur.accept(")"):
                    preds.append(cur.ref())
                    if not cur.accept(","):
                        cur.expect(")")
                        break
            cur.expect(":")
            if not cur.at_end():
                raise cur.error("expected end of line after a block header")
            blocks.append(_BlockText(label, preds))
        else:
            if not blocks:
                raise cur.error("a node line before the first block header '^label:'")
            blocks[-1].lines.append(_node_line(cur))
        i += 1
    raise ParseError("graph is not closed with '}'", len(lines), 1)


def _node_line(cur: _Cursor) -> _Line:
    cur.skip()
    col = cur.pos + 1
    name = None
    if cur.peek("%"):
        name = cur.ref().name
        cur.expect("=")
    op = cur.match(_IDENT, "an op name")
    inputs = []
    if cur.peek("%"):
        inputs.append(cur.ref())
        while cur.accept(","):
            inputs.append(cur.ref())
    attrs: dict[str, Any] = {}
    if cur.accept("{"):
        while not cur.accept("}"):
            key = cur.match(_IDENT, "an attribute name")
            if key in attrs:
                raise cur.error(f"attribute {key!r} is given twice")
            cur.expect("=")
            attrs[key] = cur.value()
            if not cur.accept(","):
                cur.expect("}")
                break
    deps = []
    if cur.accept("deps("):
        while not cur.accept(")"):
            deps.append(cur.ref())
            if not cur.accept(","):
                cur.expect(")")
                break
    cur.expect(":")
    t = cur.type()
    loc = None
    if cur.accept("loc("):
        file = cur.string()
        cur.expect(":")
        line_no = int(cur.digits("a line number"))
        cur.expect(":")
        col_no = int(cur.digits("a column"))
        cur.expect(")")
        loc = SourceLoc(file, line_no, col_no)
    if not cur.at_end():
        raise cur.error(f"unexpected {cur.text[cur.pos:cur.pos + 10]!r}")
    return _Line(name, op, inputs, attrs, deps, t, loc, cur.lineno, col)


def _build(name: str, blocks: list[_BlockText], graphs: dict[str, Graph], payload: dict[str, Any],
           end_line: int, budget: DimBudget) -> Graph:
    g = Graph.__new__(Graph)
    g.name, g.blocks, g.version, g._cache = name, {}, 0, {}
    values: dict[str, Node] = {}
    labels: dict[str, Block] = {}
    made: list[tuple[Node, _Line]] = []
    block_op = get_op("Block")
    for bt in blocks:
        if bt.label in labels:
            raise ParseError(f"block ^{bt.label} is defined twice", bt.preds[0].line if bt.preds else end_line, 1)
        b = Block(block_op, X, bt.label)
        b.graph = g
        g.blocks[b] = None
        labels[bt.label] = b
        for ln in bt.lines:
            node = _make_node(ln, graphs, payload, budget)
            node.graph, node.block = g, b
            b.members[node] = None
            if ln.name is not None:
                if ln.name in values:
                    raise ParseError(f"%{ln.name} is defined twice", ln.line, ln.col)
                values[ln.name] = node
                if not ln.name.isdigit():
                    node.name = ln.name
            made.append((node, ln))

    def resolve(r: _Ref) -> Node:
        if r.name not in values:
            raise ParseError(f"%{r.name} is not defined", r.line, r.col)
        return values[r.name]

    for bt in blocks:
        for r in bt.preds:
            labels[bt.label].append_input(resolve(r))
    for node, ln in made:
        for r in ln.inputs:
            node.append_input(resolve(r))
        for r in ln.deps:
            node.add_dep(resolve(r))
        if not node.op.arity_ok(len(ln.inputs)):
            raise ParseError(f"{ln.op} takes {node.op.arity_text()} inputs, got {len(ln.inputs)}", ln.line, ln.col)
    starts = [n for n, _ in made if n.op.name == "Start"]
    ends = [n for n, _ in made if n.op.name == "End"]
    if len(starts) != 1 or len(ends) != 1:
        raise ParseError(f"graph @{name} needs exactly one Start and one End "
                         f"(found {len(starts)} and {len(ends)})", end_line, 1)
    g.start, g.end = starts[0], ends[0]
    g.start_block, g.end_block = g.start.block, g.end.block  # type: ignore[assignment]
    if not isinstance(g.start.type, TupleType):
        raise ParseError("Start must have a tuple type", end_line, 1)
    args = {n.attrs["num"]: n for n, _ in made if is_argument(n) and n.inputs[0] is g.start}
    g.args = [args[i] for i in sorted(args)]
    return g


def _make_node(ln: _Line, graphs: dict[str, Graph], payload: dict[str, Any], budget: DimBudget) -> Node:
    try:
        opdef = get_op(ln.op)
    except KeyError:
        raise ParseError(f"unknown op {ln.op!r}", ln.line, ln.col) from None
    if opdef.name == "Block":
        raise ParseError("blocks are written as '^label(preds):' headers", ln.line, ln.col)
    attrs: dict[str, Any] = {}
    for key in ln.attrs:
        if key not in opdef.attrs and key not in UNIVERSAL_ATTRS:
            known = ", ".join(sorted(opdef.attrs)) or "none"
            raise ParseError(f"{ln.op}: unknown attribute {key!r} (known: {known})", ln.line, ln.col)
    for key, raw in ln.attrs.items():
        spec = opdef.attrs.get(key)
        try:
            attrs[key] = _attr_value(key, raw, spec.kind if spec else "str", graphs, payload, ln, budget)
        except ParseError:
            raise
        except (ValueError, TypeError, DimSyntaxError) as e:
            raise ParseError(f"{ln.op}: attribute {key!r}: {e}", ln.line, ln.col) from None
    try:
        full = opdef.complete_attrs(attrs)
    except OpTypeError as e:
        raise ParseError(str(e), ln.line, ln.col) from None
    return Node(opdef, [], full, ln.type, None, ln.loc)


def _attr_value(key: str, raw: Any, kind: str, graphs: dict[str, Graph], payload: dict[str, Any], ln: _Line,
                budget: DimBudget) -> Any:
    if isinstance(raw, _Ref):
        if kind != "graph":
            raise ValueError(f"@{raw.name} is a graph reference")
        if raw.name not in graphs:
            raise ParseError(f"graph @{raw.name} is not defined before its use", ln.line, ln.col)
        return graphs[raw.name]
    if isinstance(raw, _PayloadRef):
        if raw.key not in payload:
            raise ParseError(f"tensor @{raw.key!r} is not in the payload", ln.line, ln.col)
        arr = np.asarray(payload[raw.key])
        if str(TensorType(raw.type.dtype, arr.shape)) != str(raw.type) or arr.dtype != numpy_dtype(raw.type.dtype):
            raise ParseError(f"tensor @{raw.key!r} in the payload is {arr.dtype}{list(arr.shape)}, "
                             f"the text says {raw.type}", ln.line, ln.col)
        return arr
    if kind == "dims":
        if not isinstance(raw, list):
            raise ValueError("expected a list of dims")
        return tuple(parse_dim(d, budget) if isinstance(d, str) else d for d in raw)
    if kind == "float" and isinstance(raw, int):
        raw = float(raw)
    return check_attr(ln.op, key, kind, raw)
