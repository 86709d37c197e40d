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
import ctypes
import linecache
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from types import CodeType, FrameType
from typing import Any

from nexus.ir.node import SourceLoc

_DSL_DIR = os.path.dirname(os.path.abspath(__file__))  # the package nexus.frontend.dsl

if sys.version_info < (3, 13):
    # Before PEP 667, ``frame.f_locals`` of a function is a snapshot dict; writes reach the
    # fast locals (and closure cells) only through PyFrame_LocalsToFast.
    _locals_to_fast = ctypes.pythonapi.PyFrame_LocalsToFast
    _locals_to_fast.argtypes = [ctypes.py_object, ctypes.c_int]
    _locals_to_fast.restype = None
else:  # PEP 667: f_locals is a write-through proxy from 3.13 on
    _locals_to_fast = None
# Each branch runs on its own interpreter: tests/test_dsl_frames.py, which .ci/run runs
# on 3.11, 3.12 and 3.13.


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


_IS_DSL_FILE: dict[str, bool] = {}


def is_dsl_frame(frame: FrameType) -> bool:
    """Whether ``frame`` runs code of the DSL implementation itself."""
    filename = frame.f_code.co_filename
    hit = _IS_DSL_FILE.get(filename)
    if hit is None:
        path = os.path.abspath(filename)
        hit = os.path.dirname(path) == _DSL_DIR
        _IS_DSL_FILE[filename] = hit
    return hit


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
    filename = frame.f_code.co_filename
    node = _with_statements(filename, frame.f_globals).get(frame.f_lineno)
    if node is None:
        return None
    names: set[str] = set()
    for stmt in node.body:
        _collect_stores(stmt, names)
    reads = {n.id for item in node.items for n in ast.walk(item.context_expr) if isinstance(n, ast.Name)}
    call = node.items[0].context_expr
    arg = call.args[0] if isinstance(call, ast.Call) and len(call.args) == 1 else None
    return WithInfo(frozenset(names), frozenset(reads), arg, filename)


# filename -> (the linecache list it was parsed from, header line -> With statement)
_WITH_CACHE: dict[str, tuple[list[str], dict[int, ast.With]]] = {}


def _with_statements(filename: str, module_globals: dict[str, Any]) -> dict[int, ast.With]:
    """Every ``with`` statement of a source file, by each line of its header; parsed once
    per version of the file that linecache holds."""
    lines = linecache.getlines(filename, module_globals)
    hit = _WITH_CACHE.get(filename)
    if hit is not None and hit[0] is lines:
        return hit[1]
    table: dict[int, ast.With] = {}
    try:
        tree = ast.parse("".join(lines))
    except (SyntaxError, ValueError):
        tree = None
    if tree is not None:
        for node in ast.walk(tree):
            if isinstance(node, ast.With) and node.body:
                for line in range(node.lineno, max(node.body[0].lineno, node.lineno + 1)):
                    table.setdefault(line, node)
    _WITH_CACHE[filename] = (lines, table)
    return table


def _collect_stores(node: ast.AST, names: set[str]) -> None:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
        return  # their own scope
    if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
        names.add(node.id)
    for child in ast.iter_child_nodes(node):
        _collect_stores(child, names)
