"""The values a script's lowering passes around besides nodes: numbers and modules known
while building (:class:`Static`), tuples to unpack, the loop and function scopes, and the
placeholders for ``x.<method>`` and ``nx.<op>`` before their call."""

from __future__ import annotations

import ast
import types
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from nexus.frontend.script.annotations import I64_MAX, I64_MIN
from nexus.frontend.script.source import ParsedFunction
from nexus.ir.node import Block, Node
from nexus.ir.types import TensorType


@dataclass(frozen=True)
class Static:
    """A value known while building: a Python number or string, a module, a function."""

    value: Any

@dataclass(frozen=True)
class TupleVal:
    """Several values (``a, b`` or a call returning several results); only unpacked."""

    items: tuple[Any, ...]

Val = Node | Static | TupleVal

# A control edge that still has to enter a block: a block falling through (it gets a
# Jmp) or a Cond exit, with a description of the path for error messages.
Edge = tuple[Block | Node, str]

@dataclass
class Loop:
    breaks: list[Edge] = field(default_factory=list)
    continues: list[Edge] = field(default_factory=list)

class PathEnded(Exception):  # noqa: N818  (not an error: control flow of the lowering)
    """Python raises here on every path that reaches this point (a ``raise``, a read of a
    variable no path has assigned): the current block ended with that raise
    (``Lowering.raise_here``) and the code after it is dead.  Unwinds the lowering to
    the statement being lowered, or to the conditional expression or short-circuit
    operand whose other side goes on."""

@dataclass
class Scope:
    """One function being lowered: the script itself or an inlined helper."""

    parsed: ParsedFunction
    globals: dict[str, Any]
    closure: dict[str, Any]
    prefix: str = ""
    inline: bool = False
    returns: list[tuple[Edge, list[Node]]] = field(default_factory=list)
    ret_arity: int | None = None
    # Where the function returns None (`return`, `return None`, its end): settled once its
    # other returns are known (visitor.settle_none_returns)
    none_returns: list[tuple[Block, ast.AST]] = field(default_factory=list)
    loops: list[Loop] = field(default_factory=list)
    statics: dict[str, Static] = field(default_factory=dict)

# Array methods a script may call (handled by nexus.frontend.script.numpy_surface).
TENSOR_METHODS = frozenset({
    "sum", "mean", "max", "min", "prod", "any", "all", "var", "std", "argmax", "argmin", "cumsum", "argsort",
    "reshape", "astype", "copy", "ravel", "flatten", "swapaxes", "transpose", "squeeze", "clip", "take", "repeat",
    "cumprod"})

class TensorMethod:
    """``x.<name>`` of a tensor, waiting for its call (``x.reshape(2, -1)``)."""

    __slots__ = ("name", "x")

    def __init__(self, name: str, x: Node):
        self.name = name
        self.x = x

    def __repr__(self) -> str:
        return f"<tensor method {self.name}>"

class NexusOp:
    """``nx.<name>`` inside a script: an op of the registry, looked up when called."""

    __slots__ = ("name",)

    def __init__(self, name: str):
        self.name = name

    def __repr__(self) -> str:
        return f"nx.{self.name}"

def _dtype(n: Node) -> str:
    t = n.type
    assert isinstance(t, TensorType)
    return t.dtype

def _fold(fn: Callable[[Any, Any], Any], a: Any, b: Any) -> Static | None:
    """Python's own result for two known numbers, when it is a number a graph can hold."""
    try:
        out = fn(a, b)
    except Exception:  # noqa: BLE001  (raised at run time instead, if that line runs)
        return None
    if isinstance(out, bool) or isinstance(out, float):
        return Static(out)
    if isinstance(out, int) and I64_MIN <= out <= I64_MAX:
        return Static(out)
    return None

def _fits_not(fn: Callable[[Any, Any], Any], a: Any, b: Any) -> bool:
    try:
        out = fn(a, b)
    except Exception:  # noqa: BLE001
        return False
    return isinstance(out, int) and not I64_MIN <= out <= I64_MAX

def _describe(value: Any) -> str:
    if isinstance(value, types.ModuleType):
        return f"module `{value.__name__}`"
    if isinstance(value, str):
        return f"the string {value!r}"
    if value is None:
        return "None"
    if callable(value):
        return f"function `{getattr(value, '__name__', value)}`"
    return f"a {type(value).__name__}"
