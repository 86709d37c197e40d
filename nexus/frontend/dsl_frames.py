"""Reading and rebinding the Python variables of the frames that build a DSL graph.

The with-statement DSL lets users update graph values by plain rebinding
(``x = nx.add(x, step)``).  The builder cannot see an assignment happen, so at every
block boundary it reads the local variables of each frame that opened a region, and at
every block entry it rebinds them to values valid in the new block (a loop-header Phi,
an if-join Phi, ...).  This module holds the two CPython-specific operations that needs,
and the source location of the user's code.
"""

from __future__ import annotations

import ast
import copy
import ctypes
import functools
import inspect
import linecache
import os
import sys
import textwrap
from collections.abc import Mapping
from dataclasses import dataclass
from types import CodeType, FrameType
from typing import Any

from nexus.ir.node import SourceLoc

_FRONTEND_DIR = os.path.dirname(os.path.abspath(__file__))

if sys.version_info < (3, 13):
    # Before PEP 667, ``frame.f_locals`` of a function is a snapshot dict; writes reach the
    # fast locals (and closure cells) only through PyFrame_LocalsToFast.
    _locals_to_fast = ctypes.pythonapi.PyFrame_LocalsToFast
    _locals_to_fast.argtypes = [ctypes.py_object, ctypes.c_int]
    _locals_to_fast.restype = None
else:  # pragma: no cover - f_locals is a write-through proxy from 3.13 on
    _locals_to_fast = None


def frame_locals(frame: FrameType) -> dict[str, Any]:
    """A snapshot of ``frame``'s variables (its globals at module level)."""
    return dict(frame.f_locals)


def set_frame_locals(frame: FrameType, updates: Mapping[str, Any]) -> None:
    """Rebind variables of ``frame`` (a running function, class body or module)."""
    if not updates:
        return
    f_locals = frame.f_locals
    for name, value in updates.items():
        f_locals[name] = value
    if _locals_to_fast is not None and f_locals is not frame.f_globals:
        _locals_to_fast(frame, 0)


def is_dsl_frame(frame: FrameType) -> bool:
    """Whether ``frame`` runs code of the DSL implementation itself."""
    return os.path.dirname(os.path.abspath(frame.f_code.co_filename)) == _FRONTEND_DIR and os.path.basename(
        frame.f_code.co_filename
    ).startswith("dsl")


def user_frame() -> FrameType:
    """The innermost frame outside the DSL implementation: the user's code."""
    frame: FrameType | None = sys._getframe(1)
    while frame is not None and is_dsl_frame(frame):
        frame = frame.f_back
    if frame is None:  # pragma: no cover - always called below user code
        return sys._getframe(1)
    return frame


def user_loc() -> SourceLoc:
    """The source location of the user's line that is running now."""
    frame = user_frame()
    return SourceLoc(frame.f_code.co_filename, frame.f_lineno, 0)


@dataclass(frozen=True)
class WithInfo:
    """What the source says about the ``with`` statement running in a frame."""

    assigned: frozenset[str]  # names its body assigns
    reads: frozenset[str]  # names its header reads
    argument: ast.expr | None  # the first argument of the region call, e.g. the loop condition
    filename: str

    @property
    def bare(self) -> bool:
        """Whether the argument is a bare name (a value built earlier)."""
        return self.argument is None or isinstance(self.argument, ast.Name)

    def compile_argument(self) -> CodeType | None:
        if self.argument is None:
            return None
        return compile(ast.Expression(self.argument), self.filename, "eval")


def with_statement(frame: FrameType) -> WithInfo | None:
    """The ``with`` statement running at ``frame``'s current line, from the source (None
    if the source is unavailable).  Used to tell, before a loop body runs, which
    Python-number variables it updates, and to re-evaluate a loop condition written on
    the ``with`` line."""
    if frame.f_code.co_name == "<module>":  # getsourcelines gives only its first block
        lines, start = linecache.getlines(frame.f_code.co_filename, frame.f_globals), 1
    else:
        try:
            lines, start = inspect.getsourcelines(frame.f_code)
        except (OSError, TypeError):
            return None
    start = max(start, 1)
    tree = _parse(frame.f_code.co_filename, start, "".join(lines))
    if tree is None:
        return None
    line = frame.f_lineno - start + 1
    for node in ast.walk(tree):
        if isinstance(node, ast.With) and node.body and node.lineno <= line < node.body[0].lineno:
            names: set[str] = set()
            for stmt in node.body:
                _collect_stores(stmt, names)
            reads = {n.id for item in node.items for n in ast.walk(item.context_expr) if isinstance(n, ast.Name)}
            call = node.items[0].context_expr
            arg = call.args[0] if isinstance(call, ast.Call) and len(call.args) == 1 else None
            if arg is not None:
                arg = ast.increment_lineno(copy.deepcopy(arg), start - 1)
            return WithInfo(frozenset(names), frozenset(reads), arg, frame.f_code.co_filename)
    return None


@functools.lru_cache(maxsize=256)
def _parse(filename: str, start: int, source: str) -> ast.Module | None:
    try:
        return ast.parse(textwrap.dedent(source))
    except SyntaxError:
        return None


def _collect_stores(node: ast.AST, names: set[str]) -> None:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
        return  # their own scope
    if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
        names.add(node.id)
    for child in ast.iter_child_nodes(node):
        _collect_stores(child, names)
